"""Disk operations, each audited: expand, snapshot, restore, list; and which PVC is a workspace's home.

API followed: core/v1 PersistentVolumeClaim (``spec.resources.requests.storage``
grown in place: ceph-csi RBD expands online; ``spec.dataSource`` of kind
``VolumeSnapshot`` for a restore) and ``snapshot.storage.k8s.io/v1``
VolumeSnapshot (``spec.source.persistentVolumeClaimName``,
``spec.volumeSnapshotClassName``; ``status.readyToUse``,
``status.restoreSize``).

**Which PVC is the home.** A home PVC carries the name its workspace's
template gives (its *slot*, annotation :data:`~.names.HOME_SLOT_ANNOTATION`;
a PVC without it is its own slot). A restore makes a new PVC for the same
slot and retains the old one, so a workspace finds its home by owner label
and slot (:func:`choose_home`), never by name pattern.

**Limits.** An expand is refused when it would shrink the disk (Kubernetes
cannot) or take the user's disks together past their limit (the quota's
``max_disk``, else ``WorkspaceSpawner.disk_limit``); the limit is bytes, or
None for none. A refusal says its sizes in the unit of the size asked for
(``--size 1Mi``: ``holds 3072Mi (3 GiB)``). Every operation, refused ones included, leaves an audit
record (:mod:`.audit`): ``expand`` (before/after size), ``snapshot``,
``restore`` (old and new PVC, the snapshot). A restore swaps disks only
while nothing uses the home (no Pod or VMI) and its phase is ``Stopped``.

Sizes are bytes (ints) or Kubernetes quantities (``"100Gi"``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from kubernetes_asyncio.client.rest import ApiException

from workspacespawner.core import names
from workspacespawner.core.quantities import gib, in_unit_of, parse_quantity
from workspacespawner.core.times import EPOCH, parse_time
from workspacespawner.k8s.api import NotOurs
from workspacespawner.k8s.apistatus import one_line
from workspacespawner.k8s.kinds import DATA_VOLUME, POD, PVC, VMI, VOLUME_SNAPSHOT
from workspacespawner.k8s.objects import holders, pointer, terminating
from workspacespawner.lifecycle import phases
from workspacespawner.lifecycle.attach import ATTACH_GRACE_SECONDS, holder_of, recent
from workspacespawner.lifecycle.phases import SYSTEM, Phase, Status, WorkspaceRef

log = logging.getLogger("workspacespawner")

#: Phases of a disk that no workspace uses any more (kept for the purge).
PARKED = (str(Phase.RETAINED), str(Phase.DELETING_DISK))


class DiskOpError(Exception):
    """A disk operation refused or failed; ``reason``: ``not-found``, ``shrink``, ``over-quota``, ``in-use``, ``not-ready``,
    ``unsupported``, ``kubernetes-api``; a publish (:mod:`workspacespawner.vmdisk.publish`) also ``bad-name``, ``name-taken``."""

    def __init__(self, message: str, *, reason: str):
        super().__init__(message)
        self.reason = reason


# -- pure helpers ---------------------------------------------------------------------------------


def _meta(obj: dict) -> dict:
    return obj.get("metadata") or {}


def phase_of(obj: dict) -> str | None:
    """The lifecycle phase label of a disk (None: never recorded)."""
    return (_meta(obj).get("labels") or {}).get(names.PHASE_LABEL)


def slot_of(pvc: dict) -> str:
    """The home slot of a PVC: its slot annotation, else its own name."""
    return (_meta(pvc).get("annotations") or {}).get(names.HOME_SLOT_ANNOTATION) or _meta(pvc)["name"]


def requested_storage(obj: dict) -> str | None:
    """The storage a PVC (``spec.resources``) or DataVolume (``spec.storage``/``spec.pvc``) asks for, as written
    (``"40Gi"``), or None if unset."""
    spec = obj.get("spec") or {}
    holder = spec.get("storage") or spec.get("pvc") or spec
    return ((holder.get("resources") or {}).get("requests") or {}).get("storage")


def requested_bytes(obj: dict) -> int:
    """:func:`requested_storage` in bytes (0 if unset)."""
    size = requested_storage(obj)
    return int(parse_quantity(size)) if size else 0


def _since(obj: dict) -> datetime:
    status = Status.from_object(obj)
    return (status.since if status else None) or parse_time(_meta(obj).get("creationTimestamp")) or EPOCH


def _created(obj: dict) -> datetime:
    return parse_time(_meta(obj).get("creationTimestamp")) or EPOCH


def choose_home(pvcs: list[dict], user_name: str, slot: str) -> dict | None:
    """The PVC that is ``user_name``'s home for ``slot`` among ``pvcs`` (pure), or None.

    Only ``user_name``'s own PVCs of that slot count. A PVC in use or at
    rest wins (the newest, preferring one not still ``ProvisioningDisk``, as
    a restore leaves it until the swap is done); without one, the most
    recently retained (what a deleted user gets back); ``DeletingDisk``
    never.
    """
    mine = [p for p in pvcs if names.owned_by(_meta(p), user_name) and slot_of(p) == slot]
    active = [p for p in mine if phase_of(p) not in PARKED]
    if active:
        return max(active, key=lambda p: (phase_of(p) != str(Phase.PROVISIONING_DISK), _created(p)))
    retained = [p for p in mine if phase_of(p) == str(Phase.RETAINED)]
    return max(retained, key=_since) if retained else None


def is_home_disk(pvc: dict) -> bool:
    """Whether a PVC is a home disk: its disk label says ``home``, or it has no disk label (made by hand with owner labels)."""
    return (_meta(pvc).get("labels") or {}).get(names.DISK_LABEL, names.HOME_DISK) == names.HOME_DISK


def serves_server(pvc: dict, server: str) -> bool:
    """Whether a home PVC last served JupyterHub server ``server`` (``""``: the default; a PVC with no phase record serves it)."""
    status = Status.from_object(pvc)
    return (status.server if status else "") == server


def home_candidates(pvcs: list[dict], user_name: str, slot: str, *, server: str | None) -> list[dict]:
    """``user_name``'s homes that could serve ``slot`` (pure): the one of that slot, else one per other slot.

    Homes are found by owner (:func:`~.names.owned_by`) and slot, never by
    name alone: a home of ``slot`` itself is the only candidate
    (:func:`choose_home`). Without one, the user's homes of other slots (a
    template changed since they were made, or a PVC an admin made with the
    user's owner labels under another name) are candidates, one per slot,
    when they last served ``server`` (None: any server, for a template
    shared by all of a user's servers). A caller refuses two or more;
    ``[]``: a new home is made for ``slot``.
    """
    own = [p for p in pvcs if names.owned_by(_meta(p), user_name) and is_home_disk(p)]
    found = choose_home(own, user_name, slot)
    if found is not None:
        return [found]
    others = {slot_of(p) for p in own if server is None or serves_server(p, server)}
    chosen = (choose_home(own, user_name, other) for other in sorted(others))
    return [p for p in chosen if p is not None]


def _size(nbytes: int, given: str) -> str:
    """Bytes in the unit of the size the admin or profile gave, with GiB after it unless that unit is Gi."""
    text = in_unit_of(nbytes, given)
    return text if text.endswith("Gi") else f"{text} ({gib(nbytes)})"


def check_expand(current: int, wanted: int, others: int, limit: int | None) -> str | None:
    """Why growing a disk from ``current`` to ``wanted`` bytes is refused (``shrink``, ``over-quota``), or None.

    ``others``: bytes the user's other disks hold; ``limit``: the user's
    total in bytes (None: no limit).
    """
    if wanted < current:
        return "shrink"
    if limit is not None and wanted > current and others + wanted > limit:
        return "over-quota"
    return None


def user_disk_bytes(pvcs: list[dict], datavolumes: list[dict], user_name: str) -> dict[str, int]:
    """``{name: bytes}`` of every disk of ``user_name`` (PVCs, and DataVolumes without a PVC of theirs listed)."""
    sizes = {_meta(p)["name"]: requested_bytes(p) for p in pvcs if names.owned_by(_meta(p), user_name)}
    for dv in datavolumes:
        if names.owned_by(_meta(dv), user_name):
            sizes.setdefault(_meta(dv)["name"], requested_bytes(dv))
    return sizes


async def user_disks(kube, namespace: str, user_name: str) -> tuple[list[dict], list[dict]]:
    """``(PVCs, DataVolumes)`` of ``user_name`` in ``namespace``, by owner (:func:`~.names.owned_by`).

    PVCs come from the PVC watch (one LIST when it is down); DataVolumes only
    as a live DataVolume watch holds them (``kube.cached``), never by an API
    call: a hub that shows no VM profile runs no such watch. A root disk's
    PVC is CDI's (``managed-by: cdi-controller``), so its DataVolume is what
    counts it; :func:`user_disk_bytes` takes both.
    """
    labels = names.owner_selector(user_name)
    pvcs = [p for p in await kube.list(PVC, namespace, labels=labels) if names.owned_by(_meta(p), user_name)]
    dvs = [d for d in kube.cached(DATA_VOLUME, namespace, labels=labels) or () if names.owned_by(_meta(d), user_name)]
    return pvcs, dvs


def disk_limit(quota_settings, user_name: str, groups, fallback: str | None) -> int | None:
    """The most disk ``user_name`` may hold, in bytes (None: no limit).

    ``quota_settings``: the hub's :class:`~.quota.config.WorkspaceQuota`;
    when it is enabled its ``max_disk`` for the user in ``groups`` (names)
    applies, else ``fallback`` (``WorkspaceSpawner.disk_limit``, a quantity
    or None).
    """
    if quota_settings is not None and quota_settings.enabled:
        limit = quota_settings.limits_for(user_name, groups or ()).max_disk
    else:
        limit = fallback
    return None if limit is None else int(parse_quantity(limit))


def make_volume_snapshot(*, name: str, source: dict, user_name: str, snapshot_class: str | None,
                         datavolume: dict | None = None) -> dict:
    """A ``snapshot.storage.k8s.io/v1`` VolumeSnapshot of the PVC ``source`` for ``user_name`` (plain dict).

    Labelled with the owner's and the source's disk role; annotated with the
    source PVC and where a restore puts it back: for a home, its slot; for a
    VM's root disk (``datavolume``, the source's DataVolume), the VM it is
    the root disk of and the golden image it descends from.
    """
    meta = _meta(source)
    labels = names.owner_labels(user_name)
    role = (meta.get("labels") or {}).get(names.DISK_LABEL)
    if role:
        labels[names.DISK_LABEL] = role
    annotations = {**names.owner_annotations(user_name), names.SNAPSHOT_SOURCE_ANNOTATION: meta["name"]}
    if role == names.HOME_DISK:
        annotations[names.HOME_SLOT_ANNOTATION] = slot_of(source)
    root = (_meta(datavolume) if datavolume else {}).get("annotations") or {}
    if role != names.HOME_DISK and root.get(names.ROOT_SLOT_ANNOTATION):
        labels[names.DISK_LABEL] = names.ROOT_DISK
        for key in (names.ROOT_SLOT_ANNOTATION, names.GOLDEN_IMAGE_ANNOTATION):
            if root.get(key):
                annotations[key] = root[key]
    spec: dict = {"source": {"persistentVolumeClaimName": meta["name"]}}
    if snapshot_class:
        spec["volumeSnapshotClassName"] = snapshot_class
    return {
        "apiVersion": VOLUME_SNAPSHOT.api_version,
        "kind": "VolumeSnapshot",
        "metadata": {"name": name, "namespace": meta["namespace"], "labels": labels, "annotations": annotations},
        "spec": spec,
    }


def make_restored_pvc(*, name: str, old: dict, snapshot: dict, status: Status) -> dict:
    """A home PVC ``name`` like ``old`` (class, access modes, labels, slot), filled from ``snapshot``, recorded in ``status``.

    Its size is the larger of the old request and the snapshot's
    ``restoreSize`` (a restore may not be smaller than its source).
    """
    meta, spec = _meta(old), old.get("spec") or {}
    restore_size = (snapshot.get("status") or {}).get("restoreSize")
    size = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
    if restore_size and int(parse_quantity(restore_size)) > requested_bytes(old):
        size = restore_size
    labels = dict(meta.get("labels") or {})
    annotations = {
        names.OWNER_ANNOTATION: (meta.get("annotations") or {})[names.OWNER_ANNOTATION],
        names.HOME_SLOT_ANNOTATION: slot_of(old),
        names.RESTORED_FROM_ANNOTATION: _meta(snapshot)["name"],
    }
    new_spec = {
        "accessModes": list(spec.get("accessModes") or ["ReadWriteOnce"]),
        "resources": {"requests": {"storage": size}},
        "dataSource": {"apiGroup": VOLUME_SNAPSHOT.group, "kind": "VolumeSnapshot", "name": _meta(snapshot)["name"]},
    }
    for key in ("storageClassName", "volumeMode"):
        if spec.get(key):
            new_spec[key] = spec[key]
    return phases.made_in({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": meta["namespace"], "labels": labels, "annotations": annotations},
        "spec": new_spec,
    }, status)


def restored_name(slot: str, now: datetime) -> str:
    """The name of a home restored into ``slot`` at ``now``: ``<slot>-r<YYYYmmddHHMMSS>`` (a valid PVC name)."""
    return names.dns_label(f"{slot[:40]}-r{now:%Y%m%d%H%M%S}")


# -- the operations -------------------------------------------------------------------------------


@dataclass
class DiskOps:
    """Disk operations on the cluster of ``kube`` (a :class:`~.kube.Kube`) in ``namespace``, audited in ``audit`` by ``actor``.

    ``audit``: an :class:`~.audit.AuditLog` (None: no records, tests only).
    ``snapshot_class``: the VolumeSnapshotClass (None: the cluster's
    default). ``retention_days``: how long a disk replaced by a restore is
    retained.
    """

    kube: object
    namespace: str
    audit: object = None
    actor: str = SYSTEM
    snapshot_class: str | None = None
    retention_days: float = 30.0

    async def record(self, user: str, disk: str, action: str, before, after, result: str, server: str = "", time=None) -> None:
        """One audit record of ``action`` on ``user``'s ``disk`` by this actor (nothing without an audit log)."""
        if self.audit is not None:
            await self.audit.arecord(
                actor=self.actor, user=user, server=server, namespace=self.namespace, disk=disk,
                action=action, before=before, after=after, result=result, time=time,
            )

    async def _owned_pvc(self, user: str, name: str) -> dict:
        """``user``'s PVC ``name``: a home (its owner labels), or the PVC CDI made for their DataVolume of that name (a
        root disk's; CDI labels it ``managed-by: cdi-controller``, so a cache of ours lacks it and the API answers)."""
        pvc = await self.kube.get(PVC, self.namespace, name)
        if pvc is not None and names.owned_by(_meta(pvc), user):
            return pvc
        dv = await self.kube.get(DATA_VOLUME, self.namespace, name)
        if pvc is None and dv is not None:
            pvc = await self.kube.get(PVC, self.namespace, name, fresh=True)
        if pvc is None:
            raise DiskOpError(f"There is no PVC {self.namespace}/{name}.", reason="not-found")
        if dv is None or not names.owned_by(_meta(dv), user):
            raise DiskOpError(f"PVC {self.namespace}/{name} is not a disk of {user!r} (owner labels differ).", reason="not-found")
        return pvc

    async def disks_of(self, user: str) -> list[dict]:
        """``user``'s home PVCs (by owner label), newest first."""
        pvcs = await self.kube.list(PVC, self.namespace, labels=names.owner_selector(user))
        return sorted((p for p in pvcs if names.owned_by(_meta(p), user)), key=_created, reverse=True)

    async def home_of(self, user: str, slot: str | None = None) -> dict:
        """The PVC of ``user``'s home for ``slot`` (default: the only home slot they have); DiskOpError if none or ambiguous."""
        pvcs = await self.kube.list(PVC, self.namespace, labels=f"{names.owner_selector(user)},{names.DISK_LABEL}={names.HOME_DISK}")
        slots = sorted({slot_of(p) for p in pvcs if names.owned_by(_meta(p), user)})
        if slot is None:
            if len(slots) != 1:
                raise DiskOpError(
                    f"{user!r} has {'no home disk' if not slots else 'several home disks: ' + ', '.join(slots) + '; name one (--pvc)'}.",
                    reason="not-found",
                )
            slot = slots[0]
        home = choose_home(pvcs, user, slot)
        if home is None:
            raise DiskOpError(f"{user!r} has no home disk {slot!r}.", reason="not-found")
        return home

    async def usage(self, user: str, exclude: str = "", *, parked: bool = False) -> int:
        """Bytes all of ``user``'s disks (PVCs, DataVolumes; retained ones too) ask for, but ``exclude`` (a name);
        ``parked``: only the disks in a parked phase (Retained, DeletingDisk), which giving back would free."""
        pvcs = await self.kube.list(PVC, self.namespace, labels=names.owner_selector(user))
        dvs = await self.kube.list(DATA_VOLUME, self.namespace, labels=names.owner_selector(user))
        counted = {_meta(o)["name"] for o in (*pvcs, *dvs) if phase_of(o) in PARKED} if parked else None
        return sum(size for name, size in user_disk_bytes(pvcs, dvs, user).items()
                   if name != exclude and (counted is None or name in counted))

    async def expand(self, user: str, pvc_name: str, size: str, *, limit: int | None, server: str = "") -> dict:
        """Grow ``user``'s PVC ``pvc_name`` to ``size`` (a quantity); returns the PVC. Refuses shrinking and going over ``limit`` (bytes).

        Equal sizes change nothing (no record). The write tests the owner
        and the old size, so a concurrent change is not overwritten.
        """
        pvc = await self._owned_pvc(user, pvc_name)
        current, wanted = requested_bytes(pvc), int(parse_quantity(size))
        if wanted == current:
            return pvc
        old_size = ((pvc["spec"].get("resources") or {}).get("requests") or {}).get("storage")
        before, after = {"size": old_size}, {"size": size}
        others = await self.usage(user, pvc_name)
        refusal = check_expand(current, wanted, others, limit)
        if refusal == "shrink":
            message = f"{pvc_name} holds {_size(current, size)}; a disk cannot shrink to {size}."
        elif refusal == "over-quota":
            message = (f"{pvc_name} cannot grow to {size}: {user}'s other disks hold {_size(others, size)} "
                       f"of their {_size(limit, size)}, so at most {_size(max(0, limit - others), size)} is left for it.")
        if refusal:
            await self.record(user, pvc_name, "expand", before, after, f"refused: {message}", server)
            raise DiskOpError(message, reason=refusal)
        path = pointer("spec", "resources", "requests", "storage")
        operations = [{"op": "test", "path": path, "value": old_size}, {"op": "replace", "path": path, "value": size}]
        try:
            if names.owned_by(_meta(pvc), user):
                pvc = await self.kube.patch_owned(PVC, self.namespace, pvc_name, user, operations)
            else:  # a root disk's PVC, made by CDI: its DataVolume is the user's (checked above)
                pvc = await self.kube.patch(PVC, self.namespace, pvc_name, operations)
        except NotOurs as e:
            await self.record(user, pvc_name, "expand", before, after, "error: changed meanwhile", server)
            raise DiskOpError(f"{pvc_name} changed while expanding; nothing was done, please try again.", reason="kubernetes-api") from e
        except ApiException as e:
            await self.record(user, pvc_name, "expand", before, after, f"error: {e.status} {e.reason}", server)
            raise DiskOpError(f"The cluster refused to expand {pvc_name}: {one_line(e)}.", reason="kubernetes-api") from e
        await self.record(user, pvc_name, "expand", before, after, "ok", server)
        log.info("Expanded %s/%s of %s from %s to %s (%s)", self.namespace, pvc_name, user, old_size, size, self.actor)
        return pvc

    async def snapshot(self, user: str, pvc_name: str, name: str | None = None, *, now: datetime | None = None) -> dict:
        """Take a VolumeSnapshot of ``user``'s PVC ``pvc_name`` (named ``name``, default ``<pvc>-<time>``); returns it."""
        pvc = await self._owned_pvc(user, pvc_name)
        now = now or phases.utcnow()
        name = name or names.dns_label(f"{pvc_name[:40]}-{now:%Y%m%d%H%M%S}")
        role = (_meta(pvc).get("labels") or {}).get(names.DISK_LABEL)
        dv = None if role == names.HOME_DISK else await self.kube.get(DATA_VOLUME, self.namespace, pvc_name)
        if dv is not None and not names.owned_by(_meta(dv), user):
            dv = None
        manifest = make_volume_snapshot(name=name, source=pvc, user_name=user, snapshot_class=self.snapshot_class, datavolume=dv)
        before = {"pvc": pvc_name, "size": ((pvc["spec"].get("resources") or {}).get("requests") or {}).get("storage")}
        try:
            created = await self.kube.create(VOLUME_SNAPSHOT, self.namespace, manifest)
        except ApiException as e:
            await self.record(user, pvc_name, "snapshot", before, {"snapshot": name}, f"error: {e.status} {e.reason}", time=now)
            raise DiskOpError(f"The cluster refused the snapshot {name}: {one_line(e)}.", reason="kubernetes-api") from e
        await self.record(user, pvc_name, "snapshot", before, {"snapshot": name}, "ok", time=now)
        log.info("Snapshot %s/%s of %s taken for %s (%s)", self.namespace, name, pvc_name, user, self.actor)
        return created

    async def owned_snapshot(self, user: str, name: str) -> dict:
        """``user``'s VolumeSnapshot ``name``; :class:`DiskOpError` ``not-found`` when there is none, or it is another's."""
        snap = await self.kube.get(VOLUME_SNAPSHOT, self.namespace, name)
        if snap is None or not names.owned_by(_meta(snap), user):
            raise DiskOpError(f"{user!r} has no snapshot {name!r} in {self.namespace}.", reason="not-found")
        return snap

    async def restore(self, user: str, snapshot_name: str, *, now: datetime | None = None) -> dict:
        """Swap ``user``'s home for a new PVC made from their VolumeSnapshot ``snapshot_name``; returns the new PVC.

        Only a home snapshot, ready to use, of a home that nothing uses and
        whose phase is ``Stopped``. The new PVC is made first (phase
        ``ProvisioningDisk``), then the old home moves ``Stopped ->
        Retained`` (an atomic check that it is still Stopped; retained
        ``retention_days``), then the new one becomes ``Stopped``: the
        workspace's next start mounts it. If the workspace started meanwhile,
        the new PVC is retained instead and the old home stays.
        """
        now = now or phases.utcnow()
        snap = await self.owned_snapshot(user, snapshot_name)
        slot = (_meta(snap).get("annotations") or {}).get(names.HOME_SLOT_ANNOTATION)
        if not slot:
            raise DiskOpError(f"Snapshot {snapshot_name} is not of a home disk; only homes can be restored.", reason="unsupported")
        old = await self.home_of(user, slot)
        old_name = _meta(old)["name"]
        before = {"pvc": old_name, "phase": phase_of(old)}

        async def refuse(message: str, reason: str):
            await self.record(user, old_name, "restore", before, {"snapshot": snapshot_name}, f"refused: {message}", time=now)
            raise DiskOpError(message, reason=reason)

        if not (snap.get("status") or {}).get("readyToUse"):
            await refuse(f"Snapshot {snapshot_name} is not ready to use yet.", "not-ready")
        compute = await self.kube.list(POD, self.namespace) + await self.kube.list(VMI, self.namespace)
        using = holders(compute, old_name)
        if using:
            await refuse(
                f"{old_name} is in use by {', '.join(_meta(o)['name'] for o in using)}; stop the workspace first.", "in-use"
            )
        if phase_of(old) not in (None, str(Phase.STOPPED)):
            await refuse(f"{old_name} is {phase_of(old)}, not Stopped; a restore swaps only a stopped workspace's home.", "in-use")
        claim = holder_of(old)
        if recent(claim, now, ATTACH_GRACE_SECONDS):
            await refuse(f"{old_name} is claimed by {claim.describe()}, which is starting; stop the workspace first.", "in-use")
        ref = WorkspaceRef(namespace=self.namespace, user_name=user, home_pvc=old_name)
        current = Status.from_object(old) or Status(Phase.STOPPED)
        if phase_of(old) is None:  # made before the lifecycle: record it first, so the swap below can test it
            current = await phases.move(self.kube, ref, current, Phase.STOPPED, observed=True, actor=self.actor)
            old = await self.kube.get(PVC, self.namespace, old_name, fresh=True) or old  # its version after that write
        provisioning = Status(Phase.PROVISIONING_DISK, since=now)
        manifest = make_restored_pvc(name=restored_name(slot, now), old=old, snapshot=snap, status=provisioning)
        new = await self.kube.create(PVC, self.namespace, manifest)
        new_ref = WorkspaceRef(namespace=self.namespace, user_name=user, home_pvc=_meta(new)["name"])
        try:
            await phases.move(
                self.kube, ref, current, Phase.RETAINED, expect=Phase.STOPPED, audit=self.audit, actor=self.actor,
                retain_until=now + timedelta(days=self.retention_days), now=now, expect_version=_meta(old)["resourceVersion"],
                reason=phases.REPLACED,
            )
        except NotOurs:
            await phases.move(self.kube, new_ref, provisioning, Phase.RETAINED, retain_until=now + timedelta(days=self.retention_days),
                                 audit=self.audit, actor=self.actor, now=now)
            await refuse(f"{old_name} changed while restoring (the workspace started?); nothing was swapped.", "in-use")
        await phases.move(self.kube, new_ref, provisioning, Phase.STOPPED, actor=self.actor, now=now)
        after = {"pvc": _meta(new)["name"], "snapshot": snapshot_name}
        await self.record(user, old_name, "restore", before, after, "ok", time=now)
        log.info("Restored %s's home %s from %s into %s (%s)", user, slot, snapshot_name, _meta(new)["name"], self.actor)
        return new

    async def grow_home(self, user: str, pvc: dict, size: str, *, limit: int | None, server: str = "") -> bool:
        """At a start: grow the home ``pvc`` to ``size`` if the profile asks for more (within ``limit``); True if grown.

        A smaller ``size`` than the PVC's is no change (never a shrink).
        Raises :class:`DiskOpError` (``over-quota``) when the limit forbids it.
        """
        if int(parse_quantity(size)) <= requested_bytes(pvc):
            return False
        await self.expand(user, _meta(pvc)["name"], size, limit=limit, server=server)
        return True

    async def listing(self, user: str | None = None) -> list[dict]:
        """One row per disk we manage (PVCs and DataVolumes; of ``user`` only if given), sorted by owner and name.

        Row keys: ``owner``, ``name``, ``kind``, ``role``, ``size``,
        ``phase``, ``retain_until``, ``slot``, ``used_by``, ``claimed_by``
        (the server holding its attach claim, see :mod:`.attach`).
        """
        labels = names.owner_selector(user) if user else f"{names.MANAGED_BY_LABEL}={names.MANAGED_BY}"
        pvcs = await self.kube.list(PVC, self.namespace, labels=labels)
        dvs = await self.kube.list(DATA_VOLUME, self.namespace, labels=labels)
        compute = await self.kube.list(POD, self.namespace) + await self.kube.list(VMI, self.namespace)
        rows, seen = [], set()
        for obj in dvs + pvcs:
            meta = _meta(obj)
            owner = names.owner_name(meta)
            if meta["name"] in seen or owner is None:
                continue
            seen.add(meta["name"])
            status = Status.from_object(obj)
            rows.append({
                "owner": owner,
                "name": meta["name"],
                "kind": obj["kind"],
                "role": (meta.get("labels") or {}).get(names.DISK_LABEL, ""),
                "size": gib(requested_bytes(obj)),
                "phase": shown_phase(phase_of(obj), holders(compute, meta["name"])),
                "retain_until": phases.rfc3339(status.retain_until) if status and status.retain_until else "",
                "slot": slot_of(obj) if obj["kind"] == "PersistentVolumeClaim" else "",
                "used_by": " ".join(_meta(o)["name"] for o in holders(compute, meta["name"])),
                "claimed_by": _claimed_by(obj),
            })
        return sorted(rows, key=lambda r: (r["owner"], r["name"]))


def shown_phase(recorded: str | None, using: list[dict]) -> str:
    """The phase a listing shows for a disk recorded in ``recorded`` and mounted by the Pods/VMIs ``using`` (pure).

    A start and a stop write no phase (:data:`.phases.DERIVED_PHASES`): a
    disk recorded ``Stopped`` that compute uses shows ``Stopping`` when that
    compute is being deleted, ``Running`` when it runs, else ``Starting``.
    """
    if recorded not in (None, str(Phase.STOPPED)) or not using:
        return recorded or ""
    if any(terminating(o) for o in using):
        return str(Phase.STOPPING)
    if any((o.get("status") or {}).get("phase") == "Running" for o in using):
        return str(Phase.RUNNING)
    return str(Phase.STARTING)


def _claimed_by(obj: dict) -> str:
    """``server (Pod name) since time`` of the disk's attach claim, or ""."""
    held = holder_of(obj)
    if held is None:
        return ""
    return f"{held.server} ({held.kind} {held.name}) since {phases.rfc3339(held.since) or '?'}"
