"""The node agent's dcgm-exporter page for MIG slices and time-sliced cards (embedded cluster on ECONOMY_NODES).

Covers: a Pod holding a MIG slice is named on that slice's series, labelled
``GPU_I_PROFILE``/``GPU_I_ID`` with the slice's framebuffer, no
``DCGM_FI_DEV_GPU_UTIL`` (DCGM has none for MIG instances) and its
utilisation, set by the test, as ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``; two
Pods of different slices get different GPU instances; a time-sliced card
shared by two Pods is one series naming one of them, or, with
dcgm-exporter's ``KUBERNETES_VIRTUAL_GPUS`` (``virtual_gpus``), one per
held replica labelled ``vgpu``; devices are freed with their Pod.
"""

from __future__ import annotations

import re

from localcluster.controllers.scheduler import ECONOMY_NODES
from localcluster.testing import wait_for

from localcluster import LocalCluster

NS = "default"


def pod(name: str, resource: str, selector: dict | None = None) -> dict:
    spec = {"terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "600"],
                            "resources": {"limits": {resource: "1"}}}]}
    if selector:
        spec["nodeSelector"] = selector
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def series(text: str, metric: str, **labels: str) -> list[tuple[dict, float]]:
    """``[(labels, value)]`` of ``metric`` whose labels include ``labels``."""
    found = []
    for line in text.splitlines():
        if not line.startswith(metric + "{"):
            continue
        inner, value = line[len(metric) + 1:].rsplit("} ", 1)
        have = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', inner))
        if all(have.get(k) == v for k, v in labels.items()):
            found.append((have, float(value)))
    return found


async def test_mig_slices_and_time_sliced_cards_in_dcgm_format(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=("scheduler", "nodeagent"), nodes=ECONOMY_NODES) as cluster:
        store = cluster.store
        pods = store.kind("", "v1", "pods")
        metrics = cluster.controllers["nodeagent"].metrics
        for name, resource in (("small", "nvidia.com/mig-1g.10gb"), ("big", "nvidia.com/mig-3g.40gb"),
                               ("other", "nvidia.com/mig-1g.10gb")):
            store.create(pods, NS, pod(name, resource))
        t4 = {"nvidia.com/gpu.product": "Tesla-T4-SHARED"}
        for name in ("share-a", "share-b"):
            store.create(pods, NS, pod(name, "nvidia.com/gpu", t4))

        def placed():
            found, _ = store.list(pods, NS)
            return len(found) == 5 and all(p["spec"].get("nodeName") for p in found)

        await wait_for(placed, 30)

        text = metrics.dcgm_text()
        small = series(text, "DCGM_FI_DEV_FB_FREE", Hostname="gpu-node-mig", pod="small")
        assert len(small) == 1
        labels, free = small[0]
        assert labels["GPU_I_PROFILE"] == "1g.10gb" and free == 10 * 1024
        assert labels["modelName"] == "NVIDIA A100-SXM4-80GB" and labels["UUID"].startswith("GPU-")
        big = series(text, "DCGM_FI_DEV_FB_FREE", pod="big")[0][0]
        assert big["GPU_I_PROFILE"] == "3g.40gb"
        other = series(text, "DCGM_FI_DEV_FB_FREE", pod="other")[0][0]
        assert (other["gpu"], other["GPU_I_ID"]) != (labels["gpu"], labels["GPU_I_ID"])
        # 2 MIG cards: 1 x 3g.40gb + 1 x 2g.20gb + 2 x 1g.10gb, and 7 x 1g.10gb
        assert len(series(text, "DCGM_FI_DEV_FB_FREE", Hostname="gpu-node-mig")) == 11
        assert series(text, "DCGM_FI_DEV_GPU_UTIL", Hostname="gpu-node-mig") == []  # none for MIG instances

        metrics.set_gpu("gpu-node-mig", int(labels["gpu"]), gpu_instance=int(labels["GPU_I_ID"]), util=40, fb_used_mib=3000)
        text = metrics.dcgm_text()
        assert series(text, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", pod="small")[0][1] == 0.4
        assert series(text, "DCGM_FI_DEV_FB_USED", pod="small")[0][1] == 3000
        assert series(text, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", pod="other")[0][1] == 0  # its own slice, untouched

        card = series(text, "DCGM_FI_DEV_GPU_UTIL", Hostname="gpu-node-t4")
        assert len(card) == 1  # one card, reported once, naming one of the two Pods sharing it
        assert card[0][0]["pod"] in ("share-a", "share-b") and card[0][0]["modelName"] == "Tesla-T4"
        metrics.virtual_gpus = True
        shared = series(metrics.dcgm_text(), "DCGM_FI_DEV_GPU_UTIL", Hostname="gpu-node-t4")
        assert sorted((s["pod"], s["vgpu"]) for s, _value in shared) in (
            [("share-a", "0"), ("share-b", "1")], [("share-a", "1"), ("share-b", "0")])

        store.delete(pods, NS, "small")
        await wait_for(lambda: not series(metrics.dcgm_text(), "DCGM_FI_DEV_FB_FREE", pod="small"), 30)
        assert series(metrics.dcgm_text(), "DCGM_FI_DEV_FB_FREE", pod="other")[0][0]["GPU_I_ID"] == other["GPU_I_ID"]
