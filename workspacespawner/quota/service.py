"""The quota as the hub uses it: what ``WorkspaceSpawner`` calls, one instance per hub process.

:func:`quota_for` gives the process's :class:`QuotaService` (built from the
hub's config on first use). Its coroutines run every ledger call on the
database thread (:class:`~workspacespawner.db.executor.DatabaseExecutor`)
that the audit log's writes share, so the hub's event loop never blocks on
the database, and SQLite sees one writer from this process at a time.

A start's life, from the spawner:

``reserve``   before any Kubernetes object: check and reserve, or raise :class:`~.refusal.QuotaRefused`
``running``   the workspace reached Running: the reservation becomes an open run
``release``   the start failed before Running: drop the reservation
``stopped``   the workspace stopped (or was found gone): close its run
"""

from __future__ import annotations

import logging
import weakref

from workspacespawner.db.executor import DatabaseExecutor
from workspacespawner.quota import metrics, policy
from workspacespawner.quota.config import WorkspaceQuota
from workspacespawner.quota.enforcer import Enforcer
from workspacespawner.quota.events import make_quota_event, post_event
from workspacespawner.quota.form import annotate_profiles
from workspacespawner.quota.hubapi import HubApiStopper
from workspacespawner.quota.ledger import Ledger, LedgerUnavailable
from workspacespawner.quota.policy import Request, Reservation
from workspacespawner.quota.refusal import QuotaRefused, uncount_failure

log = logging.getLogger("workspacespawner.quota")


class QuotaService:
    """Settings, ledger and enforcer of one hub process (see the module docstring).

    ``ledger``: default, one on ``settings.ledger_url``. ``executor``: the
    database thread for the ledger's calls (default: the ledger's own,
    which is the process's unless it was given another).
    """

    def __init__(
        self, settings: WorkspaceQuota, *, ledger: Ledger | None = None, executor: DatabaseExecutor | None = None
    ):
        self.settings = settings
        self.ledger = ledger or Ledger(settings.ledger_url, timeout=settings.ledger_timeout)
        if executor is not None:
            self.ledger.executor = executor  # so the audit log on this ledger (audit_for) writes on it too
        #: The database thread of the ledger calls and of the audit log on :attr:`ledger`: ``executor``,
        #: else the ledger's (the process's :func:`~workspacespawner.db.executor.process_executor` by default).
        self.executor = self.ledger.executor
        self._spawners: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
        self.enforcer: Enforcer | None = None

    @property
    def enabled(self) -> bool:
        return self.settings.enabled

    async def call(self, fn, *args, **kwargs):
        """Run the blocking ``fn(*args, **kwargs)`` (a ledger method) on the database thread (:attr:`executor`)."""
        return await self.executor.run(fn, *args, **kwargs)

    # -- the spawner's calls ----------------------------------------------

    async def reserve(self, *, user: str, groups, request: Request, spawner=None) -> Reservation | None:
        """Check ``request`` against ``user``'s limits and reserve its place; raise QuotaRefused if refused.

        Returns the reservation to hand to :meth:`running` or
        :meth:`release` (None when quotas are off). While the ledger is
        unreachable, GPU starts are refused (``ledger-down``) and CPU starts
        proceed unmetered if ``allow_cpu_when_ledger_down``. ``spawner``:
        the spawner raising the refusal, so JupyterHub 5.5 does not count
        it as a failed spawn (see :func:`.refusal.uncount_failure`).
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
        if spawner is not None:
            uncount_failure(spawner)
        raise QuotaRefused(decision, self.settings.contact)

    async def running(self, reservation: Reservation | None) -> int | None:
        """The workspace reached Running: open its run from now. Returns the run id (None: not metered)."""
        if reservation is None or not self.enabled:
            return None
        try:
            return await self.call(self.ledger.open_run, reservation, policy.utcnow())
        except LedgerUnavailable as e:
            # The reservation row stays; the enforcer opens it once the ledger is back (close_orphans).
            log.error("Could not open the run of %s's server %r: %s", reservation.user, reservation.server_name, e)
            return None

    async def release(self, reservation: Reservation | None) -> None:
        """The start failed before Running: drop its reservation (errors are logged, not raised)."""
        if reservation is None or not self.enabled:
            return
        try:
            await self.call(self.ledger.release, reservation)
        except LedgerUnavailable as e:
            log.error(
                "Could not release the reservation of %s's server %r: %s", reservation.user, reservation.server_name, e
            )

    async def stopped(self, user: str, server_name: str, *, gone: bool = False) -> None:
        """The server stopped now, or (``gone``) was found already gone: close at its last sighting.

        Errors are logged, not raised: a run left open is closed by the
        enforcer's reconciliation once the ledger is back.
        """
        if not self.enabled:
            return
        try:
            await self.call(self.ledger.close_server, user, server_name, None if gone else policy.utcnow())
        except LedgerUnavailable as e:
            log.error("Could not close the run of %s's server %r: %s", user, server_name, e)

    async def annotated_profiles(self, profile_list: list[dict], *, user: str, groups) -> list[dict]:
        """``profile_list`` with cost and card-hours lines on GPU profiles (unchanged if quotas are off or the ledger is down)."""
        if not self.enabled:
            return profile_list
        now = policy.utcnow()
        try:
            usage = await self.call(self.ledger.usage, user, policy.month_bounds(now, self.settings.timezone), now)
        except LedgerUnavailable as e:
            log.error("Could not read %s's usage for the spawn form: %s", user, e)
            return profile_list
        return annotate_profiles(profile_list, usage, self.settings.limits_for(user, groups), now)

    # -- the hub's spawners -------------------------------------------------

    def track(self, spawner) -> None:
        """Remember a live spawner (weakly): the enforcer reads its user's groups and posts Events on its workspace.

        A spawner without a user (built by a unit test) is ignored.
        """
        if getattr(spawner, "user", None) is not None:
            self._spawners[(spawner.user.name, spawner.name)] = spawner

    def groups_of(self, user: str) -> set[str] | None:
        """The JupyterHub groups of ``user`` from one of their spawners here; None if none is."""
        for (name, _server), spawner in list(self._spawners.items()):
            if name == user:
                return {group.name for group in spawner.user.groups}
        return None

    async def event(self, user: str, server_name: str, reason: str, message: str) -> None:
        """A Kubernetes Event on the workspace's object: its spawner's ``quota_event_object()`` if that gives one, else its Pod."""
        spawner = self._spawners.get((user, server_name))
        api = getattr(spawner, "api", None)
        if spawner is None or api is None:
            return
        try:
            describe = getattr(spawner, "quota_event_object", None)
            involved = (describe() if describe else None) or {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": spawner.pod_name,
            }
            await post_event(
                api,
                make_quota_event(
                    namespace=spawner.namespace, involved=involved, reason=reason, message=message, now=policy.utcnow()
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


_SERVICE: QuotaService | None = None


def quota_for(config=None) -> QuotaService:
    """The hub process's :class:`QuotaService`, built from ``config`` (``c``) on the first call."""
    global _SERVICE
    if _SERVICE is None:
        _SERVICE = QuotaService(WorkspaceQuota(config=config) if config is not None else WorkspaceQuota())
    return _SERVICE


def reset_quota() -> None:
    """Forget the process's service (tests; the caller closes it)."""
    global _SERVICE
    _SERVICE = None
