"""The attach claim: one consumer per ReadWriteOnce disk, held on the disk before any compute mounts it.

The fence (:mod:`.fence`) looks for Pods and VMIs that use a disk, but a
look is not a hold: two servers sharing one home (``home-{username}``)
that start at the same moment both see nothing, and both create a Pod.
So before a start creates compute, it writes a claim on each of its disks
(the home PVC and, for a VM, the root DataVolume) as the annotation
:data:`~workspacespawner.core.names.ATTACH_ANNOTATION`::

    {"server": "ann/work", "kind": "Pod", "name": "jupyter-ann--work", "since": "2026-12-01T23:50:00Z"}

with one JSON Patch whose ``test`` operations check our owner labels and
the disk's ``metadata.resourceVersion`` as read, followed by ``add``: the
API server applies it only if nobody wrote the disk in between (422
otherwise; we read again and decide again), so of two starts exactly one
holds the claim. In the hub the disk is read from its watch cache; a cache
behind the API server makes the patch fail the same way, and the next read
asks the API server (``fresh``): that is the start's only live read, and
only then. A disk a start makes is created with the claim in it
(:func:`claim_annotation`); a claim of ours taken moments ago is not
written again (:func:`already_held`). The other is refused (409, ``disk-attached``) with the
name of the server that holds it.

An admin's operation that swaps a disk under a stopped workspace (a root
disk rebuild, :mod:`workspacespawner.vmdisk.rebuild`) holds the same claim for the time it takes,
under a holder of kind :data:`OPERATION_KIND` (:func:`operation_holder`):
no Pod or VMI, so it is never alive, and a start is refused (``starting``)
until it is released or older than the grace.

A claim is released (the annotation removed, guarded by a ``test`` that it
is still exactly ours) once that server's compute is observed gone: after a
stop, or a start that failed. One left behind (a hub that crashed, a release
that failed) is *stale* when the holder's compute (its Pod or VMI, by name)
does not exist or has finished and the claim is older than ``grace``
seconds (the longest a start may take to create its compute); a stale
claim is taken over. A claim of the same server is simply taken again.

:func:`decide` is the pure decision; :func:`claim` and :func:`release` do the
I/O through :class:`~workspacespawner.k8s.api.Kube`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime

from workspacespawner.core import names
from workspacespawner.core.errors import WorkspaceError
from workspacespawner.core.times import parse_time
from workspacespawner.k8s.api import NotOurs
from workspacespawner.k8s.kinds import POD, VMI
from workspacespawner.k8s.objects import FINISHED_PHASES, pointer
from workspacespawner.lifecycle.phases import WorkspaceRef, rfc3339, utcnow

log = logging.getLogger("workspacespawner")

#: Seconds an attach claim without compute counts as a start under way (the default of
#: ``WorkspaceSpawner.attach_grace_seconds``; the admin's restore, outside the hub, uses it as is).
ATTACH_GRACE_SECONDS = 600.0

#: The compute "kind" of a claim an admin's disk operation holds (:func:`operation_holder`): no compute at all.
OPERATION_KIND = "DiskOperation"

#: How many times a claim is read and tried again when the disk changed under it.
ATTEMPTS = 5

_PATH = pointer("metadata", "annotations", names.ATTACH_ANNOTATION)


@dataclass(frozen=True)
class Holder:
    """Who holds a disk: ``server`` (``user`` or ``user/server``), its compute ``kind`` (``Pod`` or ``VirtualMachineInstance``) and ``name``, ``since`` when."""

    server: str
    kind: str
    name: str
    since: datetime | None = None

    def to_json(self) -> str:
        return json.dumps({"server": self.server, "kind": self.kind, "name": self.name, "since": rfc3339(self.since)}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> Holder | None:
        """The holder in an annotation value; None when absent or unreadable (an unreadable claim holds nothing)."""
        if not text:
            return None
        try:
            data = json.loads(text)
            return cls(str(data["server"]), str(data["kind"]), str(data["name"]), parse_time(data.get("since")))
        except (ValueError, KeyError, TypeError):
            log.warning("Ignoring an unreadable attach claim %r", text)
            return None

    def describe(self) -> str:
        """``server ann/work (Pod jupyter-ann--work)``, as the admin and the user read it (an operation:
        ``rebuild of ann/work by root``)."""
        if self.kind == OPERATION_KIND:
            return f"{self.server} by {self.name}"
        what = "virtual machine" if self.kind == VMI.kind else "Pod"
        return f"server {self.server} ({what} {self.name})"


def operation_holder(ref: WorkspaceRef, action: str, actor: str, now: datetime) -> Holder:
    """The claim an admin's ``action`` (``rebuild``) on ``ref``'s disks holds, by ``actor``, from ``now``: its server is
    ``<action> of <user[/server]>``, never a server's own, so a start of that server does not take it as its own."""
    return Holder(f"{action} of {ref.label()}", OPERATION_KIND, actor, now)


def recent(claim: Holder | None, now: datetime, grace: float) -> bool:
    """Whether ``claim`` may be a start under way: it is younger than ``grace`` seconds (or undated). An operation on a
    stopped workspace's disk (a restore, a rebuild, a publish) refuses while one is."""
    return claim is not None and (claim.since is None or (now - claim.since).total_seconds() < grace)


def holder_of(obj: dict | None) -> Holder | None:
    """The attach claim recorded on a disk object, or None."""
    if obj is None:
        return None
    return Holder.from_json((obj["metadata"].get("annotations") or {}).get(names.ATTACH_ANNOTATION))


@dataclass(frozen=True)
class Verdict:
    """What :func:`decide` found: ``take`` the claim or not, and ``why`` (``free``, ``ours``, ``stale``, ``in-use``, ``starting``)."""

    take: bool
    why: str


def decide(current: Holder | None, me: Holder, *, holder_alive: bool, now: datetime, grace: float) -> Verdict:
    """Whether ``me`` may take a disk whose claim is ``current``.

    ``holder_alive``: the current holder's compute exists and has not
    finished. Free, or ours already (same server): take. Held by another
    server whose compute is alive: ``in-use``. Its compute is gone but the
    claim is younger than ``grace`` seconds (it may be about to create it):
    ``starting``. Otherwise the claim is stale: take it over.
    """
    if current is None:
        return Verdict(True, "free")
    if current.server == me.server:
        return Verdict(True, "ours")
    if holder_alive:
        return Verdict(False, "in-use")
    if current.since is not None and (now - current.since).total_seconds() < grace:
        return Verdict(False, "starting")
    return Verdict(True, "stale")


def refusal(disk: str, holder: Holder, why: str) -> WorkspaceError:
    """The 409 :class:`WorkspaceError` for a disk held by another server (or an admin's operation)."""
    if holder.kind == OPERATION_KIND:
        return WorkspaceError(
            f"Your disk {disk} is being changed ({holder.describe()}); please try again in a few minutes. Nothing was started.",
            reason="disk-attached",
            status_code=409,
        )
    doing = "is starting on it" if why == "starting" else "is using it"
    return WorkspaceError(
        f"Your disk {disk} can be used by one server at a time, and your {holder.describe()} {doing}. "
        f"Stop {holder.server} first, then start this one. Nothing was started.",
        reason="disk-attached",
        status_code=409,
    )


def already_held(current: Holder | None, me: Holder, *, grace: float) -> bool:
    """Whether ``current`` is ``me``'s own claim (same server, compute kind and name), taken less than ``grace / 2``
    seconds before ``me.since``: the disk was made with it (:func:`claim_annotation`), or the claim was just
    written. Writing it again would only move ``since``; the half of ``grace`` left is the time this start has to
    create its compute before another server could count the claim stale."""
    return (
        current is not None and me.since is not None and current.since is not None
        and (current.server, current.kind, current.name) == (me.server, me.kind, me.name)
        and (me.since - current.since).total_seconds() < grace / 2
    )


def claim_annotation(ref: WorkspaceRef, now: datetime) -> dict[str, str]:
    """The annotation of ``ref``'s claim at ``now``, for a disk made for this start (claimed as it is created)."""
    return {names.ATTACH_ANNOTATION: me_of(ref, now).to_json()}


def me_of(ref: WorkspaceRef, now: datetime | None = None) -> Holder:
    """The holder a start of ``ref`` writes: its server, and its VMI (a VM) or Pod."""
    if ref.is_vm:
        return Holder(ref.label(), VMI.kind, ref.vm or "", now)
    return Holder(ref.label(), POD.kind, ref.pod or "", now)


async def compute_alive(kube, namespace: str, user_name: str, holder: Holder) -> bool:
    """Whether the holder's Pod or VMI exists and has not finished (terminating counts as alive: it may still hold the disk).

    Found by ``user_name``'s owner labels and then by name (a ``list``, as
    the fence reads: the hub's Role has no ``get`` on Pods).
    """
    if not holder.name or holder.kind == OPERATION_KIND:
        return False
    kind = VMI if holder.kind == VMI.kind else POD
    for obj in await kube.list(kind, namespace, labels=names.owner_selector(user_name)):
        if obj["metadata"]["name"] == holder.name and (obj.get("status") or {}).get("phase") not in FINISHED_PHASES:
            return True
    return False


async def claim(kube, ref: WorkspaceRef, *, grace: float, now=utcnow) -> list[str]:
    """Take the attach claim on every disk of ``ref`` that exists; returns the names claimed.

    ``grace``: seconds a claim without compute counts as a start under way.
    Raises a 409 :class:`WorkspaceError` (``disk-attached``) when another
    server holds one; what was claimed before is released then.
    :class:`~workspacespawner.k8s.api.NotOurs` when a disk is not the user's.
    """
    taken: list[str] = []
    try:
        for kind, name in ref.disks():
            if await _claim_one(kube, kind, ref, name, grace=grace, now=now):
                taken.append(name)
    except BaseException:
        await release(kube, ref, only=taken)
        raise
    return taken


async def _claim_one(kube, kind, ref: WorkspaceRef, name: str, *, grace: float, now) -> bool:
    for attempt in range(ATTEMPTS):
        disk = await kube.get(kind, ref.namespace, name, fresh=attempt > 0)  # the cache first; after a 422, the API
        if disk is None:
            # not made yet: nothing can mount it before it exists. A disk this start makes is made with its claim
            # (claim_annotation), so one the cache does not show yet is claimed all the same.
            return False
        current = holder_of(disk)
        me = me_of(ref, now())
        alive = current is not None and current.server != me.server and await compute_alive(kube, ref.namespace, ref.user_name, current)
        verdict = decide(current, me, holder_alive=alive, now=me.since, grace=grace)
        if not verdict.take:
            raise refusal(name, current, verdict.why)
        if verdict.why == "ours" and already_held(current, me, grace=grace):
            return True
        if verdict.why == "stale":
            log.warning("Taking over the stale attach claim of %s on %s %s for %s", current.describe(), kind.kind, name, me.server)
        try:
            if await kube.patch_owned(kind, ref.namespace, name, ref.user_name, _claim_operations(disk, me)) is None:
                return False
            return True
        except NotOurs:
            if not names.labelled_for(disk["metadata"], ref.user_name):
                raise
            continue  # written meanwhile (another start, a phase move): read again, decide again
    raise WorkspaceError(
        f"Your disk {name} kept changing while this start tried to claim it; please try again.", reason="disk-attached", status_code=409
    )


async def release(kube, ref: WorkspaceRef, *, only: list[str] | None = None) -> list[str]:
    """Remove this server's claim from the disks of ``ref`` (those in ``only``, when given); returns the names released.

    Only a claim that is still exactly ours is removed (a ``test`` of its
    value): one taken over meanwhile stays. Never raises for a disk that is
    gone or changed; other API errors propagate.
    """
    released = []
    server = me_of(ref).server
    for kind, name in ref.disks():
        if only is not None and name not in only:
            continue
        if await let_go(kube, kind, ref.namespace, ref.user_name, name, server):
            released.append(name)
    return released


async def hold(kube, kind, namespace: str, user_name: str, disk: dict, holder: Holder) -> dict:
    """Write ``holder``'s claim on ``disk`` (as read: a JSON Patch testing its ``resourceVersion``); returns the disk.

    For an admin's operation (:func:`operation_holder`), after it decided
    from ``disk`` that no start holds it. A write meanwhile that left the
    claim and the lifecycle annotations as read (a controller's: CDI's
    progress on a cloning DataVolume, a PVC's binding) is read again and the
    claim written on it, up to :data:`ATTEMPTS` times. Raises
    :class:`~workspacespawner.k8s.api.NotOurs` when a start claimed the disk
    or moved its phase meanwhile, when it kept changing, or when it is not
    ``user_name``'s; ``ValueError`` when it is gone.
    """
    name = disk["metadata"]["name"]
    gone = f"{kind.kind} {namespace}/{name} is gone"
    decided_on = _start_marks(disk)
    for _ in range(ATTEMPTS):
        try:
            found = await kube.patch_owned(kind, namespace, name, user_name, _claim_operations(disk, holder))
        except NotOurs:
            disk = await kube.get(kind, namespace, name, fresh=True)
            if disk is None:
                raise ValueError(gone) from None
            if not names.labelled_for(disk["metadata"], user_name) or _start_marks(disk) != decided_on:
                raise
            continue
        if found is None:
            raise ValueError(gone)
        return found
    raise NotOurs(f"{kind.kind} {namespace}/{name} kept changing while {holder.server} tried to claim it")


def _claim_operations(disk: dict, holder: Holder) -> list[dict]:
    """The JSON Patch that writes ``holder``'s claim on ``disk`` only while it is the version read (its ``resourceVersion``)."""
    return [
        {"op": "test", "path": pointer("metadata", "resourceVersion"), "value": disk["metadata"]["resourceVersion"]},
        {"op": "add", "path": _PATH, "value": holder.to_json()},
    ]


def _start_marks(disk: dict) -> tuple[str | None, str | None]:
    """What a start writes on a disk: its attach claim and lifecycle annotations (as JSON text, or None)."""
    annotations = disk["metadata"].get("annotations") or {}
    return annotations.get(names.ATTACH_ANNOTATION), annotations.get(names.LIFECYCLE_ANNOTATION)


async def let_go(kube, kind, namespace: str, user_name: str, name: str, server: str, *, fresh: bool = False) -> bool:
    """Remove the claim of ``server`` (a :attr:`Holder.server`) from disk ``name``, only while it is still exactly
    that claim; True when removed. A disk gone, unclaimed, claimed by another, or changed meanwhile: False.
    ``fresh``: read the disk from the API server (see :meth:`~workspacespawner.k8s.api.Kube.get`)."""
    disk = await kube.get(kind, namespace, name, fresh=fresh)
    current = holder_of(disk)
    if current is None or current.server != server:
        return False
    value = disk["metadata"]["annotations"][names.ATTACH_ANNOTATION]
    try:
        return bool(await kube.patch_owned(kind, namespace, name, user_name, [{"op": "test", "path": _PATH, "value": value}, {"op": "remove", "path": _PATH}]))
    except NotOurs:
        log.info("The attach claim on %s %s changed meanwhile; leaving it", kind.kind, name)
        return False
