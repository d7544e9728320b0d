"""The lifecycle side of WorkspaceSpawner: its settings (retention, reclaim, disk limit, fence wait) and the hooks the spawner calls.

Mixed into ``WorkspaceSpawner`` (which supplies ``user``, ``name``,
``namespace``, ``api``, ``config``, ``profile``, ``home_pvc_name``,
``home_pvc_name_template``, ``home_size``, ``pod_name``, ``_step``,
``_runs_vm``, ``_vm_identity``, ``_vm_workspace``, ``_vm_ident_state``).
The spawner calls, in this order on a start::

    await self.lifecycle_before_start()    # after load_user_options(), before any object is made
    pvc = await home.ensure_home_pvc(...)  # (the spawner's _ensure_home)
    await self.lifecycle_disks_ready(pvc)  # grows home to the profile's size, -> Starting
    ... compute ...                        # lifecycle_start_failed(e) on an exception, lifecycle_running() on success

and ``lifecycle_stopping()`` as a stop begins, ``lifecycle_stopped()`` in
``run_post_stop_hook`` (after every stop, also one where the hub found the
server gone and skipped ``stop()``), ``lifecycle_delete_forever()``
in ``delete_forever``, ``lifecycle_state()``/``lifecycle_load_state()`` in
``get_state``/``load_state``. Every move goes through
:func:`.lifecycle.move`; disk moves are audited in the quota ledger's
database (:func:`.audit.audit_for`).
"""

from __future__ import annotations

import string

from kubespawner.clients import shared_client
from traitlets import Enum, Float
from traitlets.config import LoggingConfigurable

from workspacespawner.config.traittypes import Quantity
from workspacespawner.core import names
from workspacespawner.core.errors import WorkspaceError
from workspacespawner.k8s.api import PVC, Kube, NotOurs
from workspacespawner.workspace import disks, fence, lifecycle, retention
from workspacespawner.workspace.audit import audit_for
from workspacespawner.workspace.lifecycle import Phase, Status, WorkspaceRef

#: Fields of kubespawner's name templates that differ between a user's servers.
SERVER_FIELDS = {
    "servername", "user_server", "safe_servername", "safe_user_server", "escaped_servername",
    "escaped_user_server", "unescaped_servername", "pod_name",
}
#: Phases in which the workspace has compute (a Pod or VMI) on the cluster.
COMPUTE_PHASES = (Phase.STARTING, Phase.RUNNING, Phase.STOPPING)


class LifecycleSpawnerMixin(LoggingConfigurable):
    """Lifecycle phases, retention, reclaim, disk growth and the fence, for WorkspaceSpawner (see the module docstring)."""

    retention_days = Float(
        30.0,
        min=0,
        config=True,
        help="""Days the disks of a deleted user or named server are kept (``Retained``) before the purge may delete them.

        0: the next purge (``workspacespawner retention purge``) deletes them.
        """,
    )

    reclaim_policy = Enum(
        list(retention.RECLAIM_POLICIES),
        default_value="automatic",
        config=True,
        help="""Who gives a recreated user their retained disks back: ``automatic`` (at their next start) or ``admin-only``.

        ``automatic`` suits SSO identities that are never reused. With
        ``admin-only`` the start is refused until an admin runs
        ``workspacespawner retention reclaim USER``.
        """,
    )

    disk_limit = Quantity(
        None,
        allow_none=True,
        config=True,
        help="""Disk a user's workspaces may hold together, a Kubernetes quantity (``"100Gi"``), when quotas are off.

        With ``WorkspaceQuota.enabled`` its ``max_disk`` applies instead.
        Checked when a disk grows (``disk expand``, or a profile asking for
        a bigger home). ``None``: no limit.
        """,
    )

    fence_wait_seconds = Float(
        120.0,
        min=0,
        max=3600,
        config=True,
        help="""Seconds a start waits for the workspace's previous Pod or VMI, still shutting down, to go before refusing.""",
    )

    # -- state ----------------------------------------------------------

    @property
    def lifecycle_status(self) -> Status:
        """The workspace's current :class:`~.lifecycle.Status` (``Requested`` until something is known)."""
        return getattr(self, "_lifecycle", None) or Status(Phase.REQUESTED)

    @property
    def lifecycle_phase(self) -> Phase:
        """The workspace's current :class:`~.lifecycle.Phase`."""
        return self.lifecycle_status.phase

    def lifecycle_state(self) -> dict:
        """What ``get_state()`` adds: ``{"lifecycle": {...}}`` (JSON)."""
        return {"lifecycle": self.lifecycle_status.to_state()}

    def lifecycle_load_state(self, state: dict) -> None:
        """Read back :meth:`lifecycle_state` (an unreadable or missing one leaves ``Requested``: the cluster decides at the next start)."""
        self._lifecycle = Status.from_state(state.get("lifecycle") or {})

    # -- helpers --------------------------------------------------------

    def _lifecycle_kube(self) -> Kube:
        return Kube(self.api, shared_client("CustomObjectsApi"))

    def _lifecycle_audit(self):
        return audit_for(self.config)

    def _home_is_shared(self) -> bool:
        """Whether this named server's home PVC is the default server's too (the home template names no server)."""
        if not self.name:
            return False
        fields = {name for _text, name, _spec, _conv in string.Formatter().parse(self.home_pvc_name_template) if name}
        return not fields & SERVER_FIELDS

    def lifecycle_ref(self, *, fresh: bool = False, retaining: bool = False) -> WorkspaceRef:
        """The workspace's objects: home PVC, and the VM and root disk (from state; ``fresh``: from the templates, as a start makes them).

        ``retaining``: leave out a home PVC this named server shares with the default server.
        """
        vm_ident = None
        if self._runs_vm() or (not fresh and self._vm_ident_state):
            if fresh:
                self._vm_ident_state = None  # as _start_vm does: names from the current templates
            vm_ident = self._vm_identity()
        return WorkspaceRef(
            namespace=self.namespace,
            user_name=self.user.name,
            server_name=self.name or "",
            home_pvc=None if retaining and self._home_is_shared() else self.home_pvc_name,
            root_disk=vm_ident.root_disk if vm_ident else None,
            vm=vm_ident.vm if vm_ident else None,
            pod=None if vm_ident else self.pod_name,
        )

    async def _move(self, ref: WorkspaceRef, target: Phase, **kwargs) -> Status:
        """:func:`.lifecycle.move`; an illegal move (a bug) is logged and the cluster's view recorded instead, never failing a user's start or stop."""
        try:
            self._lifecycle = await lifecycle.move(
                self._lifecycle_kube(), ref, self.lifecycle_status, target, audit=self._lifecycle_audit(), **kwargs
            )
        except lifecycle.IllegalTransition as e:
            self.log.error("Lifecycle bug for %s: %s; recording what the cluster shows instead", self._log_name, e)
            await self._reconcile(ref)
        return self._lifecycle

    async def _reconcile(self, ref: WorkspaceRef) -> Status:
        self._lifecycle = await lifecycle.reconcile(self._lifecycle_kube(), ref, self.lifecycle_status, audit=self._lifecycle_audit())
        return self._lifecycle

    def _disk_limit(self) -> int | None:
        from workspacespawner.quota.service import quota_for

        groups = {g.name for g in getattr(self.user, "groups", None) or []}
        return disks.disk_limit(quota_for(self.config).settings, self.user.name, groups, self.disk_limit)

    # -- start ----------------------------------------------------------

    async def _resolve_home(self, kube: Kube) -> None:
        """Point ``home_pvc_name`` at the workspace's home (a restored one keeps the template's slot under a new name)."""
        slot = self._expand_user_properties(self.home_pvc_name_template)
        selector = f"{names.owner_selector(self.user.name)},{names.DISK_LABEL}={names.HOME_DISK}"
        home = disks.choose_home(await kube.list(PVC, self.namespace, labels=selector), self.user.name, slot)
        self.home_pvc_name = home["metadata"]["name"] if home else slot

    async def lifecycle_before_start(self) -> None:
        """Before any object is made: find the home, reconcile the phase with the cluster, reclaim retained disks, fence.

        Raises :class:`~.errors.WorkspaceError` (409): ``disk-retained``
        (admin-only reclaim), ``disk-deleting`` (the purge has them),
        ``node-unreachable`` (the workspace goes ``Degraded``),
        ``still-stopping``, ``disk-in-use``, ``already-running``.
        """
        self._lifecycle_starting = True  # kubespawner may stop() a leftover Pod inside its start: not a stop of ours
        kube = self._lifecycle_kube()
        await self._resolve_home(kube)
        ref = self.lifecycle_ref(fresh=True)
        status = await self._reconcile(ref)
        if status.phase == Phase.RETAINED:
            if self.reclaim_policy != "automatic":
                raise WorkspaceError(
                    f"Your previous disks are kept since {lifecycle.rfc3339(status.since)} (until "
                    f"{lifecycle.rfc3339(status.retain_until)}); an administrator can give them back. Nothing was started.",
                    reason="disk-retained",
                    status_code=409,
                )
            try:
                self._lifecycle = await retention.reclaim(kube, ref, audit=self._lifecycle_audit()) or status
            except NotOurs:
                self._lifecycle = await lifecycle.reconcile(kube, ref, status)
        if self.lifecycle_phase == Phase.DELETING_DISK:
            raise WorkspaceError(
                "Your previous disks are being deleted; please try again in a few minutes.", reason="disk-deleting", status_code=409
            )
        try:
            await fence.check_before_start(
                kube,
                namespace=self.namespace,
                user_name=self.user.name,
                claims=[name for _kind, name in ref.disks()],
                own_pod=ref.pod,
                own_vmi=ref.vm,
                wait=self.fence_wait_seconds,
                progress=self._step,
            )
            if ref.is_vm:
                workspace = self._vm_workspace(None)
                await workspace.watch()
                await workspace.fence()
        except WorkspaceError as e:
            if e.reason == "node-unreachable":
                await self._move(ref, Phase.DEGRADED, reason=e.reason, message=e.message, observed=True)
            raise
        if self.lifecycle_phase in COMPUTE_PHASES:  # the fences left no compute behind
            await self._move(ref, Phase.STOPPED, observed=True)
        if self.lifecycle_phase == Phase.REQUESTED:
            await self._move(ref, Phase.PROVISIONING_DISK)

    async def lifecycle_disks_ready(self, pvc: dict) -> None:
        """The home PVC exists (``pvc``, as read or created): grow it to the profile's ``home_size`` if bigger, then -> ``Starting``.

        Raises :class:`~.errors.WorkspaceError` (403, ``disk``) when growing
        would pass the user's disk limit.
        """
        kube = self._lifecycle_kube()
        ops = disks.DiskOps(kube, self.namespace, audit=self._lifecycle_audit())
        try:
            if await ops.grow_home(self.user.name, pvc, self.home_size, limit=self._disk_limit(), server=self.name or ""):
                self._step(f"Home volume {self.home_pvc_name} grown to {self.home_size}")
        except disks.DiskOpError as e:
            raise WorkspaceError(f"Your home volume cannot grow to {self.home_size}: {e}", reason="disk", status_code=403) from None
        ref = self.lifecycle_ref()
        if self.lifecycle_phase == Phase.PROVISIONING_DISK:
            await self._move(ref, Phase.STOPPED)
        await self._move(ref, Phase.STARTING)

    async def lifecycle_running(self) -> None:
        """The server is up: ``Starting -> Running``."""
        self._lifecycle_starting = False
        await self._move(self.lifecycle_ref(), Phase.RUNNING)

    async def lifecycle_start_failed(self, error: BaseException) -> None:
        """A start failed: ``Degraded`` for an unreachable node, else whatever the cluster shows (Stopped once nothing runs)."""
        self._lifecycle_starting = False
        ref = self.lifecycle_ref()
        try:
            if getattr(error, "reason", None) == "node-unreachable":
                await self._move(ref, Phase.DEGRADED, reason="node-unreachable", message=str(error), observed=True)
            else:
                await self._reconcile(ref)
        except Exception:
            self.log.exception("Could not record the failed start of %s", self._log_name)

    # -- stop, poll, delete -----------------------------------------------

    async def lifecycle_stopping(self) -> None:
        """A stop begins: -> ``Stopping`` (from Starting, Running or Degraded; nothing to do from Stopped, or inside a start).

        Never fails the stop: a record that cannot be written is logged.
        """
        if getattr(self, "_lifecycle_starting", False) or Phase.STOPPING not in lifecycle.TRANSITIONS[self.lifecycle_phase]:
            return
        try:
            await self._move(self.lifecycle_ref(), Phase.STOPPING)
        except Exception:
            self.log.exception("Could not record the stop of %s", self._log_name)

    async def lifecycle_stopped(self) -> None:
        """After any stop (``run_post_stop_hook``: also when the hub found the server gone): what the cluster shows.

        ``Stopped``, or ``Degraded`` if the compute is stuck on a lost node.
        Never fails: a record that cannot be written is logged.
        """
        if getattr(self, "_lifecycle_starting", False):
            return
        try:
            await self._reconcile(self.lifecycle_ref())
        except Exception:
            self.log.exception("Could not record that %s stopped", self._log_name)

    async def lifecycle_delete_forever(self) -> None:
        """The user or named server is deleted: its disks (not a home the default server shares) go ``Retained``; nothing is deleted."""
        ref = self.lifecycle_ref(retaining=True)
        status = await self._reconcile(ref)
        self._lifecycle = await retention.retain(
            self._lifecycle_kube(), ref, status, days=self.retention_days, audit=self._lifecycle_audit()
        )
        self.log.info(
            "Kept the disks of %s as %s until %s (%s)",
            self._log_name, self.lifecycle_phase, lifecycle.rfc3339(self._lifecycle.retain_until),
            ", ".join(name for _kind, name in ref.disks()) or "none",
        )
