"""SnapshotController: the CSI snapshot-controller and external-snapshotter for ``snapshot.storage.k8s.io/v1``.

A VolumeSnapshot whose ``spec.source.persistentVolumeClaimName`` names a
Bound PVC is taken by copying the claim's volume directory to
``<state_dir>/snapshots/<namespace>/<uid>`` (see :mod:`..volumes`); its status
then reads as the real controller writes it: ``boundVolumeSnapshotContentName``
``snapcontent-<uid>``, ``creationTime``, ``restoreSize`` (the claim's
capacity) and ``readyToUse: true``. A missing or unbound claim gives
``status.error`` and ``readyToUse: false`` (retried when the claim appears);
pre-provisioned snapshots (``volumeSnapshotContentName``) are not served.
Deleting a snapshot deletes its content. Restoring is the PVC binder's part
(``dataSource`` of kind VolumeSnapshot, see :mod:`.storage`).
"""

from __future__ import annotations

import copy

from ..store import rfc3339
from ..volumes import claim_path, copy_tree, remove_tree, snapshot_path
from .base import Controller
from .refs import PVCS, VOLUME_SNAPSHOTS, get_or_none

COMPONENT = "snapshot-controller"


class SnapshotController(Controller):
    """Takes VolumeSnapshots of PVCs as directory copies (see the module docstring)."""

    name = "snapshots"
    watches = (VOLUME_SNAPSHOTS, PVCS)

    async def reconcile(self, kind, obj, deleted) -> None:
        meta = obj["metadata"]
        if kind.key == PVCS:
            if not deleted and obj.get("status", {}).get("phase") == "Bound":
                # A claim that became Bound may be the source snapshots were waiting for.
                for snapshot in self.client.objects(self.client.kind(*VOLUME_SNAPSHOTS)):
                    if snapshot["metadata"]["namespace"] == meta["namespace"]:
                        await self._take(copy.deepcopy(snapshot))
        elif deleted:
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
        await self._write_status(current, {**current.get("status", {}), "readyToUse": True})
        await self.client.record_event(current, "SnapshotReady", f"Snapshot {namespace}/{meta['name']} is ready to use.", component=COMPONENT)

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
