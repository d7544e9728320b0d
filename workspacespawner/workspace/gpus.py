"""GPUs free right now, by GPU type: what the spawn form shows and what a refusal for want of GPUs says.

A node's GPUs are its ``status.allocatable["nvidia.com/gpu"]`` (the NVIDIA
device plugin's count), of the type its ``nvidia.com/gpu.product`` label
names (GPU feature discovery); a node counts only while it is ``Ready`` and
not cordoned (``spec.unschedulable``), as kube-scheduler's filters count
it. The GPUs held on it are those of the Pods (``spec.nodeName``; the
larger of each container's ``limits`` and ``requests``) and VMIs
(``status.nodeName``; one per ``devices.gpus`` entry and per
``devices.hostDevices`` entry under ``nvidia.com/``) that have not finished;
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

from workspacespawner.config.profiles import GPU_PRODUCT_LABEL, GPU_RESOURCE
from workspacespawner.core.quantities import parse_quantity
from workspacespawner.k8s.kinds import VMI
from workspacespawner.k8s.objects import FINISHED_PHASES, counted_once, node_of, ready_condition

log = logging.getLogger("workspacespawner")


@dataclass(frozen=True)
class GPUPool:
    """The GPUs of one type (``product``, the node label's value; ``""`` for nodes without it) on usable nodes.

    ``total``: allocatable GPUs; ``free``: those no Pod or VMI holds; both
    summed over the nodes. A server's GPUs must all be on one node:
    ``largest``/``largest_free`` are the most one node has / has free.
    """

    product: str
    total: int
    free: int
    largest: int = 0
    largest_free: int = 0

    def __add__(self, other: GPUPool) -> GPUPool:
        return GPUPool(self.product if self.product == other.product else "", self.total + other.total,
                       self.free + other.free, max(self.largest, other.largest), max(self.largest_free, other.largest_free))


def _count(value) -> int:
    try:
        return int(parse_quantity(str(value)))
    except (ValueError, TypeError, ArithmeticError):
        return 0


def node_gpus(node: dict, field: str = "allocatable") -> int:
    """The ``nvidia.com/gpu`` count of a Node's ``status.<field>`` (``allocatable`` or ``capacity``); 0 when absent."""
    return _count(((node.get("status") or {}).get(field) or {}).get(GPU_RESOURCE, 0))


def node_usable(node: dict) -> bool:
    """Whether kube-scheduler may place new work on ``node``: condition ``Ready`` True and not cordoned."""
    return not (node.get("spec") or {}).get("unschedulable") and ready_condition(node) is True


def gpus_held(obj: dict) -> int:
    """GPUs a Pod or VMI (``kind`` set) holds on its node: 0 once it finished or while it is not placed."""
    spec = obj.get("spec") or {}
    if (obj.get("status") or {}).get("phase") in FINISHED_PHASES or not node_of(obj):
        return 0
    if obj.get("kind") == VMI.kind:
        devices = ((spec.get("domain") or {}).get("devices")) or {}
        host = [d for d in devices.get("hostDevices") or [] if str(d.get("deviceName", "")).startswith("nvidia.com/")]
        return len(devices.get("gpus") or []) + len(host)
    total = 0
    for container in spec.get("containers") or []:
        resources = container.get("resources") or {}
        asked = [_count((resources.get(part) or {}).get(GPU_RESOURCE, 0)) for part in ("limits", "requests")]
        total += max(asked)
    return total


def gpu_pools(nodes: list[dict], compute: list[dict]) -> dict[str, GPUPool]:
    """``{product: GPUPool}`` of the usable GPU nodes in ``nodes``, with what ``compute`` (Pods and VMIs) holds there.

    A virt-launcher Pod and its VMI hold their GPUs once (:func:`~workspacespawner.k8s.objects.counted_once`).
    """
    allocatable: dict[str, tuple[str, int]] = {}
    for node in nodes:
        meta = node.get("metadata") or {}
        gpus = node_gpus(node)
        if gpus > 0 and node_usable(node):
            allocatable[meta.get("name", "")] = ((meta.get("labels") or {}).get(GPU_PRODUCT_LABEL, ""), gpus)
    held = dict.fromkeys(allocatable, 0)
    for obj in counted_once(compute):
        node = node_of(obj)
        if node in held:
            held[node] += gpus_held(obj)
    pools: dict[str, GPUPool] = {}
    for name, (product, gpus) in allocatable.items():
        free = max(0, gpus - held[name])  # more held than allocatable (a node shrank): none free
        one = GPUPool(product, gpus, free, gpus, free)
        pools[product] = pools[product] + one if product in pools else one
    return pools


def pool_for(pools: dict[str, GPUPool], product: str | None) -> GPUPool:
    """The pool a profile asking for GPUs of ``product`` draws on (every type together when it names none)."""
    if product:
        return pools.get(product) or GPUPool(product, 0, 0)
    every = GPUPool("", 0, 0)
    for pool in pools.values():
        every = every + GPUPool("", pool.total, pool.free, pool.largest, pool.largest_free)
    return every


def _gpus(n: int) -> str:
    return f"{n} GPU{'s' if n != 1 else ''}"


def _named(pool: GPUPool) -> str:
    return f"{pool.product} GPUs" if pool.product else "GPUs"


def shortage(pool: GPUPool, asked: int) -> str | None:
    """Why a profile asking for ``asked`` GPUs of ``pool`` cannot start now, in a sentence with the numbers; None if it can."""
    if asked <= 0 or pool.largest_free >= asked:
        return None
    if pool.total == 0:
        return f"No node with {_named(pool)} is available right now; this profile needs {_gpus(asked)}."
    if asked > pool.largest:
        return f"This profile needs {_gpus(asked)}, more than any node has ({pool.largest} {_named(pool)} at most)."
    if pool.free == 0:
        return f"All {pool.total} {_named(pool)} are in use right now; this profile needs {_gpus(asked)}."
    if pool.free >= asked:
        return (f"{pool.free} of {pool.total} {_named(pool)} are free right now, but at most {pool.largest_free} on one "
                f"node; this profile needs {_gpus(asked)} on one node.")
    return f"Only {pool.free} of {pool.total} {_named(pool)} are free right now; this profile needs {_gpus(asked)}."


class GPUCapacity:
    """The hub's view of free GPUs (see the module docstring).

    ``list_nodes``: ``async () -> list of Node dicts`` (one LIST); ``compute``:
    ``() -> list of Pod/VMI dicts | None`` (the watch caches; None until
    loaded); ``node_ttl``: seconds a Node list is reused; ``clock``: monotonic
    seconds (tests pass their own).
    """

    def __init__(self, list_nodes: Callable[[], Awaitable[list[dict]]], compute: Callable[[], list[dict] | None], *,
                 node_ttl: float = 5.0, clock: Callable[[], float] = time.monotonic):
        self.list_nodes = list_nodes
        self.compute = compute
        self.node_ttl = node_ttl
        self.clock = clock
        self._nodes: list[dict] | None = None
        self._read_at = float("-inf")
        self._warned = False

    async def pools(self) -> dict[str, GPUPool] | None:
        """``{product: GPUPool}`` now, or None when it cannot be known (caches loading, Nodes not readable)."""
        compute = self.compute()
        if compute is None:
            return None
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
        return None if self._nodes is None else gpu_pools(self._nodes, compute)
