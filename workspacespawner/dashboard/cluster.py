"""The Cluster view's numbers, from Nodes, Pods, VMIs and ledger runs: pure functions, no I/O.

Per node (:func:`node_views`): GPU cards (the physical boards:
:func:`cards_and_slices`), MIG slices and time-sliced shares counted apart;
GPU units (what a workspace takes: a whole GPU, a slice or a share) by
capacity and allocatable, held (by whom: user, server, kind, count), free,
unhealthy (capacity − allocatable:
devices the NVIDIA device plugin withdrew) and unusable (every allocatable
GPU of a node that is not ``Ready`` or is cordoned, as kube-scheduler would
not place there); CPU (cores) and memory (GiB) requested against
allocatable. Held GPUs and usability are :mod:`workspacespawner.gpu.capacity`'s
(the spawn page's counts), so both pages agree. A VMI's virt-launcher Pod
is counted as its VMI, never twice.

Per team node pool (:func:`pool_views`), when the platform labels its nodes
with a pool key (e.g. ``workspacespawner.io/pool``): the same sums.

Users (:func:`top_users`): the most GPUs held now, and card-hours per day
over the last N days (:func:`card_hour_trend`), computed by
:func:`workspacespawner.quota.policy.card_hours` over ledger runs.

Idle (:func:`idle_workspaces`): workspaces holding GPUs whose every GPU's
mean utilisation over a window stayed below a threshold; without
Prometheus readings the answer is None (unknown), never "none idle".
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from math import ceil

from workspacespawner.core.gpuresources import (
    GPU_REPLICAS_LABEL,
    MIG,
    MIG_COMPUTE_SLICES,
    SHARED_GPU,
    WHOLE_GPU,
    parse_gpu_resource,
)
from workspacespawner.core.names import labelled_for, server_of
from workspacespawner.core.quantities import parse_quantity
from workspacespawner.dashboard import cardhours
from workspacespawner.gpu.capacity import gpus_held, node_gpu_units, node_usable
from workspacespawner.gpu.metrics import CONTAINER, VM, GPUStat
from workspacespawner.idle.settings import gpu_is_idle
from workspacespawner.k8s.kinds import VMI
from workspacespawner.k8s.objects import FINISHED_PHASES, counted_once, node_of, ready_condition

GIB = Decimal(2**30)


@dataclass(frozen=True)
class Holding:
    """GPUs one workspace (or another consumer) holds on a node.

    ``user``/``server``: the owner, None for a consumer that is not one of
    our workspaces; ``kind``: ``container``, ``vm`` or ``other``; ``name``:
    the Pod or VMI; ``gpus``: how many; ``cpu`` (cores) and ``memory_gib``: what it requests.
    """

    user: str | None
    server: str | None
    kind: str
    namespace: str
    name: str
    node: str
    gpus: int
    cpu: float = 0.0
    memory_gib: float = 0.0


@dataclass(frozen=True)
class NodeView:
    """One node (see the module docstring). CPU in cores, memory in GiB, GPUs as counts of units of every GPU
    resource (a whole GPU, a MIG slice, a time-sliced replica; ``units``: ``"9 × MIG 1g.10gb, 1 × MIG 3g.40gb"``
    when the node's units are not all whole GPUs, else ``""``). ``holdings``: who holds its GPUs; ``cpu_holdings``:
    the workspaces on it that hold no GPU (a CPU workspace on a GPU node takes cores and memory GPU work needs)."""

    name: str
    pool: str | None
    product: str
    ready: bool
    schedulable: bool
    gpu_capacity: int
    gpu_allocatable: int
    gpus_held: int
    gpus_free: int
    gpus_unhealthy: int
    gpus_unusable: int
    cpu_requested: float
    cpu_allocatable: float
    memory_requested_gib: float
    memory_allocatable_gib: float
    holdings: tuple[Holding, ...] = ()
    cpu_holdings: tuple[Holding, ...] = ()
    units: str = ""
    cards: int = 0
    mig_slices: int = 0
    shares: int = 0


#: GPU feature discovery's label of a node's physical GPU cards.
GPU_COUNT_LABEL = "nvidia.com/gpu.count"


def _whole_number(text) -> int | None:
    try:
        return int(str(text))
    except ValueError:
        return None


def cards_and_slices(labels: dict, units: dict[str, int]) -> tuple[int, int, int]:
    """``(cards, MIG slices, time-sliced shares)`` of a node (pure) from its labels and ``{GPU resource: units}``.

    Cards: GPU feature discovery's ``nvidia.com/gpu.count`` when the node
    has it; else counted from the units: whole GPUs, the shares divided by
    ``nvidia.com/gpu.replicas``, the MIG slices' compute slices by 7 (rounded
    up), a VM device one card each. Shares: ``nvidia.com/gpu.shared`` units,
    or ``nvidia.com/gpu`` ones on a node whose replicas are more than 1.
    """
    replicas = max(1, _whole_number(labels.get(GPU_REPLICAS_LABEL, 1)) or 1)
    cards = mig = shares = compute = 0
    for resource, count in units.items():
        known = parse_gpu_resource(resource)
        if known is not None and known.kind == MIG:
            mig += count
            compute += known.compute_slices * count
        elif resource == SHARED_GPU or (resource == WHOLE_GPU and replicas > 1):
            shares += count
            cards += ceil(count / replicas)
        else:
            cards += count
    cards += ceil(compute / MIG_COMPUTE_SLICES)
    counted = _whole_number(labels.get(GPU_COUNT_LABEL, ""))
    return (counted if counted is not None and counted >= 0 else cards), mig, shares


def units_words(allocatable: dict[str, int]) -> str:
    """``{resource: units}`` of a node in words when they are not all whole GPUs (``""`` then): MIG slices by
    profile, time-sliced shares, VM devices by name; largest count first."""
    if set(allocatable) <= {WHOLE_GPU}:
        return ""
    def word(resource: str) -> str:
        known = parse_gpu_resource(resource)
        if known is not None and known.kind == MIG:
            return "MIG " + resource.removeprefix("nvidia.com/mig-")
        return {WHOLE_GPU: "GPU", SHARED_GPU: "shared GPU"}.get(resource, resource)
    ordered = sorted(allocatable.items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{count} × {word(resource)}" for resource, count in ordered)


@dataclass(frozen=True)
class PoolView:
    """The sums of :class:`NodeView` over the nodes of one pool (``name``; None: nodes without the pool label)."""

    name: str | None
    nodes: tuple[str, ...]
    gpu_capacity: int
    gpu_allocatable: int
    gpus_held: int
    gpus_free: int
    gpus_unhealthy: int
    gpus_unusable: int
    cpu_requested: float
    cpu_allocatable: float
    memory_requested_gib: float
    memory_allocatable_gib: float
    cards: int = 0
    mig_slices: int = 0
    shares: int = 0


@dataclass(frozen=True)
class DayUse:
    """Card-hours used on one local calendar ``day``."""

    day: date
    card_hours: float


@dataclass(frozen=True)
class UserUse:
    """A user's GPUs held now and card-hours over the trend: ``days_7``/``days_30`` per day, oldest first."""

    user: str
    gpus_now: int
    days_7: tuple[DayUse, ...] = ()
    days_30: tuple[DayUse, ...] = ()
    total_7: float = 0.0
    total_30: float = 0.0


@dataclass(frozen=True)
class IdleWorkspace:
    """A workspace holding GPUs that stayed below the threshold: its holding and the highest GPU reading (%) among its GPUs."""

    holding: Holding
    max_util: float
    gpus: tuple[int, ...] = field(default=())


def _quantity(value) -> Decimal:
    try:
        return parse_quantity(str(value))
    except (ValueError, TypeError, ArithmeticError):
        return Decimal(0)


def requested(obj: dict) -> tuple[Decimal, Decimal]:
    """``(CPU cores, memory bytes)`` a Pod or VMI (``kind`` set) requests (requests, else limits; a VMI: its domain).

    A VMI without resource requests counts one core per vCPU (sockets ×
    cores × threads) and its guest memory.
    """
    spec = obj.get("spec") or {}
    if obj.get("kind") == VMI.kind:
        domain = spec.get("domain") or {}
        resources = domain.get("resources") or {}
        asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        cpu = asked.get("cpu")
        if cpu is None:
            topology = domain.get("cpu") or {}
            cpu = int(topology.get("sockets", 1)) * int(topology.get("cores", 1)) * int(topology.get("threads", 1))
        memory = asked.get("memory") or (domain.get("memory") or {}).get("guest") or 0
        return _quantity(cpu), _quantity(memory)
    cpu = memory = Decimal(0)
    for container in spec.get("containers") or []:
        resources = container.get("resources") or {}
        asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        cpu += _quantity(asked.get("cpu", 0))
        memory += _quantity(asked.get("memory", 0))
    return cpu, memory


def holding_of(obj: dict) -> Holding:
    """Who ``obj`` (a Pod or VMI with ``kind`` set) is and what it holds: our owner labels and kubespawner's annotations."""
    meta = obj.get("metadata") or {}
    owner = server_of(meta)
    ours = owner is not None and labelled_for(meta, owner[0])
    kind = (VM if obj.get("kind") == VMI.kind else CONTAINER) if ours else "other"
    cpu, memory = requested(obj)
    return Holding(owner[0] if ours else None, owner[1] if ours else None, kind, meta.get("namespace", ""),
                   meta.get("name", ""), node_of(obj) or "", gpus_held(obj), float(cpu), round(float(memory) / 2**30, 1))


def node_views(nodes: list[dict], compute: list[dict], *, pool_of: Callable[[dict], str | None] | None = None,
               shown: Callable[[str], str] = str) -> list[NodeView]:
    """One :class:`NodeView` per node, sorted by name; ``product``: its GPU type's name for people, ``shown`` from the
    ``nvidia.com/gpu.product`` label (:meth:`~workspacespawner.config.gpueconomy.GPUEconomy.display_name`).

    ``nodes``: Node dicts; ``compute``: Pods and VMIs (``kind`` set), as the
    watch caches hold them (a virt-launcher Pod counts as its VMI:
    :func:`~workspacespawner.k8s.objects.counted_once`); ``pool_of``: a Node's team pool (None: in none), or None: no
    pools (:meth:`WorkspacesDashboard.pool_of <workspacespawner.dashboard.settings.WorkspacesDashboard.pool_of>`).
    """
    placed: dict[str, list[dict]] = defaultdict(list)
    for obj in counted_once(compute):
        if (obj.get("status") or {}).get("phase") in FINISHED_PHASES or not node_of(obj):
            continue
        placed[node_of(obj)].append(obj)
    views = []
    for node in nodes:
        meta = node.get("metadata") or {}
        labels = meta.get("labels") or {}
        name = meta.get("name", "")
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        units = node_gpu_units(node)
        capacity, gpus = sum(node_gpu_units(node, "capacity").values()), sum(units.values())
        usable = node_usable(node)
        cards, mig_slices, shares = cards_and_slices(labels, node_gpu_units(node, "capacity") or units)
        everyone = sorted(map(holding_of, placed.get(name, [])), key=lambda h: (h.user or "", h.server or "", h.name))
        holdings = tuple(h for h in everyone if h.gpus > 0)
        held = sum(h.gpus for h in holdings)
        cpu = sum((requested(obj)[0] for obj in placed.get(name, [])), Decimal(0))
        memory = sum((requested(obj)[1] for obj in placed.get(name, [])), Decimal(0))
        views.append(NodeView(
            name=name,
            pool=pool_of(node) if pool_of else None,
            product=shown(labels.get("nvidia.com/gpu.product", "")),
            ready=ready_condition(node) is True,
            schedulable=not (node.get("spec") or {}).get("unschedulable"),
            gpu_capacity=max(capacity, gpus),
            gpu_allocatable=gpus,
            gpus_held=held,
            gpus_free=max(0, gpus - held) if usable else 0,
            gpus_unhealthy=max(0, capacity - gpus),
            gpus_unusable=0 if usable else gpus,
            cpu_requested=float(cpu),
            cpu_allocatable=float(_quantity(allocatable.get("cpu", 0))),
            memory_requested_gib=float(memory / GIB),
            memory_allocatable_gib=float(_quantity(allocatable.get("memory", 0)) / GIB),
            holdings=holdings,
            cpu_holdings=tuple(h for h in everyone if h.gpus == 0),
            units=units_words(units),
            cards=cards,
            mig_slices=mig_slices,
            shares=shares,
        ))
    return sorted(views, key=lambda v: v.name)


def pool_views(views: list[NodeView]) -> list[PoolView]:
    """The :class:`PoolView` of each pool in ``views``, sorted by name (nodes without a pool last)."""
    pools: dict[str | None, list[NodeView]] = defaultdict(list)
    for view in views:
        pools[view.pool].append(view)
    result = []
    for name, members in pools.items():
        def total(attribute: str, members=members):
            return sum(getattr(v, attribute) for v in members)
        result.append(PoolView(
            name, tuple(v.name for v in members), total("gpu_capacity"), total("gpu_allocatable"), total("gpus_held"),
            total("gpus_free"), total("gpus_unhealthy"), total("gpus_unusable"), total("cpu_requested"),
            total("cpu_allocatable"), total("memory_requested_gib"), total("memory_allocatable_gib"),
            total("cards"), total("mig_slices"), total("shares"),
        ))
    return sorted(result, key=lambda p: (p.name is None, p.name or ""))


def card_hour_trend(runs, now: datetime, days: int, tz="UTC") -> tuple[DayUse, ...]:
    """Card-hours of ``runs`` (ledger :class:`~workspacespawner.quota.policy.Run`s) on each of the last ``days`` local days.

    The last day is today (up to ``now``); days are calendar days in ``tz``
    (an IANA name or tzinfo); the numbers are :func:`.cardhours.trend`'s.
    Raises ValueError for ``days`` < 1 or an unknown zone.
    """
    starts = cardhours.trend_starts(now, days, tz)
    return tuple(DayUse(start.date(), used) for start, used in zip(starts, cardhours.trend(runs, now, days, tz), strict=False))


def top_users(views: list[NodeView], runs_by_user: Mapping[str, Sequence], now: datetime, *, limit: int = 10,
              tz="UTC") -> list[UserUse]:
    """The users holding the most GPUs now (then the most card-hours over 30 days), at most ``limit``.

    ``runs_by_user``: ``{user: (Run, ...)}`` covering at least the last 30
    days (``Ledger.runs_all`` over that period). Users with no GPU now but
    card-hours in the period are listed after those holding GPUs.
    """
    now_held: dict[str, int] = defaultdict(int)
    for view in views:
        for holding in view.holdings:
            if holding.user is not None:
                now_held[holding.user] += holding.gpus
    users = set(now_held) | set(runs_by_user)
    result = []
    for user in users:
        runs = runs_by_user.get(user) or []
        days_30 = card_hour_trend(runs, now, 30, tz)
        days_7 = days_30[-7:]
        result.append(UserUse(user, now_held.get(user, 0), days_7, days_30,
                              sum(d.card_hours for d in days_7), sum(d.card_hours for d in days_30)))
    result = [u for u in result if u.gpus_now > 0 or u.total_30 > 0]
    result.sort(key=lambda u: (-u.gpus_now, -u.total_30, u.user))
    return result[:limit]


def idle_workspaces(views: list[NodeView], utilisation: list[GPUStat] | None, *, threshold: float) -> list[IdleWorkspace] | None:
    """Our workspaces holding GPUs whose every reported GPU is idle at ``threshold`` % (None: unknown), as the hub's
    idle-GPU pass judges (:func:`~workspacespawner.idle.settings.gpu_is_idle`).

    ``utilisation``: each GPU's reading over the window
    (:func:`~workspacespawner.idle.activity.read_idle_readings`: its
    highest), None without Prometheus. A workspace none of whose GPUs is
    reported is not flagged (unknown for it).
    """
    if utilisation is None:
        return None
    by_workspace: dict[tuple, list[GPUStat]] = defaultdict(list)
    for stat in utilisation:
        if stat.holder is not None and stat.util is not None:
            by_workspace[(stat.holder.user, stat.holder.server, stat.holder.kind)].append(stat)
    idle = []
    for view in views:
        for holding in view.holdings:
            stats = by_workspace.get((holding.user, holding.server, holding.kind)) if holding.user is not None else None
            if stats and all(gpu_is_idle(stat.util, threshold) for stat in stats):
                idle.append(IdleWorkspace(holding, max(stat.util for stat in stats), tuple(sorted(s.gpu for s in stats))))
    return idle
