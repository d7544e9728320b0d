"""The root-disk pool: root DataVolumes cloned ahead of time per golden image, claimed by a first VM start.

Settings: :class:`~workspacespawner.config.rootdiskpool.RootDiskPool`
(``c.RootDiskPool.ready_disks``). A *pool disk* is a DataVolume cloned from
a golden-image DataSource through ``spec.sourceRef``, exactly as a start
would clone a root disk, but labelled ``workspacespawner.io/disk: pool``
and :data:`~.names.POOL_IMAGE_LABEL` instead of an owner: no quota, no
retention and no purge selects it. :class:`RootDiskPoolKeeper` (one per
namespace and hub process) keeps each pool at its count from the hub's
DataVolume watch, and retires (deletes, with ``uid`` and
``resourceVersion`` preconditions, so never a disk claimed meanwhile) the
pool disks of a golden image no longer listed, of another shape, or cloned
from what the DataSource pointed at before (its ``spec.source`` then is
recorded on each disk, :data:`~.names.GOLDEN_IMAGE_SOURCE_ANNOTATION`).

**The claim.** A first start (no VM, no root disk yet) whose root disk
would have a pool's shape takes that pool's oldest ready disk with one
JSON Patch: a ``test`` of its ``resourceVersion`` and of the pool label,
then its labels and annotations replaced by a root disk's (owner, slot,
lifecycle record, the start's attach claim). The patch is atomic: two
starts that pick the same disk get one 200 and one 422 (the loser tries
the next disk), and a hub that crashes leaves the disk either a pool disk
or wholly the user's root disk, which the next start finds by its slot
(:mod:`.rootdisk`). Each claim, clone and retirement is audited
(``claim``, ``create``, ``delete``).

API followed: ``cdi.kubevirt.io/v1beta1`` DataVolume (``spec.sourceRef``,
``spec.storage``, ``status.phase``) and DataSource (``spec.source``), JSON
Patch with ``test`` operations, DeleteOptions ``preconditions``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from kubernetes_asyncio.client.rest import ApiException

from workspacespawner.backends.vm.manifests import VMIdentity, VMSettings, datavolume_storage
from workspacespawner.config.rootdiskpool import PoolEntry, PoolShape
from workspacespawner.core import names
from workspacespawner.core.quantities import parse_quantity
from workspacespawner.core.times import parse_time
from workspacespawner.k8s.kinds import DATA_SOURCE, DATA_VOLUME
from workspacespawner.k8s.objects import pointer, terminating
from workspacespawner.lifecycle import phases
from workspacespawner.lifecycle.phases import SYSTEM, Status
from workspacespawner.vmdisk.rootdisk import DATAVOLUME_ANNOTATIONS

log = logging.getLogger("workspacespawner")

#: labelSelector of every pool disk.
POOL_SELECTOR = f"{names.MANAGED_BY_LABEL}={names.MANAGED_BY},{names.DISK_LABEL}={names.POOL_DISK}"
#: A pool disk whose clone failed is retired (and replaced) once it is this many refill intervals old.
FAILED_AFTER_INTERVALS = 10
#: How many times one look tries to retire a pool disk that keeps changing under it (see :meth:`RootDiskPoolKeeper._retire`).
RETIRE_ATTEMPTS = 3
#: How many times a start tries to claim one pool disk whose version moved on under it (see :meth:`RootDiskPoolKeeper._claim_one`).
CLAIM_ATTEMPTS = 3


def _meta(obj: dict) -> dict:
    return obj.get("metadata") or {}


def image_id(shape: PoolShape) -> str:
    """The :data:`~.names.POOL_IMAGE_LABEL` value of ``shape``'s golden image."""
    return names.golden_image_id(shape.golden_image_namespace, shape.golden_image)


def shape_for(settings: VMSettings) -> PoolShape:
    """The shape of the root disk a start with ``settings`` would clone."""
    return PoolShape(settings.golden_image, settings.golden_image_namespace, settings.root_disk_size,
                     settings.storage_class, settings.volume_mode)


def same_shape(dv: dict, shape: PoolShape) -> bool:
    """Whether DataVolume ``dv`` is a clone of ``shape``'s golden image with its size (compared as quantities),
    StorageClass and volumeMode."""
    spec = dv.get("spec") or {}
    ref, storage = spec.get("sourceRef") or {}, spec.get("storage") or {}
    size = ((storage.get("resources") or {}).get("requests") or {}).get("storage")
    if ref.get("kind") != "DataSource" or size is None:
        return False
    found = PoolShape(ref.get("name"), ref.get("namespace") or _meta(dv).get("namespace"), size,
                      storage.get("storageClassName"), storage.get("volumeMode"))
    return _same_shapes(found, shape)


def _same_shapes(a: PoolShape, b: PoolShape) -> bool:
    """Whether two shapes are one (sizes compared as quantities: ``40Gi`` is ``40960Mi``)."""
    try:
        same_size = parse_quantity(a.size) == parse_quantity(b.size)
    except ValueError:
        return False
    return same_size and (a.golden_image, a.golden_image_namespace, a.storage_class, a.volume_mode) == \
        (b.golden_image, b.golden_image_namespace, b.storage_class, b.volume_mode)


def source_text(source: dict | None) -> str | None:
    """A DataSource's ``spec.source`` as the text pool disks record (None: no source)."""
    return json.dumps(source, sort_keys=True) if source else None


def source_cloned_from(dv: dict) -> str | None:
    """The DataSource ``spec.source`` text a pool disk was cloned from (:data:`~.names.GOLDEN_IMAGE_SOURCE_ANNOTATION`)."""
    return (_meta(dv).get("annotations") or {}).get(names.GOLDEN_IMAGE_SOURCE_ANNOTATION)


def ready(dv: dict) -> bool:
    """Whether the DataVolume's clone is done (``status.phase: Succeeded``) and it is not being deleted."""
    return (dv.get("status") or {}).get("phase") == "Succeeded" and not terminating(dv)


def pool_disk_name(shape: PoolShape) -> str:
    """A fresh name for a pool disk of ``shape``: ``pool-<image>-<6 hex digits>``, a DNS label."""
    return f"{names.dns_label(f'pool-{shape.golden_image}', 56)}-{secrets.token_hex(3)}"


def make_pool_disk(shape: PoolShape, *, namespace: str, name: str, source: dict) -> dict:
    """A pool disk: a DataVolume named ``name`` in ``namespace`` cloning ``shape``'s golden image, which points at
    ``source`` (its DataSource's ``spec.source``) now; labelled as a pool disk, owned by nobody."""
    labels = {names.MANAGED_BY_LABEL: names.MANAGED_BY, names.DISK_LABEL: names.POOL_DISK, names.POOL_IMAGE_LABEL: image_id(shape)}
    annotations = {
        **DATAVOLUME_ANNOTATIONS,
        names.GOLDEN_IMAGE_ANNOTATION: shape.image,
        names.GOLDEN_IMAGE_SOURCE_ANNOTATION: source_text(source),
    }
    return {
        "apiVersion": DATA_VOLUME.api_version,
        "kind": "DataVolume",
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations},
        "spec": {
            "sourceRef": {"kind": "DataSource", "name": shape.golden_image, "namespace": shape.golden_image_namespace},
            "storage": datavolume_storage(size=shape.size, storage_class=shape.storage_class, volume_mode=shape.volume_mode),
        },
    }


def claim_operations(dv: dict, ident: VMIdentity, *, recorded: Status | None, annotations: Mapping[str, str]) -> list[dict]:
    """The JSON Patch that makes pool disk ``dv`` ``ident``'s root disk, if it is still the pool disk it was.

    ``test``s its ``resourceVersion`` and pool label; then its labels become
    a root disk's of the owner (the pool label dropped) and its annotations
    gain the owner's name, the slot (``ident.vm``), the lifecycle record
    ``recorded`` and ``annotations`` (the start's attach claim).
    """
    meta = _meta(dv)
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k != names.POOL_IMAGE_LABEL}
    labels.update(names.disk_labels(ident.user_name, ident.kubespawner_username, names.ROOT_DISK))
    new = phases.made_in({"metadata": {"labels": labels, "annotations": {
        **(meta.get("annotations") or {}), **names.owner_annotations(ident.user_name), names.ROOT_SLOT_ANNOTATION: ident.vm,
    }}}, recorded, annotations)["metadata"]
    return [
        {"op": "test", "path": pointer("metadata", "resourceVersion"), "value": meta["resourceVersion"]},
        {"op": "test", "path": pointer("metadata", "labels", names.DISK_LABEL), "value": names.POOL_DISK},
        {"op": "replace", "path": pointer("metadata", "labels"), "value": new["labels"]},
        {"op": "replace", "path": pointer("metadata", "annotations"), "value": new["annotations"]},
    ]


@dataclass
class PoolPlan:
    """What one look at the pools does: ``retire`` these pool disks; ``clone`` this many for each entry (by image id)."""

    retire: list[dict] = field(default_factory=list)
    clone: dict[str, int] = field(default_factory=dict)


def plan(disks: Iterable[dict], entries: Iterable[PoolEntry], sources: Mapping[str, str | None], *,
         now: datetime, failed_after: float) -> PoolPlan:
    """Pure: which pool disks to retire and how many to clone so each entry has its count.

    ``disks``: the namespace's pool disks; ``sources``: per image id, the
    golden image's current ``spec.source`` text (None: its DataSource is
    missing or has none, so nothing is cloned for it, and its disks are
    kept). A disk is retired when its image is no entry's, its shape is not
    its entry's, it was cloned from another source, its clone failed over
    ``failed_after`` seconds ago, or it is beyond the count (the newest go
    first). Disks being deleted are not counted.
    """
    wanted = {image_id(e.shape): e for e in entries}
    result, kept = PoolPlan(), defaultdict(list)
    for dv in disks:
        if terminating(dv):
            continue
        image = (_meta(dv).get("labels") or {}).get(names.POOL_IMAGE_LABEL)
        entry, source = wanted.get(image), sources.get(image)
        created = parse_time(_meta(dv).get("creationTimestamp"))
        failed = (dv.get("status") or {}).get("phase") == "Failed" and created is not None \
            and (now - created).total_seconds() > failed_after
        if entry is None or not same_shape(dv, entry.shape) or (source is not None and source_cloned_from(dv) != source) or failed:
            result.retire.append(dv)
        else:
            kept[image].append(dv)
    for image, entry in wanted.items():
        mine = sorted(kept[image], key=lambda d: (not ready(d), _meta(d).get("creationTimestamp") or "", _meta(d)["name"]))
        result.retire.extend(mine[entry.count:])
        missing = entry.count - len(mine)
        if missing > 0 and sources.get(image) is not None:
            result.clone[image] = missing
    return result


def claimable(disks: Iterable[dict], shape: PoolShape, source: str | None) -> list[dict]:
    """Pure: the ready pool disks a start of ``shape`` may claim, oldest first (``source``: the golden image's
    current source text, when the keeper knows it; disks cloned from another are left for retirement)."""
    image = image_id(shape)
    found = [
        dv for dv in disks
        if (_meta(dv).get("labels") or {}).get(names.DISK_LABEL) == names.POOL_DISK
        and (_meta(dv).get("labels") or {}).get(names.POOL_IMAGE_LABEL) == image
        and ready(dv) and same_shape(dv, shape)
        and (source is None or source_cloned_from(dv) == source)
    ]
    return sorted(found, key=lambda d: (_meta(d).get("creationTimestamp") or "", _meta(d)["name"]))


class RootDiskPoolKeeper:
    """The pools of one namespace: kept at their counts in the background, and claimed by first starts.

    ``kube``: the hub's :class:`~workspacespawner.k8s.cachedkube.CachedKube`
    (its DataVolume list reads the shared watch once :meth:`start` ran);
    ``entries``: the pools (:meth:`.RootDiskPool.entries`); ``audit``: an
    :class:`~workspacespawner.lifecycle.audit.AuditLog` or None;
    ``interval``: seconds between looks (a claim wakes it at once).
    """

    def __init__(self, kube, namespace: str, entries: list[PoolEntry], *, audit=None, interval: float = 15.0,
                 watch=None):
        self.kube = kube
        self.namespace = namespace
        self.entries = list(entries)
        self.audit = audit
        self.interval = interval
        self._watch = watch
        self._sources: dict[str, str | None] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None

    def entry_for(self, settings: VMSettings) -> PoolEntry | None:
        """The pool a start with ``settings`` may take a disk from, or None (no pool of its golden image and shape)."""
        shape = shape_for(settings)
        return next((e for e in self.entries if _same_shapes(e.shape, shape)), None)

    async def _record(self, *, user: str, disk: str, action: str, before, after, result: str, server: str = "", actor: str = SYSTEM) -> None:
        if self.audit is not None:
            await self.audit.arecord(actor=actor, user=user, server=server, namespace=self.namespace, disk=disk,
                                     action=action, before=before, after=after, result=result)

    # -- the claim -----------------------------------------------------------

    async def claim(self, ident: VMIdentity, settings: VMSettings, *, recorded: Status | None,
                    annotations: Mapping[str, str]) -> dict | None:
        """Make a ready pool disk ``ident``'s root disk (see the module docstring); returns it as the API server
        answered, or None when the pool of ``settings``' shape is empty or absent (the start then clones).

        Disks another start claimed first (the ``test`` answers 422) or that
        went meanwhile (404) are passed over. Any other API error is logged
        and None returned: a pool is a shortcut, never a reason to fail a start.
        """
        entry = self.entry_for(settings)
        if entry is None:
            return None
        try:
            disks = await self.kube.list(DATA_VOLUME, self.namespace, labels=POOL_SELECTOR)
            source = self._sources.get(image_id(entry.shape))
            for dv in claimable(disks, entry.shape, source):
                name = _meta(dv)["name"]
                claimed = await self._claim_one(dv, entry.shape, source, ident, recorded, annotations)
                if claimed is None:
                    continue
                log.info("Root disk %s/%s taken from the pool of %s for %s", self.namespace, name, entry.shape.image, ident.user_name)
                await self._record(user=ident.user_name, server=ident.server_name, disk=name, action="claim",
                                   before={"pool": entry.shape.image}, after={"root_disk": name, "vm": ident.vm}, result="ok")
                self.wake()
                return claimed
        except Exception as e:  # noqa: BLE001 - the start clones instead
            log.warning("Could not take a root disk from the pool of %s for %s: %s", entry.shape.image, ident.user_name, e)
        return None

    async def _claim_one(self, dv: dict, shape: PoolShape, source: str | None, ident: VMIdentity,
                         recorded: Status | None, annotations: Mapping[str, str]) -> dict | None:
        """The guarded claim of pool disk ``dv``: the disk as claimed, or None when another start took it or it went.

        A refused ``test`` (409, 422) is read again: CDI's controller writes a
        DataVolume for a while after its clone succeeded (its populator's
        annotations), so the version the list showed may be stale while the
        disk is still in the pool; it is claimed at its new version, up to
        :data:`CLAIM_ATTEMPTS` times, unless it is no longer claimable.
        """
        name = _meta(dv)["name"]
        for _attempt in range(CLAIM_ATTEMPTS):
            try:
                return await self.kube.patch(DATA_VOLUME, self.namespace, name,
                                             claim_operations(dv, ident, recorded=recorded, annotations=annotations))
            except ApiException as e:
                if e.status not in (409, 422):
                    raise
            dv = await self.kube.get(DATA_VOLUME, self.namespace, name, fresh=True)
            if dv is None or not claimable([dv], shape, source):
                return None  # another start took it first, or it went
        return None

    # -- keeping the pools -----------------------------------------------------

    async def _source(self, shape: PoolShape) -> str | None:
        """The golden image's current ``spec.source`` text (None: its DataSource is missing or has none)."""
        found = await self.kube.get(DATA_SOURCE, shape.golden_image_namespace, shape.golden_image, fresh=True)
        return source_text(((found or {}).get("spec") or {}).get("source"))

    async def refill(self) -> PoolPlan:
        """One look: read each golden image's DataSource, retire what is stale or beyond the counts, clone what is
        missing; returns what it planned. Every clone and retirement is audited."""
        for entry in self.entries:
            self._sources[image_id(entry.shape)] = await self._source(entry.shape)
        disks = await self.kube.list(DATA_VOLUME, self.namespace, labels=POOL_SELECTOR)
        todo = plan(disks, self.entries, self._sources, now=phases.utcnow(), failed_after=FAILED_AFTER_INTERVALS * self.interval)
        for dv in todo.retire:
            await self._retire(dv)
        by_image = {image_id(e.shape): e for e in self.entries}
        for image, count in todo.clone.items():
            shape = by_image[image].shape
            for _ in range(count):
                await self._clone(shape, json.loads(self._sources[image]))
        return todo

    async def _retire(self, dv: dict) -> None:
        """Delete pool disk ``dv`` unless it was claimed since it was read.

        The DELETE's ``uid`` and ``resourceVersion`` preconditions answer 409
        when the disk changed since: a claim, or (far more often) CDI writing
        the status of a clone in progress. The disk is then read again and,
        while it is still the same disk and still in the pool, retired with
        its new ``resourceVersion``; a claimed disk is left alone.
        """
        meta = _meta(dv)
        name, image = meta["name"], (meta.get("annotations") or {}).get(names.GOLDEN_IMAGE_ANNOTATION)
        for _attempt in range(RETIRE_ATTEMPTS):
            try:
                await self.kube.delete(DATA_VOLUME, self.namespace, name, uid=meta.get("uid"), resource_version=meta.get("resourceVersion"))
                break
            except ApiException as e:
                if e.status != 409:
                    await self._record(user="", disk=name, action="delete", before={"pool": image}, after=None,
                                       result=f"error: {e.status} {e.reason}")
                    raise
            fresh = await self.kube.get(DATA_VOLUME, self.namespace, name, fresh=True)
            fresh_meta = _meta(fresh) if fresh is not None else {}
            if fresh is None or fresh_meta.get("uid") != meta.get("uid") or fresh_meta.get("deletionTimestamp") \
                    or (fresh_meta.get("labels") or {}).get(names.DISK_LABEL) != names.POOL_DISK:
                return  # gone, replaced, or claimed meanwhile: not the keeper's to delete
            meta = fresh_meta
        else:
            return  # it keeps changing: looked at again next time
        log.info("Retired pool disk %s/%s of %s", self.namespace, name, image)
        await self._record(user="", disk=name, action="delete", before={"pool": image}, after=None, result="ok: pool disk retired")

    async def _clone(self, shape: PoolShape, source: dict) -> None:
        name = pool_disk_name(shape)
        await self.kube.create(DATA_VOLUME, self.namespace, make_pool_disk(shape, namespace=self.namespace, name=name, source=source))
        log.info("Cloning pool disk %s/%s from %s", self.namespace, name, shape.image)
        await self._record(user="", disk=name, action="create", before=None, after={"pool": shape.image}, result="ok: pool disk")

    def wake(self) -> None:
        """Look at the pools now (after a claim) instead of at the next interval."""
        self._wake.set()

    async def _run(self) -> None:
        if self._watch is not None:
            await self._watch()
        while True:
            self._wake.clear()
            try:
                await self.refill()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - the next look tries again
                log.warning("Could not refill the root-disk pools of %s: %s", self.namespace, e)
            try:
                await asyncio.wait_for(self._wake.wait(), self.interval)
            except TimeoutError:
                pass

    def start(self) -> None:
        """Run :meth:`refill` every ``interval`` seconds (and after each claim) on the running loop; once."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"root-disk pools of {self.namespace}")

    async def close(self) -> None:
        """Stop looking at the pools."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
            self._task = None
