"""Placement rules (workspace.placement): team pools, cheaper GPUs first, one user's GPU workspaces spread.

Pure: what a start's Pod spec or VMI template gets for a pool profile, for
any other profile (kept off every pool's label, ANDed into an admin's own
required terms), for prefer_cheaper_gpus (one preferred term per priced
product, cheapest weighted highest) and for spread_gpu_workspaces; that the
result is a valid core/v1 Pod and kubevirt.io/v1 VirtualMachine by the
Kubernetes schema (the local cluster's validator) and by kubernetes_asyncio's
models; and the spawn page's sentence.
"""

from __future__ import annotations

import pytest
from localcluster.kinds import by_kind
from localcluster.validation import Validator

from workspacespawner.backends.vm.manifests import VMIdentity, VMSettings, make_virtual_machine, vm_spec_current
from workspacespawner.config.gpueconomy import GPUEconomy
from workspacespawner.config.teampools import TeamGPUPools
from workspacespawner.core import names
from workspacespawner.gpu.placement import apply, cheaper_first, placement, prefers_sentence
from workspacespawner.k8s.models import to_model

LABEL = "example.org/team-pool"
POOLS = TeamGPUPools(pools={
    "vision": {"groups": ["vision-lab"], "node_selector": {LABEL: "vision"},
               "taint": {"key": LABEL, "value": "vision", "effect": "NoSchedule"}},
    "nlp": {"groups": ["nlp"], "node_selector": {LABEL: "nlp"}},
    "robots": {"groups": ["robots"], "node_selector": {"example.org/lab": "robots"}},
}).all()
ECONOMY = GPUEconomy(card_hour_weights={"nvidia.com/gpu": {
    "NVIDIA-A100-SXM4-80GB": 1.0, "Tesla-V100-SXM2-16GB": 0.5, "Tesla-P4": 0.25, "Tesla-T4": 0.25, "*": 1.0}})


def test_a_pool_profile_runs_on_its_pool_and_tolerates_its_taint():
    where = placement(user_name="ann", gpus=8, pool=POOLS["vision"], pools=POOLS.values())
    spec = apply({"containers": []}, where)
    assert spec["nodeSelector"] == {LABEL: "vision"}
    assert spec["tolerations"] == [{"key": LABEL, "operator": "Equal", "value": "vision", "effect": "NoSchedule"}]
    assert "nodeAffinity" not in spec.get("affinity", {})  # its own pool's label pins it; no exclusion


def test_every_other_workspace_is_kept_off_every_pool_label():
    where = placement(user_name="bob", gpus=0, pools=POOLS.values())
    spec = apply({"containers": []}, where)
    assert spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "example.org/lab", "operator": "NotIn", "values": ["robots"]},
                              {"key": LABEL, "operator": "NotIn", "values": ["nlp", "vision"]}]}]}
    assert "tolerations" not in spec and "nodeSelector" not in spec and "podAntiAffinity" not in spec["affinity"]


def test_the_exclusion_is_anded_into_each_of_the_admins_required_terms():
    admins = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
    ]}}}, "tolerations": [{"key": "x", "operator": "Exists"}]}
    spec = apply(admins, placement(user_name="bob", gpus=1, pools=[POOLS["nlp"]], spread=False))
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    exclusion = {"key": LABEL, "operator": "NotIn", "values": ["nlp"]}
    assert [t["matchExpressions"][-1] for t in terms] == [exclusion, exclusion]
    assert terms[0]["matchExpressions"][0]["key"] == "zone" and terms[1]["matchFields"][0]["values"] == ["n1"]
    assert spec["tolerations"] == admins["tolerations"]
    assert apply(spec, placement(user_name="bob", gpus=1, pools=[POOLS["nlp"]], spread=False)) == spec  # idempotent
    assert admins["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
        "matchExpressions"] == [{"key": "zone", "operator": "In", "values": ["a"]}]  # the input is not changed


def test_cheaper_gpus_first_cheapest_weighted_highest_equal_prices_equal_weights():
    terms = cheaper_first(ECONOMY.products_by_cost("nvidia.com/gpu"))
    assert [(t["preference"]["matchExpressions"][0]["values"][0], t["weight"]) for t in terms] == [
        ("Tesla-P4", 100), ("Tesla-T4", 100), ("Tesla-V100-SXM2-16GB", 10), ("NVIDIA-A100-SXM4-80GB", 1)]
    assert all(t["preference"]["matchExpressions"][0]["key"] == "nvidia.com/gpu.product" for t in terms)
    assert cheaper_first([]) == []


@pytest.mark.parametrize(("gpus", "product", "prefer", "preferred"), [
    (1, None, True, True), (1, "NVIDIA-A100-SXM4-80GB", True, False), (0, None, True, False), (1, None, False, False),
])
def test_only_a_gpu_profile_naming_no_product_prefers_cheaper(gpus, product, prefer, preferred):
    where = placement(user_name="ann", gpus=gpus, product=product, prefer_cheaper=prefer, spread=False,
                      products_by_cost=ECONOMY.products_by_cost("nvidia.com/gpu"), keep_off_gpu_nodes=False)
    assert bool(where.preferred) is preferred
    assert where.preferred_products == (["Tesla-P4", "Tesla-T4", "Tesla-V100-SXM2-16GB", "NVIDIA-A100-SXM4-80GB"]
                                        if preferred else [])


def test_a_gpu_workspace_spreads_away_from_its_owners_others():
    spec = apply({}, placement(user_name="ann", gpus=1))
    assert spec["affinity"]["podAntiAffinity"] == {"preferredDuringSchedulingIgnoredDuringExecution": [{
        "weight": 100, "podAffinityTerm": {
            "labelSelector": {"matchLabels": {names.OWNER_LABEL: names.owner_id("ann")}},
            "topologyKey": "kubernetes.io/hostname"}}]}
    assert "podAntiAffinity" not in apply({}, placement(user_name="ann", gpus=0)).get("affinity", {})  # CPU: no spread
    assert "affinity" not in apply({}, placement(user_name="ann", gpus=2, spread=False))
    cheaper = placement(user_name="ann", gpus=1, prefer_cheaper=True, products_by_cost=[("Tesla-P4", 0.25)])
    assert cheaper.preferred and not cheaper.anti_affinity  # the cheaper card comes first: no spread to fight it


def test_the_spawn_pages_sentence():
    assert prefers_sentence(["Tesla-P4", "Tesla-V100-SXM2-16GB", "NVIDIA-A100-SXM4-80GB"]) == (
        "Prefers older GPUs: Tesla-P4, then Tesla-V100-SXM2-16GB, then NVIDIA-A100-SXM4-80GB")
    assert prefers_sentence([]) is None and prefers_sentence(["NVIDIA-A100-SXM4-80GB"]) is None  # no choice to state


def everything(pool=None) -> dict:
    return apply({}, placement(user_name="ann", gpus=2, pool=pool, pools=POOLS.values(), prefer_cheaper=True,
                               products_by_cost=ECONOMY.products_by_cost("nvidia.com/gpu")))


@pytest.mark.parametrize("pool", [None, POOLS["vision"]])
def test_a_pod_with_every_rule_is_valid_by_the_kubernetes_schema(pool):
    spec = {"containers": [{"name": "notebook", "image": "quay.io/jupyter/base-notebook:2025-10-20"}], **everything(pool)}
    Validator().validate(by_kind()[("v1", "Pod")], {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                                                   "spec": spec})
    to_model("V1PodSpec", spec)  # kubespawner's models take it too (an unknown field raises)


@pytest.mark.parametrize("pool", [None, POOLS["vision"]])
def test_a_vm_template_with_every_rule_is_valid_and_current_after_a_restart(pool):
    ident = VMIdentity.for_workspace(namespace="hub", user_name="ann", kubespawner_username="ann", base_name="vm-ann",
                                     home_pvc="home-ann")
    where = placement(user_name="ann", gpus=2, pool=pool, pools=POOLS.values())
    vm = make_virtual_machine(ident=ident, settings=VMSettings(golden_image="g", golden_image_namespace="hub", gpus=2,
                                                               placement=where))
    template = vm["spec"]["template"]["spec"]
    assert template["affinity"]["podAntiAffinity"]  # on the owner label, which the template labels carry
    assert names.OWNER_LABEL in vm["spec"]["template"]["metadata"]["labels"]
    Validator().validate(by_kind()[("kubevirt.io/v1", "VirtualMachine")], vm)
    assert vm_spec_current(vm, vm)
    without = make_virtual_machine(ident=ident, settings=VMSettings(golden_image="g", golden_image_namespace="hub", gpus=2))
    assert not vm_spec_current(vm, without)  # a profile that lost its placement brings the VM to it


def test_a_cpu_workspace_prefers_nodes_without_gpus():
    """Issue #38 item 9: CPU work keeps off GPU nodes while a CPU node can take it (a preference: it still runs on a
    GPU node when no other fits); a GPU workspace and a CPU one that opts out get no such term."""
    cpu = placement(user_name="ann", gpus=0)
    assert cpu.preferred == ({"weight": 100, "preference": {"matchExpressions": [
        {"key": "nvidia.com/gpu.product", "operator": "DoesNotExist"}]}},)
    assert placement(user_name="ann", gpus=0, keep_off_gpu_nodes=False).preferred == ()
    assert placement(user_name="ann", gpus=1).preferred == ()
    spec = apply({"containers": []}, cpu)
    assert spec["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] == list(cpu.preferred)
