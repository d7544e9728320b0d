"""Give a stopped VM workspace a new root disk, from a golden image or a snapshot; the old one retained, the home untouched.

:func:`rebuild` clones the new disk from a golden image (a DataSource);
:func:`restore_root_disk` restores it from a VolumeSnapshot of one of the
workspace's root disks (CDI's ``spec.source.snapshot``), which records the
VirtualMachine it belongs to (:data:`~.names.ROOT_SLOT_ANNOTATION`). Both find
the user's VirtualMachine (for a rebuild by server: owner labels and the
template's ``hub.jupyter.org/servername`` annotation, never a name pattern)
and its root DataVolume (the one the VM names,
:func:`~.rootdisk.root_disk_of`), then swap it in the same named, idempotent
steps:

1. refuses unless the workspace is stopped: no VMI, no Pod or VMI using the
   disk, no attach claim younger than the grace (a start under way), and
   the VM and disk recorded ``Stopped`` (or never recorded);
2. takes the workspace: its own attach claim on the old disk
   (:func:`~workspacespawner.lifecycle.attach.operation_holder`), written with a test of the disk's
   ``resourceVersion`` as read in step 1;
3. creates the new root DataVolume (:func:`~.rootdisk.make_rebuilt_datavolume`,
   named ``<vm>-root-<time>``), ``ProvisioningDisk``, made with the same claim;
4. points the VM at it (a JSON Patch testing the VM's ``resourceVersion``
   and the disk it named);
5. moves the old disk ``Stopped -> Retained`` until ``now + retention_days``
   (audited ``retain``), the new one to ``Stopped``, and drops both claims.

**Why the attach claim, not only the lifecycle compare-and-swap.** The
restore swaps a home with one compare-and-swap on one object; a rebuild
writes three (new disk, VM, old disk) and a start reads the VM to learn
which disk to claim. A compare-and-swap on the old disk alone would let a
start that read the VM before step 4 claim the old disk after step 2 and
boot whichever disk the VM names when it asks KubeVirt. The claim is what
a start itself takes before any compute exists and what it refuses to
override while young (:func:`~workspacespawner.lifecycle.attach.decide`): held on both disks from
step 2 to step 5, no start can use either; one lost with a crashed process
goes stale after the grace, as a start's does.

**Crash safety.** The VM always names exactly one existing disk, so the
workspace starts after a crash at any step (once a left claim is stale).
A rerun finishes the job: a VM naming a rebuilt disk whose predecessor
(:data:`~.names.REBUILT_FROM_ANNOTATION`) is not yet retained finishes
step 5 (``resumed``); a new disk made before the crash and not yet named
by the VM is reused for the same image (else retained, never deleted).

Every run leaves an audit record ``rebuild`` (a restore: ``restore``; before
and after: ``root_disk`` and ``image``, and a restore's ``snapshot``; result
``ok``, ``ok: resumed``, ``refused: ...``, ``error: ...``), besides the
lifecycle's own ``retain``.

API followed: ``kubevirt.io/v1`` VirtualMachines and VMIs,
``cdi.kubevirt.io/v1beta1`` DataVolumes and DataSources,
``snapshot.storage.k8s.io/v1`` VolumeSnapshots, core/v1 Pods.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from kubernetes_asyncio.client.rest import ApiException

from workspacespawner.config.goldenimages import cloned_from
from workspacespawner.core import names
from workspacespawner.core.quantities import gib, parse_quantity
from workspacespawner.k8s.api import NotOurs
from workspacespawner.k8s.apistatus import one_line
from workspacespawner.k8s.kinds import DATA_SOURCE, DATA_VOLUME, POD, VIRTUAL_MACHINE, VMI
from workspacespawner.k8s.objects import holders
from workspacespawner.lifecycle import attach, phases
from workspacespawner.lifecycle.disks import PARKED, DiskOpError, DiskOps, phase_of, requested_bytes
from workspacespawner.lifecycle.phases import Phase, Status, WorkspaceRef
from workspacespawner.vmdisk.rootdisk import (
    make_rebuilt_datavolume,
    rebuilt_name,
    repoint_operations,
    root_disk_of,
    vm_of_server,
)

log = logging.getLogger("workspacespawner")

ACTION = "rebuild"
#: The audit action of :func:`restore_root_disk` (a home's restore records the same word).
RESTORE = "restore"


@dataclass(frozen=True)
class Rebuilt:
    """What a rebuild or a restore did: VM ``vm`` now boots from ``new`` (cloned from ``image``, ``namespace/name``,
    or restored from VolumeSnapshot ``snapshot``, a disk descended from it); ``old`` is retained until
    ``retain_until``; ``resumed``: it finished an earlier one that stopped half-way."""

    vm: str
    old: str
    new: str
    image: str
    retain_until: datetime
    resumed: bool = False
    snapshot: str = ""


def _meta(obj: dict | None) -> dict:
    return (obj or {}).get("metadata") or {}


def _annotations(obj: dict | None) -> dict:
    return _meta(obj).get("annotations") or {}


async def find_vm(kube, namespace: str, user: str, server: str = "") -> dict | None:
    """``user``'s VirtualMachine of server ``server`` (:func:`~.rootdisk.vm_of_server`), or None."""
    return vm_of_server(await kube.list(VIRTUAL_MACHINE, namespace, labels=names.owner_selector(user)), user, server)


def _in_use(compute: list[dict], disk: str, vmi: dict | None) -> list[str]:
    using = [f"{o['kind']} {_meta(o)['name']}" for o in holders(compute, disk)]
    if vmi is not None and f"{VMI.kind} {_meta(vmi)['name']}" not in using:
        using.append(f"{VMI.kind} {_meta(vmi)['name']}")
    return using


@dataclass
class _Run:
    """One run of :func:`rebuild`: where it records, and what it read."""

    ops: DiskOps
    user: str
    server: str
    now: datetime
    before: dict
    disk: str = ""
    action: str = ACTION

    async def refuse(self, message: str, reason: str, after: dict | None = None):
        await self.ops.record(self.user, self.disk, self.action, self.before, after or {}, f"refused: {message}", self.server,
                              time=self.now)
        raise DiskOpError(message, reason=reason)

    @property
    def doing(self) -> str:
        return "restoring" if self.action == RESTORE else "rebuilding"

    @property
    def what(self) -> str:
        return f"{self.user}'s server {self.server!r}" if self.server else f"{self.user}'s default server"

    def ref(self, disk: str) -> WorkspaceRef:
        return WorkspaceRef(namespace=self.ops.namespace, user_name=self.user, server_name=self.server, root_disk=disk)


async def rebuild(ops: DiskOps, user: str, *, server: str = "", image: str | None = None, golden_namespace: str = names.GOLDEN_IMAGE_NAMESPACE,
                  limit: int | None = None, grace: float = attach.ATTACH_GRACE_SECONDS, now: datetime | None = None) -> Rebuilt:
    """Give ``user``'s stopped VM workspace ``server`` (``""``: default) a new root disk cloned from a golden image.

    ``ops``: the :class:`~workspacespawner.lifecycle.disks.DiskOps` (cluster, namespace, audit log,
    actor, ``retention_days`` the old disk is kept). ``image``: the name of
    a DataSource in ``golden_namespace`` (None: the image the old disk was
    cloned from). ``limit``: the user's disk limit in bytes (None: none). A
    rebuild is a swap: the new disk counts, the old one it retains does not
    (that copy is the user's safety net until the purge), but retained disks
    of earlier rebuilds and restores do, so copies cannot pile up past the
    limit; a rebuild that would pass it is refused. ``grace``: seconds an attach claim without compute
    counts as a start under way. Returns a :class:`Rebuilt`. Raises
    :class:`~workspacespawner.lifecycle.disks.DiskOpError`: ``not-found`` (no such VM, root disk or
    image), ``in-use`` (running, starting, or changed meanwhile),
    ``over-quota``, ``kubernetes-api``; each leaves an audit record.
    """
    now = now or phases.utcnow()
    run = _Run(ops, user, server, now, {"root_disk": None, "image": None})
    vm = await find_vm(ops.kube, ops.namespace, user, server)
    if vm is None:
        await run.refuse(f"{run.what} has no virtual machine workspace.", "not-found")
    old, mine, resumed = await _begin(run, vm)
    if resumed is not None:
        return resumed
    await _check_stopped(run, vm, old, mine, grace)
    wanted = f"{golden_namespace}/{image}" if image else cloned_from(old)
    after = {"root_disk": None, "image": wanted}
    if wanted is None:
        await run.refuse(f"{_meta(old)['name']} records no golden image it was cloned from; choose one.", "not-found", after)
    image_ns, _, image_name = wanted.partition("/")
    if await ops.kube.get(DATA_SOURCE, image_ns, image_name) is None:
        await run.refuse(f"There is no golden image {wanted} (no DataSource {image_name} in namespace {image_ns}).", "not-found", after)
    return await _replace(run, vm, old, mine, wanted, None, limit)


async def restore_root_disk(ops: DiskOps, user: str, snapshot_name: str, *, limit: int | None = None,
                            grace: float = attach.ATTACH_GRACE_SECONDS, now: datetime | None = None) -> Rebuilt:
    """Give ``user``'s stopped VM workspace a new root disk restored from their VolumeSnapshot ``snapshot_name`` of one
    of its root disks (the VM is the one the snapshot records, :func:`snapshot_root_slot`).

    As :func:`rebuild` (``ops``, ``limit``, ``grace``; the same steps, refusals and retention), audited ``restore``;
    the new disk is no smaller than the snapshot's ``restoreSize``. Also refused: ``not-found`` (no such snapshot
    of ``user``'s, or its VM is gone), ``unsupported`` (not a snapshot of a root disk), ``not-ready`` (the cluster
    has not finished it).
    """
    snap = await ops.owned_snapshot(user, snapshot_name)
    return await restore_root_from(ops, user, snap, await snapshot_root_slot(ops.kube, ops.namespace, user, snap),
                                   limit=limit, grace=grace, now=now)


async def restore_root_from(ops: DiskOps, user: str, snap: dict, slot: tuple[str | None, str | None], *,
                            limit: int | None = None, grace: float = attach.ATTACH_GRACE_SECONDS,
                            now: datetime | None = None) -> Rebuilt:
    """:func:`restore_root_disk` of ``user``'s VolumeSnapshot ``snap`` as read, ``slot`` its
    :func:`snapshot_root_slot`."""
    now = now or phases.utcnow()
    kube, ns = ops.kube, ops.namespace
    snapshot_name = _meta(snap)["name"]
    run = _Run(ops, user, "", now, {"root_disk": None, "image": None}, action=RESTORE)
    run.disk = _snapshot_source(snap)
    vm_name, image = slot
    if vm_name is None:
        await run.refuse(f"Snapshot {snapshot_name} is not of a virtual machine's system disk.", "unsupported")
    vm = await kube.get(VIRTUAL_MACHINE, ns, vm_name)
    if vm is None or not names.owned_by(_meta(vm), user):
        await run.refuse(f"The virtual machine {vm_name} that snapshot {snapshot_name} was taken of is gone.", "not-found")
    template = (((vm.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("annotations") or {}
    run.server = template.get(names.SERVER_ANNOTATION, "")
    old, mine, resumed = await _begin(run, vm)
    if resumed is not None:
        return resumed
    await _check_stopped(run, vm, old, mine, grace)
    wanted = image or cloned_from(old) or ""
    if not (snap.get("status") or {}).get("readyToUse"):
        await run.refuse(f"Snapshot {snapshot_name} is not ready to use yet.", "not-ready", {"root_disk": None, "snapshot": snapshot_name})
    return await _replace(run, vm, old, mine, wanted, snap, limit)


def _snapshot_source(snapshot: dict) -> str:
    """The name of the PVC ``snapshot`` was taken of."""
    return (_annotations(snapshot).get(names.SNAPSHOT_SOURCE_ANNOTATION)
            or ((snapshot.get("spec") or {}).get("source") or {}).get("persistentVolumeClaimName") or "")


async def snapshot_root_slot(kube, namespace: str, user: str, snapshot: dict) -> tuple[str | None, str | None]:
    """The VirtualMachine whose root disk ``user``'s VolumeSnapshot ``snapshot`` was taken of, and the golden image that
    disk descends from (``namespace/name``); ``(None, None)`` for a snapshot of any other disk (a home).

    The snapshot's own :data:`~.names.ROOT_SLOT_ANNOTATION` (written when it was taken,
    :func:`~workspacespawner.lifecycle.disks.make_volume_snapshot`), else, for one taken before it was written, the
    annotations of the DataVolume of the PVC it was taken of, while that DataVolume is kept.
    """
    annotations = _annotations(snapshot)
    if annotations.get(names.HOME_SLOT_ANNOTATION):
        return None, None
    if annotations.get(names.ROOT_SLOT_ANNOTATION):
        return annotations[names.ROOT_SLOT_ANNOTATION], annotations.get(names.GOLDEN_IMAGE_ANNOTATION)
    source = _snapshot_source(snapshot)
    dv = await kube.get(DATA_VOLUME, namespace, source) if source else None
    if dv is None or not names.owned_by(_meta(dv), user) or not _annotations(dv).get(names.ROOT_SLOT_ANNOTATION):
        return None, None
    return _annotations(dv)[names.ROOT_SLOT_ANNOTATION], cloned_from(dv)


async def _begin(run: _Run, vm: dict) -> tuple[dict, attach.Holder, Rebuilt | None]:
    """The VM's root DataVolume and the run's attach claim; refused if the VM names none of the user's. The third item
    is the result when this run finished an earlier one instead (see *Crash safety*)."""
    kube, ns, user = run.ops.kube, run.ops.namespace, run.user
    vm_name, old_name = _meta(vm)["name"], root_disk_of(vm)
    old = await kube.get(DATA_VOLUME, ns, old_name, fresh=True) if old_name else None
    if old is None or not names.owned_by(_meta(old), user):
        await run.refuse(f"The virtual machine {vm_name} of {run.what} boots from no DataVolume of {user}'s ({old_name}).", "not-found")
    run.disk, run.before = old_name, {"root_disk": old_name, "image": cloned_from(old)}
    mine = attach.operation_holder(run.ref(old_name), run.action, run.ops.actor, run.now)
    previous_name = _annotations(old).get(names.REBUILT_FROM_ANNOTATION)
    previous = await kube.get(DATA_VOLUME, ns, previous_name, fresh=True) if previous_name else None
    if previous is not None and names.owned_by(_meta(previous), user) and phase_of(previous) not in PARKED:
        run.disk, run.before = previous_name, {"root_disk": previous_name, "image": cloned_from(previous)}
        return old, mine, await _finish(run, vm_name, previous, old, mine, resumed=True)
    return old, mine, None


async def _replace(run: _Run, vm: dict, old: dict, mine: attach.Holder, wanted: str, snapshot: dict | None,
                   limit: int | None) -> Rebuilt:
    """Steps 2 to 5 for a checked, stopped workspace: a new root disk from golden image ``wanted`` or, if given, from
    ``snapshot`` (descended from ``wanted``), within the disk ``limit``."""
    ops, user, now = run.ops, run.user, run.now
    kube, ns = ops.kube, ops.namespace
    vm_name, old_name = _meta(vm)["name"], _meta(old)["name"]
    restored_from = _meta(snapshot)["name"] if snapshot is not None else None
    after = {"root_disk": None, "image": wanted, **({"snapshot": restored_from} if snapshot is not None else {})}
    leftovers = [dv for dv in await kube.list(DATA_VOLUME, ns, labels=names.owner_selector(user))
                 if names.owned_by(_meta(dv), user) and _annotations(dv).get(names.REBUILT_FROM_ANNOTATION) == old_name
                 and _annotations(dv).get(names.ROOT_SLOT_ANNOTATION) == vm_name and phase_of(dv) not in PARKED]
    reuse = next((dv for dv in leftovers if cloned_from(dv) == wanted and phase_of(dv) == Phase.PROVISIONING_DISK
                  and _annotations(dv).get(names.RESTORED_FROM_ANNOTATION) == restored_from), None)
    if limit is not None and reuse is None:
        restore_size = ((snapshot or {}).get("status") or {}).get("restoreSize")
        others = await ops.usage(user, exclude=old_name)
        size = max(requested_bytes(old), int(parse_quantity(restore_size)) if restore_size else 0)
        if others + size > limit:
            parked = await ops.usage(user, parked=True)
            way_out = (f"{gib(parked)} of it in retained disks; give back a retained disk first" if parked else
                       f"so it needs a disk quota of {gib(others + size)}; ask the administrators for one")
            await run.refuse(f"A new system disk of {gib(size)} would take {user}'s disks past their {gib(limit)}: "
                             f"besides the system disk it replaces, they hold {gib(others)}, {way_out}.", "over-quota", after)

    if phase_of(old) is None:  # made before the lifecycle: record it first, so the retain below can test it
        await phases.move(kube, run.ref(old_name), Status(Phase.STOPPED), Phase.STOPPED, observed=True, actor=ops.actor, now=now)
        old = await kube.get(DATA_VOLUME, ns, old_name, fresh=True) or old
    try:
        old = await attach.hold(kube, DATA_VOLUME, ns, user, old, mine)
    except (NotOurs, ValueError):
        await run.refuse(f"{old_name} changed while {run.doing} (the workspace started?); nothing was changed.", "in-use", after)
    retain_until = now + timedelta(days=ops.retention_days)
    for dv in leftovers:
        if dv is not reuse and _meta(dv)["name"] != old_name:
            await _retain(run, dv, retain_until)
    try:
        new = reuse or await _create_disk(run, old, vm_name, wanted, snapshot, mine)
    except ApiException as e:
        await attach.let_go(kube, DATA_VOLUME, ns, user, old_name, mine.server, fresh=True)
        await ops.record(user, old_name, run.action, run.before, after, f"error: {e.status} {e.reason}", run.server, time=now)
        raise DiskOpError(f"The cluster refused the new system disk: {one_line(e)}.", reason="kubernetes-api") from e
    new_name = _meta(new)["name"]
    if reuse is not None:
        await attach.hold(kube, DATA_VOLUME, ns, user, await kube.get(DATA_VOLUME, ns, new_name, fresh=True), mine)
    vm = await kube.get(VIRTUAL_MACHINE, ns, vm_name, fresh=True)
    try:
        if vm is None or root_disk_of(vm) != old_name:
            raise NotOurs(f"VirtualMachine {vm_name} changed")
        await kube.patch_owned(VIRTUAL_MACHINE, ns, vm_name, user, repoint_operations(vm, new_name))
    except ApiException as e:  # the new disk stays ProvisioningDisk: a rerun reuses it
        for name in (old_name, new_name):
            await attach.let_go(kube, DATA_VOLUME, ns, user, name, mine.server, fresh=True)
        await ops.record(user, old_name, run.action, run.before, {**after, "root_disk": new_name}, f"error: {e.status} {e.reason}",
                         run.server, time=now)
        raise DiskOpError(f"The cluster refused to point {vm_name} at {new_name}: {one_line(e)}; it still boots from {old_name}.",
                          reason="kubernetes-api") from e
    except NotOurs:
        await _retain(run, await kube.get(DATA_VOLUME, ns, new_name, fresh=True), retain_until)
        for name in (old_name, new_name):
            await attach.let_go(kube, DATA_VOLUME, ns, user, name, mine.server, fresh=True)
        await run.refuse(f"The virtual machine {vm_name} changed while {run.doing} (it started?); it still boots from {old_name}, "
                         f"and {new_name} is retained.", "in-use", {**after, "root_disk": new_name})
    return await _finish(run, vm_name, old, new, mine)


#: How many names a new disk tries: :func:`~.rootdisk.rebuilt_name`, then ``-2``, ``-3``... (swaps in one second).
NAME_TRIES = 5


async def _create_disk(run: _Run, old: dict, vm_name: str, wanted: str, snapshot: dict | None, mine: attach.Holder) -> dict:
    """Create the new root DataVolume (step 3) under :func:`~.rootdisk.rebuilt_name`, or that name with ``-2``,
    ``-3``... when an earlier swap in the same second took it; raises the API's last error."""
    base = rebuilt_name(vm_name, run.now)
    tries = [base, *(f"{base}-{n}" for n in range(2, NAME_TRIES + 1))]

    async def create(name: str) -> dict:
        return await run.ops.kube.create(DATA_VOLUME, run.ops.namespace, make_rebuilt_datavolume(
            name=name, old=old, vm_name=vm_name, image=wanted, snapshot=snapshot,
            status=Status(Phase.PROVISIONING_DISK, since=run.now, server=run.server),
            annotations={names.ATTACH_ANNOTATION: mine.to_json()}))

    for name in tries[:-1]:
        try:
            return await create(name)
        except ApiException as e:
            if e.status != 409:  # 409 on a create: the name is taken
                raise
    return await create(tries[-1])


async def _check_stopped(run: _Run, vm: dict, old: dict, mine: attach.Holder, grace: float) -> None:
    """Refuse (``in-use``) unless the workspace is stopped (see :func:`rebuild`, step 1)."""
    kube, ns, old_name = run.ops.kube, run.ops.namespace, _meta(old)["name"]
    vmi = await kube.get(VMI, ns, _meta(vm)["name"], fresh=True)
    compute = await kube.list(POD, ns) + await kube.list(VMI, ns)
    using = _in_use(compute, old_name, vmi)
    if using:
        await run.refuse(f"The workspace is running ({', '.join(using)}); stop it first.", "in-use")
    for obj in (vm, old):
        if phase_of(obj) not in (None, str(Phase.STOPPED)):
            await run.refuse(f"{obj['kind']} {_meta(obj)['name']} is {phase_of(obj)}, not Stopped; a {run.action} needs a stopped workspace.", "in-use")
    claim = attach.holder_of(old)
    if attach.recent(claim, run.now, grace) and claim.server != mine.server:
        await run.refuse(f"{old_name} is claimed by {claim.describe()}, which is starting; stop the workspace first.", "in-use")


async def _retain(run: _Run, dv: dict | None, retain_until: datetime) -> None:
    """Park DataVolume ``dv`` (a disk a rebuild made and did not use): ``Retained`` until ``retain_until`` (audited)."""
    if dv is None:
        return
    current = Status.from_object(dv) or Status(Phase.PROVISIONING_DISK)
    await phases.move(run.ops.kube, run.ref(_meta(dv)["name"]), current, Phase.RETAINED, retain_until=retain_until,
                         audit=run.ops.audit, actor=run.ops.actor, now=run.now)


async def _finish(run: _Run, vm_name: str, old: dict, new: dict, mine: attach.Holder, *, resumed: bool = False) -> Rebuilt:
    """Step 5: the VM names ``new``; retain ``old``, record ``new`` Stopped, drop the claims, write the record."""
    ops, ns, user = run.ops, run.ops.namespace, run.user
    old_name, new_name = _meta(old)["name"], _meta(new)["name"]
    restored_from = _annotations(new).get(names.RESTORED_FROM_ANNOTATION)
    after = {"root_disk": new_name, "image": cloned_from(new), **({"snapshot": restored_from} if restored_from else {})}
    retain_until = run.now + timedelta(days=ops.retention_days)
    compute = await ops.kube.list(POD, ns) + await ops.kube.list(VMI, ns)
    if holders(compute, old_name):
        await run.refuse(f"{old_name} is still in use; it is retained once nothing uses it (run the {run.action} again).", "in-use", after)
    try:
        await phases.move(ops.kube, run.ref(old_name), Status.from_object(old) or Status(Phase.STOPPED), Phase.RETAINED,
                             expect=Phase.STOPPED, retain_until=retain_until, audit=ops.audit, actor=ops.actor, now=run.now,
                             reason=phases.REPLACED)
    except NotOurs:
        await run.refuse(f"{old_name} changed meanwhile; run the {run.action} again to finish.", "in-use", after)
    provisioning = Status.from_object(new)
    if provisioning is not None and provisioning.phase == Phase.PROVISIONING_DISK:
        await phases.move(ops.kube, run.ref(new_name), provisioning, Phase.STOPPED, actor=ops.actor, now=run.now)
    for name in (old_name, new_name):
        await attach.let_go(ops.kube, DATA_VOLUME, ns, user, name, mine.server, fresh=True)
    await ops.record(user, old_name, run.action, run.before, after, "ok: resumed" if resumed else "ok", run.server, time=run.now)
    log.info("%s the root disk of %s/%s: %s -> %s (%s)%s", "Restored" if restored_from else "Rebuilt", ns, vm_name, old_name,
             new_name, ops.actor, " (resumed)" if resumed else "")
    return Rebuilt(vm=vm_name, old=old_name, new=new_name, image=after["image"] or "", retain_until=retain_until, resumed=resumed,
                   snapshot=restored_from or "")
