"""The Cluster view (team leads and admins): nodes and their GPUs, who holds them, the top users, idle GPUs.

``GET <prefix>cluster``      the page
``GET <prefix>api/cluster``  the same data as JSON (:func:`cluster_data`)

Both answer 403 to a viewer without the view (:attr:`Viewer.sees_cluster
<workspacespawner.dashboard.access.Viewer.sees_cluster>`). A team lead sees
every node (sharing a node needs the whole picture) but the names of only
the users they may read (:meth:`Viewer.can_read
<workspacespawner.dashboard.access.Viewer.can_read>`): anyone else's
holding, GPU, trend or idle workspace is shown under a label of its own,
"user A", "user B"... (:func:`aliases`: the same person has the same label
everywhere on the page, two people never share one), with its numbers,
without user, server or object name. Admins see every name.

The data comes from the watch caches (Nodes, Pods, VMIs: no API call per
request), one :meth:`Ledger.runs_all <workspacespawner.quota.ledger.Ledger.runs_all>`
read on the database thread (the 30-day trend), and, when
``c.GPUQueues.queues`` is set, one list of our ClusterQueues (each
queue's GPUs in use, borrowed, admitted and waiting:
:mod:`~workspacespawner.dashboard.queues`), and, when
``c.GPUIdle.prometheus_url`` is set, six Prometheus queries (the GPUs now,
and their highest utilisation over ``c.GPUIdle.gpu_idle_timeout``: an idle
GPU is what the hub's idle-GPU pass calls idle,
:func:`~workspacespawner.idle.settings.gpu_is_idle`). Nodes are grouped by
the team pools of ``c.TeamGPUPools.pools``, as the spawner places
workspaces. A Prometheus, ledger or Kueue failure
leaves its part out with a sentence saying why; the cluster part is always
shown.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from workspacespawner.core.names import MANAGED_BY, MANAGED_BY_LABEL
from workspacespawner.core.prometheus import PrometheusClient, PrometheusError
from workspacespawner.dashboard import cardhours, charts
from workspacespawner.dashboard.access import Viewer
from workspacespawner.dashboard.base import DashboardHandler
from workspacespawner.dashboard.cluster import (
    Holding,
    IdleWorkspace,
    NodeView,
    PoolView,
    UserUse,
    idle_workspaces,
    node_views,
    pool_views,
    top_users,
)
from workspacespawner.dashboard.queues import QueueView, queue_json, queue_views
from workspacespawner.gpu.metrics import GPUStat, read_gpu_metrics
from workspacespawner.idle.activity import read_idle_readings
from workspacespawner.k8s.kinds import NODE, POD, VMI
from workspacespawner.quota.ledger import LedgerUnavailable

log = logging.getLogger("workspacespawner.dashboard")

#: What a hidden user is called on the page: "user A", "user B"... (:func:`aliases`).
ALIAS = "user {}"

#: How many users the top-users table lists.
TOP_USERS = 10


@dataclass(frozen=True)
class ClusterReadings:
    """What one request read, before the viewer's filter: ``views`` (per node), ``pools`` (empty without a pool
    label), ``gpus`` (per GPU now; None without Prometheus or on its error), ``users`` (top users), ``idle`` (None:
    unknown), ``prometheus_error`` and ``ledger_error`` (a sentence, or None), ``queues`` (the GPU queues; empty
    without any, None when Kueue could not be read: ``queues_error`` says why)."""

    views: list[NodeView]
    pools: list[PoolView]
    gpus: list[GPUStat] | None
    users: list[UserUse]
    idle: list[IdleWorkspace] | None
    prometheus_error: str | None = None
    ledger_error: str | None = None
    queues: list[QueueView] | None = None
    queues_error: str | None = None


def _shown(viewer: Viewer, user: str | None) -> bool:
    """Whether ``viewer`` may see the name behind a holding of ``user`` (None: not one of our workspaces)."""
    return viewer.admin if user is None else viewer.can_read(user)


def _letters(index: int) -> str:
    """0 -> ``A``, 25 -> ``Z``, 26 -> ``AA``... (a spreadsheet's column names)."""
    word = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        word = chr(ord("A") + rest) + word
    return word


def aliases(viewer: Viewer, readings: ClusterReadings) -> dict[str, str]:
    """``{user: "user A"}`` for each user in ``readings`` whose name ``viewer`` may not see, in name order, so each
    hidden person has one label on the page and no two share one (pure; the names stay on the server)."""
    users = {h.user for v in readings.views for h in v.holdings}
    users |= {s.holder.user for s in readings.gpus or () if s.holder is not None}
    users |= {u.user for u in readings.users} | {w.holding.user for w in readings.idle or ()}
    hidden = sorted(u for u in users if u is not None and not viewer.can_read(u))
    return {user: ALIAS.format(_letters(i)) for i, user in enumerate(hidden)}


def holding_json(viewer: Viewer, holding: Holding, alias: dict[str, str]) -> dict:
    """A holding for ``viewer``: ``{user, server, kind, name, node, gpus, cpu, memory_gib, hidden, alias}``; a user the viewer may not
    read (or, for a non-admin, a consumer that is not a workspace) has user, server and name None and hidden True,
    and a workspace's ``alias`` its label from :func:`aliases` (None otherwise)."""
    shown = _shown(viewer, holding.user)
    return {
        "user": holding.user if shown else None,
        "server": holding.server if shown else None,
        "kind": holding.kind,
        "name": holding.name if shown else None,
        "node": holding.node,
        "gpus": holding.gpus,
        "cpu": holding.cpu,
        "memory_gib": holding.memory_gib,
        "hidden": not shown,
        "alias": None if shown else alias.get(holding.user or ""),
    }


def _counts(view: NodeView | PoolView) -> dict:
    return {
        "gpus": {"cards": view.cards, "mig_slices": view.mig_slices, "shares": view.shares,
                 "capacity": view.gpu_capacity, "allocatable": view.gpu_allocatable, "held": view.gpus_held,
                 "free": view.gpus_free, "unhealthy": view.gpus_unhealthy, "unusable": view.gpus_unusable},
        "cpu": {"requested": round(view.cpu_requested, 3), "allocatable": round(view.cpu_allocatable, 3)},
        "memory_gib": {"requested": round(view.memory_requested_gib, 3),
                       "allocatable": round(view.memory_allocatable_gib, 3)},
    }


def gpu_json(viewer: Viewer, stat: GPUStat, alias: dict[str, str]) -> dict:
    """One GPU's readings for ``viewer``: ``{node, gpu, instance, mig_profile, model, util, fb_used_mib, fb_free_mib,
    power_watts, holder}`` (``instance``/``mig_profile``: a MIG slice's, else ``""``) (% , MiB, W; None when not
    reported); ``holder``: ``{user, server, kind, hidden, alias}`` or None (free)."""
    holder = None
    if stat.holder is not None:
        shown = _shown(viewer, stat.holder.user)
        holder = {"user": stat.holder.user if shown else None, "server": stat.holder.server if shown else None,
                  "kind": stat.holder.kind, "hidden": not shown,
                  "alias": None if shown else alias.get(stat.holder.user or "")}
    elif stat.pod:
        holder = {"user": None, "server": None, "kind": "other", "hidden": True, "alias": None}
    return {"node": stat.node, "gpu": stat.gpu, "instance": stat.instance, "mig_profile": stat.mig_profile,
            "model": stat.model, "util": stat.util, "fb_used_mib": stat.fb_used_mib,
            "fb_free_mib": stat.fb_free_mib, "power_watts": stat.power_watts, "holder": holder}


def user_json(viewer: Viewer, use: UserUse, alias: dict[str, str]) -> dict:
    """One top user for ``viewer``: ``{user, hidden, alias, gpus_now, total_7, total_30, days_7, days_30}``
    (card-hours; ``days_*`` per local day, oldest first, as ``[day, card-hours]``)."""
    shown = viewer.can_read(use.user)
    return {
        "user": use.user if shown else None,
        "hidden": not shown,
        "alias": None if shown else alias.get(use.user),
        "gpus_now": use.gpus_now,
        "total_7": round(use.total_7, 4),
        "total_30": round(use.total_30, 4),
        "days_7": [[d.day.isoformat(), round(d.card_hours, 4)] for d in use.days_7],
        "days_30": [[d.day.isoformat(), round(d.card_hours, 4)] for d in use.days_30],
    }


def cluster_data(viewer: Viewer, readings: ClusterReadings, *, prometheus_url: str | None, threshold: float,
                 window_seconds: int) -> dict:
    """The Cluster view's data for ``viewer`` (pure): what the page draws and ``api/cluster`` answers.

    ``{"nodes": [{name, pool, product, units, ready, schedulable, gpus: {capacity, allocatable, held, free, unhealthy,
    unusable}, cpu: {requested, allocatable} (cores), memory_gib: {...}, holdings: [holding_json], gpu_readings:
    [gpu_json] | None}], "pools": [{name, nodes, ...counts}], "totals": {...counts}, "top_users": [user_json],
    "idle": [{...holding_json, max_util, gpus_idle}] | None, "prometheus": {"url", "error"}, "ledger_error",
    "idle_threshold" (%), "idle_window" (seconds), "queues": [queue_json] | None, "queues_error"}``.
    ``gpu_readings`` and ``idle`` are None without Prometheus readings (not set, or it failed: ``prometheus.error``
    says how); ``queues`` is empty without GPU queues and None when Kueue could not be read.
    """
    alias = aliases(viewer, readings)
    readings_by_node: dict[str, list[dict]] = {}
    for stat in readings.gpus or ():
        readings_by_node.setdefault(stat.node, []).append(gpu_json(viewer, stat, alias))
    nodes = []
    for view in readings.views:
        node = {"name": view.name, "pool": view.pool, "product": view.product, "units": view.units, "ready": view.ready,
                "schedulable": view.schedulable, **_counts(view),
                "holdings": [holding_json(viewer, h, alias) for h in view.holdings],
                "cpu_holdings": [holding_json(viewer, h, alias) for h in view.cpu_holdings],
                "gpu_readings": None if readings.gpus is None else readings_by_node.get(view.name, [])}
        nodes.append(node)
    everything = pool_views([replace(v, pool=None) for v in readings.views])
    totals = _counts(everything[0]) if everything else _counts(PoolView(None, (), 0, 0, 0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0))
    idle = None
    if readings.idle is not None:
        idle = [{**holding_json(viewer, w.holding, alias), "max_util": round(w.max_util, 2), "gpus_idle": list(w.gpus)}
                for w in readings.idle]
    return {
        "nodes": nodes,
        "pools": [{"name": p.name, "nodes": list(p.nodes), **_counts(p)} for p in readings.pools],
        "totals": totals,
        "top_users": [user_json(viewer, u, alias) for u in readings.users],
        "idle": idle,
        "idle_threshold": threshold,
        "idle_window": window_seconds,
        "prometheus": {"url": prometheus_url, "error": readings.prometheus_error},
        "ledger_error": readings.ledger_error,
        "queues": None if readings.queues is None else [queue_json(q) for q in readings.queues],
        "queues_error": readings.queues_error,
    }


async def read_cluster(ctx) -> ClusterReadings:
    """Read the caches, the ledger (one ``runs_all`` on the database thread) and Prometheus (when set) for the view.

    Never raises for Prometheus or the ledger: their failures are sentences in the result.
    """
    settings = ctx.settings
    nodes, pods, vmis = (await ctx.caches.objects(NODE), await ctx.caches.objects(POD), await ctx.caches.objects(VMI))
    pool_of = settings.pool_of()
    views = node_views(nodes, pods + vmis, pool_of=pool_of, shown=ctx.economy.display_name)
    pools = pool_views(views) if pool_of else []
    now = ctx.now()
    tz = ctx.quota.timezone
    runs_by_user, ledger_error = {}, None
    if ctx.ledger is not None:
        try:
            runs_by_user = await ctx.call(ctx.ledger.runs_all, cardhours.trend_span(now, tz))
        except LedgerUnavailable as e:
            log.error("Could not read the card-hours of the Cluster view: %s", e)
            ledger_error = f"The ledger cannot be read just now ({e}); card-hour trends are left out."
    users = top_users(views, runs_by_user, now, limit=TOP_USERS, tz=tz)
    gpus = idle = prometheus_error = None
    url, gpu_idle = settings.prometheus(), settings.gpu_idle()
    if url:
        prometheus = PrometheusClient(url, timeout=settings.prometheus_timeout)
        try:
            gpus = await read_gpu_metrics(prometheus, pods, vmis)
            idle = []  # GPUIdle.gpu_idle_timeout 0: idle GPUs are not looked for
            if gpu_idle.enabled:
                utilisation = await read_idle_readings(prometheus, pods, vmis, window_seconds=gpu_idle.gpu_idle_timeout)
                idle = idle_workspaces(views, utilisation, threshold=gpu_idle.utilisation_threshold)
        except PrometheusError as e:
            log.warning("Cluster view without GPU readings: %s", e)
            gpus = idle = None
            prometheus_error = f"Prometheus at {url} did not answer: {e.error}"
    queues, queues_error = await read_queues(ctx)
    return ClusterReadings(views, pools, gpus, users, idle, prometheus_error, ledger_error, queues, queues_error)


async def read_queues(ctx) -> tuple[list[QueueView] | None, str | None]:
    """The GPU queues as Kueue keeps them (one list of our ClusterQueues; none without queues), or None and why."""
    if not ctx.gpu_queues:
        return [], None
    try:
        found = await ctx.kube.custom_api.list_cluster_custom_object(
            "kueue.x-k8s.io", "v1beta2", "clusterqueues", label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY}")
    except Exception as e:  # noqa: BLE001 - any failure leaves the part out, with a sentence
        log.warning("Cluster view without the GPU queues: %s", e)
        return None, f"Kueue's ClusterQueues cannot be read just now ({type(e).__name__}); the GPU queues are left out."
    return queue_views(ctx.gpu_queues, found.get("items") or [], ctx.economy.display_name), None


def sparkline_top(data: dict) -> float:
    """The card-hours per day at the top of every Top users sparkline: the most any of them used in a day over the
    30 days, at least 1 (one scale for all rows, so their heights compare; the page prints it)."""
    return max([1.0, *(v for use in data["top_users"] for _d, v in use["days_30"])])


def sparklines(data: dict) -> dict[int, tuple[str, str]]:
    """``{index in data["top_users"]: (7-day SVG, 30-day SVG)}`` for the page, all from 0 to :func:`sparkline_top`
    (titles name only shown users; a hidden one by its label)."""
    found, top = {}, sparkline_top(data)
    for index, use in enumerate(data["top_users"]):
        who = use["user"] or use["alias"]
        found[index] = (
            charts.sparkline([v for _d, v in use["days_7"]], title=f"Card-hours per day of {who}, last 7 days",
                            at_least=top),
            charts.sparkline([v for _d, v in use["days_30"]], title=f"Card-hours per day of {who}, last 30 days",
                            at_least=top),
        )
    return found


class ClusterHandler(DashboardHandler):
    """Refuses (403) a viewer without the Cluster view before ``get`` runs."""

    async def prepare(self):
        await super().prepare()
        if self._finished or self.viewer is None:
            return
        if not self.viewer.sees_cluster:
            self.refuse(403, "The Cluster view is for team leads and admins.")

    async def data(self) -> dict:
        settings = self.ctx.settings
        gpu_idle = settings.gpu_idle()
        return cluster_data(self.viewer, await read_cluster(self.ctx), prometheus_url=settings.prometheus(),
                            threshold=gpu_idle.utilisation_threshold, window_seconds=int(gpu_idle.gpu_idle_timeout))


class ClusterPage(ClusterHandler):
    """``GET cluster``: the page."""

    async def get(self):
        data = await self.data()
        self.render_page("cluster.html", title="Cluster", data=data, sparklines=sparklines(data),
                         sparkline_top=sparkline_top(data))


class ClusterApi(ClusterHandler):
    """``GET api/cluster``: :func:`cluster_data` as JSON."""

    async def get(self):
        self.write_json(await self.data())


ROUTES = [
    (r"cluster", ClusterPage),
    (r"api/cluster", ClusterApi),
]
