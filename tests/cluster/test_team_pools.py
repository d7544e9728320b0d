"""Placement rules on a cluster: team pools fenced off, cheaper GPUs first, one user's GPU workspaces spread.

Pods carrying what workspace.placement decides (the spec a workspace's Pod
gets) are placed by the scheduler of each control plane (the local cluster's
scoring, and the real kube-scheduler): a pool member's workspace lands on its
pool's nodes; anyone else's never does, even when the only GPUs free are
there (Unschedulable, by the node affinity alone on an untainted pool); a
profile preferring cheaper GPUs takes the cheapest free product and falls
back to the next when it is full; two GPU workspaces of one user go to two
nodes when they can, where without the rule both go to the roomier one.
"""

from __future__ import annotations

import kubernetes
import pytest
from localcluster.controllers.scheduler import GPU_TAINT

from tests.support import planes
from tests.support.faultcases import wait_until
from workspacespawner.config.gpueconomy import GPUEconomy
from workspacespawner.config.teampools import TeamGPUPools
from workspacespawner.core import names
from workspacespawner.core.gpuresources import GPU_PRODUCT_LABEL
from workspacespawner.gpu.placement import apply, placement

POOL_LABEL = "example.org/team-pool"
VISION_TAINT = {"key": POOL_LABEL, "value": "vision", "effect": "NoSchedule"}
A100, V100, P4 = "NVIDIA-A100-SXM4-80GB", "Tesla-V100-SXM2-16GB", "Tesla-P4"
NODES = [
    {"name": "cpu-1", "cpu": "16", "memory": "64Gi"},
    {"name": "a100-1", "cpu": "64", "memory": "256Gi", "gpus": 4, "gpu_product": A100, "taints": [GPU_TAINT]},
    {"name": "v100-big", "cpu": "64", "memory": "256Gi", "gpus": 2, "gpu_product": V100, "taints": [GPU_TAINT]},
    {"name": "v100-small", "cpu": "8", "memory": "32Gi", "gpus": 2, "gpu_product": V100, "taints": [GPU_TAINT]},
    {"name": "p4-1", "cpu": "8", "memory": "32Gi", "gpus": 1, "gpu_product": P4, "taints": [GPU_TAINT]},
    {"name": "vision-1", "cpu": "64", "memory": "256Gi", "gpus": 8, "gpu_product": A100,
     "labels": {POOL_LABEL: "vision"}, "taints": [GPU_TAINT, VISION_TAINT]},
    {"name": "nlp-1", "cpu": "64", "memory": "256Gi", "gpus": 8, "gpu_product": A100,
     "labels": {POOL_LABEL: "nlp"}, "taints": [GPU_TAINT]},  # no taint of its own: only the node affinity fences it
]
POOLS = TeamGPUPools(pools={
    "vision": {"groups": ["vision-lab"], "node_selector": {POOL_LABEL: "vision"}, "taint": VISION_TAINT},
    "nlp": {"groups": ["nlp"], "node_selector": {POOL_LABEL: "nlp"}},
}).all()
ECONOMY = GPUEconomy(card_hour_weights={"nvidia.com/gpu": {A100: 1.0, V100: 0.5, P4: 0.25}})


@pytest.fixture(scope="module")
def cluster(control_plane, tmp_path_factory):
    with planes.running(control_plane, tmp_path_factory.mktemp("cluster"), nodes=NODES) as cluster:
        yield cluster


@pytest.fixture
def core(cluster):
    client = kubernetes.config.new_client_from_config(str(cluster.kubeconfig))
    api = kubernetes.client.CoreV1Api(client)
    made: list[str] = []
    yield api, made
    for name in made:
        api.delete_namespaced_pod(name, "default", grace_period_seconds=0)
    assert wait_until(lambda: not {p.metadata.name for p in api.list_namespaced_pod("default").items} & set(made))
    client.close()


def workspace(core, name: str, user: str, gpus: int, *, product: str | None = None, fenced: bool = True, **rules) -> str:
    """Create a Pod as a workspace of ``user`` gets it (owner labels, the placement rules unless not ``fenced``);
    return its name."""
    api, made = core
    resources = {"requests": {"cpu": "1", "memory": "1Gi"}, **({"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {})}
    spec = {"containers": [{"name": "notebook", "image": "quay.io/jupyter/base-notebook:2025-10-20",
                            "command": ["sleep", "3600"], "resources": resources}],
            "terminationGracePeriodSeconds": 0}
    if product:
        spec["nodeSelector"] = {GPU_PRODUCT_LABEL: product}
    where = placement(user_name=user, gpus=gpus, pools=POOLS.values(), product=product,
                      products_by_cost=ECONOMY.products_by_cost("nvidia.com/gpu"), **rules)
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": names.owner_labels(user)},
            "spec": apply(spec, where) if fenced else spec}
    api.create_namespaced_pod("default", body)
    made.append(name)
    return name


def placed(core, name: str) -> str:
    """The node the scheduler put Pod ``name`` on (waits for it)."""
    api, _ = core
    node = wait_until(lambda: api.read_namespaced_pod(name, "default").spec.node_name)
    assert node, f"{name} was not placed: {api.read_namespaced_pod(name, 'default').status.conditions}"
    return node


def refusal(core, name: str) -> str:
    """The scheduler's Unschedulable message for Pod ``name`` (waits for it)."""
    api, _ = core

    def message():
        pod = api.read_namespaced_pod(name, "default")
        for condition in pod.status.conditions or []:
            if condition.type == "PodScheduled" and condition.reason == "Unschedulable":
                return condition.message
        return None

    found = wait_until(message)
    assert found, f"{name} was not refused"
    assert api.read_namespaced_pod(name, "default").spec.node_name is None
    return found


def test_a_pool_members_workspace_lands_in_its_pool(core):
    assert placed(core, workspace(core, "vision-ann", "ann", 8, pool=POOLS["vision"])) == "vision-1"
    assert placed(core, workspace(core, "nlp-ann", "ann", 8, pool=POOLS["nlp"])) == "nlp-1"


def test_no_one_elses_workspace_lands_in_a_pool_even_with_its_gpus_free(core):
    # 8 GPUs on one node exist only in the pools (both idle): refused, where without the fence nlp-1 would take it
    message = refusal(core, workspace(core, "eight-bob", "bob", 8))
    assert "didn't match Pod's node affinity/selector" in message
    assert placed(core, workspace(core, "cpu-bob", "bob", 0)) == "cpu-1"
    assert placed(core, workspace(core, "eight-unfenced", "bob", 8, fenced=False)) == "nlp-1"  # what the fence stops


def test_prefer_cheaper_takes_the_cheapest_free_product_then_the_next(core):
    first = placed(core, workspace(core, "cheap-1", "cy", 1, prefer_cheaper=True))
    assert first == "p4-1"
    second = placed(core, workspace(core, "cheap-2", "dee", 1, prefer_cheaper=True))  # the one P4 is taken
    assert second.startswith("v100-")
    plain = placed(core, workspace(core, "plain-1", "eve", 1, spread=False))  # no preference: the roomiest node
    assert plain in ("a100-1", "v100-big")


def half_fill_the_small_v100_node(core) -> None:
    """A CPU-only Pod holding half of v100-small's CPU, so the scheduler's least-allocated score prefers v100-big."""
    api, made = core
    api.create_namespaced_pod("default", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "filler"}, "spec": {
        "containers": [{"name": "busy", "image": "quay.io/jupyter/base-notebook:2025-10-20", "command": ["sleep", "3600"],
                        "resources": {"requests": {"cpu": "4", "memory": "1Gi"}}}],
        "nodeSelector": {"kubernetes.io/hostname": "v100-small"}, "tolerations": [{"key": GPU_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}],
        "terminationGracePeriodSeconds": 0}})
    made.append("filler")
    assert placed(core, "filler") == "v100-small"


def test_two_gpu_workspaces_of_one_user_spread_over_two_nodes(core):
    half_fill_the_small_v100_node(core)
    one = placed(core, workspace(core, "spread-1", "fay", 1, product=V100))
    two = placed(core, workspace(core, "spread-2", "fay", 1, product=V100))
    assert (one, two) == ("v100-big", "v100-small")


def test_without_the_rule_both_go_to_the_roomier_node(core):
    half_fill_the_small_v100_node(core)
    one = placed(core, workspace(core, "packed-1", "gus", 1, product=V100, spread=False))
    two = placed(core, workspace(core, "packed-2", "gus", 1, product=V100, spread=False))
    assert one == two == "v100-big"


def test_two_gpu_vms_of_one_user_spread_over_two_nodes(core, cluster):
    """A VMI's template gets the same rules (the local cluster's scheduler places VMIs on both planes)."""
    half_fill_the_small_v100_node(core)
    client = kubernetes.config.new_client_from_config(str(cluster.kubeconfig))
    custom = kubernetes.client.CustomObjectsApi(client)
    where = placement(user_name="hal", gpus=1, pools=POOLS.values())
    made = []
    try:
        for name in ("vm-hal-1", "vm-hal-2"):
            spec = apply({"domain": {"cpu": {"cores": 1}, "memory": {"guest": "1Gi"}, "devices": {
                "disks": [], "gpus": [{"name": "gpu0", "deviceName": "nvidia.com/gpu"}]}},
                "nodeSelector": {GPU_PRODUCT_LABEL: V100}}, where)
            custom.create_namespaced_custom_object("kubevirt.io", "v1", "default", "virtualmachineinstances", {
                "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                "metadata": {"name": name, "labels": names.owner_labels("hal")}, "spec": spec})
            made.append(name)
            assert wait_until(lambda name=name: (custom.get_namespaced_custom_object(
                "kubevirt.io", "v1", "default", "virtualmachineinstances", name).get("status") or {}).get("nodeName"))
        nodes = [custom.get_namespaced_custom_object("kubevirt.io", "v1", "default", "virtualmachineinstances", n)["status"]
                 ["nodeName"] for n in made]
        assert nodes == ["v100-big", "v100-small"]
    finally:
        for name in made:
            custom.delete_namespaced_custom_object("kubevirt.io", "v1", "default", "virtualmachineinstances", name)
        client.close()
