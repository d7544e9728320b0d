"""How the local cluster's scheduler ranks the nodes that can take a Pod or VMI: its *preferred* affinities.

kube-scheduler scores each feasible node with plugins (``NodeAffinity``,
``InterPodAffinity``, ``NodeResourcesFit``, ...); the local cluster keeps
the two that express a workload's wishes, read from the Kubernetes docs
("Assigning Pods to Nodes"), not copied:

* preferred node affinity: the sum of the ``weight`` of each
  ``preferredDuringSchedulingIgnoredDuringExecution`` term whose
  ``preference`` (a NodeSelectorTerm) the node matches;
* preferred pod affinity and anti-affinity: for each weighted term, its
  ``weight`` once per placed Pod or VMI its ``labelSelector`` matches
  (in the term's ``namespaces``, or the workload's own namespace; an empty
  ``namespaceSelector`` means every namespace) that runs in the same
  topology domain as the node (the same value of the node label
  ``topologyKey``); added for affinity, subtracted for anti-affinity.

:func:`preference_score` is that sum; the scheduler picks the highest
score first and breaks ties as before (the most free CPU and memory, then
the name). A VMI's launcher Pod carries its VMI's labels and is placed with
it, so the VMI counts and its Pod does not. kube-scheduler normalises each
plugin's scores to 0–100 and weighs them against the others; here the
preferences simply come first, which is what the tests need to see.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..selectors import Requirement

PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
#: metav1 ``LabelSelectorRequirement`` operators as :class:`~..selectors.Requirement` spells them.
SELECTOR_OPERATORS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}


@dataclass(frozen=True)
class Placed:
    """A Pod or VMI already on a node: its ``namespace``, ``labels`` and ``node`` name."""

    namespace: str
    labels: dict
    node: str


def selector_matches(selector: dict | None, labels: dict) -> bool:
    """Whether a metav1 ``LabelSelector`` (``matchLabels``, ``matchExpressions``) selects ``labels``; None selects nothing."""
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        op = SELECTOR_OPERATORS.get(expr.get("operator"))
        if op is None or not Requirement(expr["key"], op, frozenset(expr.get("values") or [])).matches(labels):
            return False
    return True


def node_affinity_score(spec: dict, node: dict, term_matches: Callable[[dict, dict], bool]) -> int:
    """The summed weights of ``spec``'s preferred node affinity terms ``node`` matches (``term_matches(term, node)``)."""
    terms = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(PREFERRED) or []
    return sum(int(t.get("weight", 0)) for t in terms if term_matches(t.get("preference") or {}, node))


def _namespaces(term: dict, own: str) -> set[str] | None:
    """The namespaces a pod affinity term looks in (None: every one)."""
    if term.get("namespaceSelector") == {}:
        return None
    return set(term.get("namespaces") or []) or {own}


def pod_affinity_score(spec: dict, namespace: str, node: dict, nodes: dict[str, dict], placed: Iterable[Placed]) -> int:
    """Preferred pod affinity minus anti-affinity of ``spec`` (a workload in ``namespace``) on ``node``.

    ``nodes``: every Node by name (for the topology labels of where the
    ``placed`` workloads run).
    """
    affinity = spec.get("affinity") or {}
    placed = list(placed)
    score = 0
    for field, sign in (("podAffinity", 1), ("podAntiAffinity", -1)):
        for weighted in (affinity.get(field) or {}).get(PREFERRED) or []:
            term = weighted.get("podAffinityTerm") or {}
            key = term.get("topologyKey", "")
            domain = (node["metadata"].get("labels") or {}).get(key)
            if domain is None:
                continue
            namespaces = _namespaces(term, namespace)
            for other in placed:
                other_labels = ((nodes.get(other.node) or {}).get("metadata") or {}).get("labels") or {}
                if (other_labels.get(key) == domain and (namespaces is None or other.namespace in namespaces)
                        and selector_matches(term.get("labelSelector"), other.labels)):
                    score += sign * int(weighted.get("weight", 0))
    return score


def preference_score(spec: dict, namespace: str, node: dict, nodes: dict[str, dict], placed: Iterable[Placed],
                     term_matches: Callable[[dict, dict], bool]) -> int:
    """How much ``spec`` (a PodSpec or VMI spec in ``namespace``) prefers ``node``: node affinity plus pod (anti-)affinity.

    ``term_matches(term, node)``: whether ``node`` matches a NodeSelectorTerm
    (the scheduler's own check of required terms).
    """
    return node_affinity_score(spec, node, term_matches) + pod_affinity_score(spec, namespace, node, nodes, placed)
