"""Where a workspace may and should run: team pools, cheaper GPUs first, one user's GPU workspaces spread. Pure.

:func:`placement` decides, from the profile's settings, what a workspace's
Pod (or a VM's VirtualMachineInstance template) must carry:

- a pool profile (``team_pool``) runs only on its pool's nodes: the pool's
  label in ``nodeSelector`` and a toleration of the pool's taint;
- every other workspace never runs on a pool node: a required node affinity
  expression ``<label> NotIn [<values>]`` per pool label (``NotIn`` also
  matches nodes without the label), ANDed into every required term the
  admin configured (``node_affinity_required``), or a term of its own;
- ``prefer_cheaper_gpus``: for a GPU profile naming no
  ``nvidia.com/gpu.product``, one preferred node affinity term per product
  :class:`~workspacespawner.config.gpueconomy.GPUEconomy` prices for its
  GPU resource, the cheapest weighted highest (:func:`cheaper_first`);
- ``cpu_prefers_cpu_nodes``: a CPU workspace (no GPUs) prefers nodes
  without GPUs (no ``nvidia.com/gpu.product`` label), so it leaves a GPU
  node's CPU and memory to the GPU work there while a CPU node can take it
  (:func:`cpu_nodes_first`);
- ``spread_gpu_workspaces``: a GPU workspace prefers nodes without another
  workspace of its owner (preferred pod anti-affinity, weight 100, on the
  owner label :data:`~workspacespawner.core.names.OWNER_LABEL`, per
  ``kubernetes.io/hostname``). Not for a workspace that prefers cheaper
  GPUs: the two would fight (kube-scheduler weighs each scoring plugin's
  normalised score alike, so a second workspace would go to a dearer card
  to be apart), and the cheaper card is what its owner pays for.

:func:`apply` merges a :class:`Placement` into a core/v1 ``PodSpec`` (or a
kubevirt.io/v1 ``VirtualMachineInstanceSpec``, which has the same
``nodeSelector``, ``affinity`` and ``tolerations``) in its JSON form. The
kube-scheduler honours all of it natively; the local cluster scores the
preferred terms the same way (``localcluster/controllers/scoring.py``).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from workspacespawner.config.teampools import TeamPool
from workspacespawner.core import names
from workspacespawner.core.gpuresources import GPU_PRODUCT_LABEL

#: The node label a topology of one node is (what kube-scheduler's hostname topology uses).
HOSTNAME_LABEL = "kubernetes.io/hostname"
#: Weight of the preferred pod anti-affinity that spreads one user's GPU workspaces (the most a term may have).
SPREAD_WEIGHT = 100
#: Weight of the preferred term of the cheapest product; each next price is ten times less (at least 1).
CHEAPEST_WEIGHT = 100


@dataclass(frozen=True)
class Placement:
    """What one workspace's compute must carry to be placed right (JSON forms of core/v1 objects).

    ``node_selector``: labels the node must have; ``required``: node selector
    requirements ANDed into every required node affinity term; ``preferred``:
    ``PreferredSchedulingTerm`` dicts; ``anti_affinity``:
    ``WeightedPodAffinityTerm`` dicts (preferred pod anti-affinity);
    ``tolerations``: ``Toleration`` dicts.
    """

    node_selector: dict[str, str] = field(default_factory=dict)
    required: tuple[dict, ...] = ()
    preferred: tuple[dict, ...] = ()
    anti_affinity: tuple[dict, ...] = ()
    tolerations: tuple[dict, ...] = ()

    @property
    def preferred_products(self) -> list[str]:
        """The GPU products the preferred terms name, most preferred first (empty when it prefers none)."""
        terms = sorted(self.preferred, key=lambda t: -t["weight"])
        return [v for t in terms for e in t["preference"]["matchExpressions"] if e["key"] == GPU_PRODUCT_LABEL
                for v in e["values"]]


def cheaper_first(products_by_cost: Sequence[tuple[str, float]]) -> list[dict]:
    """Preferred node affinity terms on ``nvidia.com/gpu.product``, one per product, cheapest weighted highest.

    ``products_by_cost``: ``[(product, card-hours per unit-hour)]`` cheapest
    first (:meth:`~workspacespawner.config.gpueconomy.GPUEconomy.products_by_cost`).
    The cheapest price gets :data:`CHEAPEST_WEIGHT` (100), each next price a
    tenth of the one before, at least 1 (weights are 1–100 in core/v1);
    products of one price get one weight. Steep on purpose: kube-scheduler
    adds other scores (free CPU and memory) to a node's, and a cheaper GPU
    should still win over an emptier node.
    """
    terms, rank, last = [], -1, None
    for product, price in products_by_cost:
        if price != last:
            rank, last = rank + 1, price
        weight = max(1, CHEAPEST_WEIGHT // 10**rank)
        terms.append({"weight": weight, "preference": {
            "matchExpressions": [{"key": GPU_PRODUCT_LABEL, "operator": "In", "values": [product]}]}})
    return terms


def cpu_nodes_first() -> dict:
    """The ``PreferredSchedulingTerm`` of a CPU workspace: nodes without a GPU (no ``nvidia.com/gpu.product``), weight 100."""
    return {"weight": CHEAPEST_WEIGHT, "preference": {
        "matchExpressions": [{"key": GPU_PRODUCT_LABEL, "operator": "DoesNotExist"}]}}


def pool_exclusion(pools: Iterable[TeamPool]) -> tuple[dict, ...]:
    """Node selector requirements that keep a workspace off every pool's nodes: ``<label> NotIn [values]`` per label."""
    by_label: dict[str, set[str]] = {}
    for pool in pools:
        by_label.setdefault(pool.label, set()).add(pool.value)
    return tuple({"key": label, "operator": "NotIn", "values": sorted(values)} for label, values in sorted(by_label.items()))


def spread_term(user_name: str) -> dict:
    """The ``WeightedPodAffinityTerm`` that keeps ``user_name``'s workspaces apart: per node, on their owner label."""
    return {"weight": SPREAD_WEIGHT, "podAffinityTerm": {
        "labelSelector": {"matchLabels": {names.OWNER_LABEL: names.owner_id(user_name)}},
        "topologyKey": HOSTNAME_LABEL,
    }}


def placement(*, user_name: str, gpus: int, pool: TeamPool | None = None, pools: Iterable[TeamPool] = (),
              product: str | None = None, products_by_cost: Sequence[tuple[str, float]] = (),
              prefer_cheaper: bool = False, spread: bool = True, keep_off_gpu_nodes: bool = True) -> Placement:
    """The :class:`Placement` of one start.

    ``user_name``: the owner (JupyterHub name); ``gpus``: GPU units the
    profile asks for (0: a CPU workspace: no preference, no spread);
    ``pool``: the team pool the profile joins (None: none), ``pools``: every
    pool of the site; ``product``: the ``nvidia.com/gpu.product`` the profile
    selects (None: any); ``products_by_cost``: the products priced for the
    profile's GPU resource, cheapest first; ``prefer_cheaper``/``spread``:
    the profile's ``prefer_cheaper_gpus``/``spread_gpu_workspaces`` (a
    preference for cheaper GPUs, when it applies, replaces the spread);
    ``keep_off_gpu_nodes``: its ``cpu_prefers_cpu_nodes`` (CPU workspaces only).
    """
    selector, tolerations, required = {}, (), ()
    if pool is not None:
        selector = {pool.label: pool.value}
        tolerations = tuple(t for t in [pool.toleration()] if t is not None)
    else:
        required = pool_exclusion(pools)
    preferred = tuple(cheaper_first(products_by_cost)) if gpus and prefer_cheaper and not product else ()
    if not gpus and keep_off_gpu_nodes:
        preferred = (cpu_nodes_first(),)
    anti = (spread_term(user_name),) if gpus and spread and not preferred else ()
    return Placement(selector, required, preferred, anti, tolerations)


def _merge_required(node_affinity: dict, required: tuple[dict, ...]) -> None:
    if not required:
        return
    spec = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = spec.get("nodeSelectorTerms") or [{}]
    for term in terms:
        expressions = term.setdefault("matchExpressions", [])
        expressions += [copy.deepcopy(r) for r in required if r not in expressions]
    spec["nodeSelectorTerms"] = terms


def _add_new(items: list, more: Iterable[dict]) -> list:
    return items + [copy.deepcopy(m) for m in more if m not in items]


def apply(spec: dict, where: Placement) -> dict:
    """``spec`` (a PodSpec or VirtualMachineInstanceSpec in JSON form, not changed) with ``where`` merged in.

    ``nodeSelector`` gains the placement's labels; the required node
    affinity expressions are ANDed into every existing required term (terms
    are ORed, so each must carry them); preferred terms, pod anti-affinity
    terms and tolerations are added unless already there.
    """
    out = copy.deepcopy(spec)
    if where.node_selector:
        out["nodeSelector"] = {**(out.get("nodeSelector") or {}), **where.node_selector}
    if where.required or where.preferred:
        node_affinity = out.setdefault("affinity", {}).setdefault("nodeAffinity", {})
        _merge_required(node_affinity, where.required)
        if where.preferred:
            key = "preferredDuringSchedulingIgnoredDuringExecution"
            node_affinity[key] = _add_new(node_affinity.get(key) or [], where.preferred)
    if where.anti_affinity:
        anti = out.setdefault("affinity", {}).setdefault("podAntiAffinity", {})
        key = "preferredDuringSchedulingIgnoredDuringExecution"
        anti[key] = _add_new(anti.get(key) or [], where.anti_affinity)
    if where.tolerations:
        out["tolerations"] = _add_new(out.get("tolerations") or [], where.tolerations)
    return out


def prefers_sentence(products: Sequence[str]) -> str | None:
    """``Prefers older GPUs: Tesla-P4, then Tesla-V100-SXM2-16GB, then ...`` (None for fewer than two: no choice)."""
    return "Prefers older GPUs: " + ", then ".join(products) if len(products) > 1 else None
