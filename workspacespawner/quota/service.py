"""The quota as the hub uses it: what ``WorkspaceSpawner`` calls, one instance per hub process.

The hub's :class:`~workspacespawner.services.HubServices` holds the
process's one :class:`QuotaService`. Its coroutines run every ledger call on
the database thread (:class:`~workspacespawner.db.executor.DatabaseExecutor`)
that the audit log's writes share, so the hub's event loop never blocks on
the database, and SQLite sees one writer from this process at a time.

A start's life, from the spawner:

``reserve``     before any Kubernetes object: check and reserve, or raise :class:`~.refusal.QuotaRefused`
``running``     right before compute (a Pod, a VM) is created: the reservation becomes an open run
``placed``      the compute is on a node: the run is priced at that node's GPU type (once; see below)
``start_done``  the start ended (up or failed): the enforcer's reconciliation may close the run once compute is gone
``release``     the start failed before compute was asked for: drop the reservation (an open run stays)
``stopping``    a block around a stop: until it ends the enforcer leaves the run to the stop
``stopped``     the workspace's compute is observed gone: close its run

A run opens before compute can exist and is closed only once compute is
observed gone (the spawner checks the shared watch caches first), so every
second a GPU is held is inside an open run, also when kubespawner deletes
and re-creates a Pod inside one start (its answer to 409 AlreadyExists).

A run opens at its profile's provisional weight (the weight of the product
it names, else the most its GPU resource may cost) and is priced once, when
this hub sees it placed (:meth:`QuotaService.placed`): the weight of the
node's GPU type under the hub's ``c.GPUEconomy.card_hour_weights``, for the
run's whole time. A run this hub did not open (a hub restart re-adopting a
running server) is never priced again.
"""

from __future__ import annotations

import logging
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from workspacespawner.config.gpueconomy import GPUEconomy
from workspacespawner.db.executor import DatabaseExecutor
from workspacespawner.quota import metrics, policy
from workspacespawner.quota.config import WorkspaceQuota
from workspacespawner.quota.enforcer import Enforcer
from workspacespawner.quota.events import make_quota_event, post_event
from workspacespawner.quota.hubapi import HubApiStopper
from workspacespawner.quota.ledger import Ledger, LedgerUnavailable
from workspacespawner.quota.policy import Limits, Request, Reservation, Run, Usage
from workspacespawner.quota.refusal import QuotaRefused

log = logging.getLogger("workspacespawner.quota")


@dataclass(frozen=True)
class TrackedWorkspace:
    """What the quota service knows of one running or starting workspace of this hub.

    ``groups``: its user's JupyterHub group names; ``involved``: the core/v1
    ``ObjectReference`` Events about its quota go on (``apiVersion``,
    ``kind``, ``name``: its Pod, or its VirtualMachine); ``core_api``: a
    kubernetes_asyncio ``CoreV1Api`` to post them with (None: no Events).
    """

    user: str
    server: str
    namespace: str
    involved: dict
    groups: frozenset[str] = field(default_factory=frozenset)
    core_api: object | None = None


@dataclass(frozen=True)
class MonthBalance:
    """One user's month as the pages show it: the ledger's ``runs`` this month (and active ones), the ``usage``
    they make up to ``now``, and the user's ``limits``."""

    runs: list[Run]
    usage: Usage
    limits: Limits
    now: datetime

    def card_hours_of(self, server_name: str) -> float:
        """Card-hours the server ``server_name`` (``""``: the default server) used this month, up to ``now``."""
        mine = [run for run in self.runs if run.server_name == server_name]
        return policy.card_hours(mine, self.usage.period_start, self.usage.period_end, self.now)


class QuotaService:
    """Settings, ledger and enforcer of one hub process (see the module docstring).

    ``ledger``: default, one on ``settings.database_url()``. ``executor``: the
    database thread for the ledger's calls (default: the ledger's own,
    which is the process's unless it was given another). ``economy``: the
    card-hour weights runs are priced with at placement (default: none
    set, every GPU 1.0 and a MIG slice its share).
    """

    def __init__(
        self, settings: WorkspaceQuota, *, ledger: Ledger | None = None, executor: DatabaseExecutor | None = None,
        economy: GPUEconomy | None = None,
    ):
        self.settings = settings
        #: The card-hour weights (``c.GPUEconomy``) a run is priced with when it is placed.
        self.economy = economy if economy is not None else GPUEconomy()
        self.ledger = ledger or Ledger(settings.database_url(), timeout=settings.ledger_timeout)
        if executor is not None:
            self.ledger.executor = executor  # so the audit log on this ledger writes on it too
        #: The database thread of the ledger calls and of the audit log on :attr:`ledger`: ``executor``,
        #: else the ledger's (the process's :func:`~workspacespawner.db.executor.process_executor` by default).
        self.executor = self.ledger.executor
        self._workspaces: dict[tuple[str, str], TrackedWorkspace] = {}
        self._groups: dict[str, frozenset[str]] = {}
        self._starting: set[tuple[str, str]] = set()
        self._stopping: Counter[tuple[str, str]] = Counter()
        #: Runs this hub opened that wait for their node's GPU type: ``{(user, server): (run id, GPU resource)}``.
        self._unpriced: dict[tuple[str, str], tuple[int, str]] = {}
        #: Starts that wait in a GPU queue first (:meth:`in_line`): their run opens at :meth:`admitted`.
        self._in_line: dict[tuple[str, str], Reservation | None] = {}
        self.enforcer: Enforcer | None = None

    @property
    def enabled(self) -> bool:
        return self.settings.enabled

    async def call(self, fn, *args, **kwargs):
        """Run the blocking ``fn(*args, **kwargs)`` (a ledger method) on the database thread (:attr:`executor`)."""
        return await self.executor.run(fn, *args, **kwargs)

    # -- the spawner's calls ----------------------------------------------

    async def reserve(self, *, user: str, groups, request: Request) -> Reservation | None:
        """Check ``request`` against ``user``'s limits and reserve its place; raise QuotaRefused if refused.

        Returns the reservation to hand to :meth:`running` or
        :meth:`release` (None when quotas are off). While the ledger is
        unreachable, GPU starts are refused (``ledger-down``) and CPU starts
        proceed unmetered if ``allow_cpu_when_ledger_down``.
        """
        if not self.enabled:
            return None
        now = policy.utcnow()
        limits = self.settings.limits_for(user, groups)
        try:
            decision = await self.call(
                self.ledger.check_and_reserve,
                user,
                request,
                limits,
                now,
                tz=self.settings.timezone,
                min_start_hours=self.settings.min_start_hours,
            )
        except LedgerUnavailable as e:
            log.error("Quota check of %s's start: %s", user, e)
            decision = policy.ledger_down(request, self.settings.allow_cpu_when_ledger_down)
            if decision.allowed:
                log.warning("Starting %s's CPU workspace %r unmetered: the ledger is down", user, request.server_name)
                return Reservation.of(user, request, now)
        if decision.allowed:
            return decision.reservation
        metrics.record_refusal(decision.reason)
        log.info("Quota refused %s's start of %r (%s): %s", user, request.profile, decision.reason, decision.detail)
        raise QuotaRefused(decision, self.settings.contact)

    def in_line(self, user: str, server_name: str, waits: bool) -> None:
        """Whether the start of ``(user, server_name)`` waits in a GPU queue before its compute may run (its Pod at
        Kueue's gate holds no GPU): then :meth:`running` opens no run for it, :meth:`admitted` does, from when it was
        admitted. Said at each start's reservation."""
        key = (user, server_name or "")
        if waits:
            self._in_line[key] = None
        else:
            self._in_line.pop(key, None)

    async def running(self, reservation: Reservation | None) -> int | None:
        """Compute is about to be created: open the run from now. Returns the run id (None: not metered).

        Until :meth:`start_done`, the enforcer counts the server as alive
        (its compute may not be in the watch caches yet), so it never closes
        the run of a start under way. A start :meth:`in_line` keeps its
        reservation until :meth:`admitted`.
        """
        if reservation is None or not self.enabled:
            return None
        key = (reservation.user, reservation.server_name or "")
        self._starting.add(key)
        if key in self._in_line:
            self._in_line[key] = reservation
            return None
        return await self._open(reservation, policy.utcnow())

    async def admitted(self, user: str, server_name: str, at: datetime) -> int | None:
        """The start of ``(user, server_name)`` left the GPU queue; it last waited there at ``at``: open its run from
        ``at`` (every second it may have held a GPU is metered). Returns the run id (None: not metered)."""
        reservation = self._in_line.pop((user, server_name or ""), None)
        if reservation is None or not self.enabled:
            return None
        return await self._open(reservation, at)

    async def _open(self, reservation: Reservation, at: datetime) -> int | None:
        key = (reservation.user, reservation.server_name or "")
        self._unpriced.pop(key, None)
        try:
            watched = timedelta(seconds=2 * self.settings.enforce_interval)
            run_id = await self.call(self.ledger.open_run, reservation, at, watched=watched)
        except LedgerUnavailable as e:
            # The reservation row stays; the enforcer opens it once the ledger is back (close_orphans).
            log.error("Could not open the run of %s's server %r: %s", reservation.user, reservation.server_name, e)
            return None
        if run_id is not None and reservation.gpus > 0 and not reservation.gpu_product:
            self._unpriced[key] = (run_id, reservation.gpu_resource)
        return run_id

    async def placed(self, user: str, server_name: str, product: str | None) -> float | None:
        """The server's compute is on a node of GPU type ``product`` (its ``nvidia.com/gpu.product`` label): price its
        run there. Returns the weight charged (card-hours per unit-hour), or None when nothing was priced.

        Only a run this hub opened (:meth:`running`) and has not priced yet,
        whose profile named no product, is priced, once; ``product`` None
        (the node or its label unknown) leaves the provisional weight, the
        most the resource may cost. Ledger errors are logged, not raised
        (the run keeps its provisional weight).
        """
        if not self.enabled or not product:
            return None
        entry = self._unpriced.pop((user, server_name or ""), None)
        if entry is None:
            return None
        run_id, resource = entry
        weight = self.economy.weight(resource, product)
        try:
            priced = await self.call(self.ledger.price_run, run_id, product, weight)
        except LedgerUnavailable as e:
            log.error("Could not price the run of %s's server %r on %s: %s", user, server_name, product, e)
            return None
        if not priced:
            return None
        log.info("%s's server %r placed on %s %s: %s card-hours per unit-hour", user, server_name or "(default)",
                 resource, product, policy.number(weight))
        return weight

    def start_done(self, user: str, server_name: str) -> None:
        """The start of ``(user, server_name)`` ended, up or failed: its run is reconciled with the cluster from now on."""
        self._starting.discard((user, server_name))
        self._in_line.pop((user, server_name or ""), None)

    @contextmanager
    def stopping(self, user: str, server_name: str):
        """A stop of ``(user, server_name)`` is under way in this block: the enforcer counts the server alive and leaves
        its run to the stop, which closes it when it sees the compute gone (:meth:`stopped`).

        A pass meanwhile would close the run at its last sighting: after a hub
        restart, that is the old hub's last pass, and a stop that removes the
        compute before this hub's first pass saw it would leave every second
        between unmetered. A stop that leaves its compute behind (its DELETE
        kept failing) hands the run back to the enforcer as the block ends.
        """
        key = (user, server_name or "")
        self._stopping[key] += 1
        try:
            yield
        finally:
            self._stopping[key] -= 1
            if not self._stopping[key]:
                del self._stopping[key]

    @property
    def in_hand(self) -> set[tuple[str, str]]:
        """``(user, server)`` of every start whose run is open and every stop under way: their spawner closes or keeps
        the run, the enforcer leaves it alone (a new set)."""
        return self._starting | set(self._stopping)

    async def release(self, reservation: Reservation | None) -> None:
        """The start failed: drop its reservation if no run was opened (errors are logged, not raised)."""
        if reservation is None or not self.enabled:
            return
        try:
            await self.call(self.ledger.release, reservation)
        except LedgerUnavailable as e:
            log.error(
                "Could not release the reservation of %s's server %r: %s", reservation.user, reservation.server_name, e
            )

    async def stopped(self, user: str, server_name: str, *, gone: bool = False) -> None:
        """The server's compute was observed gone now, or (``gone``) found gone: close now, or at its last sighting.

        Call it only once compute is observed gone; while it is still there
        the run stays open and the enforcer's reconciliation closes it when
        the watch caches no longer hold it.

        Errors are logged, not raised: a run left open is closed by the
        enforcer's reconciliation once the ledger is back.
        """
        if not self.enabled:
            return
        self._unpriced.pop((user, server_name or ""), None)
        try:
            await self.call(self.ledger.close_server, user, server_name, None if gone else policy.utcnow())
        except LedgerUnavailable as e:
            log.error("Could not close the run of %s's server %r: %s", user, server_name, e)

    async def balance(self, *, user: str, groups, now: datetime | None = None) -> MonthBalance | None:
        """``user``'s runs this month (one ledger read, on the database thread), usage and limits; None when quotas
        are off or the ledger cannot be read (logged)."""
        if not self.enabled:
            return None
        now = now or policy.utcnow()
        period = policy.month_bounds(now, self.settings.timezone)
        try:
            runs = await self.call(self.ledger.runs_of, user, period)
        except LedgerUnavailable as e:
            log.error("Could not read %s's usage for the spawn page: %s", user, e)
            return None
        usage = policy.usage_from_runs(runs, period, now)
        return MonthBalance(runs, usage, self.settings.limits_for(user, groups), now)

    # -- the hub's spawners -------------------------------------------------

    def track(self, workspace: TrackedWorkspace) -> None:
        """Remember a workspace of this hub: the enforcer reads its user's groups and posts Events on its object.

        A later call for the same user and server replaces the earlier one
        (a start resolves the profile, and with it the object Events go on).
        """
        self._workspaces[(workspace.user, workspace.server)] = workspace
        self._groups[workspace.user] = frozenset(workspace.groups)

    def groups_of(self, user: str) -> set[str] | None:
        """The JupyterHub groups of ``user`` as their last tracked workspace gave them; None if none is tracked (O(1))."""
        groups = self._groups.get(user)
        return None if groups is None else set(groups)

    async def event(self, user: str, server_name: str, reason: str, message: str) -> None:
        """A Kubernetes Event (core/v1) on the tracked workspace's object: its Pod, or its VirtualMachine."""
        workspace = self._workspaces.get((user, server_name))
        if workspace is None or workspace.core_api is None:
            return
        try:
            await post_event(
                workspace.core_api,
                make_quota_event(
                    namespace=workspace.namespace,
                    involved=workspace.involved,
                    reason=reason,
                    message=message,
                    now=policy.utcnow(),
                ),
            )
        except Exception as e:  # an Event is a courtesy: never let it break the pass
            log.info("Could not post a %s Event for %s's server %r: %s", reason, user, server_name, e)

    def start_enforcer(self, *, hub_api_url: str | None = None, alive=None, alive_kinds=None) -> Enforcer | None:
        """Start the process's enforcer task once (later calls return it); needs a running event loop.

        ``hub_api_url``: the hub's REST API (the spawner's ``hub.api_url``)
        unless ``WorkspaceQuota.hub_api_url`` is set. ``alive`` and
        ``alive_kinds``: see :class:`~.enforcer.Enforcer`.
        """
        if not self.enabled:
            return None
        if self.enforcer is None:
            url = self.settings.hub_api_url or hub_api_url
            token = self.settings.hub_api_token
            stop = HubApiStopper(url, token) if url and token else None
            if stop is None:
                log.warning(
                    "WorkspaceQuota.hub_api_token is not set: the quota enforcer will warn users but cannot stop servers"
                )
            self.enforcer = Enforcer(self, stop=stop, alive=alive, alive_kinds=alive_kinds)
        self.enforcer.start()
        return self.enforcer

    async def close(self) -> None:
        """Stop the enforcer, the database thread (after its queued calls) and the database connections.

        A later call on the executor starts a new thread, so closing a
        service never breaks another one sharing the process's executor.
        """
        if self.enforcer is not None:
            await self.enforcer.close()
        self.executor.shutdown(wait=True)
        self.ledger.dispose()
