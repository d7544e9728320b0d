"""GPU metrics from a real Prometheus, joined to the workspaces holding the GPUs.

Covers: the local cluster's virt-launcher Pod of a GPU VMI (KubeVirt's
labels, owned by the VMI, bound to its node, gone with the VMI, never run
nor counted twice by the scheduler); the node agent's dcgm-exporter-format
``/metrics`` (per-GPU gauges labelled with the Pod the device is allocated
to: the server Pod, or the VMI's virt-launcher Pod) and kubelet volume stats
``/kubelet/metrics`` (a claim's real usage), both scraped by Debian's
Prometheus 2.42 on loopback (tests/support/prometheus.py); then
:mod:`workspacespawner.gpu.metrics` reads the values a test set
and joins them to the right user, server and kind for the container and
the VM, and :mod:`workspacespawner.dashboard.cluster` counts the node's
GPUs (held once each) and flags the idle VM, not the busy container.
The Prometheus client's failures (a PromQL error, nothing listening, a
server that never answers, an answer that is not JSON) are each one
PrometheusError naming the URL.
"""

from __future__ import annotations

import asyncio
import os

import pytest
from localcluster.testing import wait_for
from localcluster.volumes import claim_path

from localcluster import LocalCluster
from tests.support.prometheus import Unavailable, running_prometheus
from workspacespawner.core.names import OWNER_ANNOTATION, SERVER_ANNOTATION, owner_labels
from workspacespawner.core.prometheus import PrometheusClient, PrometheusError
from workspacespawner.dashboard.cluster import idle_workspaces, node_views
from workspacespawner.gpu.metrics import read_gpu_metrics, read_volume_usage
from workspacespawner.idle.activity import read_idle_readings

NS = "default"
CONTROLLERS = ("storage", "scheduler", "nodeagent", "virt")
GPU_NODE = "gpu-node-1"


@pytest.fixture
def prometheus_required():
    """Skip without Debian's prometheus, unless $CI is set (then it is an error)."""
    if not (os.path.exists("/usr/bin/prometheus")):
        if os.environ.get("CI"):
            pytest.fail("prometheus is required in CI ($CI is set)", pytrace=False)
        pytest.skip("/usr/bin/prometheus is not installed (Debian package prometheus)")


def workspace_meta(name: str, user: str, server: str) -> dict:
    return {"name": name, "labels": {**owner_labels(user), "component": "singleuser-server"},
            "annotations": {"hub.jupyter.org/username": user, SERVER_ANNOTATION: server, OWNER_ANNOTATION: user}}


def pvc(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}


def gpu_pod() -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": workspace_meta("jupyter-ann", "ann", ""),
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "notebook", "image": "quay.io/jupyter/base-notebook",
                            "command": ["python", "-c", "import time; time.sleep(600)"],
                            "resources": {"limits": {"nvidia.com/gpu": "2"}},
                            "volumeMounts": [{"name": "home", "mountPath": "/home/jovyan"}]}],
            "volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": "home-ann"}}],
        },
    }


def gpu_vmi() -> dict:
    return {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "metadata": workspace_meta("bob-gpu", "bob", "gpu"),
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "domain": {"resources": {"requests": {"memory": "1Gi", "cpu": "2"}},
                       "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}],
                                   "gpus": [{"name": "gpu1", "deviceName": "nvidia.com/GA100_A100_SXM4_80GB"}]}},
            "volumes": [{"name": "root", "persistentVolumeClaim": {"claimName": "root-bob"}}],
        },
    }


def objects(store, plural: str, group: str = "", version: str = "v1") -> list[dict]:
    found, _ = store.list(store.kind(group, version, plural), NS)
    return found


def launchers(store) -> list[dict]:
    return [p for p in objects(store, "pods") if (p["metadata"].get("labels") or {}).get("kubevirt.io") == "virt-launcher"]


async def test_gpu_metrics_join_container_and_vm_through_prometheus(tmp_path, prometheus_required):
    async with LocalCluster(state_dir=tmp_path, controllers=CONTROLLERS) as cluster:
        store = cluster.store
        for claim in ("home-ann", "root-bob"):
            store.create(store.kind("", "v1", "persistentvolumeclaims"), NS, pvc(claim))
        store.create(store.kind("", "v1", "pods"), NS, gpu_pod())
        vmi_kind = store.kind("kubevirt.io", "v1", "virtualmachineinstances")
        vmi = store.create(vmi_kind, NS, gpu_vmi())

        def running(plural, name, group=""):
            obj = next((o for o in objects(store, plural, group) if o["metadata"]["name"] == name), None)
            return obj if obj and (obj.get("status") or {}).get("phase") == "Running" else None

        await wait_for(lambda: running("pods", "jupyter-ann"), 30)
        await wait_for(lambda: running("virtualmachineinstances", "bob-gpu", "kubevirt.io"), 30)
        launcher = (await wait_for(lambda: launchers(store), 10))[0]
        labels = launcher["metadata"]["labels"]
        assert labels["kubevirt.io/created-by"] == vmi["metadata"]["uid"]
        assert labels["vm.kubevirt.io/name"] == "bob-gpu"
        assert launcher["metadata"]["ownerReferences"][0]["uid"] == vmi["metadata"]["uid"]
        assert launcher["spec"]["nodeName"] == GPU_NODE
        assert await wait_for(lambda: running("pods", launcher["metadata"]["name"]), 10)
        assert not launcher["metadata"]["name"].startswith("bob-gpu")  # the join cannot lean on the name

        home = claim_path(cluster, NS, "home-ann")
        (home / "data.bin").write_bytes(b"x" * (3 * 2**20))

        metrics = cluster.controllers["nodeagent"].metrics
        url = await metrics.serve()
        held = metrics.holders()[GPU_NODE]
        ann_gpus = sorted(i for i, who in held.items() if who["pod"] == "jupyter-ann")
        bob_gpus = sorted(i for i, who in held.items() if who["pod"] == launcher["metadata"]["name"])
        assert len(ann_gpus) == 2 and len(bob_gpus) == 1 and not set(ann_gpus) & set(bob_gpus)
        assert metrics.holders()[GPU_NODE] == held  # stable while the consumers live
        for index in ann_gpus:
            metrics.set_gpu(GPU_NODE, index, util=91, fb_used_mib=40000, power_watts=310)
        metrics.set_gpu(GPU_NODE, bob_gpus[0], util=2, fb_used_mib=1200, power_watts=72.5)

        try:
            async with running_prometheus({"dcgm": f"{url}/metrics", "kubelet": f"{url}/kubelet/metrics"}) as base:
                client = PrometheusClient(base, timeout=5)
                pods, vmis = objects(store, "pods"), objects(store, "virtualmachineinstances", "kubevirt.io")

                stats = await read_gpu_metrics(client, pods, vmis)
                assert [(s.node, s.gpu) for s in stats] == [(GPU_NODE, i) for i in range(8)]
                for stat in stats:
                    assert stat.model == "NVIDIA A100-SXM4-80GB"
                    if stat.gpu in ann_gpus:
                        assert (stat.holder.user, stat.holder.server, stat.holder.kind, stat.holder.name) == ("ann", "", "container", "jupyter-ann")
                        assert (stat.util, stat.fb_used_mib, stat.fb_free_mib, stat.power_watts) == (91, 40000, 81920 - 40000, 310)
                    elif stat.gpu in bob_gpus:
                        assert (stat.holder.user, stat.holder.server, stat.holder.kind, stat.holder.name) == ("bob", "gpu", "vm", "bob-gpu")
                        assert (stat.util, stat.fb_used_mib, stat.power_watts) == (2, 1200, 72.5)
                    else:
                        assert stat.holder is None and stat.pod == "" and stat.util == 0

                volumes = await read_volume_usage(client)
                assert volumes[(NS, "home-ann")].capacity_bytes == 2**30
                assert volumes[(NS, "home-ann")].used_bytes >= 3 * 2**20
                assert (NS, "root-bob") in volumes

                nodes = store.list(store.kind("", "v1", "nodes"), None)[0]
                views = node_views(nodes, pods + vmis)
                gpu_node = next(v for v in views if v.name == GPU_NODE)
                assert (gpu_node.gpu_capacity, gpu_node.gpus_held, gpu_node.gpus_free) == (8, 3, 5)
                assert [(h.user, h.kind, h.gpus) for h in gpu_node.holdings] == [("ann", "container", 2), ("bob", "vm", 1)]

                utilisation = await read_idle_readings(client, pods, vmis, window_seconds=60)
                idle = idle_workspaces(views, utilisation, threshold=10)
                assert [(w.holding.user, w.holding.server, w.holding.kind) for w in idle] == [("bob", "gpu", "vm")]

                with pytest.raises(PrometheusError) as refused:
                    await client.query("sum(")
                assert "bad_data" in str(refused.value) and base in refused.value.url
        except Unavailable as e:  # pragma: no cover - the fixture checked the program
            pytest.skip(str(e))

        store.delete(vmi_kind, NS, "bob-gpu")
        await wait_for(lambda: not launchers(store), 20)
        assert sorted(i for i, who in metrics.holders()[GPU_NODE].items() if who["pod"]) == ann_gpus


async def test_unreachable_prometheus_is_one_error_naming_the_url():
    client = PrometheusClient("http://127.0.0.1:9", timeout=2)
    with pytest.raises(PrometheusError) as failed:
        await client.query("up")
    assert failed.value.url.startswith("http://127.0.0.1:9/api/v1/query?query=up")


async def test_a_silent_or_garbled_server_is_one_error_naming_the_url():
    async def silent(reader, writer):
        await reader.read(1024)  # never answers

    async def garbled(reader, writer):
        await reader.read(1024)
        writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 5\r\nConnection: close\r\n\r\noops!")
        await writer.drain()
        writer.close()

    for handler, words in ((silent, "Timeout"), (garbled, "HTTP 502, not a JSON answer")):
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            with pytest.raises(PrometheusError) as failed:
                await PrometheusClient(f"http://127.0.0.1:{port}", timeout=0.5).query_range("up", 0, 60, 15)
            assert words in failed.value.error and f":{port}/api/v1/query_range?" in failed.value.url
        finally:
            server.close()
