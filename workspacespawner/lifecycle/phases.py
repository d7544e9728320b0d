"""The workspace lifecycle: its phases, the moves allowed between them, and the one function that moves a workspace.

A workspace (one user's default or named server and the disks that outlive
it) is always in one :class:`Phase`::

    Requested → ProvisioningDisk → Stopped → Starting → Running → Stopping → Stopped → Retained → DeletingDisk

plus ``Degraded`` with a reason word (``node-unreachable``, ``disk-missing``,
``root-disk``, ``disk-lost``) and a message for the user and the admin. :data:`TRANSITIONS` lists every allowed move; a move
to the current phase is an idempotent no-op. Anything else raises
:class:`IllegalTransition`: a bug, never a silent overwrite.

Where the phase is kept: in the spawner's state (:meth:`Status.to_state`)
and, for the phases the cluster cannot show, on the workspace's persistent
objects (its home PVC and, for a VM workspace, its root DataVolume and
VirtualMachine) as the label :data:`~.names.PHASE_LABEL` (for selection by
label) and the JSON annotation :data:`~.names.LIFECYCLE_ANNOTATION` (phase,
reason, message, since, retainUntil, server). ``Starting``, ``Running`` and
``Stopping`` (:data:`DERIVED_PHASES`) are never written: the workspace's Pod
or VMI shows them, so a start and a stop write no phase and the objects
keep the one they had at rest (``Stopped``); :func:`derive_phase` reads them
back from the compute. A home PVC that several servers of a user
share (the default ``home-{username}``) carries the phase of the server
that recorded last (``server`` in the annotation); a VM server's own phase
is on its VM and root disk. :func:`move` is the only writer: it checks the
move, patches every object with a JSON Patch that first tests our owner
labels (never writing anyone else's object), writes an audit record when the
move concerns a disk (:func:`audit_action`), and returns the new
:class:`Status`.

Reconcile, don't trust memory: :func:`observe` reads what the cluster holds
(PVC, DataVolume, VM, VMI, Pod, and the readiness of their nodes; in the
hub, from its watch caches: :class:`~.k8s.cachedkube.CachedKube`) and the
pure :func:`derive_phase` says which phase that is; :func:`reconcile`
records it where annotations or state disagree (a restarted hub, a Pod that
died, a node lost).

Time comes from :func:`utcnow`, the one clock of the lifecycle, retention
and disk modules (tests move it with ``monkeypatch.setattr(lifecycle,
"utcnow", ...)`` or pass ``now``). Times are aware UTC datetimes, written as
RFC 3339 (``2025-06-01T12:00:00Z``).
"""

from __future__ import annotations

import enum
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import Protocol

from workspacespawner.core import names
from workspacespawner.core.times import parse_time
from workspacespawner.k8s.api import NotOurs
from workspacespawner.k8s.kinds import DATA_VOLUME, POD, PVC, VIRTUAL_MACHINE, VMI, Kind
from workspacespawner.k8s.objects import FINISHED_PHASES, holders, node_of, pointer, terminating

log = logging.getLogger("workspacespawner")

#: The actor of moves nobody asked for by name (the hub, the purge task).
SYSTEM = "system"


def utcnow() -> datetime:
    """The current time, aware, in UTC: the lifecycle's only clock."""
    return datetime.now(UTC)


def rfc3339(moment: datetime | None) -> str | None:
    """``moment`` as ``2025-06-01T12:00:00Z`` (UTC, whole seconds); None stays None."""
    if moment is None:
        return None
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Phase(enum.StrEnum):
    """Where a workspace stands (the values are what labels, annotations and state hold)."""

    REQUESTED = "Requested"
    PROVISIONING_DISK = "ProvisioningDisk"
    STOPPED = "Stopped"
    STARTING = "Starting"
    RUNNING = "Running"
    STOPPING = "Stopping"
    RETAINED = "Retained"
    DELETING_DISK = "DeletingDisk"
    DEGRADED = "Degraded"


P = Phase

#: Every allowed move (besides staying in the same phase).
TRANSITIONS: dict[Phase, frozenset[Phase]] = {
    P.REQUESTED: frozenset({P.PROVISIONING_DISK, P.DEGRADED}),
    # ProvisioningDisk -> Retained: a disk made for a restore that was abandoned.
    P.PROVISIONING_DISK: frozenset({P.STOPPED, P.RETAINED, P.DEGRADED}),
    # Stopped -> ProvisioningDisk: a disk restored from a snapshot is being made.
    P.STOPPED: frozenset({P.STARTING, P.PROVISIONING_DISK, P.RETAINED, P.DEGRADED}),
    # Starting -> Stopped: a failed start that left no compute behind.
    P.STARTING: frozenset({P.RUNNING, P.STOPPING, P.STOPPED, P.DEGRADED}),
    # Running -> Stopped: the server ended on its own (poll found it gone).
    P.RUNNING: frozenset({P.STOPPING, P.STOPPED, P.DEGRADED}),
    P.STOPPING: frozenset({P.STOPPED, P.DEGRADED}),
    # Retained -> Stopped: the disks were given back (reclaim); -> DeletingDisk: the purge.
    P.RETAINED: frozenset({P.STOPPED, P.DELETING_DISK}),
    P.DELETING_DISK: frozenset(),
    # Degraded -> Stopped: fenced or recovered; -> Starting: a retry once the cause is gone.
    P.DEGRADED: frozenset({P.STOPPED, P.STARTING, P.STOPPING, P.RETAINED}),
}


#: Phases never written to the cluster: the workspace's compute (its Pod, or its VM's VMI) and attach claim show them
#: (:func:`derive_phase`), so a start and a stop write no phase; the objects keep the phase they had at rest
#: (``Stopped``). Every other phase is recorded: it must survive a hub restart and the cluster alone cannot show it.
DERIVED_PHASES = frozenset({P.STARTING, P.RUNNING, P.STOPPING})
#: The reason of a ``Retained`` disk that a newer one replaced (a restored home, a rebuilt root disk): the workspace
#: goes on with the new disk, the old one is only kept for its user until the purge.
REPLACED = "replaced"


class IllegalTransition(RuntimeError):
    """A move :data:`TRANSITIONS` does not allow: a bug in the caller, never a state to record."""

    def __init__(self, before: Phase, after: Phase):
        super().__init__(f"illegal lifecycle move {before} -> {after} (allowed from {before}: {', '.join(sorted(TRANSITIONS[before])) or 'none'})")
        self.before, self.after = before, after


def allowed(before: Phase, after: Phase) -> bool:
    """Whether a workspace in ``before`` may move to ``after`` (staying put is always allowed)."""
    return before == after or after in TRANSITIONS[before]


def check_transition(before: Phase, after: Phase) -> None:
    """Raise :class:`IllegalTransition` unless :func:`allowed`."""
    if not allowed(before, after):
        raise IllegalTransition(before, after)


def audit_action(before: Phase, after: Phase) -> str | None:
    """The audit action of a move that concerns a disk (``create``, ``retain``, ``reclaim``, ``purge``), else None."""
    if before == after:
        return None
    if after == P.RETAINED:
        return "retain"
    if before == P.RETAINED and after == P.STOPPED:
        return "reclaim"
    if after == P.DELETING_DISK:
        return "purge"
    if before == P.PROVISIONING_DISK and after == P.STOPPED:
        return "create"
    return None


@dataclass(frozen=True)
class Status:
    """A workspace's phase and what goes with it.

    ``reason``: a fixed word, for ``Degraded`` (why) and ``Stopped`` (why
    the hub stopped it, such as ``idle-gpu``; empty after an ordinary stop);
    ``message``: one sentence for the user and the admin. ``since``: when the phase was
    entered. ``retain_until``: for ``Retained``, when the purge may delete
    the disks. ``server``: the JupyterHub server name that recorded it
    (``""`` for the default server).
    """

    phase: Phase
    reason: str = ""
    message: str = ""
    since: datetime | None = None
    retain_until: datetime | None = None
    server: str = ""

    def same(self, other: Status | None) -> bool:
        """Whether ``other`` is this phase with the same reason (and retain-until): a move between them is a no-op."""
        return (
            other is not None
            and (self.phase, self.reason, self.retain_until) == (other.phase, other.reason, other.retain_until)
        )

    def to_state(self) -> dict:
        """A JSON-safe dict (the annotation's and the spawner state's shape); :meth:`from_state` reads it.

        A new dict each call, built from one made once per status: JupyterHub
        asks every spawner for its state at each save and in each admin
        listing of the users (``GET /users``), and formatting the times was
        most of the cost.
        """
        return dict(self._state)

    @cached_property
    def _state(self) -> dict:
        data = {"phase": str(self.phase), "since": rfc3339(self.since), "server": self.server}
        if self.reason:
            data.update(reason=self.reason, message=self.message)
        if self.retain_until is not None:
            data["retainUntil"] = rfc3339(self.retain_until)
        return data

    @classmethod
    def from_state(cls, data) -> Status | None:
        """The status :meth:`to_state` wrote; None for anything unreadable (an unknown phase, a hand-edited value)."""
        try:
            return cls(
                phase=Phase(data["phase"]),
                reason=data.get("reason") or "",
                message=data.get("message") or "",
                since=parse_time(data.get("since")),
                retain_until=parse_time(data.get("retainUntil")),
                server=data.get("server") or "",
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            return None

    @classmethod
    def from_object(cls, obj: dict | None) -> Status | None:
        """The status recorded on a Kubernetes object (its lifecycle annotation), or None."""
        text = (((obj or {}).get("metadata") or {}).get("annotations") or {}).get(names.LIFECYCLE_ANNOTATION)
        if not text:
            return None
        try:
            return cls.from_state(json.loads(text))
        except ValueError:
            return None


#: The phases that carry a reason word and message: ``Degraded`` always, ``Stopped`` when the hub stopped the workspace
#: on its own (:mod:`.stopreasons`), ``Retained`` when a newer disk replaced it (:data:`REPLACED`).
REASONED_PHASES = (P.DEGRADED, P.STOPPED, P.RETAINED)


def degraded(reason: str, message: str) -> Status:
    """A ``Degraded`` status with its ``reason`` word and ``message``."""
    return Status(P.DEGRADED, reason, message)


# -- which objects a workspace has ---------------------------------------------------------------


@dataclass(frozen=True)
class WorkspaceRef:
    """The objects of one workspace, by name, where the spawner's state or templates put them.

    ``home_pvc``: its home PVC (None when this workspace must not record
    on it, e.g. a named server sharing the default server's home);
    ``root_disk`` and ``vm``: a VM workspace's DataVolume and VirtualMachine
    (the VMI has the VM's name); ``pod``: a container workspace's Pod name.
    """

    namespace: str
    user_name: str
    server_name: str = ""
    home_pvc: str | None = None
    root_disk: str | None = None
    vm: str | None = None
    pod: str | None = None

    @property
    def is_vm(self) -> bool:
        return self.vm is not None

    def disks(self) -> list[tuple[Kind, str]]:
        """The disks: home PVC and root DataVolume, those that are named."""
        return [(kind, name) for kind, name in ((PVC, self.home_pvc), (DATA_VOLUME, self.root_disk)) if name]

    def persistent(self) -> list[tuple[Kind, str]]:
        """Where the phase is recorded: the disks and the VirtualMachine."""
        return self.disks() + ([(VIRTUAL_MACHINE, self.vm)] if self.vm else [])

    def label(self) -> str:
        """``user`` or ``user/server`` for logs and messages."""
        return f"{self.user_name}/{self.server_name}" if self.server_name else self.user_name


# -- the one move ----------------------------------------------------------------------------------


def _whole_seconds(moment: datetime | None) -> datetime | None:
    """``moment`` as recorded (RFC 3339, whole seconds), so a status in memory equals the one read back."""
    return None if moment is None else moment.replace(microsecond=0)


def made_in(manifest: dict, status: Status | None, annotations: Mapping[str, str] | None = None) -> dict:
    """``manifest`` (changed in place, and returned) for an object created already recorded in ``status``: its
    phase label and lifecycle annotation (none when ``status`` is None), plus ``annotations``."""
    metadata = manifest.setdefault("metadata", {})
    if status is not None:
        metadata.setdefault("labels", {})[names.PHASE_LABEL] = str(status.phase)
        metadata.setdefault("annotations", {})[names.LIFECYCLE_ANNOTATION] = json.dumps(status.to_state())
    metadata.setdefault("annotations", {}).update(annotations or {})
    return manifest


def _record_operations(status: Status, expect: Phase | None, expect_version: str | None = None) -> list[dict]:
    operations = []
    if expect_version is not None:
        operations.append({"op": "test", "path": pointer("metadata", "resourceVersion"), "value": expect_version})
    if expect is not None:
        operations.append({"op": "test", "path": pointer("metadata", "labels", names.PHASE_LABEL), "value": str(expect)})
    operations += [
        {"op": "add", "path": pointer("metadata", "labels", names.PHASE_LABEL), "value": str(status.phase)},
        {"op": "add", "path": pointer("metadata", "annotations", names.LIFECYCLE_ANNOTATION), "value": json.dumps(status.to_state())},
    ]
    return operations


async def move(
    kube,
    ref: WorkspaceRef,
    current: Status,
    target: Phase,
    *,
    reason: str = "",
    message: str = "",
    actor: str = SYSTEM,
    audit=None,
    retain_until: datetime | None = None,
    observed: bool = False,
    expect: Phase | None = None,
    expect_version: str | None = None,
    now: datetime | None = None,
) -> Status:
    """Move the workspace of ``ref`` from ``current`` to ``target``; return the new :class:`Status`.

    ``kube``: a :class:`~.kube.Kube`. Checks the move against
    :data:`TRANSITIONS` (raises :class:`IllegalTransition`) unless
    ``observed`` (the cluster already is in ``target``: :func:`reconcile`
    records what it found, and writes it even if ``current`` says the
    same). ``Degraded`` needs a ``reason`` word, ``Stopped`` may have one
    (:data:`REASONED_PHASES`); ``retain_until`` goes with
    ``Retained``. Otherwise a move to the same status is a no-op (nothing
    written). Each persistent object of ``ref`` that exists
    and is ``ref.user_name``'s gets the phase label and the lifecycle
    annotation; one that is not ours is left untouched (logged). With
    ``expect``, each object must still be recorded in that phase (an atomic
    JSON Patch ``test``), else :class:`~.kube.NotOurs` is raised;
    ``expect_version`` (with ``expect``, for a ``ref`` of one object): the
    object must also be unchanged since it was read at that
    ``resourceVersion`` (no attach claim taken meanwhile). A move
    that concerns a disk (:func:`audit_action`) adds an audit record per
    disk to ``audit`` (an :class:`~.audit.AuditLog`), by ``actor``.
    """
    if not observed:
        check_transition(current.phase, target)
    if target == P.DEGRADED and not reason:
        raise ValueError("a Degraded workspace needs a reason word")
    moment = now or utcnow()
    keeps_reason = target in REASONED_PHASES
    new = Status(
        target,
        reason if keeps_reason else "",
        message if keeps_reason else "",
        since=_whole_seconds(moment),
        retain_until=_whole_seconds(retain_until) if target == P.RETAINED else None,
        server=ref.server_name,
    )
    if new.same(current) and expect is None and not observed:
        return current
    if target in DERIVED_PHASES and expect is None:  # the compute shows it: nothing to write
        log.info("Workspace %s: %s -> %s", ref.label(), current.phase, target)
        return new
    operations = _record_operations(new, expect, expect_version)
    recorded: list[tuple[Kind, str]] = []
    for kind, name in ref.persistent():
        known, cached = kube.peek(kind, ref.namespace, name)
        if known and expect is None and (cached is None or (new.same(Status.from_object(cached)) and _ours(cached, ref.user_name))):
            if cached is not None:  # already recorded so (made so): nothing to write, the move still audited
                recorded.append((kind, name))
            continue
        try:
            found = await kube.patch_owned(kind, ref.namespace, name, ref.user_name, operations)
        except NotOurs:
            if expect is not None:
                raise
            log.warning("Not recording phase %s on %s %s/%s: it is not %s's", target, kind.kind, ref.namespace, name, ref.user_name)
            continue
        if found is not None:
            recorded.append((kind, name))
    log.info("Workspace %s: %s -> %s%s", ref.label(), current.phase, target, f" ({new.reason})" if new.reason else "")
    action = audit_action(current.phase, target)
    if action and audit is not None:
        for kind, name in recorded:
            if kind in (PVC, DATA_VOLUME):
                await _audit_move(audit, ref, name, action, actor, current, new, moment)
    return new


async def _audit_move(audit, ref: WorkspaceRef, disk: str, action: str, actor: str, before: Status, after: Status, moment: datetime) -> None:
    try:
        await audit.arecord(
            actor=actor,
            user=ref.user_name,
            server=ref.server_name,
            namespace=ref.namespace,
            disk=disk,
            action=action,
            before=before.to_state(),
            after=after.to_state(),
            result="ok",
            time=moment,
        )
    except Exception:  # the move happened: the cluster holds it; say loudly that the trail missed it
        log.exception("Could not write the audit record of %s %s (%s -> %s)", action, disk, before.phase, after.phase)


# -- what the cluster says -------------------------------------------------------------------------


@dataclass(frozen=True)
class Observed:
    """What the cluster holds for one workspace (each object None when absent or not the user's).

    ``recorded``: the status its objects' lifecycle annotations hold (None
    without any); ``saved``: the spawner state's status. ``home``: the home PVC; ``root``: the root
    DataVolume; ``vm``/``vmi``: the VirtualMachine and its instance;
    ``pod``: a container workspace's Pod. ``holders``: the user's Pods and
    VMIs (any server's, leaked ones too) that use the workspace's disks and
    have not finished. ``node_ready``: the readiness of the nodes the Pod,
    VMI and holders sit on (True, False, or None when unknown).
    ``vm_workspace``: whether the workspace is a VM.
    """

    recorded: Status | None = None
    saved: Status | None = None
    home: dict | None = None
    root: dict | None = None
    vm: dict | None = None
    vmi: dict | None = None
    pod: dict | None = None
    holders: tuple[dict, ...] = ()
    node_ready: Mapping[str, bool | None] = field(default_factory=dict)
    vm_workspace: bool = False


class KindStatus(Protocol):
    """What a workspace kind (a backend) says about its own objects, for :func:`derive_phase`.

    ``compute_status``: the phase the kind's compute shows (a Pod; a VM and
    its VMI), or None when it has none; ``root_disk_status``: a Degraded
    status for a root disk that failed, ProvisioningDisk for one still
    being prepared, else None (containers have no root disk).
    """

    def compute_status(self, observed: Observed) -> Status | None: ...

    def root_disk_status(self, observed: Observed) -> Status | None: ...


def _on_lost_node(o: Observed) -> Status | None:
    """``Degraded`` (``node-unreachable``) when the workspace's Pod or VMI, or a holder of its disks, sits on a node that is not Ready."""
    pod = o.pod if o.pod is not None and (o.pod.get("status") or {}).get("phase") not in FINISHED_PHASES else None
    for obj in (pod, o.vmi, *o.holders):
        node = node_of(obj)
        if obj is not None and node and o.node_ready.get(node) is False:
            return degraded(
                "node-unreachable",
                f"The workspace's previous {'virtual machine' if obj.get('kind') == VMI.kind else 'server'} is still registered on node {node}, "
                "which is not responding; it may still hold the disk. An administrator must fence the node "
                "(workspacespawner fence USER --confirm-node-down) before the workspace can start again.",
            )
    return None


def _keep(recorded: Status, derived: Status) -> Status:
    """``recorded`` when it already says ``derived`` (its ``since`` stays), else ``derived``.

    A recorded ``Stopped`` with the reason the hub stopped it keeps that
    reason: the cluster shows a stopped workspace, never why.
    """
    if derived.phase == P.STOPPED == recorded.phase and not derived.reason:
        return recorded
    return recorded if derived.same(recorded) else derived


def derive_phase(observed: Observed, kind: KindStatus) -> Status:
    """The workspace's status from what the cluster holds (pure; see :class:`Observed`).

    In order: compute (its own, or any of the user's holding its disks) on
    a node that is not Ready is ``Degraded`` (``node-unreachable``); a Pod or VMI gives ``Starting``, ``Running`` or
    ``Stopping`` (a VM whose disk clone runs, ``ProvisioningDisk``; a failed
    clone or missing disk, ``Degraded``). Without compute: no disk at all is
    ``Requested`` (or ``Degraded``/``disk-missing`` if disks were recorded);
    a disk being deleted is ``DeletingDisk``; a recorded ``Retained`` or
    ``DeletingDisk`` stays (only the cluster's labels say so); a Failed
    DataVolume or a Lost PVC is ``Degraded``; a DataVolume still cloning is
    ``ProvisioningDisk``; otherwise ``Stopped``. A derived status equal to
    the recorded one is the recorded one (same ``since``). ``recorded``
    falls back on ``saved``, then on ``Requested``.
    """
    recorded = observed.recorded or observed.saved or Status(P.REQUESTED)
    compute = _on_lost_node(observed) or kind.compute_status(observed)
    if compute is not None:
        return _keep(recorded, compute)
    disks = [d for d in (observed.home, observed.root) if d is not None]
    if not disks:
        if recorded.phase in (P.REQUESTED, P.PROVISIONING_DISK, P.DELETING_DISK):
            return _keep(recorded, Status(P.REQUESTED))
        return _keep(recorded, degraded("disk-missing", "The workspace's disks are gone; please ask an administrator."))
    if any(terminating(d) for d in disks):
        return _keep(recorded, Status(P.DELETING_DISK))
    if recorded.phase in (P.RETAINED, P.DELETING_DISK):
        return recorded
    root = kind.root_disk_status(observed)
    if root is not None and root.phase == P.DEGRADED:
        return _keep(recorded, root)
    if ((observed.home or {}).get("status") or {}).get("phase") == "Lost":
        return _keep(recorded, degraded("disk-lost", "The home volume lost its storage (PVC Lost); please ask an administrator."))
    return _keep(recorded, root or Status(P.STOPPED))


def _ours(obj: dict | None, user_name: str) -> dict | None:
    """``obj`` if it is ``user_name``'s: owner labels and name for disks and VMs, owner labels for Pods and VMIs."""
    if obj is None:
        return None
    meta = obj.get("metadata") or {}
    compute = obj.get("kind") in (POD.kind, VMI.kind)
    return obj if (names.labelled_for(meta, user_name) if compute else names.owned_by(meta, user_name)) else None


async def observe(kube, ref: WorkspaceRef, saved: Status | None = None) -> Observed:
    """Read the workspace's objects into an :class:`Observed`: a GET per disk and VM, the user's Pods and VMIs (by owner label), their nodes.

    ``saved``: the spawner state's status (see :class:`Observed`). Objects
    that are not ``ref.user_name``'s count as absent; ``recorded`` is read
    from the VM, then the root disk, then the home PVC.
    """
    ns, user = ref.namespace, ref.user_name

    async def get(kind: Kind, name: str | None) -> dict | None:
        return _ours(await kube.get(kind, ns, name), user) if name else None

    home, root, vm = await get(PVC, ref.home_pvc), await get(DATA_VOLUME, ref.root_disk), await get(VIRTUAL_MACHINE, ref.vm)
    selector = names.owner_selector(user)
    compute = [o for o in await kube.list(POD, ns, labels=selector) + await kube.list(VMI, ns, labels=selector) if _ours(o, user)]
    pod = next((o for o in compute if o["kind"] == POD.kind and o["metadata"]["name"] == ref.pod), None)
    vmi = next((o for o in compute if o["kind"] == VMI.kind and o["metadata"]["name"] == ref.vm), None)
    using = {o["metadata"]["uid"]: o for _kind, name in ref.disks() for o in holders(compute, name) if o is not pod and o is not vmi}
    recorded = next((s for s in map(Status.from_object, (vm, root, home)) if s is not None), None)
    return Observed(
        recorded=recorded,
        saved=saved,
        home=home,
        root=root,
        vm=vm,
        vmi=vmi,
        pod=pod,
        holders=tuple(using.values()),
        node_ready=await kube.nodes_ready([node_of(o) for o in (pod, vmi, *using.values())]),
        vm_workspace=ref.is_vm,
    )


async def reconcile(
    kube, ref: WorkspaceRef, kind: KindStatus, saved: Status | None = None, *, audit=None, actor: str = SYSTEM
) -> Status:
    """Derive the workspace's status from the cluster and record it where it differs; return it.

    What the cluster shows wins over the spawner's memory (``saved``) and
    over stale annotations (see :func:`derive_phase`); a difference is
    written through :func:`move` (``observed=True``: the cluster is already
    there). Objects made before the lifecycle existed get their first record.
    """
    found = await observe(kube, ref, saved)
    derived = derive_phase(found, kind)
    # an object made after the last record (a VM's root disk and VM, made by its first start) gets it too
    unrecorded = derived.phase not in DERIVED_PHASES and any(
        obj is not None and not derived.same(Status.from_object(obj)) for obj in (found.home, found.root, found.vm)
    )
    if derived.same(found.recorded) and not unrecorded:
        return found.recorded
    if not any((found.home, found.root, found.vm)):
        return derived
    current = found.recorded or saved or Status(P.REQUESTED)
    return await move(
        kube,
        ref,
        current,
        derived.phase,
        reason=derived.reason,
        message=derived.message,
        retain_until=derived.retain_until,
        observed=True,
        audit=audit,
        actor=actor,
    )
