"""CDIController: the Containerized Data Importer's DataVolume and DataSource controllers (``cdi.kubevirt.io/v1beta1``).

A DataVolume fills a PVC of its own name, which CDI creates from
``spec.storage`` or ``spec.pvc`` with the DataVolume as its controlling owner
(deleting the DataVolume deletes the disk; the spawner never does so on stop):

* ``spec.sourceRef`` (kind DataSource, namespace defaulting to the
  DataVolume's) resolves through the DataSource's ``spec.source.pvc`` or
  ``spec.source.snapshot``; ``spec.source.pvc`` and ``spec.source.snapshot``
  name the source directly. Phases ``CloneScheduled`` -> ``CloneInProgress``
  (``status.progress`` ``"25.00%"``, ``"50.00%"``, ...) -> ``Succeeded``
  (``"100.0%"``); the target volume ends up a copy of the source's (of
  its disk image in the target's, when their ``volumeMode`` differ: see
  :func:`~..volumes.clone_paths`).
* ``spec.source.blank`` (and the network sources http/registry/s3/gcs/imageio/vddk,
  which have no network to import from here) -> ``ImportScheduled`` ->
  ``ImportInProgress`` -> ``Succeeded`` with an empty volume.
* A missing DataSource or source: conditions ``Bound`` Unknown / ``Ready``
  False with reason ``CloneWithoutSource`` ("The source pvc x doesn't
  exist"), a ``CloneWithoutSource`` Warning Event, phase ``Pending``; the
  clone starts once the source appears.
* A clone asking for less storage than its source PVC requests is refused as
  CDI's clone validation does: ``Pending``, ``Bound`` Unknown / ``Ready``
  False with reason ``CloneValidationFailed`` ("... target resources
  requests storage size is smaller than the source 2147483648 <
  4294967296"), a Warning Event; no PVC is made.
* A PVC of the DataVolume's name that exists already and is Bound is adopted
  (``Succeeded`` without copying), as CDI's claim adoption does.

Conditions ``Bound``, ``Ready`` and ``Running`` follow what CDI reports. When
the target's class binds ``WaitForFirstConsumer`` the target PVC is annotated
with ``volume.kubernetes.io/selected-node`` as if CDI's clone pod had been
scheduled, so the clone runs before any VM starts (CDI with
``cdi.kubevirt.io/storage.bind.immediate.requested``).

The DataSource controller keeps each DataSource's ``Ready`` condition
(``Ready``, ``NotFound``, ``NoSource``) and ``status.source``.

Knobs: ``clone_seconds`` (seconds a clone or import takes, default 1.0),
``clone_steps`` (progress updates, default 4), ``fail_next`` (the next N
population runs fail), ``fail_names`` (DataVolume names, or
``namespace/name``, whose population fails) and ``failure_message``. A failed
DataVolume has phase ``Failed`` and ``Running`` False with reason ``Error``,
which KubeVirt reports as the VM's ``DataVolumeError``.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from dataclasses import dataclass
from pathlib import Path

from ..conditions import find_condition, set_condition
from ..defaults import storage_request
from ..store import rfc3339
from ..validation import parse_quantity
from ..volumes import (
    claim_path,
    claim_volume_mode,
    clone_paths,
    copy_tree,
    disk_image_path,
    grow_raw_image,
    snapshot_path,
)
from .base import Controller
from .refs import (
    DATA_SOURCES,
    DATA_VOLUMES,
    NODES,
    PVCS,
    STORAGE_CLASSES,
    VOLUME_SNAPSHOTS,
    get_or_none,
    is_owned_by,
    owner_reference,
)
from .storage import SELECTED_NODE_ANNOTATION, storage_class_for

log = logging.getLogger("localcluster.cdi")

COMPONENT = "datavolume-controller"
STAMPS = ("lastHeartbeatTime", "lastTransitionTime")
TERMINAL = ("Succeeded", "Failed")
CREATED_FOR_ANNOTATION = "cdi.kubevirt.io/createdForDataVolume"
CDI_LABELS = {
    "app": "containerized-data-importer",
    "app.kubernetes.io/component": "storage",
    "app.kubernetes.io/managed-by": "cdi-controller",
}


@dataclass(frozen=True)
class Source:
    """Where a DataVolume's data comes from: ``kind`` is ``pvc``, ``snapshot`` or ``blank``."""

    kind: str
    namespace: str = ""
    name: str = ""

    @property
    def clone(self) -> bool:
        return self.kind != "blank"

    def describe(self) -> str:
        return f"{self.namespace}/{self.name}" if self.clone else "blank"


class MissingSource(Exception):
    """The DataSource or the source it names does not exist (yet)."""

    def __init__(self, what: str, name: str):
        super().__init__(f"The source {what} {name} doesn't exist")


def datasource_status(store, ds: dict) -> dict:
    """The status CDI's DataSource controller writes: ``source`` and the ``Ready`` condition."""
    spec_source = (ds.get("spec") or {}).get("source") or {}
    namespace = ds["metadata"]["namespace"]
    old = copy.deepcopy((ds.get("status") or {}).get("conditions") or [])
    now = rfc3339(store.clock())
    pvc_ref, snap_ref = spec_source.get("pvc"), spec_source.get("snapshot")
    if pvc_ref:
        pvc = get_or_none(store, PVCS, pvc_ref.get("namespace") or namespace, pvc_ref["name"])
        ready = pvc is not None and pvc.get("status", {}).get("phase") == "Bound"
        reason, message = ("Ready", "DataSource is ready to be consumed") if ready else ("NotFound", "No source PVC")
    elif snap_ref:
        snap = get_or_none(store, VOLUME_SNAPSHOTS, snap_ref.get("namespace") or namespace, snap_ref["name"])
        ready = bool(snap and (snap.get("status") or {}).get("readyToUse"))
        if ready:
            reason, message = "Ready", "DataSource is ready to be consumed"
        else:
            reason, message = ("SnapshotNotReady", "Snapshot is not ready") if snap else ("NotFound", "No source snapshot")
    else:
        ready, reason, message = False, "NoSource", "No source PVC set"
    set_condition(old, "Ready", "True" if ready else "False", reason, message, now=now, stamps=STAMPS)
    return {"source": copy.deepcopy(spec_source), "conditions": old}


def resolve_source(store, dv: dict) -> Source:
    """The Source of a DataVolume; raises :class:`MissingSource` while the DataSource or source is missing."""
    spec = dv["spec"]
    namespace = dv["metadata"]["namespace"]
    ref = spec.get("sourceRef")
    if ref:
        ds_namespace = ref.get("namespace") or namespace
        ds = get_or_none(store, DATA_SOURCES, ds_namespace, ref["name"])
        if ds is None:
            raise MissingSource("datasource", ref["name"])
        source, namespace = ds["spec"].get("source") or {}, ds_namespace
    else:
        source = spec.get("source") or {}
    for kind, key in (("pvc", PVCS), ("snapshot", VOLUME_SNAPSHOTS)):
        if source.get(kind):
            src_namespace = source[kind].get("namespace") or namespace
            if get_or_none(store, key, src_namespace, source[kind]["name"]) is None:
                raise MissingSource(kind, source[kind]["name"])
            return Source(kind, src_namespace, source[kind]["name"])
    if ref:
        raise MissingSource("datasource", ref["name"])  # a DataSource without a source
    return Source("blank")


def smaller_than_source(dv: dict, source_pvc: dict | None) -> str | None:
    """CDI's words when ``dv`` asks for less storage than its source PVC requests (its clone validation), else None."""
    spec = dv.get("spec") or {}
    wanted = ((spec.get("pvc") or spec.get("storage") or {}).get("resources") or {}).get("requests", {}).get("storage")
    has = storage_request(source_pvc or {})
    if not wanted or not has:
        return None
    target, source = parse_quantity(wanted), parse_quantity(has)
    if target >= source:
        return None
    return f"target resources requests storage size is smaller than the source {int(target)} < {int(source)}"


def target_claim(dv: dict, source_capacity: str | None) -> dict:
    """The PVC CDI creates for a DataVolume: ``spec.pvc`` as given, or ``spec.storage`` completed; the DataVolume's
    labels (CDI's own over them) and a copy of its annotations as they are now, as CDI's ``newPersistentVolumeClaim``
    makes it (a later change of the DataVolume's annotations does not reach the claim)."""
    meta = dv["metadata"]
    if dv["spec"].get("pvc"):
        spec = copy.deepcopy(dv["spec"]["pvc"])
    else:
        storage = copy.deepcopy(dv["spec"].get("storage") or {})
        spec = {k: v for k, v in storage.items() if k not in ("dataSource", "dataSourceRef")}
        spec.setdefault("accessModes", ["ReadWriteOnce"])
        spec.setdefault("volumeMode", "Filesystem")
        requests = spec.setdefault("resources", {}).setdefault("requests", {})
        requests.setdefault("storage", source_capacity or "1Gi")
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": {**(meta.get("labels") or {}), **CDI_LABELS},
            # CDI copies every annotation the DataVolume has when the claim is made (and never again)
            "annotations": {**(meta.get("annotations") or {}), CREATED_FOR_ANNOTATION: meta["uid"]},
            "ownerReferences": [owner_reference(dv)],
        },
        "spec": spec,
    }


class CDIController(Controller):
    """Populates DataVolumes and keeps DataSources' status (see the module docstring)."""

    name = "cdi"
    watches = (DATA_VOLUMES, DATA_SOURCES, PVCS, VOLUME_SNAPSHOTS)
    reads = (NODES, STORAGE_CLASSES)

    def __init__(self, cluster):
        super().__init__(cluster)
        self.clone_seconds = 1.0
        self.clone_steps = 4
        self.fail_next = 0
        self.fail_names: set[str] = set()
        self.failure_message = (
            "Unable to process data: Unable to transfer source data to target directory: "
            "write /data/disk.img: no space left on device"
        )
        self._running: dict[str, asyncio.Task] = {}

    async def stop(self) -> None:
        for task in list(self._running.values()):
            task.cancel()
        await asyncio.gather(*self._running.values(), return_exceptions=True)
        self._running.clear()
        await super().stop()

    async def reconcile(self, kind, obj, deleted) -> None:
        if kind.key == DATA_VOLUMES:
            if deleted:
                task = self._running.pop(obj["metadata"]["uid"], None)
                if task is not None:
                    task.cancel()
            else:
                await self._sync_data_volume(obj)
            return
        if kind.key == DATA_SOURCES and not deleted:
            await self._sync_data_source(obj)
        elif kind.key != DATA_SOURCES:
            for ds in self.client.objects(self.client.kind(*DATA_SOURCES)):
                await self._sync_data_source(ds)
        # A source or a target claim changed: DataVolumes waiting on one may move on.
        for dv in self.client.objects(self.client.kind(*DATA_VOLUMES)):
            if (dv.get("status") or {}).get("phase") not in TERMINAL:
                await self._sync_data_volume(dv)

    # -- DataSources -------------------------------------------------------

    async def _sync_data_source(self, ds: dict) -> None:
        meta = ds["metadata"]
        ds = get_or_none(self.client, DATA_SOURCES, meta["namespace"], meta["name"])
        if ds is None:
            return
        ds["status"] = datasource_status(self.client, ds)
        await self.client.replace(self.client.kind(*DATA_SOURCES), meta["namespace"], meta["name"], ds, subresource="status")

    # -- DataVolumes -------------------------------------------------------

    async def _sync_data_volume(self, dv: dict) -> None:
        meta = dv["metadata"]
        dv = get_or_none(self.client, DATA_VOLUMES, meta["namespace"], meta["name"])
        if dv is None or dv["metadata"].get("deletionTimestamp") or meta["uid"] in self._running:
            return
        if (dv.get("status") or {}).get("phase") in TERMINAL:
            return
        target = get_or_none(self.client, PVCS, meta["namespace"], meta["name"])
        if target is not None and not is_owned_by(target, dv):
            await self._adopt(dv, target)
            return
        try:
            source = resolve_source(self.client, dv)
        except MissingSource as missing:
            await self._without_source(dv, str(missing))
            return
        source_pvc = get_or_none(self.client, PVCS, source.namespace, source.name) if source.kind == "pvc" else None
        smaller = smaller_than_source(dv, source_pvc) if target is None else None
        if smaller is not None:
            await self._clone_refused(dv, smaller)
            return
        if source_pvc is not None and source_pvc.get("status", {}).get("phase") != "Bound":
            return  # too early: the source is still being populated
        if target is None:
            await self._create_target(dv, source, source_pvc)
            return
        if target.get("status", {}).get("phase") != "Bound":
            return
        fail = self._should_fail(dv)
        self._running[dv["metadata"]["uid"]] = asyncio.create_task(
            self._populate(dv, source, fail), name=f"cdi-{meta['namespace']}-{meta['name']}"
        )

    def _should_fail(self, dv: dict) -> bool:
        meta = dv["metadata"]
        if meta["name"] in self.fail_names or f"{meta['namespace']}/{meta['name']}" in self.fail_names:
            return True
        if self.fail_next > 0:
            self.fail_next -= 1
            return True
        return False

    async def _adopt(self, dv: dict, target: dict) -> None:
        """Take over an existing Bound PVC of the DataVolume's name, as CDI's claim adoption does."""
        if target.get("status", {}).get("phase") != "Bound":
            return
        meta = target["metadata"]
        meta.setdefault("ownerReferences", []).append(owner_reference(dv))
        meta.setdefault("annotations", {})["cdi.kubevirt.io/storage.populatedFor"] = dv["metadata"]["name"]
        await self.client.replace(self.client.kind(*PVCS), meta["namespace"], meta["name"], target)
        await self._write(dv, "Succeeded", "100.0%", bound=("True", "Bound", f"PVC {meta['name']} Bound"), ready="True", running=("False", "Completed"))
        await self.client.record_event(dv, "Bound", f"PVC {meta['name']} Bound", component=COMPONENT)

    async def _without_source(self, dv: dict, message: str) -> None:
        await self._not_cloned(dv, "CloneWithoutSource", message)

    async def _clone_refused(self, dv: dict, detail: str) -> None:
        await self._not_cloned(dv, "CloneValidationFailed", f"The clone doesn't meet the validation requirements: {detail}")

    async def _not_cloned(self, dv: dict, reason: str, message: str) -> None:
        """Report a clone CDI does not start (``reason``): ``Pending``, conditions ``Bound`` Unknown and ``Ready``
        False with ``reason``, a Warning Event; nothing is created."""
        bound = find_condition((dv.get("status") or {}).get("conditions"), "Bound") or {}
        if bound.get("message") == message:
            return  # already reported
        await self._write(dv, "Pending", None, bound=("Unknown", reason, message), ready="False", ready_reason=reason,
                          running=("False", ""))
        await self.client.record_event(dv, reason, message, type="Warning", component=COMPONENT)

    async def _create_target(self, dv: dict, source: Source, source_pvc: dict | None) -> None:
        capacity = (source_pvc or {}).get("status", {}).get("capacity", {}).get("storage")
        claim = target_claim(dv, capacity)
        _, storage_class = storage_class_for(self.client, claim)
        if storage_class and storage_class.get("volumeBindingMode") == "WaitForFirstConsumer":
            claim["metadata"]["annotations"][SELECTED_NODE_ANNOTATION] = self._clone_node()
        await self.client.create(self.client.kind(*PVCS), dv["metadata"]["namespace"], claim)
        name = dv["metadata"]["name"]
        phase = "CloneScheduled" if source.clone else "ImportScheduled"
        await self._write(dv, phase, "N/A", bound=("False", "Pending", f"PVC {name} Pending"), ready="False", running=("False", ""))
        target = f"{dv['metadata']['namespace']}/{name}"
        message = f"Cloning from {source.describe()} into {target} scheduled" if source.clone else f"Import into {name} scheduled"
        await self.client.record_event(dv, phase, message, component=COMPONENT)

    def _clone_node(self) -> str:
        nodes = sorted(n["metadata"]["name"] for n in self.client.objects(self.client.kind(*NODES)))
        return nodes[0] if nodes else "localcluster"

    async def _populate(self, dv: dict, source: Source, fail: bool) -> None:
        """Run one clone or import: progress updates, the copy, then Succeeded (or Failed)."""
        meta = dv["metadata"]
        name, uid = meta["name"], meta["uid"]
        phase = "CloneInProgress" if source.clone else "ImportInProgress"
        bound = ("True", "Bound", f"PVC {name} Bound")
        steps = max(1, int(self.clone_steps))
        try:
            target = f"{meta['namespace']}/{name}"
            started = f"Cloning from {source.describe()} into {target} in progress" if source.clone else f"Import into {name} in progress"
            await self.client.record_event(dv, phase, started, component=COMPONENT)
            for step in range(steps):
                if not await self._write(dv, phase, f"{100 * step / steps:.2f}%", bound=bound, ready="False", running=("True", "")):
                    return
                if fail and step == steps // 2:
                    await self._write(dv, "Failed", f"{100 * step / steps:.2f}%", bound=bound, ready="False", running=("False", "Error", self.failure_message))
                    await self.client.record_event(dv, "Error", self.failure_message, type="Warning", component=COMPONENT)
                    return
                await asyncio.sleep(self.clone_seconds / steps)
            source_dir = self._source_dir(source)
            target_dir = claim_path(self.cluster, meta["namespace"], name, self.client)
            if source_dir is not None and target_dir is not None:
                target_mode = claim_volume_mode(self.client, meta["namespace"], name)
                # A snapshot restores into a claim of its source's mode.
                source_mode = claim_volume_mode(self.client, source.namespace, source.name) if source.kind == "pvc" else target_mode
                await copy_tree(*clone_paths(source_dir, source_mode, target_dir, target_mode))
                await asyncio.to_thread(grow_raw_image, disk_image_path(target_dir, target_mode), self._claim_bytes(meta))
            if not await self._write(dv, "Succeeded", "100.0%", bound=bound, ready="True", running=("False", "Completed")):
                return
            done = f"Successfully cloned from {source.describe()} into {target}" if source.clone else "Import Successful"
            await self.client.record_event(dv, "CloneSucceeded" if source.clone else "ImportSucceeded", done, component=COMPONENT)
        finally:
            self._running.pop(uid, None)

    def _claim_bytes(self, meta: dict) -> int:
        """The storage the DataVolume's PVC asks for, in bytes (0 when it says none)."""
        wanted = storage_request(get_or_none(self.client, PVCS, meta["namespace"], meta["name"]) or {})
        return int(parse_quantity(wanted)) if wanted else 0

    def _source_dir(self, source: Source) -> Path | None:
        if source.kind == "pvc":
            return claim_path(self.cluster, source.namespace, source.name, self.client)
        if source.kind == "snapshot":
            snap = get_or_none(self.client, VOLUME_SNAPSHOTS, source.namespace, source.name)
            return snapshot_path(self.cluster, source.namespace, snap["metadata"]["uid"]) if snap else None
        return None

    async def _write(self, dv, phase, progress, *, bound, ready, running, ready_reason="") -> bool:
        """Write the DataVolume's status; False when the DataVolume is gone (or replaced)."""
        meta = dv["metadata"]
        current = get_or_none(self.client, DATA_VOLUMES, meta["namespace"], meta["name"])
        if current is None or current["metadata"]["uid"] != meta["uid"]:
            return False
        status = current.setdefault("status", {})
        now = rfc3339(self.client.clock())
        conditions = status.setdefault("conditions", [])
        set_condition(conditions, "Bound", *bound, now=now, stamps=STAMPS)
        set_condition(conditions, "Ready", ready, ready_reason, now=now, stamps=STAMPS)
        set_condition(conditions, "Running", *running, now=now, stamps=STAMPS)
        status["phase"] = phase
        if phase != "Pending":
            status["claimName"] = meta["name"]
        status.setdefault("restartCount", 0)
        if progress is not None:
            status["progress"] = progress
        await self.client.replace(self.client.kind(*DATA_VOLUMES), meta["namespace"], meta["name"], current, subresource="status")
        return True


