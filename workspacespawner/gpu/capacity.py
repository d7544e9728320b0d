"""GPUs free right now, by GPU resource and type: what the spawn form shows and what a refusal for want of GPUs says.

A node's GPUs are the GPU resources of its ``status.allocatable`` (the
NVIDIA device plugin's counts: ``nvidia.com/gpu``, MIG slices such as
``nvidia.com/mig-1g.10gb``, time-sliced ``nvidia.com/gpu.shared``, VM
devices; :mod:`workspacespawner.core.gpuresources`), of the type its
``nvidia.com/gpu.product`` label names (GPU feature discovery); a node
counts only while it is ``Ready`` and not cordoned
(``spec.unschedulable``), as kube-scheduler's filters count it. The units
held on it are those of the Pods (``spec.nodeName``; the larger of each
container's ``limits`` and ``requests``) and VMIs (``status.nodeName``;
one per ``devices.gpus`` and GPU ``devices.hostDevices`` entry, of its
``deviceName``) that have not finished;
a VMI's virt-launcher Pod, which holds the same GPUs, is not counted again
(:func:`~workspacespawner.k8s.objects.counted_once`).

:class:`GPUCapacity` reads the Pods and VMIs from the hub's shared watch
caches and the Nodes with one LIST at most every ``node_ttl`` seconds for
the whole hub, never one call per page view. It sees this hub's own
workspaces only: a Pod of another tenant on the same node is not in the
hub's caches, so the scheduler's refusal stays the last word.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from workspacespawner.config.profiles import GPU_RESOURCE
from workspacespawner.core.gpuresources import (
    DEVICE,
    GPU_PRODUCT_LABEL,
    MIG,
    SHARED,
    WHOLE,
    GPUResource,
    looks_like_gpu,
    parse_gpu_resource,
)
from workspacespawner.core.quantities import parse_quantity
from workspacespawner.k8s.kinds import VMI
from workspacespawner.k8s.objects import FINISHED_PHASES, counted_once, node_of, ready_condition

log = logging.getLogger("workspacespawner")


@dataclass(frozen=True)
class GPUPool:
    """The units of one GPU resource of one type on usable nodes.

    ``product``: the node label's value (``""`` for nodes without it);
    ``resource``: the GPU resource (``nvidia.com/gpu``, a MIG slice, a
    share, a VM device; :mod:`workspacespawner.core.gpuresources`).
    ``total``: allocatable units; ``free``: those no Pod or VMI holds; both
    summed over the nodes. A server's units must all be on one node:
    ``largest``/``largest_free`` are the most one node has / has free.
    """

    product: str
    total: int
    free: int
    largest: int = 0
    largest_free: int = 0
    resource: str = GPU_RESOURCE

    def __add__(self, other: GPUPool) -> GPUPool:
        return GPUPool(self.product if self.product == other.product else "", self.total + other.total,
                       self.free + other.free, max(self.largest, other.largest), max(self.largest_free, other.largest_free),
                       self.resource if self.resource == other.resource else GPU_RESOURCE)


def _count(value) -> int:
    try:
        return int(parse_quantity(str(value)))
    except (ValueError, TypeError, ArithmeticError):
        return 0


def _is_gpu(name: str, declared) -> bool:
    return looks_like_gpu(name) or parse_gpu_resource(name, declared) is not None


def node_gpu_units(node: dict, field: str = "allocatable", declared=()) -> dict[str, int]:
    """``{resource: units}`` of every GPU resource in a Node's ``status.<field>`` (``allocatable`` or ``capacity``).

    GPU resources: those :func:`~workspacespawner.core.gpuresources.parse_gpu_resource`
    knows (with the site device names ``declared``) and any other name
    under a GPU vendor's domain (a VM device not declared still holds a GPU).
    """
    quantities = (node.get("status") or {}).get(field) or {}
    units = {name: _count(value) for name, value in quantities.items() if _is_gpu(name, declared)}
    return {name: count for name, count in units.items() if count > 0}


def node_gpus(node: dict, field: str = "allocatable") -> int:
    """The ``nvidia.com/gpu`` count of a Node's ``status.<field>`` (``allocatable`` or ``capacity``); 0 when absent."""
    return _count(((node.get("status") or {}).get(field) or {}).get(GPU_RESOURCE, 0))


def node_usable(node: dict) -> bool:
    """Whether kube-scheduler may place new work on ``node``: condition ``Ready`` True and not cordoned."""
    return not (node.get("spec") or {}).get("unschedulable") and ready_condition(node) is True


def units_held(obj: dict, declared=()) -> dict[str, int]:
    """``{resource: units}`` of GPU resources a Pod or VMI (``kind`` set) holds on its node; empty once finished or unplaced.

    A Pod: per container, the larger of ``limits`` and ``requests`` of each
    GPU resource. A VMI: one unit of its ``deviceName`` per
    ``devices.gpus`` entry and per GPU ``devices.hostDevices`` entry.
    """
    spec = obj.get("spec") or {}
    held: dict[str, int] = {}
    if (obj.get("status") or {}).get("phase") in FINISHED_PHASES or not node_of(obj):
        return held
    if obj.get("kind") == VMI.kind:
        devices = ((spec.get("domain") or {}).get("devices")) or {}
        for device in [*(devices.get("gpus") or []), *(devices.get("hostDevices") or [])]:
            name = str(device.get("deviceName", ""))
            if _is_gpu(name, declared):
                held[name] = held.get(name, 0) + 1
        return held
    for container in spec.get("containers") or []:
        resources = container.get("resources") or {}
        names = {n for part in ("limits", "requests") for n in (resources.get(part) or {}) if _is_gpu(n, declared)}
        for name in names:
            asked = max(_count((resources.get(part) or {}).get(name, 0)) for part in ("limits", "requests"))
            if asked:
                held[name] = held.get(name, 0) + asked
    return held


def gpus_held(obj: dict, declared=()) -> int:
    """GPU units of every GPU resource a Pod or VMI holds on its node (:func:`units_held` summed)."""
    return sum(units_held(obj, declared).values())


def gpu_pools(nodes: list[dict], compute: list[dict], declared=()) -> dict[tuple[str, str], GPUPool]:
    """``{(resource, product): GPUPool}`` of the usable GPU nodes in ``nodes``, with what ``compute`` (Pods and VMIs) holds.

    A virt-launcher Pod and its VMI hold their GPUs once (:func:`~workspacespawner.k8s.objects.counted_once`).
    """
    allocatable: dict[str, tuple[str, dict[str, int]]] = {}
    for node in nodes:
        meta = node.get("metadata") or {}
        units = node_gpu_units(node, declared=declared)
        if units and node_usable(node):
            allocatable[meta.get("name", "")] = ((meta.get("labels") or {}).get(GPU_PRODUCT_LABEL, ""), units)
    held: dict[str, dict[str, int]] = {name: {} for name in allocatable}
    for obj in counted_once(compute):
        node = node_of(obj)
        if node in held:
            for resource, count in units_held(obj, declared).items():
                held[node][resource] = held[node].get(resource, 0) + count
    pools: dict[tuple[str, str], GPUPool] = {}
    for name, (product, units) in allocatable.items():
        for resource, total in units.items():
            free = max(0, total - held[name].get(resource, 0))  # more held than allocatable (a node shrank): none free
            one = GPUPool(product, total, free, total, free, resource)
            key = (resource, product)
            pools[key] = pools[key] + one if key in pools else one
    return pools


def pool_for(pools: dict[tuple[str, str], GPUPool], product: str | None, resource: str = GPU_RESOURCE) -> GPUPool:
    """The pool a profile asking for units of ``resource`` of ``product`` draws on (every type together when it names none)."""
    if product:
        return pools.get((resource, product)) or GPUPool(product, 0, 0, resource=resource)
    every = GPUPool("", 0, 0, resource=resource)
    for (name, _), pool in pools.items():
        if name == resource:
            every = every + GPUPool("", pool.total, pool.free, pool.largest, pool.largest_free, resource)
    return every


def _units(pool: GPUPool, n: int) -> str:
    known = parse_gpu_resource(pool.resource) or GPUResource(pool.resource, DEVICE)
    return known.describe(n)


def _named(pool: GPUPool, shown: Callable[[str], str] = str) -> str:
    known = parse_gpu_resource(pool.resource) or GPUResource(pool.resource, DEVICE)
    what = {WHOLE: "GPUs", SHARED: "shared GPUs", MIG: "MIG slices " + pool.resource.removeprefix("nvidia.com/mig-")}
    unit = what.get(known.kind, pool.resource)
    return f"{shown(pool.product)} {unit}" if pool.product else unit


def shortage(pool: GPUPool, asked: int, shown: Callable[[str], str] = str) -> str | None:
    """Why a profile asking for ``asked`` units of ``pool`` cannot start now, in a sentence with the numbers; None if it can.

    ``shown``: the GPU type's name for people, from its product label
    (:meth:`~workspacespawner.config.gpueconomy.GPUEconomy.display_name`; default: the label itself).
    """
    if asked <= 0 or pool.largest_free >= asked:
        return None
    named = _named(pool, shown)
    need = _units(pool, asked)
    if pool.total == 0:
        return f"No node with {named} is available right now; this profile needs {need}."
    if asked > pool.largest:
        return f"This profile needs {need}, more than any node has ({pool.largest} {named} at most)."
    if pool.free == 0:
        return f"All {pool.total} {named} are in use right now; this profile needs {need}."
    if pool.free >= asked:
        return (f"{pool.free} of {pool.total} {named} are free right now, but at most {pool.largest_free} on one "
                f"node; this profile needs {need} on one node.")
    return f"Only {pool.free} of {pool.total} {named} are free right now; this profile needs {need}."


class GPUCapacity:
    """The hub's view of free GPUs (see the module docstring).

    ``list_nodes``: ``async () -> list of Node dicts`` (one LIST); ``compute``:
    ``() -> list of Pod/VMI dicts | None`` (the watch caches; None until
    loaded); ``node_ttl``: seconds a Node list is reused; ``clock``: monotonic
    seconds (tests pass their own); ``declared``: the site's GPU device
    names (:meth:`~workspacespawner.config.gpueconomy.GPUEconomy.declared`).
    """

    def __init__(self, list_nodes: Callable[[], Awaitable[list[dict]]], compute: Callable[[], list[dict] | None], *,
                 node_ttl: float = 5.0, clock: Callable[[], float] = time.monotonic, declared: tuple[str, ...] = ()):
        self.declared = declared
        self.list_nodes = list_nodes
        self.compute = compute
        self.node_ttl = node_ttl
        self.clock = clock
        self._nodes: list[dict] | None = None
        self._read_at = float("-inf")
        self._warned = False

    async def pools(self, where: Callable[[dict], bool] | None = None) -> dict[tuple[str, str], GPUPool] | None:
        """``{(resource, product): GPUPool}`` now, or None when it cannot be known (caches loading, Nodes not readable).

        ``where``: which Nodes count (``(Node dict) -> bool``; None: all), e.g. a team pool's nodes only.
        """
        compute = self.compute()
        if compute is None:
            return None
        nodes = await self.nodes()
        if nodes is None:
            return None
        return gpu_pools([n for n in nodes if where is None or where(n)], compute, self.declared)

    async def nodes(self) -> list[dict] | None:
        """The shared Node list (one LIST at most every ``node_ttl`` seconds for the whole hub), None when unreadable."""
        if self.clock() - self._read_at >= self.node_ttl:
            self._read_at = self.clock()  # a failed LIST too waits out the TTL: never one call per page view
            try:
                self._nodes = await self.list_nodes()
            except Exception as e:  # a refusal (403 without the optional ClusterRole), an outage: no numbers then
                self._nodes = None
                if not self._warned:
                    log.warning("Cannot read Nodes for the free-GPU counts (%s); the spawn form shows none",
                                getattr(e, "status", None) or type(e).__name__)
                    self._warned = True
        return self._nodes

    async def product_of(self, node_name: str) -> str | None:
        """The ``nvidia.com/gpu.product`` label of Node ``node_name`` from the shared Node list (None: unknown or unreadable).

        What a run is charged for once its workspace is placed, read through :meth:`nodes` (one LIST at most
        every ``node_ttl`` seconds for the whole hub).
        """
        for node in await self.nodes() or []:
            meta = node.get("metadata") or {}
            if meta.get("name") == node_name:
                return (meta.get("labels") or {}).get(GPU_PRODUCT_LABEL)
        return None
