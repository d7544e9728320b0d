"""The hub's periodic idle-GPU pass: one task for all GPU servers, every ``GPUIdle.interval`` seconds.

Each pass:

1. takes the workspaces that hold GPUs from the shared watch caches (no
   API request), the hub's view of every active server from one paginated
   REST request (:class:`~workspacespawner.idle.activity.HubUsers`) and,
   with Prometheus, each workspace's highest GPU utilisation over the
   timeout window from one query;
2. decides each server (:func:`~workspacespawner.idle.decision.decide`),
   remembering when it was first warned so its stop time stays put;
3. shows each warning on the hub's home page (:mod:`.notices`) and, once
   the grace is over, stops the server through the hub's REST API the way
   the quota enforcer does (:class:`~workspacespawner.quota.hubapi.HubApiStopper`):
   only compute goes, disks stay, and the run is metered up to the stop.
   The stop leaves an audit record (action ``stop``, ``after.reason``
   ``idle GPU``), the reason on the ledger's run, a Kubernetes Event on the
   workspace and a message on the home page.

When the hub's API or Prometheus does not answer, the pass logs it and
does nothing else (no warning changes, no stop); the next pass tries again.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta, tzinfo

from workspacespawner.core.names import server_of
from workspacespawner.core.prometheus import PrometheusClient, PrometheusError
from workspacespawner.core.tasks import PeriodicPass
from workspacespawner.idle.activity import HubView, gpu_servers, gpu_servers_held, read_utilisation
from workspacespawner.idle.decision import (
    PHASE_REASON,
    STOP,
    STOP_REASON,
    WARN,
    GPUServer,
    IdleVerdict,
    Policy,
    decide,
    warning_message,
)
from workspacespawner.idle.notices import IDLE_NOTICES, IdleNotices
from workspacespawner.k8s.objects import counted_once
from workspacespawner.lifecycle.stopreasons import STOP_REASONS
from workspacespawner.quota import policy as quota_policy
from workspacespawner.quota.hubapi import SpawnPending

log = logging.getLogger("workspacespawner.idle")

#: How long to wait before asking the hub again to stop a server that is still there.
RESTOP_AFTER = timedelta(minutes=5)

#: The reason word of the Kubernetes Events the pass posts.
EVENT_REASONS = {WARN: "GPUIdle", STOP: "GPUIdleStop"}


class IdlePass(PeriodicPass):
    """The idle-GPU pass of one hub process (see the module docstring).

    ``settings``: :class:`~workspacespawner.idle.settings.GPUIdle`.
    ``hub``: ``async () -> HubView`` (:class:`~.activity.HubUsers`).
    ``objects``: ``() -> (pods, vmis) | None``, the watch caches' Pods
    (virt-launcher Pods included) and VMIs, ``kind`` set; None until loaded
    (:func:`workspacespawner.k8s.watches.pods_and_vmis`). ``stop``:
    ``async (user, server) -> bool`` asking the hub to stop a server (None:
    warn only). ``prometheus``: a client of the Prometheus with
    dcgm-exporter's metrics (None: none). ``quota``: the
    :class:`~workspacespawner.quota.service.QuotaService` (the run's stop
    reason, Events, the timezone warnings are shown in); ``audit``: the
    :class:`~workspacespawner.lifecycle.audit.AuditLog`. ``declared``: the
    site's VM device names. ``now``: the clock (aware UTC). ``notices``:
    where warnings go (default: the process's :data:`~.notices.IDLE_NOTICES`).
    """

    name = "workspacespawner-idle-gpus"

    def __init__(
        self,
        settings,
        *,
        hub: Callable[[], Awaitable[HubView]],
        objects: Callable[[], tuple[list[dict], list[dict]] | None],
        stop: Callable[[str, str], Awaitable] | None = None,
        prometheus: PrometheusClient | None = None,
        quota=None,
        audit=None,
        declared=(),
        now: Callable[[], datetime] = quota_policy.utcnow,
        notices: IdleNotices = IDLE_NOTICES,
    ):
        self.settings = settings
        self.hub = hub
        self.objects = objects
        self.stop = stop
        self.prometheus = prometheus
        self.quota = quota
        self.audit = audit
        self.declared = tuple(declared)
        self.now = now
        self.notices = notices
        self._warned: dict[tuple[str, str], datetime] = {}
        self._told: dict[tuple[str, str], str] = {}
        self._asked_stop: dict[tuple[str, str], datetime] = {}
        self._stopped: set[tuple[str, str]] = set()

    def timezone(self) -> tzinfo:
        """The zone stop times are shown in: the quota's ``timezone``, else UTC."""
        name = getattr(getattr(self.quota, "settings", None), "timezone", None)
        try:
            return quota_policy.zone(name) if name else UTC
        except ValueError:
            return UTC

    async def read(self, now: datetime) -> tuple[list[GPUServer], dict[tuple[str, str], str]] | None:
        """Step 1: the GPU servers now, and each one's namespace; None when something could not be read (logged)."""
        seen = self.objects()
        if seen is None:
            log.info("Idle-GPU pass skipped: the watch caches have not loaded yet")
            return None
        pods, vmis = seen
        compute = counted_once(pods + vmis)
        held = gpu_servers_held(compute, self.declared)
        namespaces = {}
        for obj in compute:
            meta = obj.get("metadata") or {}
            owner = server_of(meta)
            if owner is not None:
                namespaces[owner] = meta.get("namespace", "")
        if not held:
            return [], namespaces
        try:
            view = await self.hub()
        except Exception as e:  # the hub's API down or refusing: try again next pass
            log.warning("Idle-GPU pass skipped: the hub's API did not answer (%s); trying again next pass", e)
            return None
        utilisation = None
        if self.prometheus is not None:
            try:
                utilisation = await read_utilisation(self.prometheus, pods, vmis,
                                                     window_seconds=self.settings.gpu_idle_timeout)
            except PrometheusError as e:
                log.warning("Idle-GPU pass skipped: %s; trying again next pass", e)
                return None
        return gpu_servers(held, view, utilisation), namespaces

    async def tick(self) -> list[tuple[str, str, str]]:
        """One pass; returns ``(user, server, action)`` of every warning given (once per warning) and stop made."""
        now = self.now()
        if not self.settings.enabled:
            for user, server in self.notices.keys():
                self.notices.clear(user, server)
            return []
        found = await self.read(now)
        if found is None:
            return []
        servers, namespaces = found
        policy = Policy.of(self.settings)
        tz = self.timezone()
        actions: list[tuple[str, str, str]] = []
        current = set()
        for server in servers:
            key = server.key
            current.add(key)
            verdict = decide(server, policy, now, self._warned.get(key))
            if verdict.action not in (WARN, STOP):
                self._forget(key)
                continue
            if key in self._stopped:  # asked to stop already: keep saying so, ask again after RESTOP_AFTER
                if verdict.action == STOP:
                    await self._stop(server, verdict, namespaces.get(key, ""), now, tz)
                continue
            self._warned[key] = verdict.warned_at
            message = warning_message(IdleVerdict(**{**verdict.__dict__, "action": WARN}), now, tz)
            self.notices.set(server.user, server.server, message)
            if self._told.get(key) is None:
                self._told[key] = WARN
                log.warning("Idle GPU server %s/%r: %s", server.user, server.server, message)
                await self._event(server, WARN, message)
                actions.append((server.user, server.server, WARN))
            if verdict.action == STOP and await self._stop(server, verdict, namespaces.get(key, ""), now, tz):
                actions.append((server.user, server.server, "stopped"))
        for key in set(self._warned) - current:
            self._forget(key)
        for key in self.notices.keys() - current - self._stopped:
            self.notices.clear(*key)
        self._stopped &= self.notices.keys()
        return actions

    def _forget(self, key: tuple[str, str]) -> None:
        self._warned.pop(key, None)
        self._told.pop(key, None)
        self._asked_stop.pop(key, None)
        self._stopped.discard(key)
        self.notices.clear(*key)

    async def _event(self, server: GPUServer, action: str, message: str) -> None:
        if self.quota is not None:
            await self.quota.event(server.user, server.server, EVENT_REASONS[action], message)

    async def _stop(self, server: GPUServer, verdict: IdleVerdict, namespace: str, now: datetime, tz) -> bool:
        """Ask the hub to stop ``server``; on success record why. False when not asked (no token, pending, failed)."""
        key = server.key
        asked = self._asked_stop.get(key)
        if asked is not None and now - asked < RESTOP_AFTER:
            return False
        if self.stop is None:
            log.warning("Cannot stop %s's idle GPU server %r: no hub API token configured", server.user, server.server)
            return False
        # the reason goes on the run first: the hub's stop closes the run, and a closed run's reason stays as it is
        await self._record_reason(server, now)
        message = warning_message(verdict, now, tz)
        STOP_REASONS.say(server.user, server.server, PHASE_REASON, message)  # the Stopped phase records it
        try:
            await self.stop(server.user, server.server)
        except SpawnPending as e:
            log.info("Not stopping yet: %s; asking again at the next pass", e)
            return False
        except Exception as e:  # the hub's API down: the next pass asks again
            log.warning("Could not stop %s's idle GPU server %r (%s); trying again next pass",
                        server.user, server.server, e)
            return False
        self._asked_stop[key] = now
        self._stopped.add(key)
        self.notices.set(server.user, server.server, message)
        log.warning("Stopped %s's idle GPU server %r: %s", server.user, server.server, message)
        await self._audit(server, verdict, namespace, now)
        await self._event(server, STOP, message)
        return True

    async def _audit(self, server: GPUServer, verdict: IdleVerdict, namespace: str, now: datetime) -> None:
        """The audit record of an idle stop (errors logged, not raised)."""
        if self.audit is not None:
            try:
                await self.audit.arecord(
                    actor="system", user=server.user, server=server.server, namespace=namespace, disk="",
                    action="stop", before={"phase": "Running", "gpus": server.gpus, "profile": server.profile},
                    after={"reason": STOP_REASON, "idle_seconds": int(verdict.idle_for(now).total_seconds()),
                           "gpu_measured": verdict.measured},
                    result="ok", time=now,
                )
            except Exception as e:
                log.error("Could not write the audit record of %s's idle stop of %r: %s", server.user, server.server, e)

    async def _record_reason(self, server: GPUServer, now: datetime) -> None:
        """``idle GPU`` as the stop reason of the server's open run in the ledger (errors logged, not raised)."""
        quota = self.quota
        if quota is None or not quota.enabled:
            return
        try:
            period = quota_policy.month_bounds(now, quota.settings.timezone)
            runs = await quota.call(quota.ledger.runs_of, server.user, period)
            for run in runs:
                if run.server_name == server.server and run.state == quota_policy.OPEN and run.id is not None:
                    await quota.call(quota.ledger.set_stop_reason, run.id, STOP_REASON)
        except Exception as e:
            log.error("Could not write the stop reason of %s's run of %r: %s", server.user, server.server, e)

    def interval(self) -> float:
        return self.settings.interval

    def failed(self, error: Exception) -> None:
        log.error("Idle-GPU pass failed: %s", error, exc_info=error)
