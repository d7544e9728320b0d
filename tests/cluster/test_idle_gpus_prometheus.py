"""The idle-GPU pass on the local cluster, with the node agent's dcgm-exporter metrics scraped by a real Prometheus.

A JupyterLab container (2 GPUs) whose GPUs work (91 %) with no activity
for hours, and a VM (its GPU allocated to its virt-launcher Pod) whose GPU
stays at 2 % while its guest's singleuser server keeps reporting activity
(an open tab). With Prometheus: the busy container is left alone, the VM
is warned and, after a grace of 0, stopped (the hub's stop is a recording
stand-in: this tier has no hub; tests/hub/test_idle_gpus_hub.py stops a
real one). Without Prometheus, the same cluster: the VM's fresh activity
keeps it, the container's old activity gets it warned but never stopped.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import pytest
from traitlets.config import Config

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
)
from tests.support.helpers import wait_for
from tests.support.prometheus import Unavailable, running_prometheus
from workspacespawner.core.prometheus import PrometheusClient
from workspacespawner.idle.activity import HubServer, HubView
from workspacespawner.idle.gpupass import IdlePass
from workspacespawner.idle.notices import IdleNotices
from workspacespawner.idle.settings import GPUIdle
from workspacespawner.localcluster import LocalCluster


def phase(store, plural: str, name: str, group: str = "") -> str | None:
    """The phase of ``name`` in the store, None while it is not there."""
    for obj in objects(store, plural, group):
        if obj["metadata"]["name"] == name:
            return (obj.get("status") or {}).get("phase")
    return None


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
        stopped: list[tuple[str, str]] = []

        async def hub():
            return view

        async def stop(user, server):
            stopped.append((user, server))
            return True

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
