"""One workspace's lifecycle as the spawner's starts, stops and deletions move it.

The spawner holds one :class:`WorkspaceLifecycle` per server and calls, on a
start (the workspace's objects named by a
:class:`~workspacespawner.lifecycle.phases.WorkspaceRef`)::

    await phases.before_start(ref, fence_own=backend.fence, say=step)   # reconcile, reclaim, fence
    ... ensure the home PVC ...
    await phases.disks_ready(ref, pvc, ...)                           # grow home, -> Starting
    await phases.claim_disks(ref)                                     # the attach claim, before any compute
    ... compute ...                                                      # running(ref) / start_failed(ref, e)

``stopping(ref)`` as a stop begins, ``stopped(ref)`` after every stop (also
one where the hub found the server gone; it releases the attach claim once
the compute is gone, as a failed start does), ``delete_forever(ref)`` when the
user or server is deleted. Every move goes through
:func:`~workspacespawner.lifecycle.phases.move`; disk moves are audited.
What a kind's objects show comes from ``kind`` (the backend's
:class:`~workspacespawner.lifecycle.phases.KindStatus`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass

from workspacespawner.core.errors import WorkspaceError
from workspacespawner.k8s.api import NotOurs
from workspacespawner.lifecycle import attach, disks, fence, phases, retention
from workspacespawner.lifecycle.phases import KindStatus, Phase, Status, WorkspaceRef
from workspacespawner.lifecycle.stopreasons import STOP_REASONS

log = logging.getLogger("workspacespawner")

#: Phases in which the workspace has compute (a Pod or VMI) on the cluster.
COMPUTE_PHASES = (Phase.STARTING, Phase.RUNNING, Phase.STOPPING)


@dataclass(frozen=True)
class LifecycleSettings:
    """The lifecycle settings of one hub (see :class:`~workspacespawner.lifecycle.settings.LifecycleTraits`).

    ``retention_days``: days a deleted workspace's disks are kept;
    ``reclaim_policy``: ``automatic`` or ``admin-only``;
    ``fence_wait_seconds``: how long a start waits for old compute to go;
    ``attach_grace_seconds``: how long an attach claim without compute
    counts as a start under way (then it is stale, see :mod:`.attach`).
    """

    retention_days: float = 30.0
    reclaim_policy: str = "automatic"
    fence_wait_seconds: float = 120.0
    attach_grace_seconds: float = attach.ATTACH_GRACE_SECONDS


class WorkspaceLifecycle:
    """The phase of one workspace and the moves a spawner makes (see the module docstring).

    ``kube``: a :class:`~workspacespawner.k8s.api.Kube`; ``audit``: an
    :class:`~workspacespawner.lifecycle.audit.AuditLog` (or None);
    ``kind``: the KindStatus of the workspace's current kind (set again
    when a start picks its backend); ``label``: how logs name the server.
    """

    def __init__(self, *, kube, audit, kind: KindStatus, settings: LifecycleSettings, label: str = ""):
        self.kube = kube
        self.audit = audit
        self.kind = kind
        self.settings = settings
        self.label = label
        self.status = Status(Phase.REQUESTED)
        #: True from before_start until the start ends: kubespawner may stop() a leftover Pod inside its start.
        self.starting = False
        #: True when a stop cut the last spawn short (JupyterHub cancels it, then forgets that it did), until the next
        #: spawn ends (:meth:`spawn_ended`); kept in the spawner's state. The hub's "not running" page says so.
        self.start_cancelled = False

    @property
    def phase(self) -> Phase:
        return self.status.phase

    def state(self) -> dict:
        """What ``get_state()`` keeps: ``{"lifecycle": {...}}`` (JSON), and ``"start_cancelled": true`` after a
        cancelled spawn (JupyterHub drops a stopped server's Spawner; the one it makes next reads this back)."""
        return {"lifecycle": self.status.to_state(), **({"start_cancelled": True} if self.start_cancelled else {})}

    def load_state(self, state: dict) -> None:
        """Read back :meth:`state`; an unreadable or missing one leaves ``Requested`` (the cluster decides at the next start)."""
        self.status = Status.from_state(state.get("lifecycle") or {}) or Status(Phase.REQUESTED)
        self.start_cancelled = state.get("start_cancelled") is True

    async def _move(self, ref: WorkspaceRef, target: Phase, **kwargs) -> Status:
        """:func:`phases.move`; an illegal move (a bug) is logged and the cluster's view recorded instead."""
        try:
            self.status = await phases.move(self.kube, ref, self.status, target, audit=self.audit, **kwargs)
        except phases.IllegalTransition as e:
            log.error("Lifecycle bug for %s: %s; recording what the cluster shows instead", self.label, e)
            await self.reconcile(ref)
        return self.status

    async def reconcile(self, ref: WorkspaceRef) -> Status:
        """Record what the cluster shows (see :func:`phases.reconcile`)."""
        self.status = await phases.reconcile(self.kube, ref, self.kind, self.status, audit=self.audit)
        return self.status

    async def before_start(self, ref: WorkspaceRef, *, fence_own: Callable[..., Awaitable[None]], say,
                           servers: Collection[str] = ()) -> None:
        """Before any object is made: reconcile with the cluster, reclaim retained disks, fence.

        ``fence_own(say)``: the backend's own fence (a VM's VMI); ``say(message)``
        shows a step; ``servers``: the names of the user's servers the hub has
        (:func:`~.fence.check_before_start`). Raises :class:`~workspacespawner.core.errors.WorkspaceError`
        (409): ``disk-retained`` (admin-only reclaim), ``disk-deleting``,
        ``node-unreachable`` (the workspace goes ``Degraded``),
        ``still-stopping``, ``disk-in-use``, ``leftover-compute``, ``already-running``.
        """
        self.starting = True
        status = await self.reconcile(ref)
        if status.phase == Phase.RETAINED:
            if self.settings.reclaim_policy != "automatic":
                raise WorkspaceError(
                    f"Your previous disks are kept since {phases.rfc3339(status.since)} (until "
                    f"{phases.rfc3339(status.retain_until)}); an administrator can give them back. Nothing was started.",
                    reason="disk-retained",
                    status_code=409,
                )
            try:
                self.status = await retention.reclaim(self.kube, ref, audit=self.audit) or status
            except NotOurs:
                self.status = await phases.reconcile(self.kube, ref, self.kind, status)
        if self.phase == Phase.DELETING_DISK:
            raise WorkspaceError(
                "Your previous disks are being deleted; please try again in a few minutes.", reason="disk-deleting", status_code=409
            )
        try:
            await fence.check_before_start(
                self.kube,
                namespace=ref.namespace,
                user_name=ref.user_name,
                claims=[name for _kind, name in ref.disks()],
                own_pod=ref.pod,
                own_vmi=ref.vm,
                server=ref.server_name,
                servers=servers,
                wait=self.settings.fence_wait_seconds,
                progress=say,
            )
            await fence_own(say)
        except WorkspaceError as e:
            if e.reason == "node-unreachable":
                await self._move(ref, Phase.DEGRADED, reason=e.reason, message=e.message, observed=True)
            raise
        if self.phase in COMPUTE_PHASES:  # the fences left no compute behind
            await self._move(ref, Phase.STOPPED, observed=True)
        if self.phase == Phase.REQUESTED:
            await self._move(ref, Phase.PROVISIONING_DISK)

    async def disks_ready(
        self, ref: WorkspaceRef, pvc: dict, *, home_size: str, limit: int | None, server: str, say
    ) -> None:
        """The home PVC exists (``pvc``, as read or created): grow it to ``home_size`` if bigger, then -> ``Starting``.

        ``limit``: the user's disk limit in bytes (None: none). Raises
        :class:`~workspacespawner.core.errors.WorkspaceError` (403, ``disk``)
        when growing would pass it.
        """
        ops = disks.DiskOps(self.kube, ref.namespace, audit=self.audit)
        try:
            if await ops.grow_home(ref.user_name, pvc, home_size, limit=limit, server=server):
                say(f"Home volume {pvc['metadata']['name']} grown to {home_size}")
        except disks.DiskOpError as e:
            raise WorkspaceError(f"Your home volume cannot grow to {home_size}: {e}", reason="disk", status_code=403) from None
        if self.phase == Phase.PROVISIONING_DISK:
            await self._move(ref, Phase.STOPPED)
        await self._move(ref, Phase.STARTING)

    async def claim_disks(self, ref: WorkspaceRef) -> None:
        """Take the attach claim on the workspace's disks (see :mod:`.attach`); call it right before compute is created.

        Raises :class:`~workspacespawner.core.errors.WorkspaceError` (409,
        ``disk-attached``) naming the server that holds a disk.
        """
        taken = await attach.claim(self.kube, ref, grace=self.settings.attach_grace_seconds)
        log.info("Attach claim of %s on %s", self.label, ", ".join(taken) or "no disk yet")

    async def _release_if_gone(self, ref: WorkspaceRef) -> None:
        """Release the attach claim once this workspace's compute is observed gone (else it stays, and goes stale later)."""
        if await attach.compute_alive(self.kube, ref.namespace, ref.user_name, attach.me_of(ref)):
            log.info("Keeping the attach claim of %s: its compute is still there", self.label)
            return
        released = await attach.release(self.kube, ref)
        if released:
            log.info("Released the attach claim of %s on %s", self.label, ", ".join(released))

    def spawn_ended(self, cancelled: bool) -> None:
        """JupyterHub's spawn of this server ended: ``cancelled`` by a stop, or not (a success or a failure)."""
        self.start_cancelled = cancelled

    async def running(self, ref: WorkspaceRef) -> None:
        """The server is up: ``Starting -> Running``."""
        self.starting = False
        await self._move(ref, Phase.RUNNING)

    async def start_failed(self, ref: WorkspaceRef, error: BaseException) -> None:
        """A start failed: ``Degraded`` for an unreachable node, else what the cluster shows. Never raises."""
        self.starting = False
        try:
            if getattr(error, "reason", None) == "node-unreachable":
                await self._move(ref, Phase.DEGRADED, reason="node-unreachable", message=str(error), observed=True)
            else:
                await self.reconcile(ref)
        except Exception:
            log.exception("Could not record the failed start of %s", self.label)
        try:
            await self._release_if_gone(ref)
        except Exception:
            log.exception("Could not release the attach claim of %s", self.label)

    async def stopping(self, ref: WorkspaceRef) -> None:
        """A stop begins: -> ``Stopping`` (nothing to do from Stopped, or inside a start). Never raises."""
        if self.starting or Phase.STOPPING not in phases.TRANSITIONS[self.phase]:
            return
        try:
            await self._move(ref, Phase.STOPPING)
        except Exception:
            log.exception("Could not record the stop of %s", self.label)

    async def stopped(self, ref: WorkspaceRef) -> None:
        """After any stop: what the cluster shows (``Stopped``, or ``Degraded`` on a lost node). Never raises.

        A stop the hub decided on its own records the reason its pass said
        (:data:`~.stopreasons.STOP_REASONS`) with the ``Stopped`` phase.
        """
        if self.starting:
            return
        try:
            await self.reconcile(ref)
            said = STOP_REASONS.take(ref.user_name, ref.server_name)
            if said is not None and self.phase == Phase.STOPPED:
                await self._move(ref, Phase.STOPPED, reason=said.reason, message=said.message, observed=True)
        except Exception:
            log.exception("Could not record that %s stopped", self.label)
        try:
            await self._release_if_gone(ref)
        except Exception:
            log.exception("Could not release the attach claim of %s", self.label)

    async def delete_forever(self, ref: WorkspaceRef) -> bool:
        """The user or server is deleted: its disks in ``ref`` go ``Retained``; nothing is deleted. Never raises.

        Returns True once recorded. When the API refuses the write (JupyterHub
        answers the deletion 204 whatever happens here), the disks are
        marked ``Degraded`` (reason ``retention-pending``) if the API allows
        that much, and False is returned: the caller tries again later
        (:meth:`~workspacespawner.services.HubServices.retry_later`).
        """
        try:
            status = await self.reconcile(ref)
            self.status = await retention.retain(self.kube, ref, status, days=self.settings.retention_days, audit=self.audit)
        except Exception as e:
            log.error("Could not mark the disks of deleted %s Retained (%s); trying again later", self.label,
                      getattr(e, "status", None) or e)
            message = ("The user or server was deleted, but its disks could not be marked Retained yet; "
                       "the hub tries again until it can.")
            try:
                await self._move(ref, Phase.DEGRADED, reason="retention-pending", message=message, observed=True)
            except Exception as again:
                log.error("Could not mark the disks of %s Degraded either (%s)", self.label, getattr(again, "status", None) or again)
            return False
        log.info(
            "Kept the disks of %s as %s until %s (%s)",
            self.label, self.phase, phases.rfc3339(self.status.retain_until),
            ", ".join(name for _kind, name in ref.disks()) or "none",
        )
        return True
