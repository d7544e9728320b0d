"""The local cluster's ranking of feasible nodes by preferred affinities (localcluster.controllers.scoring).

Pure: preferred node affinity weights summed over matching terms; preferred
pod anti-affinity subtracting its weight per matching placed workload in the
node's topology domain (and affinity adding it); namespaces and selectors
as core/v1 reads them.
"""

from __future__ import annotations

from localcluster.controllers.scheduler import _term_matches
from localcluster.controllers.scoring import Placed, preference_score, selector_matches

PRODUCT = "nvidia.com/gpu.product"


def node(name: str, product: str, rack: str = "r1") -> dict:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, PRODUCT: product, "rack": rack}}}


NODES = {n["metadata"]["name"]: n for n in (node("p4", "Tesla-P4"), node("v100", "Tesla-V100"), node("a100", "A100", "r2"))}
CHEAPER = {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
    {"weight": 100, "preference": {"matchExpressions": [{"key": PRODUCT, "operator": "In", "values": ["Tesla-P4"]}]}},
    {"weight": 10, "preference": {"matchExpressions": [{"key": PRODUCT, "operator": "In", "values": ["Tesla-V100"]}]}},
]}}}


def spread(key: str = "kubernetes.io/hostname", **term) -> dict:
    return {"affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100,
            "podAffinityTerm": {"labelSelector": {"matchLabels": {"owner": "ann"}}, "topologyKey": key, **term}}]}}}


def score(spec: dict, node_name: str, placed=(), namespace="hub") -> int:
    return preference_score(spec, namespace, NODES[node_name], NODES, placed, _term_matches)


def test_preferred_node_affinity_sums_the_weights_of_matching_terms():
    assert [score(CHEAPER, n) for n in ("p4", "v100", "a100")] == [100, 10, 0]
    assert score({}, "p4") == 0


def test_anti_affinity_counts_each_matching_workload_in_the_same_domain():
    placed = [Placed("hub", {"owner": "ann"}, "p4"), Placed("hub", {"owner": "ann"}, "p4"), Placed("hub", {"owner": "bob"}, "v100")]
    assert [score(spread(), n, placed) for n in ("p4", "v100", "a100")] == [-200, 0, 0]
    assert [score(spread("rack"), n, placed) for n in ("p4", "v100", "a100")] == [-200, -200, 0]  # p4 and v100 share r1
    assert score(spread(), "p4", [Placed("other", {"owner": "ann"}, "p4")]) == 0  # another namespace: not counted
    assert score(spread(namespaceSelector={}), "p4", [Placed("other", {"owner": "ann"}, "p4")]) == -100
    affinity = {"affinity": {"podAffinity": spread()["affinity"]["podAntiAffinity"]}}
    assert score(affinity, "p4", placed) == 200


def test_label_selectors_as_core_v1_reads_them():
    assert selector_matches({"matchExpressions": [{"key": "owner", "operator": "NotIn", "values": ["bob"]}]}, {})
    assert not selector_matches({"matchLabels": {"owner": "ann"}, "matchExpressions": [
        {"key": "gpu", "operator": "Exists"}]}, {"owner": "ann"})
    assert selector_matches({}, {"owner": "ann"}) and not selector_matches(None, {"owner": "ann"})
