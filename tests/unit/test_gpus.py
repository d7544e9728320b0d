"""Free GPUs by type (workspacespawner.gpu.capacity): what the spawn form and a refusal for want of GPUs say."""

from __future__ import annotations

import asyncio

from workspacespawner.gpu.capacity import GPUCapacity, GPUPool, gpu_pools, gpus_held, pool_for, shortage

A100 = "NVIDIA-A100-SXM4-80GB"


def node(name: str, gpus: int, product: str | None = A100, *, ready: str = "True", cordoned: bool = False) -> dict:
    labels = {"nvidia.com/gpu.product": product} if product else {}
    return {"metadata": {"name": name, "labels": labels}, "spec": {"unschedulable": cordoned},
            "status": {"allocatable": {"cpu": "32", "nvidia.com/gpu": str(gpus)}, "conditions": [{"type": "Ready", "status": ready}]}}


def pod(node_name: str | None, *, limits: int = 0, requests: int = 0, phase: str = "Running") -> dict:
    resources = {"limits": {"nvidia.com/gpu": str(limits)}, "requests": {"nvidia.com/gpu": str(requests)}}
    spec = {"containers": [{"name": "notebook", "resources": resources}, {"name": "sidecar"}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"kind": "Pod", "metadata": {"name": "p"}, "spec": spec, "status": {"phase": phase}}


def vmi(node_name: str | None, gpus: int, host: tuple[str, ...] = (), phase: str = "Running",
        device: str = "nvidia.com/gpu") -> dict:
    devices = {"gpus": [{"name": f"gpu{i}", "deviceName": device} for i in range(gpus)],
               "hostDevices": [{"name": f"h{i}", "deviceName": d} for i, d in enumerate(host)]}
    status = {"phase": phase, **({"nodeName": node_name} if node_name else {})}
    return {"kind": "VirtualMachineInstance", "metadata": {"name": "v"}, "spec": {"domain": {"devices": devices}}, "status": status}


def test_held_gpus_of_pods_and_vmis():
    assert gpus_held(pod("gpu-1", limits=2)) == 2
    assert gpus_held(pod("gpu-1", requests=1)) == 1  # requests alone count too
    assert gpus_held(pod(None, limits=4)) == 0  # not placed: holds nothing yet
    assert gpus_held(pod("gpu-1", limits=4, phase="Succeeded")) == 0
    assert gpus_held(vmi("gpu-1", 2, host=("nvidia.com/GA102GL_A10", "intel.com/qat"))) == 3
    assert gpus_held(vmi("gpu-1", 1, phase="Failed")) == 0
    assert gpus_held(vmi(None, 1)) == 0


def test_pools_count_usable_nodes_by_type():
    nodes = [node("gpu-1", 8), node("gpu-2", 4), node("l4-1", 2, "NVIDIA-L4"), node("down", 8, ready="Unknown"),
             node("cordoned", 8, cordoned=True), node("cpu-1", 0, None)]
    compute = [pod("gpu-1", limits=8), vmi("gpu-2", 1), pod("l4-1", limits=1), pod("down", limits=8), pod("cpu-1")]
    pools = gpu_pools(nodes, compute)
    assert pools == {("nvidia.com/gpu", A100): GPUPool(A100, total=12, free=3, largest=8, largest_free=3),
                     ("nvidia.com/gpu", "NVIDIA-L4"): GPUPool("NVIDIA-L4", total=2, free=1, largest=2, largest_free=1)}
    assert pool_for(pools, None) == GPUPool("", 14, 4, 8, 3)  # a profile naming no type draws on every GPU node
    assert pool_for(pools, "NVIDIA-H100") == GPUPool("NVIDIA-H100", 0, 0)
    shrunk = gpu_pools([node("gpu-1", 2)], [pod("gpu-1", limits=4)])  # more held than allocatable: none free
    assert shrunk[("nvidia.com/gpu", A100)].free == 0


def mig_node(name: str, slices: dict[str, int], product: str = A100) -> dict:
    allocatable = {"cpu": "64", **{f"nvidia.com/mig-{size}": str(n) for size, n in slices.items()}}
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product}}, "spec": {},
            "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": "True"}]}}


def mig_pod(node_name: str, size: str, n: int = 1) -> dict:
    limits = {f"nvidia.com/mig-{size}": str(n)}
    return {"kind": "Pod", "metadata": {"name": "m"}, "status": {"phase": "Running"},
            "spec": {"nodeName": node_name, "containers": [{"name": "notebook", "resources": {"limits": limits}}]}}


def test_mig_slices_and_shares_are_pools_of_their_own_resource():
    """A MIG node's slices (mixed strategy) are counted per slice size; a time-sliced node's replicas under their name."""
    shared = node("t4-1", 0, "Tesla-T4-SHARED")
    shared["status"]["allocatable"]["nvidia.com/gpu.shared"] = "16"
    nodes = [mig_node("mig-1", {"1g.10gb": 7}), mig_node("mig-2", {"1g.10gb": 3, "3g.40gb": 1}), shared, node("gpu-1", 8)]
    compute = [mig_pod("mig-1", "1g.10gb", 2), mig_pod("mig-2", "3g.40gb"), pod("gpu-1", limits=1),
               {**mig_pod("t4-1", "1g.10gb"), "spec": {"nodeName": "t4-1", "containers": [
                   {"name": "n", "resources": {"limits": {"nvidia.com/gpu.shared": "1"}}}]}},
               vmi("gpu-1", 1, device="nvidia.com/gpu")]
    pools = gpu_pools(nodes, compute)
    one_g = pools[("nvidia.com/mig-1g.10gb", A100)]
    assert (one_g.total, one_g.free, one_g.largest, one_g.largest_free) == (10, 8, 7, 5)
    assert pools[("nvidia.com/mig-3g.40gb", A100)].free == 0
    assert pools[("nvidia.com/gpu.shared", "Tesla-T4-SHARED")].free == 15
    assert pools[("nvidia.com/gpu", A100)].free == 6  # a Pod and a VM each hold one whole GPU; the slices are apart
    assert pool_for(pools, None, "nvidia.com/mig-1g.10gb").free == 8
    assert shortage(pools[("nvidia.com/mig-3g.40gb", A100)], 1) == (
        f"All 1 {A100} MIG slices 3g.40gb are in use right now; this profile needs 1 MIG slice 3g.40gb.")
    assert gpus_held(mig_pod("mig-1", "1g.10gb", 2)) == 2


def test_sentences_with_the_numbers():
    assert shortage(GPUPool(A100, 8, 3, 8, 3), 2) is None
    assert shortage(GPUPool(A100, 8, 0, 8, 0), 1) == f"All 8 {A100} GPUs are in use right now; this profile needs 1 GPU."
    assert shortage(GPUPool(A100, 8, 2, 8, 2), 4) == f"Only 2 of 8 {A100} GPUs are free right now; this profile needs 4 GPUs."
    assert shortage(GPUPool(A100, 16, 6, 8, 3), 4) == \
        f"6 of 16 {A100} GPUs are free right now, but at most 3 on one node; this profile needs 4 GPUs on one node."
    assert shortage(GPUPool(A100, 8, 8, 8, 8), 16) == f"This profile needs 16 GPUs, more than any node has (8 {A100} GPUs at most)."
    assert shortage(GPUPool("NVIDIA-H100", 0, 0), 1) == "No node with NVIDIA-H100 GPUs is available right now; this profile needs 1 GPU."
    assert shortage(GPUPool(A100, 0, 0), 0) is None  # a CPU profile never lacks GPUs


def test_nodes_are_listed_at_most_once_per_ttl_and_a_refusal_gives_no_numbers():
    calls = []
    now = [0.0]

    async def list_nodes():
        calls.append(now[0])
        if len(calls) == 3:
            raise PermissionError("403")
        return [node("gpu-1", 8)]

    compute = [pod("gpu-1", limits=1)]
    capacity = GPUCapacity(list_nodes, lambda: compute, node_ttl=5.0, clock=lambda: now[0])

    async def run():
        first = await capacity.pools()
        now[0] = 4.9
        second = await capacity.pools()  # from the cached Node list, with the caches' Pods as they are now
        compute.append(pod("gpu-1", limits=2))
        third = await capacity.pools()
        now[0] = 5.0
        fourth = await capacity.pools()
        now[0] = 10.0
        fifth = await capacity.pools()  # the LIST fails: no numbers rather than stale ones
        now[0] = 14.0
        sixth = await capacity.pools()  # nor another LIST before the TTL is out
        now[0] = 15.0
        seventh = await capacity.pools()
        return first, second, third, fourth, fifth, sixth, seventh

    first, second, third, fourth, fifth, sixth, seventh = asyncio.run(run())
    assert calls == [0.0, 5.0, 10.0, 15.0]
    assert [p[("nvidia.com/gpu", A100)].free if p else None for p in (first, second, third, fourth, fifth, sixth, seventh)] == \
        [7, 7, 5, 5, None, None, 5]
    assert asyncio.run(GPUCapacity(list_nodes, lambda: None).pools()) is None  # caches still loading
