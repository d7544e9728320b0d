"""SnapshotController: the CSI snapshot-controller and external-snapshotter for ``snapshot.storage.k8s.io/v1``.

A VolumeSnapshot whose ``spec.source.persistentVolumeClaimName`` names a
Bound PVC is taken by copying the claim's volume directory to
``<state_dir>/snapshots/<namespace>/<uid>`` (see :mod:`..volumes`); its status
then reads as the real controller writes it: ``boundVolumeSnapshotContentName``
``snapcontent-<uid>``, ``creationTime``, ``restoreSize`` (the claim's
capacity) and ``readyToUse: true``. The VolumeSnapshotContent of that name
(cluster-scoped) is made as external-snapshotter makes it: ``driver`` (the
CSI driver of the claim's volume), ``source.volumeHandle``,
``volumeSnapshotRef``, ``deletionPolicy`` ``Delete``, ``sourceVolumeMode``,
and a status with ``snapshotHandle``, ``restoreSize`` in bytes and
``readyToUse``; CDI reads it to choose a clone from the snapshot (its driver
must be the target class's provisioner). A snapshot naming no
``volumeSnapshotClassName`` gets its driver's default VolumeSnapshotClass
written there first (the controller makes one per ceph-csi driver,
annotated ``snapshot.storage.kubernetes.io/is-default-class``, as a
rook-ceph set-up does); a missing class, or not exactly one default, is an
error. A missing or unbound claim gives
``status.error`` and ``readyToUse: false`` (retried when the claim appears);
pre-provisioned snapshots (``volumeSnapshotContentName``) are not served.
Deleting a snapshot deletes its content, the object and the copy. Restoring is the PVC binder's part
(``dataSource`` of kind VolumeSnapshot, see :mod:`.storage`).
"""

from __future__ import annotations

import copy

from ..store import rfc3339
from ..validation import parse_quantity
from ..volumes import claim_path, copy_tree, remove_tree, snapshot_path
from .base import Controller
from .refs import PVCS, PVS, VOLUME_SNAPSHOT_CLASSES, VOLUME_SNAPSHOT_CONTENTS, VOLUME_SNAPSHOTS, get_or_none
from .storage import CEPHFS_PROVISIONER, RBD_PROVISIONER

COMPONENT = "snapshot-controller"


#: The annotation that makes a VolumeSnapshotClass its driver's default.
DEFAULT_CLASS_ANNOTATION = "snapshot.storage.kubernetes.io/is-default-class"


def default_snapshot_classes() -> list[dict]:
    """The VolumeSnapshotClasses a rook-ceph cluster is set up with: one default class per ceph-csi driver."""
    return [
        {"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotClass",
         "metadata": {"name": name, "annotations": {DEFAULT_CLASS_ANNOTATION: "true"}},
         "driver": driver, "deletionPolicy": "Delete"}
        for name, driver in (("csi-rbdplugin-snapclass", RBD_PROVISIONER), ("csi-cephfsplugin-snapclass", CEPHFS_PROVISIONER))
    ]


def volume_csi(client, claim: dict) -> dict:
    """The ``spec.csi`` of ``claim``'s volume (``driver``, ``volumeHandle``), empty for a volume that has none."""
    volume = get_or_none(client, PVS, None, claim["spec"].get("volumeName") or "")
    return ((volume or {}).get("spec") or {}).get("csi") or {}


def volume_driver(client, claim: dict) -> str:
    """The CSI driver of ``claim``'s volume (``local`` for one that has none)."""
    return volume_csi(client, claim).get("driver") or "local"


class SnapshotController(Controller):
    """Takes VolumeSnapshots of PVCs as directory copies (see the module docstring)."""

    name = "snapshots"
    watches = (VOLUME_SNAPSHOTS, PVCS)
    reads = (PVS, VOLUME_SNAPSHOT_CONTENTS, VOLUME_SNAPSHOT_CLASSES)

    async def start(self) -> None:
        await self.client.watch((VOLUME_SNAPSHOT_CLASSES,))
        for klass in default_snapshot_classes():
            if get_or_none(self.client, VOLUME_SNAPSHOT_CLASSES, None, klass["metadata"]["name"]) is None:
                await self.client.create(self.client.kind(*VOLUME_SNAPSHOT_CLASSES), None, klass)
        await super().start()

    async def reconcile(self, kind, obj, deleted) -> None:
        meta = obj["metadata"]
        if kind.key == PVCS:
            if not deleted and obj.get("status", {}).get("phase") == "Bound":
                # A claim that became Bound may be the source snapshots were waiting for.
                for snapshot in self.client.objects(self.client.kind(*VOLUME_SNAPSHOTS)):
                    if snapshot["metadata"]["namespace"] == meta["namespace"]:
                        await self._take(copy.deepcopy(snapshot))
        elif deleted:
            content = get_or_none(self.client, VOLUME_SNAPSHOT_CONTENTS, None, f"snapcontent-{meta['uid']}")
            if content is not None:
                await self.client.delete(self.client.kind(*VOLUME_SNAPSHOT_CONTENTS), None, content["metadata"]["name"])
            await remove_tree(snapshot_path(self.cluster, meta["namespace"], meta["uid"]))
        else:
            await self._take(obj)

    async def _take(self, snapshot: dict) -> None:
        snapshot = get_or_none(self.client, VOLUME_SNAPSHOTS, snapshot["metadata"]["namespace"], snapshot["metadata"]["name"])
        if snapshot is None:
            return
        meta = snapshot["metadata"]
        status = snapshot.get("status") or {}
        if status.get("readyToUse") or meta.get("deletionTimestamp"):
            return
        namespace, uid = meta["namespace"], meta["uid"]
        content = f"snapcontent-{uid}"
        claim_name = snapshot["spec"]["source"].get("persistentVolumeClaimName")
        if not claim_name:
            await self._fail(snapshot, content, "pre-provisioned snapshots (volumeSnapshotContentName) are not supported by the local cluster")
            return
        source = claim_path(self.cluster, namespace, claim_name, self.client)
        if source is None:
            await self._fail(snapshot, content, f'cannot get claim from snapshot: persistentvolumeclaims "{claim_name}" not found or not bound')
            return
        claim = get_or_none(self.client, PVCS, namespace, claim_name)
        snapshot, problem = await self._with_class(snapshot, claim)
        if problem is not None:
            await self._fail(snapshot, content, problem)
            return
        now = rfc3339(self.client.clock())
        restore_size = claim["status"].get("capacity", {}).get("storage", "0")
        await self._write_status(
            snapshot, {"boundVolumeSnapshotContentName": content, "creationTime": now, "readyToUse": False, "restoreSize": restore_size}
        )
        await copy_tree(source, snapshot_path(self.cluster, namespace, uid))
        current = get_or_none(self.client, VOLUME_SNAPSHOTS, namespace, meta["name"])
        if current is None or current["metadata"]["uid"] != uid:
            await remove_tree(snapshot_path(self.cluster, namespace, uid))
            return
        await self._make_content(current, claim, content)
        await self._write_status(current, {**current.get("status", {}), "readyToUse": True})
        await self.client.record_event(current, "SnapshotReady", f"Snapshot {namespace}/{meta['name']} is ready to use.", component=COMPONENT)

    async def _with_class(self, snapshot: dict, claim: dict) -> tuple[dict, str | None]:
        """``snapshot`` naming its VolumeSnapshotClass, or the reason it cannot: a snapshot that names none gets the
        default class of its claim's CSI driver written into ``spec.volumeSnapshotClassName``, as snapshot-controller
        does (CDI clones only from a snapshot that names its class)."""
        named = snapshot["spec"].get("volumeSnapshotClassName")
        if named:
            if get_or_none(self.client, VOLUME_SNAPSHOT_CLASSES, None, named) is None:
                return snapshot, f'failed to get snapshot class: volumesnapshotclasses.snapshot.storage.k8s.io "{named}" not found'
            return snapshot, None
        driver = volume_driver(self.client, claim)
        defaults = [c for c in self.client.objects(self.client.kind(*VOLUME_SNAPSHOT_CLASSES))
                    if c.get("driver") == driver and (c["metadata"].get("annotations") or {}).get(DEFAULT_CLASS_ANNOTATION) == "true"]
        if len(defaults) != 1:
            return snapshot, (f"failed to set a default snapshot class: {len(defaults)} default VolumeSnapshotClasses "
                              f"for driver {driver}, not 1")
        snapshot = copy.deepcopy(snapshot)
        snapshot["spec"]["volumeSnapshotClassName"] = defaults[0]["metadata"]["name"]
        meta = snapshot["metadata"]
        return await self.client.replace(self.client.kind(*VOLUME_SNAPSHOTS), meta["namespace"], meta["name"], snapshot), None

    async def _make_content(self, snapshot: dict, claim: dict, name: str) -> None:
        """The VolumeSnapshotContent ``name`` bound to ``snapshot`` of ``claim``, ready (see the module docstring)."""
        kind = self.client.kind(*VOLUME_SNAPSHOT_CONTENTS)
        if get_or_none(self.client, VOLUME_SNAPSHOT_CONTENTS, None, name) is not None:
            return
        meta = snapshot["metadata"]
        csi = volume_csi(self.client, claim)
        class_name = snapshot["spec"]["volumeSnapshotClassName"]
        klass = get_or_none(self.client, VOLUME_SNAPSHOT_CLASSES, None, class_name) or {}
        spec = {
            "deletionPolicy": klass.get("deletionPolicy") or "Delete",
            "driver": csi.get("driver") or "local",
            "source": {"volumeHandle": csi.get("volumeHandle") or claim["spec"].get("volumeName") or meta["uid"]},
            "sourceVolumeMode": claim["spec"].get("volumeMode") or "Filesystem",
            "volumeSnapshotClassName": class_name,
            "volumeSnapshotRef": {"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
                                  "name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]},
        }
        content = await self.client.create(kind, None, {"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotContent",
                                                      "metadata": {"name": name}, "spec": spec})
        content["status"] = {
            "creationTime": int(self.client.clock().timestamp() * 1e9),
            "readyToUse": True,
            "restoreSize": int(parse_quantity((snapshot.get("status") or {}).get("restoreSize") or "0")),
            "snapshotHandle": f"snapshot-{meta['uid']}",
        }
        await self.client.replace(kind, None, name, content, subresource="status")

    async def _fail(self, snapshot: dict, content: str, detail: str) -> None:
        message = f"Failed to create snapshot content with error {detail}"
        if ((snapshot.get("status") or {}).get("error") or {}).get("message") == message:
            return
        await self._write_status(snapshot, {"readyToUse": False, "error": {"message": message, "time": rfc3339(self.client.clock())}})
        await self.client.record_event(snapshot, "SnapshotContentCreationFailed", message, type="Warning", component=COMPONENT)

    async def _write_status(self, snapshot: dict, status: dict) -> None:
        snapshot = copy.deepcopy(snapshot)
        snapshot["status"] = status
        meta = snapshot["metadata"]
        await self.client.replace(self.client.kind(*VOLUME_SNAPSHOTS), meta["namespace"], meta["name"], snapshot, subresource="status")
