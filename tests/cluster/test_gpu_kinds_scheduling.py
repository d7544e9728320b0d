"""GPU kinds on the local cluster's mixed node set (ECONOMY_NODES), on both control planes.

Covers: the Nodes advertise MIG slices, time-sliced replicas and GPU
products with GPU feature discovery's labels; Pods asking for a MIG slice,
a replica of a time-sliced T4 or a V100 by its product land on the node
that has them; once a kind is exhausted the next Pod is refused with
kube-scheduler's words naming that resource (the embedded scheduler and the
real kube-scheduler alike); and the product's own count of free GPUs
(``workspacespawner.gpu.capacity.gpu_pools`` over the cluster's Nodes and
Pods) agrees with what the scheduler placed and refused.
"""

from __future__ import annotations

import kubernetes
import pytest
from localcluster.controllers.scheduler import ECONOMY_NODES

from tests.support import planes
from tests.support.faultcases import wait_until
from workspacespawner.gpu.capacity import gpu_pools, shortage

NS = "default"
A100 = "NVIDIA-A100-SXM4-80GB"
MIG_1G = "nvidia.com/mig-1g.10gb"
NODE_COUNT = len(ECONOMY_NODES)


@pytest.fixture(scope="module")
def cluster(control_plane, tmp_path_factory):
    with planes.running(control_plane, tmp_path_factory.mktemp("cluster"), nodes=ECONOMY_NODES) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def core(cluster):
    with kubernetes.config.new_client_from_config(str(cluster.kubeconfig)) as client:
        yield kubernetes.client.CoreV1Api(client)


def pod(name: str, resource: str, count: int = 1, selector: dict | None = None) -> dict:
    spec = {
        "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "600"],
                        "resources": {"limits": {resource: str(count)}, "requests": {"cpu": "100m"}}}],
    }
    if selector:
        spec["nodeSelector"] = selector
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"test": "gpu-kinds"}}, "spec": spec}


def wait(predicate, what: str):
    value = wait_until(predicate)
    assert value, f"never happened: {what}"
    return value


def node_of(core, name: str) -> str | None:
    return core.read_namespaced_pod(name, NS).spec.node_name


def refusal(core, name: str) -> str | None:
    """The PodScheduled=False message of Pod ``name``, once it has one."""
    for condition in core.read_namespaced_pod(name, NS).status.conditions or []:
        if condition.type == "PodScheduled" and condition.status == "False" and condition.reason == "Unschedulable":
            return condition.message
    return None


def start_all(core, bodies: list[dict]) -> list[str]:
    """Create the Pods and wait until each is placed; their nodes."""
    for body in bodies:
        core.create_namespaced_pod(NS, body)
    return [wait(lambda n=body["metadata"]["name"]: node_of(core, n), f"{body['metadata']['name']} placed") for body in bodies]


def delete(core, names: list[str]) -> None:
    for name in names:
        core.delete_namespaced_pod(name, NS, grace_period_seconds=0)
    wait(lambda: not {p.metadata.name for p in core.list_namespaced_pod(NS).items} & set(names), "Pods gone")


def pools(core):
    client = core.api_client
    nodes = [client.sanitize_for_serialization(n) for n in core.list_node().items]
    pods = [{**client.sanitize_for_serialization(p), "kind": "Pod"} for p in core.list_namespaced_pod(NS).items]
    return gpu_pools(nodes, pods)


def test_nodes_advertise_mig_slices_replicas_and_products(core):
    nodes = {n.metadata.name: n for n in core.list_node().items}
    mig = nodes["gpu-node-mig"]
    assert mig.status.allocatable[MIG_1G] == "9"
    assert mig.status.allocatable["nvidia.com/mig-3g.40gb"] == "1"
    assert "nvidia.com/gpu" not in mig.status.allocatable
    assert mig.metadata.labels["nvidia.com/mig.strategy"] == "mixed"
    assert mig.metadata.labels["nvidia.com/mig-1g.10gb.count"] == "9"
    assert mig.metadata.labels["nvidia.com/gpu.product"] == A100
    t4 = nodes["gpu-node-t4"]
    assert t4.status.allocatable["nvidia.com/gpu"] == "4"
    assert t4.metadata.labels["nvidia.com/gpu.replicas"] == "4"
    assert t4.metadata.labels["nvidia.com/gpu.product"] == "Tesla-T4-SHARED"
    assert nodes["gpu-node-v100"].metadata.labels["nvidia.com/gpu.product"] == "Tesla-V100-SXM2-16GB"


def test_mig_slices_fill_the_mig_node_then_the_scheduler_names_the_slice(core):
    names = [f"mig-{i}" for i in range(9)]
    placed = start_all(core, [pod(n, MIG_1G) for n in names])
    try:
        assert set(placed) == {"gpu-node-mig"}
        pool = pools(core)[(MIG_1G, A100)]
        assert (pool.total, pool.free) == (9, 0)
        assert pools(core)[("nvidia.com/mig-3g.40gb", A100)].free == 1  # another slice size is still free
        core.create_namespaced_pod(NS, pod("mig-extra", MIG_1G))
        names.append("mig-extra")
        message = wait(lambda: refusal(core, "mig-extra"), "mig-extra refused")
        # kube-scheduler's FitError: the MIG node and the untainted CPU node lack the slice; the whole-GPU nodes' taint
        # (worded "untolerated taint {nvidia.com/gpu: present}" by the embedded scheduler, "untolerated taint(s)" by 1.34's)
        assert message.startswith(f"0/{NODE_COUNT} nodes are available: 2 Insufficient {MIG_1G}, "
                                  "3 node(s) had untolerated taint"), message
        assert shortage(pool, 1) == f"All 9 {A100} MIG slices 1g.10gb are in use right now; this profile needs 1 MIG slice 1g.10gb."
        big = start_all(core, [pod("mig-3g", "nvidia.com/mig-3g.40gb")])
        names.append("mig-3g")
        assert big == ["gpu-node-mig"]
    finally:
        delete(core, names)


def test_time_sliced_replicas_and_products_by_label(core):
    t4 = {"nvidia.com/gpu.product": "Tesla-T4-SHARED"}
    names = [f"t4-{i}" for i in range(4)]
    placed = start_all(core, [pod(n, "nvidia.com/gpu", selector=t4) for n in names])
    try:
        assert set(placed) == {"gpu-node-t4"}  # four Pods on one card's four replicas
        pool = pools(core)[("nvidia.com/gpu", "Tesla-T4-SHARED")]
        assert (pool.total, pool.free) == (4, 0)
        core.create_namespaced_pod(NS, pod("t4-extra", "nvidia.com/gpu", selector=t4))
        names.append("t4-extra")
        message = wait(lambda: refusal(core, "t4-extra"), "t4-extra refused")
        assert message.startswith(f"0/{NODE_COUNT} nodes are available: 1 Insufficient nvidia.com/gpu, "
                                  f"{NODE_COUNT - 1} node(s) didn't match Pod's node affinity/selector."), message
        v100 = start_all(core, [pod("v100", "nvidia.com/gpu", 2, selector={"nvidia.com/gpu.product": "Tesla-V100-SXM2-16GB"})])
        names.append("v100")
        assert v100 == ["gpu-node-v100"]
        assert pools(core)[("nvidia.com/gpu", "Tesla-V100-SXM2-16GB")].free == 0
        assert pools(core)[("nvidia.com/gpu", A100)].free == 8  # the A100s were never touched
    finally:
        delete(core, names)
