"""The idle-GPU pass on the local cluster, with the node agent's dcgm-exporter metrics scraped by a real Prometheus.

A JupyterLab container (2 GPUs) whose GPUs work (91 %) with no activity
for hours, and a VM (its GPU allocated to its virt-launcher Pod) whose GPU
stays at 2 % while its guest's singleuser server keeps reporting activity
(an open tab). With Prometheus: the busy container is left alone, the VM
is warned and, after a grace of 0, stopped (the hub's stop is a recording
stand-in: this tier has no hub; tests/hub/test_idle_gpus_hub.py stops a
real one). Without Prometheus, the same cluster: the VM's fresh activity
keeps it, the container's old activity gets it warned but never stopped.
MIG slices, which DCGM reports no ``DCGM_FI_DEV_GPU_UTIL`` for, are judged
by their ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``: of two idle-looking servers on
slices of one card, the one whose slice computes is kept.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import pytest
from localcluster.controllers.scheduler import ECONOMY_NODES
from localcluster.testing import wait_for
from traitlets.config import Config

from localcluster import LocalCluster
from tests.cluster.test_gpu_metrics_prometheus import (  # noqa: F401 (prometheus_required is a fixture)
    CONTROLLERS,
    GPU_NODE,
    NS,
    gpu_pod,
    gpu_vmi,
    launchers,
    objects,
    prometheus_required,
    pvc,
    workspace_meta,
)
from tests.support.prometheus import Unavailable, running_prometheus
from workspacespawner.core.prometheus import PrometheusClient
from workspacespawner.idle.activity import HubServer, HubView
from workspacespawner.idle.gpupass import IdlePass
from workspacespawner.idle.notices import IdleNotices
from workspacespawner.idle.settings import GPUIdle


def phase(store, plural: str, name: str, group: str = "") -> str | None:
    """The phase of ``name`` in the store, None while it is not there."""
    for obj in objects(store, plural, group):
        if obj["metadata"]["name"] == name:
            return (obj.get("status") or {}).get("phase")
    return None


def stand_in_hub(view: HubView):
    """``(hub, stop, stopped)``: the pass's reading of the hub (always ``view``) and a stop that records in ``stopped``."""
    stopped: list[tuple[str, str]] = []

    async def hub():
        return view

    async def stop(user, server):
        stopped.append((user, server))
        return True

    return hub, stop, stopped


def settings() -> GPUIdle:
    config = Config()
    config.GPUIdle.gpu_idle_timeout = 60
    config.GPUIdle.gpu_idle_grace = 0
    return GPUIdle(config=config)


@pytest.mark.usefixtures("prometheus_required")
async def test_idle_gpus_with_and_without_prometheus(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=CONTROLLERS) as cluster:
        store = cluster.store
        claims = store.kind("", "v1", "persistentvolumeclaims")
        [store.create(claims, NS, pvc(name)) for name in ("home-ann", "root-bob")]
        store.create(store.kind("", "v1", "pods"), NS, gpu_pod())
        store.create(store.kind("kubevirt.io", "v1", "virtualmachineinstances"), NS, gpu_vmi())
        await wait_for(lambda: phase(store, "pods", "jupyter-ann") == "Running", 30)
        await wait_for(lambda: phase(store, "virtualmachineinstances", "bob-gpu", "kubevirt.io") == "Running", 30)
        launcher = (await wait_for(lambda: launchers(store), 10))[0]
        metrics = cluster.controllers["nodeagent"].metrics
        url = await metrics.serve()
        for index, who in metrics.holders()[GPU_NODE].items():
            if who["pod"] == "jupyter-ann":
                metrics.set_gpu(GPU_NODE, index, util=91)
            elif who["pod"] == launcher["metadata"]["name"]:
                metrics.set_gpu(GPU_NODE, index, util=2)

        now = datetime.now(UTC)
        view = HubView(servers={
            ("ann", ""): HubServer(last_activity=now - timedelta(hours=3), started=now - timedelta(hours=4),
                                   pending=None, profile="jupyterlab-2gpu"),
            ("bob", "gpu"): HubServer(last_activity=now, started=now - timedelta(hours=4), pending=None,
                                      profile="ubuntu-vm-gpu"),
        }, groups={"ann": frozenset(), "bob": frozenset()})
        hub, stop, stopped = stand_in_hub(view)

        def compute():
            pods = [{**p, "kind": "Pod"} for p in objects(store, "pods")]
            vmis = [{**v, "kind": "VirtualMachineInstance"} for v in objects(store, "virtualmachineinstances",
                                                                               "kubevirt.io")]
            return pods, vmis

        without = IdlePass(settings(), hub=hub, objects=compute, stop=stop, notices=IdleNotices())
        assert await without.tick() == [("ann", "", "warn")]
        assert await without.tick() == []
        assert stopped == [] and without.notices.of("bob") == []

        try:
            async with running_prometheus({"dcgm": f"{url}/metrics"}) as base:
                client = PrometheusClient(base, timeout=5)
                deadline = time.monotonic() + 60
                while len(await client.query('DCGM_FI_DEV_GPU_UTIL{pod!=""}')) < 3:  # both holders scraped
                    assert time.monotonic() < deadline, "Prometheus scraped no GPU held"
                    await asyncio.sleep(0.5)
                measured = IdlePass(settings(), hub=hub, objects=compute, stop=stop, prometheus=client,
                                    notices=IdleNotices())
                assert await measured.tick() == [("bob", "gpu", "warn"), ("bob", "gpu", "stopped")]
                assert stopped == [("bob", "gpu")]
                assert measured.notices.of("ann") == []
                assert measured.notices.of("bob")[0].startswith("Your workspace 'gpu' was stopped: it had used no GPU")
        except Unavailable as e:  # pragma: no cover - the fixture checked the program
            pytest.skip(str(e))


def mig_pod(name: str, user: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": workspace_meta(name, user, ""),
            "spec": {"terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "notebook", "image": "quay.io/jupyter/base-notebook",
                                     "command": ["python", "-c", "import time; time.sleep(600)"],
                                     "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}]}}


@pytest.mark.usefixtures("prometheus_required")
async def test_a_mig_slice_is_judged_by_its_engine_activity(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=CONTROLLERS, nodes=ECONOMY_NODES) as cluster:
        store = cluster.store
        for name, user in (("jupyter-cy", "cy"), ("jupyter-dee", "dee")):
            store.create(store.kind("", "v1", "pods"), NS, mig_pod(name, user))
        for name in ("jupyter-cy", "jupyter-dee"):
            await wait_for(lambda name=name: phase(store, "pods", name) == "Running", 30)
        metrics = cluster.controllers["nodeagent"].metrics
        url = await metrics.serve()
        for device, who in metrics.assigned()["gpu-node-mig"]:
            if who is not None:  # cy's slice computes, dee's does not
                metrics.set_gpu("gpu-node-mig", device.gpu, gpu_instance=device.instance,
                                util=60 if who["pod"] == "jupyter-cy" else 1)
        now = datetime.now(UTC)
        old = dict(last_activity=now - timedelta(hours=3), started=now - timedelta(hours=4), pending=None,
                   profile="mig-1g")
        view = HubView(servers={("cy", ""): HubServer(**old), ("dee", ""): HubServer(**old)},
                       groups={"cy": frozenset(), "dee": frozenset()})
        hub, stop, stopped = stand_in_hub(view)

        def compute():
            return [{**p, "kind": "Pod"} for p in objects(store, "pods")], []

        try:
            async with running_prometheus({"dcgm": f"{url}/metrics"}) as base:
                client = PrometheusClient(base, timeout=5)
                deadline = time.monotonic() + 60
                while len(await client.query('DCGM_FI_PROF_GR_ENGINE_ACTIVE{GPU_I_ID!="",pod!=""}')) < 2:
                    assert time.monotonic() < deadline, "Prometheus scraped no MIG slice held"
                    await asyncio.sleep(0.5)
                assert await client.query('DCGM_FI_DEV_GPU_UTIL{GPU_I_ID!=""}') == []  # none for MIG, as DCGM
                measured = IdlePass(settings(), hub=hub, objects=compute, stop=stop, prometheus=client,
                                    notices=IdleNotices())
                assert await measured.tick() == [("dee", "", "warn"), ("dee", "", "stopped")]
                assert stopped == [("dee", "")]
        except Unavailable as e:  # pragma: no cover - the fixture checked the program
            pytest.skip(str(e))
