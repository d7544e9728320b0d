"""The hub's periodic quota pass: one task for all users, reading the ledger, never polling the cluster per user.

Each pass (every ``WorkspaceQuota.enforce_interval`` seconds):

1. Reconciles the ledger with the cluster, if it was given an ``alive``
   source (the shared watch caches: every ``(user, server)`` whose Pod or
   VMI exists): open runs seen alive get their ``last_seen``, runs whose
   workspace vanished (a crash, a stop missed while the hub was down) are
   closed at their last sighting, or, if seen at the pass before, when
   seen gone; stale reservations are cleaned up.
2. Reads this month's runs of every user with card-hours or an active
   workspace (one query for all users: :meth:`Ledger.runs_all`), refreshes
   the Prometheus gauges.
3. For each user with open GPU runs whose groups are known (a spawner of
   theirs lives in this hub): :func:`policy.enforcement` says ``warn``,
   ``grace`` or ``stop``. The user sees a message on the hub's home page
   (:mod:`.announce`) and a Kubernetes Event and a log line record it once
   per change; on ``stop`` the reason is written on the run in the ledger
   and each of their GPU servers is stopped through the hub's REST API
   (:mod:`.hubapi`). CPU servers keep running.

A pass costs the same SQL however many users run (two transactions, five
statements on SQLite, plus one write per stop or closed run) and O(users)
work, handed back to the event loop every :data:`USERS_PER_SLICE` users
(``benchmarks/enforcer.py`` measures it up to 3,000 servers).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta

from workspacespawner.core import names
from workspacespawner.core.tasks import PeriodicPass
from workspacespawner.lifecycle.stopreasons import STOP_REASONS
from workspacespawner.quota import metrics, policy
from workspacespawner.quota.announce import ANNOUNCEMENTS
from workspacespawner.quota.hubapi import SpawnPending
from workspacespawner.quota.ledger import LedgerUnavailable
from workspacespawner.quota.policy import OPEN, Verdict, number, when

log = logging.getLogger("workspacespawner.quota")

#: How long to wait before asking the hub again to stop a server that is still open.
RESTOP_AFTER = timedelta(minutes=5)

EVENT_REASONS = {"warn": "QuotaLow", "grace": "QuotaExhausted", "stop": "QuotaStop"}

#: Users a pass handles between two returns to the event loop: it never holds the loop for more than a few ms.
USERS_PER_SLICE = 25


async def _yield_every(count: int) -> None:
    """Give the event loop its turn after every :data:`USERS_PER_SLICE` users of a pass (``count`` counts from 1)."""
    if count % USERS_PER_SLICE == 0:
        await asyncio.sleep(0)


def alive_from_objects(objects) -> set[tuple[str, str]]:
    """``(user, server)`` of every object (raw JSON dict) in ``objects`` that names its owner (:func:`names.server_of`).

    Objects being deleted still count: their compute is still held.
    """
    return {owner for obj in objects if (owner := names.server_of(obj.get("metadata") or {})) is not None}


def verdict_message(verdict: Verdict, reset, stop_tz) -> str:
    """What the user reads about ``verdict`` (plain text)."""
    stop_at = (
        f"{verdict.stop_at.astimezone(stop_tz):%H:%M} ({getattr(stop_tz, 'key', 'UTC')})" if verdict.stop_at else "soon"
    )
    limit, used = number(verdict.limit), number(verdict.used)
    if verdict.action == "warn":
        minutes = number(round(max(0.0, verdict.left) / verdict.rate * 60))
        units = f"{verdict.running_gpus} GPU{'' if verdict.running_gpus == 1 else 's'}"
        return (
            f"Your GPU time runs out soon: {number(verdict.left)} of your {limit} card-hours are left this month, "
            f"about {minutes} minutes at your current use ({units}, {number(verdict.rate)} card-hours per hour). "
            f"Your GPU servers will be stopped at {stop_at}. Save your work."
        )
    if verdict.action == "grace":
        return (
            f"You have used all {limit} card-hours of this month ({used} used). Your GPU servers will be stopped at "
            f"{stop_at}: save your work now. Card-hours reset on {when(reset)}."
        )
    if verdict.action == "stop":
        return (
            f"Your GPU servers were stopped: you used all {limit} card-hours of this month ({used} used). "
            f"CPU profiles remain available; card-hours reset on {when(reset)}."
        )
    return ""


def exhausted_message(limit: float, reset) -> str:
    """What a user without GPU servers reads once their card-hours are used up."""
    return f"You have used all {number(limit)} card-hours of this month. CPU profiles remain available; GPU profiles again from {when(reset)}."


class Enforcer(PeriodicPass):
    """The periodic pass for one hub process (see the module docstring), every ``enforce_interval`` seconds.

    ``service``: the :class:`~workspacespawner.quota.service.QuotaService`
    (settings, ledger calls in its worker thread, groups and events of the
    hub's spawners). ``stop``: ``async (user, server_name)`` asking the hub
    to stop a server (None: warn only). ``alive``: ``() -> set of (user,
    server) | None`` (may be async), the workspaces the cluster holds now,
    None while that is not known (watch caches not loaded): no
    reconciliation then. Starts under way in this hub (the service's
    ``starting``) count as alive: their compute may not be cached yet. ``alive_kinds``: the workspace kinds that view
    covers (``("container",)`` if it reads Pods only; None: all kinds).
    """

    name = "workspacespawner-quota"

    def __init__(
        self,
        service,
        *,
        stop: Callable[[str, str], Awaitable] | None = None,
        alive: Callable[[], object] | None = None,
        alive_kinds: tuple[str, ...] | None = None,
    ):
        self.service = service
        self.stop = stop
        self.alive = alive
        self.alive_kinds = alive_kinds
        self._told: dict[str, str] = {}
        self._asked_stop: dict[tuple[str, str], object] = {}

    async def _alive(self) -> set[tuple[str, str]] | None:
        if self.alive is None:
            return None
        seen = self.alive()
        if asyncio.iscoroutine(seen):
            seen = await seen
        return None if seen is None else set(seen) | self.service.in_hand

    async def reconcile(self, now) -> list:
        """Step 1: close what the cluster no longer holds; returns the runs closed."""
        seen = await self._alive()
        if seen is None:
            return []
        settings = self.service.settings
        closed = await self.service.call(
            self.service.ledger.close_orphans,
            seen,
            now,
            min_age=timedelta(seconds=2 * settings.enforce_interval),
            watched=timedelta(seconds=2 * settings.enforce_interval),
            reservation_timeout=timedelta(seconds=settings.reservation_timeout),
            kinds=self.alive_kinds,
        )
        for run in closed:
            log.info(
                "Closed run %s of %s's server %r (no longer in the cluster; last seen %s)",
                run.id,
                run.user,
                run.server_name,
                run.stopped,
            )
        return closed

    async def tick(self) -> list[tuple[str, str, str]]:
        """One pass; returns ``(user, server_name, action)`` for every warning and stop issued.

        Users are handled one at a time, their runs built from the read and
        dropped before the next user's (see :class:`~.ledger.RunsByUser`): a
        pass keeps no per-user objects alive past its user, so it does not
        fill the garbage collector's oldest generation.
        """
        settings = self.service.settings
        now = policy.utcnow()
        period = policy.month_bounds(now, settings.timezone)
        await self.reconcile(now)
        runs_by_user = await self.service.call(self.service.ledger.runs_all, period)
        for user in ANNOUNCEMENTS.users() - set(runs_by_user):
            ANNOUNCEMENTS.clear(user)
            self._told.pop(user, None)
        used: dict[str, float] = {}
        units: dict[tuple[str, str], int] = {}
        gpu_hours: dict[tuple[str, str], float] = {}
        actions: list[tuple[str, str, str]] = []
        for count, user in enumerate(runs_by_user, 1):
            await _yield_every(count)
            runs = runs_by_user[user]
            use = policy.usage_from_runs(runs, period, now)
            used[user] = use.card_hours
            gpu_runs = [run for run in use.active if run.state == OPEN and run.gpus > 0]
            for run in gpu_runs:
                units[(run.gpu_resource, run.gpu_product)] = units.get((run.gpu_resource, run.gpu_product), 0) + run.gpus
            for kind, hours in policy.gpu_hours(runs, *period, now).items():
                gpu_hours[kind] = gpu_hours.get(kind, 0.0) + hours
            actions += await self._enforce(user, runs, use, gpu_runs, period, now)
        metrics.set_snapshot(used, sum(units.values()), settings.metrics_top_users, gpu_hours=gpu_hours, running_units=units)
        return actions

    async def _enforce(self, user: str, runs, use: policy.Usage, gpu_runs: list, period, now) -> list[tuple[str, str, str]]:
        """Step 3 for one user: tell them, and stop their GPU servers when the verdict is ``stop``."""
        settings = self.service.settings
        groups = self.service.groups_of(user)
        if groups is None:
            return []  # no spawner of theirs here: their group limits are unknown, leave them alone
        limits = settings.limits_for(user, groups)
        if not gpu_runs:
            exhausted = limits.card_hours_per_month - use.card_hours <= 0 and use.card_hours > 0
            self._say(user, exhausted_message(limits.card_hours_per_month, period[1]) if exhausted else "")
            return []
        verdict = policy.enforcement(
            runs,
            period,
            limits.card_hours_per_month,
            now,
            warn_before=settings.warn_before,
            grace_period=settings.grace_period,
            grace_card_hours=settings.grace_card_hours,
        )
        message = verdict_message(verdict, period[1], policy.zone(settings.timezone))
        self._say(user, message)
        if verdict.action == "none":
            self._told.pop(user, None)
            return []
        actions = []
        if self._told.get(user) != verdict.action:
            self._told[user] = verdict.action
            log.warning("Quota %s for %s: %s", verdict.action, user, message)
            for run in gpu_runs:
                await self.service.event(user, run.server_name, EVENT_REASONS[verdict.action], message)
                actions.append((user, run.server_name, verdict.action))
        if verdict.action == "stop":
            for run in gpu_runs:
                if await self._stop(run, verdict, now):
                    actions.append((user, run.server_name, "stopped"))
        return actions

    def _say(self, user: str, message: str) -> None:
        if message:
            ANNOUNCEMENTS.set(user, message)
        else:
            ANNOUNCEMENTS.clear(user)

    async def _stop(self, run, verdict: Verdict, now) -> bool:
        key = (run.user, run.server_name)
        asked = self._asked_stop.get(key)
        if asked is not None and now - asked < RESTOP_AFTER:
            return False
        reason = f"card-hours: {number(verdict.used)} of {number(verdict.limit)} used"
        await self.service.call(self.service.ledger.set_stop_reason, run.id, reason)
        if self.stop is None:
            log.warning(
                "Cannot stop %s's server %r (%s): no hub API token configured", run.user, run.server_name, reason
            )
            return False
        STOP_REASONS.say(run.user, run.server_name, "card-hours",  # the Stopped phase records it
                         f"Stopped: its owner used {number(verdict.used)} of {number(verdict.limit)} card-hours of the month.")
        try:
            await self.stop(run.user, run.server_name)
        except SpawnPending as e:
            log.info("Not stopping yet: %s; asking again at the next pass", e)
            return False
        self._asked_stop[key] = now
        log.warning("Stopped %s's GPU server %r: %s", run.user, run.server_name, reason)
        return True

    def interval(self) -> float:
        return self.service.settings.enforce_interval

    def failed(self, error: Exception) -> None:
        if isinstance(error, LedgerUnavailable):
            log.warning("Quota pass skipped: %s", error)
        else:
            log.error("Quota pass failed: %s", error, exc_info=error)
