"""StorageController: Kubernetes' PersistentVolume controller plus the ceph-csi external-provisioner.

Mirrors what ``kube-controller-manager``'s persistentvolume-binder and the
CSI sidecars (external-provisioner, external-resizer) do for a cluster whose
storage is ceph-csi (``rbd.csi.ceph.com``, ``cephfs.csi.ceph.com``):

* On start it creates the StorageClasses ``ceph-rbd`` (the default class,
  expandable, binding mode from ``cluster.volume_binding_mode``, CDI's clone
  strategy ``csi-clone``: :data:`CDI_CLONE_STRATEGY`) and
  ``cephfs`` (Immediate) when they are missing.
* A Pending PVC whose class binds ``Immediate`` gets a dynamically provisioned
  PersistentVolume ``pvc-<uid>`` and is bound (``spec.volumeName``, status
  ``Bound``), with the Event ``ProvisioningSucceeded``. With
  ``WaitForFirstConsumer`` it waits (Event ``WaitForFirstConsumer``) until a
  Pod or VMI using it is placed on a node, or until the
  ``volume.kubernetes.io/selected-node`` annotation names one, as the
  scheduler's volume binder would set it. An unknown class gives the Warning
  ``ProvisioningFailed``. A class whose provisioner is not one of
  :data:`PROVISIONERS` (the ceph-csi drivers this cluster runs) leaves the
  claim Pending with the Event ``ExternalProvisioning``, as a cluster
  without that provisioner does. A PVC created with no class got the default one
  from the API server (see :mod:`..defaults`); one created while there was
  no default class provisions from the default class once there is one.
* A PVC naming a PersistentVolume (``spec.volumeName``) is bound to it
  statically.
* ``dataSource``/``dataSourceRef`` of a ready VolumeSnapshot (restore) or of a
  bound PVC (CSI clone) provisions the new volume with a copy of that data. A
  ``dataSourceRef`` of any other kind names a volume populator (CDI's
  ``VolumeCloneSource``, say): the provisioner leaves that claim alone, as
  external-provisioner does, and the populator fills it (CDI binds it to the
  volume of a CSI clone it made).
* Growing a bound PVC's storage request expands the volume when the class
  allows it: PV ``spec.capacity``, then PVC ``status.capacity``, after
  ``resize_seconds``.
* A volume whose claim is gone is ``Released``, then follows its reclaim
  policy: ``Delete`` removes its data and deletes the PV (which goes once the
  pv-protection finalizer is off, see :mod:`.protection`), ``Retain`` leaves
  it ``Released``.

Each PersistentVolume's data is a directory (see :mod:`..volumes`).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import secrets
from pathlib import Path

from ..defaults import DEFAULT_CLASS_ANNOTATIONS, default_storage_class
from ..errors import ApiError
from ..store import rfc3339
from ..validation import parse_quantity
from ..volumes import claim_path, copy_tree, remove_tree, snapshot_path, volume_path
from .base import Controller
from .refs import PODS, PVCS, PVS, STORAGE_CLASSES, VMIS, VOLUME_SNAPSHOTS, claim_names, get_or_none

log = logging.getLogger("localcluster.storage")

COMPONENT = "persistentvolume-controller"
DEFAULT_CLASS_ANNOTATION = DEFAULT_CLASS_ANNOTATIONS[0]
SELECTED_NODE_ANNOTATION = "volume.kubernetes.io/selected-node"
RBD_PROVISIONER = "rbd.csi.ceph.com"
CEPHFS_PROVISIONER = "cephfs.csi.ceph.com"
#: CDI's StorageClass annotation choosing how it clones into the class: ``csi-clone``, a clone in the storage (ceph-csi
#: clones RBD images), as an administrator of a Ceph cluster sets it; CDI's StorageProfile then says so.
CDI_CLONE_STRATEGY = "cdi.kubevirt.io/clone-strategy"
#: The CSI provisioners this cluster runs; a class of any other waits for an external one that never comes.
PROVISIONERS = (RBD_PROVISIONER, CEPHFS_PROVISIONER)


def default_storage_classes(binding_mode: str) -> list[dict]:
    """The StorageClasses of the local cluster, shaped like a Rook-Ceph install's."""
    return [
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": "ceph-rbd", "annotations": {DEFAULT_CLASS_ANNOTATION: "true", CDI_CLONE_STRATEGY: "csi-clone"}},
            "provisioner": RBD_PROVISIONER,
            "parameters": {
                "clusterID": "rook-ceph",
                "pool": "replicapool",
                "imageFormat": "2",
                "imageFeatures": "layering",
                "csi.storage.k8s.io/fstype": "ext4",
            },
            "allowVolumeExpansion": True,
            "reclaimPolicy": "Delete",
            "volumeBindingMode": binding_mode,
        },
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": "cephfs"},
            "provisioner": CEPHFS_PROVISIONER,
            "parameters": {"clusterID": "rook-ceph", "fsName": "myfs", "pool": "myfs-replicated"},
            "allowVolumeExpansion": True,
            "reclaimPolicy": "Delete",
            "volumeBindingMode": "Immediate",
        },
    ]


async def ensure_storage_classes(cluster, client=None) -> None:
    """Create the local cluster's StorageClasses that are missing (existing ones are left as they are), through ``client`` (default ``cluster.client``)."""
    store = client or cluster.client
    kind = store.kind(*STORAGE_CLASSES)
    for storage_class in default_storage_classes(cluster.volume_binding_mode):
        if get_or_none(store, STORAGE_CLASSES, None, storage_class["metadata"]["name"]) is None:
            await store.create(kind, None, storage_class)


def storage_class_for(store, pvc: dict) -> tuple[str, dict | None]:
    """The class name a PVC provisions from and the StorageClass (None if missing).

    A PVC without ``storageClassName`` (created before there was a default
    class) uses the default class.
    """
    name = pvc["spec"].get("storageClassName")
    if name is None:
        default = default_storage_class(store)
        return (default["metadata"]["name"], copy.deepcopy(default)) if default else ("", None)
    return name, (get_or_none(store, STORAGE_CLASSES, None, name) if name else None)


def populated_elsewhere(pvc: dict) -> bool:
    """Whether ``pvc``'s ``dataSourceRef`` names a volume populator (any kind but a PVC or a VolumeSnapshot, such as
    CDI's ``VolumeCloneSource``): a CSI provisioner leaves such a claim to its populator."""
    ref = pvc["spec"].get("dataSourceRef")
    if not ref:
        return False
    return (ref.get("apiGroup") or "", ref.get("kind")) not in (("", "PersistentVolumeClaim"), (VOLUME_SNAPSHOTS[0], "VolumeSnapshot"))


def requested_storage(pvc: dict) -> str:
    """The PVC's ``spec.resources.requests.storage`` (``"1Gi"`` if the client left it out)."""
    return str(((pvc["spec"].get("resources") or {}).get("requests") or {}).get("storage", "1Gi"))


def make_persistent_volume(pvc: dict, storage_class: dict, pv_name: str) -> dict:
    """The PersistentVolume the ceph-csi provisioner creates for ``pvc``."""
    meta = pvc["metadata"]
    provisioner = storage_class["provisioner"]
    parameters = storage_class.get("parameters") or {}
    attributes = {k: v for k, v in parameters.items() if not k.startswith("csi.storage.k8s.io/")}
    image = ("imageName" if provisioner == RBD_PROVISIONER else "subvolumeName", f"csi-vol-{meta['uid']}")
    attributes[image[0]] = image[1]
    csi = {
        "driver": provisioner,
        "volumeHandle": f"0001-0009-rook-ceph-0000000000000001-{meta['uid']}",
        "volumeAttributes": attributes,
    }
    if "csi.storage.k8s.io/fstype" in parameters:
        csi["fsType"] = parameters["csi.storage.k8s.io/fstype"]
    spec = {
        "accessModes": list(pvc["spec"].get("accessModes") or ["ReadWriteOnce"]),
        "capacity": {"storage": requested_storage(pvc)},
        "claimRef": {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": meta["uid"],
            "resourceVersion": meta["resourceVersion"],
        },
        "csi": csi,
        "persistentVolumeReclaimPolicy": storage_class.get("reclaimPolicy", "Delete"),
        "storageClassName": storage_class["metadata"]["name"],
        "volumeMode": pvc["spec"].get("volumeMode", "Filesystem"),
    }
    if storage_class.get("mountOptions"):
        spec["mountOptions"] = list(storage_class["mountOptions"])
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": pv_name, "annotations": {"pv.kubernetes.io/provisioned-by": provisioner}},
        "spec": spec,
    }


async def bind_claim(store, pvc: dict, pv: dict) -> dict:
    """Bind ``pvc`` and ``pv`` to each other (both objects and statuses); returns the bound PVC.

    The binder's two halves: the PV's ``claimRef`` and phase ``Bound``, then
    the claim's ``spec.volumeName``, bind annotations and status (phase,
    accessModes, capacity from the volume).
    """
    pv_kind, pvc_kind = store.kind(*PVS), store.kind(*PVCS)
    meta = pvc["metadata"]
    name = pv["metadata"]["name"]
    ref = pv["spec"].get("claimRef") or {}
    if ref.get("uid") != meta["uid"]:
        pv["spec"]["claimRef"] = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": meta["uid"],
        }
        pv = await store.replace(pv_kind, None, name, pv)
    pv["status"] = {"phase": "Bound"}
    await store.replace(pv_kind, None, name, pv, subresource="status")
    claim = store.get(pvc_kind, meta["namespace"], meta["name"])
    claim["spec"]["volumeName"] = name
    annotations = claim["metadata"].setdefault("annotations", {})
    annotations["pv.kubernetes.io/bind-completed"] = "yes"
    annotations["pv.kubernetes.io/bound-by-controller"] = "yes"
    provisioner = (pv["spec"].get("csi") or {}).get("driver")
    if provisioner:
        annotations["volume.kubernetes.io/storage-provisioner"] = provisioner
        annotations["volume.beta.kubernetes.io/storage-provisioner"] = provisioner
    claim = await store.replace(pvc_kind, meta["namespace"], meta["name"], claim)
    claim["status"] = {
        "phase": "Bound",
        "accessModes": list(pv["spec"].get("accessModes") or []),
        "capacity": dict(pv["spec"].get("capacity") or {}),
    }
    return await store.replace(pvc_kind, meta["namespace"], meta["name"], claim, subresource="status")


async def provision_volume(cluster, pvc: dict, storage_class: dict, *, source=None, client=None) -> dict | None:
    """Provision a PersistentVolume ``pvc-<uid>`` for ``pvc`` and bind the two; returns the bound PVC.

    On the real control plane (``cluster.real_control_plane``, whose
    kube-controller-manager binds), only the volume is created, its
    ``claimRef`` naming the claim, as ceph-csi's external-provisioner does;
    the claim is returned as it was.

    ``source`` is a directory whose content the new volume starts with (a
    snapshot restore or a clone); None starts empty. Returns None if the claim
    went away while its data was being copied (the copy is then removed).
    Reads and writes go through ``client`` (default ``cluster.client``).

    The data of a claim whose volume exists is never copied or removed again,
    as external-provisioner does: on the real plane the claim stays Pending
    until kube-controller-manager binds it, so a reconcile queued meanwhile
    looks at it again, and CDI may have moved the volume to another claim by
    then (a DataVolume's restore from a snapshot rebinds its temporary
    claim's volume).
    """
    store = client or cluster.client
    meta = pvc["metadata"]
    pv_name = f"pvc-{meta['uid']}"
    pv = get_or_none(store, PVS, None, pv_name)
    if pv is None:
        await _fill_volume(volume_path(cluster, pv_name), source)
    current = get_or_none(store, PVCS, meta["namespace"], meta["name"])
    if current is None or current["metadata"]["uid"] != meta["uid"]:
        if get_or_none(store, PVS, None, pv_name) is None:
            await remove_tree(volume_path(cluster, pv_name))  # no volume was made of it, by this caller or another
        return None
    if current.get("status", {}).get("phase") == "Bound":
        return current  # provisioned meanwhile by another caller
    if pv is None:
        pv = await store.create(store.kind(*PVS), None, make_persistent_volume(current, storage_class, pv_name))
        await store.record_event(current, "ProvisioningSucceeded", f"Successfully provisioned volume {pv_name}",
                                 component=f"{storage_class['provisioner']}_csi-provisioner")
    # The external-provisioner only creates the volume; the PV binder binds (here, or kube-controller-manager's).
    return await bind_claim(store, current, pv) if not getattr(cluster, "real_control_plane", False) else current


async def _fill_volume(path: Path, source: Path | None) -> None:
    """Make ``path`` a new volume's folder: a copy of ``source`` (None: empty), made beside it and renamed into place
    once whole, so that a volume never holds half a copy; a folder already there (another caller's) is kept."""
    staging = path.with_name(f".{path.name}.{secrets.token_hex(4)}.partial")  # one per caller
    if source is not None:
        await copy_tree(source, staging)
    else:
        await asyncio.to_thread(staging.mkdir, parents=True)
    if path.exists():  # another caller's copy came first
        await remove_tree(staging)
        return
    try:
        await asyncio.to_thread(staging.rename, path)
    except OSError:  # it came first meanwhile
        await remove_tree(staging)


class StorageController(Controller):
    """Binds, provisions, expands and reclaims PersistentVolumes (see the module docstring).

    Knob: ``resize_seconds`` (seconds, default 0) between a PVC's request
    growing and its ``status.capacity`` following.

    On the real control plane (``cluster.real_control_plane``) it
    plays only ceph-csi's sidecars: kube-controller-manager's PV controller
    binds claims (static and provisioned), marks volumes Available and
    Released; this controller provisions volumes, expands them, and deletes a
    Released volume whose reclaim policy is ``Delete``, as external-provisioner
    does.
    """

    name = "storage"
    watches = (PVCS, PVS, STORAGE_CLASSES, PODS, VMIS, VOLUME_SNAPSHOTS)

    def __init__(self, cluster):
        super().__init__(cluster)
        self.resize_seconds = 0.0
        self.binder = not self.real_control_plane

    async def start(self) -> None:
        await ensure_storage_classes(self.cluster, self.client)
        await super().start()

    async def reconcile(self, kind, obj, deleted) -> None:
        if kind.key == PVCS:
            if deleted:
                await self._release_volumes_of(obj)
            else:
                await self._sync_claim(obj)
        elif kind.key == PVS:
            await self._sync_volume(obj, deleted)
        elif not deleted:
            wanted = self._unblocked_claims(kind.key, obj)
            namespace = obj["metadata"].get("namespace")
            for pvc in self.client.objects(self.client.kind(*PVCS)):
                meta = pvc["metadata"]
                if pvc.get("status", {}).get("phase") != "Pending" or namespace not in (None, meta["namespace"]):
                    continue
                if wanted is None or meta["name"] in wanted:
                    await self._sync_claim(copy.deepcopy(pvc))

    @staticmethod
    def _unblocked_claims(key, obj: dict) -> set[str] | None:
        """Claims a change may unblock: those of a Pod or VMI now on a node (None: any pending claim)."""
        if key == PODS:
            on_node = (obj.get("spec") or {}).get("nodeName")
        elif key == VMIS:
            on_node = (obj.get("status") or {}).get("nodeName")
        else:
            return None  # a StorageClass or a VolumeSnapshot: any pending claim may use it
        pod_name = obj["metadata"]["name"] if key == PODS else None
        return claim_names(obj["spec"].get("volumes"), pod_name) if on_node else set()

    # -- claims ------------------------------------------------------------

    async def _sync_claim(self, pvc: dict) -> None:
        meta = pvc["metadata"]
        pvc = get_or_none(self.client, PVCS, meta["namespace"], meta["name"])
        if pvc is None or pvc["metadata"].get("deletionTimestamp"):
            return
        if pvc.get("status", {}).get("phase") == "Bound":
            await self._expand(pvc)
        elif pvc.get("status", {}).get("phase") == "Pending":
            if pvc["spec"].get("volumeName"):
                if self.binder:
                    await self._bind_static(pvc)
            else:
                await self._provision(pvc)

    async def _bind_static(self, pvc: dict) -> None:
        pv = get_or_none(self.client, PVS, None, pvc["spec"]["volumeName"])
        if pv is None or pv.get("status", {}).get("phase") == "Released":
            return
        ref = pv["spec"].get("claimRef") or {}
        meta = pvc["metadata"]
        if ref and (ref.get("namespace"), ref.get("name")) != (meta["namespace"], meta["name"]):
            return
        if ref.get("uid") not in (None, meta["uid"]):
            return
        await bind_claim(self.client, pvc, pv)

    async def _provision(self, pvc: dict) -> None:
        class_name, storage_class = storage_class_for(self.client, pvc)
        if not class_name:
            return  # storageClassName "" asks for static binding only
        if storage_class is None:
            await self._warn(pvc, "ProvisioningFailed", f'storageclass.storage.k8s.io "{class_name}" not found')
            return
        if populated_elsewhere(pvc):
            return  # as external-provisioner: the volume populator of that kind fills this claim (CDI rebinds one)
        if storage_class.get("volumeBindingMode") == "WaitForFirstConsumer" and not await self._select_node(pvc):
            await self.client.record_event(pvc,
                "WaitForFirstConsumer",
                "waiting for first consumer to be created before binding",
                component=COMPONENT,
            )
            return
        if storage_class["provisioner"] not in PROVISIONERS:
            await self.client.record_event(
                pvc,
                "ExternalProvisioning",
                f"Waiting for a volume to be created either by the external provisioner '{storage_class['provisioner']}' "
                "or manually by the system administrator. If volume creation is delayed, please verify that the "
                "provisioner is running and correctly registered.",
                component=COMPONENT,
            )
            return
        source, problem = self._data_source(pvc)
        if problem:
            await self._warn(pvc, "ProvisioningFailed", problem, component=f"{storage_class['provisioner']}_csi-provisioner")
            return
        await provision_volume(self.cluster, pvc, storage_class, source=source, client=self.client)

    async def _select_node(self, pvc: dict) -> str | None:
        """The node a WaitForFirstConsumer claim is provisioned for: annotated, or its consumer's."""
        meta = pvc["metadata"]
        node = meta.get("annotations", {}).get(SELECTED_NODE_ANNOTATION)
        if node:
            return node
        node = self._consumer_node(meta["namespace"], meta["name"])
        if node:
            pvc["metadata"].setdefault("annotations", {})[SELECTED_NODE_ANNOTATION] = node
            await self.client.replace(self.client.kind(*PVCS), meta["namespace"], meta["name"], pvc)
        return node

    def _consumer_node(self, namespace: str, claim: str) -> str | None:
        """The node of a Pod or VMI placed there that uses ``claim`` (directly or as its DataVolume)."""
        for pod in self.client.objects(self.client.kind(*PODS)):
            node = pod.get("spec", {}).get("nodeName")
            if pod["metadata"]["namespace"] == namespace and node and claim in claim_names(pod["spec"].get("volumes"), pod["metadata"]["name"]):
                return node
        for vmi in self.client.objects(self.client.kind(*VMIS)):
            node = (vmi.get("status") or {}).get("nodeName")
            if vmi["metadata"]["namespace"] == namespace and node and claim in claim_names(vmi["spec"].get("volumes")):
                return node
        return None

    def _data_source(self, pvc: dict):
        """``(directory, None)`` to start the volume from, ``(None, None)`` for an empty one, or ``(None, problem)``."""
        ref = pvc["spec"].get("dataSourceRef") or pvc["spec"].get("dataSource")
        if not ref:
            return None, None
        namespace = ref.get("namespace") or pvc["metadata"]["namespace"]
        name, kind = ref.get("name"), ref.get("kind")
        prefix = f"error getting handle for DataSource Type {kind} by Name {name}"
        if kind == "VolumeSnapshot" and ref.get("apiGroup") == VOLUME_SNAPSHOTS[0]:
            snapshot = get_or_none(self.client, VOLUME_SNAPSHOTS, namespace, name)
            if snapshot is None:
                return None, f'{prefix}: error getting snapshot {name} from api server: volumesnapshots.snapshot.storage.k8s.io "{name}" not found'
            if not (snapshot.get("status") or {}).get("readyToUse"):
                return None, f"{prefix}: snapshot {name} is not Ready"
            return snapshot_path(self.cluster, namespace, snapshot["metadata"]["uid"]), None
        if kind == "PersistentVolumeClaim" and not ref.get("apiGroup"):
            path = claim_path(self.cluster, namespace, name, self.client)
            if path is None:
                return None, f'{prefix}: persistentvolumeclaims "{name}" not found or not bound'
            return path, None
        return None, None

    async def _warn(self, pvc: dict, reason: str, message: str, component: str = COMPONENT) -> None:
        await self.client.record_event(pvc, reason, message, type="Warning", component=component)

    # -- expansion ---------------------------------------------------------

    async def _expand(self, pvc: dict) -> None:
        want = requested_storage(pvc)
        have = (pvc.get("status") or {}).get("capacity", {}).get("storage")
        try:
            if have is None or parse_quantity(want) <= parse_quantity(have):
                return
        except ValueError:
            return
        _, storage_class = storage_class_for(self.client, pvc)
        if not storage_class or not storage_class.get("allowVolumeExpansion"):
            return
        meta = pvc["metadata"]
        pv_name = pvc["spec"]["volumeName"]
        component = f"{storage_class['provisioner']}_csi-resizer"
        await self.client.record_event(pvc, "Resizing", f"External resizer is resizing volume {pv_name}", component=component)
        if self.resize_seconds:
            await asyncio.sleep(self.resize_seconds)
        pv = get_or_none(self.client, PVS, None, pv_name)
        if pv is not None:
            pv["spec"]["capacity"]["storage"] = want
            await self.client.replace(self.client.kind(*PVS), None, pv_name, pv)
        pvc = get_or_none(self.client, PVCS, meta["namespace"], meta["name"])
        if pvc is None:
            return
        pvc["status"].setdefault("capacity", {})["storage"] = want
        await self.client.replace(self.client.kind(*PVCS), meta["namespace"], meta["name"], pvc, subresource="status")
        await self.client.record_event(pvc, "VolumeResizeSuccessful", "Resize volume succeeded", component=component)

    # -- reclaim -----------------------------------------------------------

    async def _release_volumes_of(self, pvc: dict) -> None:
        if not self.binder:
            return  # the PV controller marks them Released; _sync_volume reclaims then
        uid = pvc["metadata"]["uid"]
        for pv in self.client.objects(self.client.kind(*PVS)):
            if (pv["spec"].get("claimRef") or {}).get("uid") == uid:
                await self._reclaim(copy.deepcopy(pv))

    async def _sync_volume(self, pv: dict, deleted: bool) -> None:
        name = pv["metadata"]["name"]
        if deleted:
            if pv["spec"].get("persistentVolumeReclaimPolicy", "Delete") == "Delete":
                await remove_tree(volume_path(self.cluster, name))
            return
        pv = get_or_none(self.client, PVS, None, name)
        if pv is None:
            return
        ref = pv["spec"].get("claimRef") or {}
        phase = (pv.get("status") or {}).get("phase")
        if not self.binder:
            if phase == "Released" and pv["metadata"].get("annotations", {}).get("pv.kubernetes.io/provisioned-by") in (
                RBD_PROVISIONER,
                CEPHFS_PROVISIONER,
            ):
                await self._reclaim(pv)
            return
        if phase == "Pending":
            # A volume created by hand (statically): Available until a claim binds it.
            pv["status"] = {"phase": "Available"}
            await self.client.replace(self.client.kind(*PVS), None, name, pv, subresource="status")
        elif phase == "Bound" and ref.get("uid"):
            claim = get_or_none(self.client, PVCS, ref.get("namespace"), ref.get("name", ""))
            if claim is None or claim["metadata"]["uid"] != ref["uid"]:
                await self._reclaim(pv)

    async def _reclaim(self, pv: dict) -> None:
        name = pv["metadata"]["name"]
        if (pv.get("status") or {}).get("phase") != "Released":
            pv["status"] = {"phase": "Released", "lastPhaseTransitionTime": rfc3339(self.client.clock())}
            await self.client.replace(self.client.kind(*PVS), None, name, pv, subresource="status")
        if pv["spec"].get("persistentVolumeReclaimPolicy", "Delete") == "Delete":
            # the volume's data first, then its PV object: as external-provisioner deletes the backing volume first
            await remove_tree(volume_path(self.cluster, name))
            try:
                await self.client.delete(self.client.kind(*PVS), None, name)
            except ApiError as e:
                if e.code != 404:
                    raise
            log.info("deleted volume %s (reclaim policy Delete)", name)
