"""The local cluster's storage: PVC binding and provisioning, expansion, reclaim, snapshots and restore.

Drives the StorageController (PersistentVolume controller + ceph-csi
provisioner) and the SnapshotController through the store, the way a client's
writes reach them, and checks objects, Events and the volume directories.
Also the API server's DefaultStorageClass admission: a claim created without
a class gets the default one written into it, on create only.
"""

from __future__ import annotations

import datetime

import pytest
from localcluster.testing import create_object as create
from localcluster.testing import events_for as events
from localcluster.testing import get_object as get
from localcluster.testing import wait_for
from localcluster.volumes import claim_path, volume_path

from localcluster import LocalCluster

PVCS = ("", "v1", "persistentvolumeclaims")
PVS = ("", "v1", "persistentvolumes")
PODS = ("", "v1", "pods")
SNAPSHOTS = ("snapshot.storage.k8s.io", "v1", "volumesnapshots")
SNAPSHOT_CONTENTS = ("snapshot.storage.k8s.io", "v1", "volumesnapshotcontents")
SNAPSHOT_CLASSES = ("snapshot.storage.k8s.io", "v1", "volumesnapshotclasses")
SCS = ("storage.k8s.io", "v1", "storageclasses")


def claim(name: str, size: str = "1Gi", storage_class: str | None = "ceph-rbd", **spec) -> dict:
    body = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}, **spec},
    }
    if storage_class is not None:
        body["spec"]["storageClassName"] = storage_class
    return body


def phase(cluster, key, name, namespace="default"):
    obj = get(cluster, key, name, namespace)
    return obj and (obj.get("status") or {}).get("phase")


def snapshot(name: str, claim_name: str) -> dict:
    return {
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshot",
        "metadata": {"name": name},
        "spec": {"source": {"persistentVolumeClaimName": claim_name}},
    }


async def test_storage_classes_exist(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=("storage",)) as cluster:
        rbd = get(cluster, ("storage.k8s.io", "v1", "storageclasses"), "ceph-rbd", None)
        cephfs = get(cluster, ("storage.k8s.io", "v1", "storageclasses"), "cephfs", None)
        assert rbd["provisioner"] == "rbd.csi.ceph.com"
        assert rbd["allowVolumeExpansion"] is True
        assert rbd["reclaimPolicy"] == "Delete"
        assert rbd["volumeBindingMode"] == "Immediate"
        assert cephfs["provisioner"] == "cephfs.csi.ceph.com"


async def test_immediate_binding_provisions_a_volume(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=("storage",)) as cluster:
        pvc = create(cluster, PVCS, claim("home-ann", "5Gi"))
        await wait_for(lambda: phase(cluster, PVCS, "home-ann") == "Bound")
        bound = get(cluster, PVCS, "home-ann")
        pv_name = f"pvc-{pvc['metadata']['uid']}"
        assert bound["spec"]["volumeName"] == pv_name
        assert bound["status"]["capacity"] == {"storage": "5Gi"}
        assert bound["status"]["accessModes"] == ["ReadWriteOnce"]
        pv = get(cluster, PVS, pv_name, None)
        assert pv["status"]["phase"] == "Bound"
        assert pv["spec"]["csi"]["driver"] == "rbd.csi.ceph.com"
        assert pv["spec"]["claimRef"]["uid"] == pvc["metadata"]["uid"]
        assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Delete"
        assert pv["spec"]["storageClassName"] == "ceph-rbd"
        assert volume_path(cluster, pv_name).is_dir()
        assert claim_path(cluster, "default", "home-ann") == volume_path(cluster, pv_name)
        assert events(cluster, "home-ann", "ProvisioningSucceeded")


async def test_wait_for_first_consumer_binds_when_a_pod_is_placed(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=("storage",), volume_binding_mode="WaitForFirstConsumer") as cluster:
        create(cluster, PVCS, claim("home-bob"))
        await wait_for(lambda: events(cluster, "home-bob", "WaitForFirstConsumer"))
        event = events(cluster, "home-bob", "WaitForFirstConsumer")[0]
        assert event["message"] == "waiting for first consumer to be created before binding"
        assert phase(cluster, PVCS, "home-bob") == "Pending"
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "jupyter-bob"},
            "spec": {
                "containers": [{"name": "notebook", "image": "jupyter/base-notebook:latest"}],
                "volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": "home-bob"}}],
            },
        }
        create(cluster, PODS, pod)
        assert phase(cluster, PVCS, "home-bob") == "Pending"  # not placed yet
        placed = get(cluster, PODS, "jupyter-bob")
        placed["spec"]["nodeName"] = "cpu-node-1"
        cluster.store.replace(cluster.store.kind(*PODS), "default", "jupyter-bob", placed)
        await wait_for(lambda: phase(cluster, PVCS, "home-bob") == "Bound")
        annotations = get(cluster, PVCS, "home-bob")["metadata"]["annotations"]
        assert annotations["volume.kubernetes.io/selected-node"] == "cpu-node-1"


async def test_unknown_storage_class_stays_pending_with_a_warning(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=("storage",)) as cluster:
        create(cluster, PVCS, claim("home-x", storage_class="fast"))
        await wait_for(lambda: events(cluster, "home-x", "ProvisioningFailed"))
        event = events(cluster, "home-x", "ProvisioningFailed")[0]
        assert event["type"] == "Warning"
        assert event["message"] == 'storageclass.storage.k8s.io "fast" not found'
        assert phase(cluster, PVCS, "home-x") == "Pending"


async def test_claim_without_class_uses_the_default_class(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=("storage",)) as cluster:
        create(cluster, PVCS, claim("scratch", storage_class=None))
        await wait_for(lambda: phase(cluster, PVCS, "scratch") == "Bound")
        pv = get(cluster, PVS, get(cluster, PVCS, "scratch")["spec"]["volumeName"], None)
        assert pv["spec"]["storageClassName"] == "ceph-rbd"


def storage_class(name: str, default: bool) -> dict:
    annotations = {"storageclass.kubernetes.io/is-default-class": "true"} if default else {}
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name, "annotations": annotations},
            "provisioner": "rbd.csi.ceph.com"}


async def test_default_storage_class_is_written_on_create_only(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=()) as cluster:
        store = cluster.store
        create(cluster, PVCS, claim("before", storage_class=None))  # no default class yet: left unset
        create(cluster, SCS, storage_class("plain", default=False), None)
        create(cluster, SCS, storage_class("fast", default=True), None)
        assert create(cluster, PVCS, claim("home", storage_class=None))["spec"]["storageClassName"] == "fast"
        assert get(cluster, PVCS, "home")["spec"]["storageClassName"] == "fast"
        assert create(cluster, PVCS, claim("static", storage_class=""))["spec"]["storageClassName"] == ""
        assert create(cluster, PVCS, claim("chosen", storage_class="plain"))["spec"]["storageClassName"] == "plain"
        legacy = claim("legacy", storage_class=None)
        legacy["metadata"]["annotations"] = {"volume.beta.kubernetes.io/storage-class": "plain"}
        assert "storageClassName" not in create(cluster, PVCS, legacy)["spec"]
        before = get(cluster, PVCS, "before")
        before["metadata"]["labels"] = {"touched": "yes"}
        updated = store.replace(store.kind(*PVCS), "default", "before", before)
        assert updated["metadata"]["labels"] == {"touched": "yes"} and "storageClassName" not in updated["spec"]
        # Two defaults: the newest wins, then the first by name.
        store.clock = lambda: datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
        create(cluster, SCS, storage_class("newer-b", default=True), None)
        create(cluster, SCS, storage_class("newer-a", default=True), None)
        assert create(cluster, PVCS, claim("late", storage_class=None))["spec"]["storageClassName"] == "newer-a"


async def test_expansion_updates_volume_then_claim_capacity(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=("storage",)) as cluster:
        create(cluster, PVCS, claim("home-cy", "1Gi"))
        await wait_for(lambda: phase(cluster, PVCS, "home-cy") == "Bound")
        pvc = get(cluster, PVCS, "home-cy")
        pvc["spec"]["resources"]["requests"]["storage"] = "20Gi"
        cluster.store.replace(cluster.store.kind(*PVCS), "default", "home-cy", pvc)
        await wait_for(lambda: get(cluster, PVCS, "home-cy")["status"]["capacity"]["storage"] == "20Gi")
        assert get(cluster, PVS, pvc["spec"]["volumeName"], None)["spec"]["capacity"]["storage"] == "20Gi"
        assert events(cluster, "home-cy", "VolumeResizeSuccessful")


@pytest.mark.parametrize("policy", ["Delete", "Retain"])
async def test_deleted_claim_follows_reclaim_policy(tmp_path, policy):
    async with LocalCluster(state_dir=tmp_path, controllers=("storage", "protection")) as cluster:
        store = cluster.store
        sc_kind = store.kind("storage.k8s.io", "v1", "storageclasses")
        store.create(sc_kind, None, {
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "keep"},
            "provisioner": "rbd.csi.ceph.com", "reclaimPolicy": policy, "volumeBindingMode": "Immediate",
        })
        create(cluster, PVCS, claim("data", storage_class="keep"))
        await wait_for(lambda: phase(cluster, PVCS, "data") == "Bound")
        pv_name = get(cluster, PVCS, "data")["spec"]["volumeName"]
        (volume_path(cluster, pv_name) / "notes.txt").write_text("keep me?")
        store.delete(store.kind(*PVCS), "default", "data")
        if policy == "Delete":
            await wait_for(lambda: get(cluster, PVS, pv_name, None) is None)
            await wait_for(lambda: not volume_path(cluster, pv_name).exists())
        else:
            await wait_for(lambda: phase(cluster, PVS, pv_name, None) == "Released")
            assert (volume_path(cluster, pv_name) / "notes.txt").read_text() == "keep me?"


async def test_snapshot_and_restore_into_a_new_claim(tmp_path, caplog):
    async with LocalCluster(state_dir=tmp_path, controllers=("storage", "snapshots")) as cluster:
        create(cluster, PVCS, claim("home-dee", "2Gi"))
        await wait_for(lambda: phase(cluster, PVCS, "home-dee") == "Bound")
        home = claim_path(cluster, "default", "home-dee")
        (home / "work").mkdir()
        (home / "work" / "thesis.tex").write_text("\\chapter{One}")
        taken = create(cluster, SNAPSHOTS, snapshot("home-dee-1", "home-dee"))
        await wait_for(lambda: (get(cluster, SNAPSHOTS, "home-dee-1").get("status") or {}).get("readyToUse"))
        status = get(cluster, SNAPSHOTS, "home-dee-1")["status"]
        assert status["restoreSize"] == "2Gi"
        assert status["boundVolumeSnapshotContentName"] == f"snapcontent-{taken['metadata']['uid']}"
        assert status["creationTime"]
        # the content, as external-snapshotter makes it: CDI's clone from a snapshot reads its driver
        # the driver's default class is written into the snapshot, as snapshot-controller does (CDI requires it)
        assert get(cluster, SNAPSHOTS, "home-dee-1")["spec"]["volumeSnapshotClassName"] == "csi-rbdplugin-snapclass"
        content = get(cluster, SNAPSHOT_CONTENTS, status["boundVolumeSnapshotContentName"], None)
        assert content["spec"]["driver"] == "rbd.csi.ceph.com" and content["spec"]["deletionPolicy"] == "Delete"
        assert content["spec"]["volumeSnapshotClassName"] == "csi-rbdplugin-snapclass"
        assert content["spec"]["volumeSnapshotRef"] == {"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
                                                        "name": "home-dee-1", "namespace": "default", "uid": taken["metadata"]["uid"]}
        assert content["spec"]["source"]["volumeHandle"] and content["spec"]["sourceVolumeMode"] == "Filesystem"
        assert (content["status"]["readyToUse"], content["status"]["restoreSize"]) == (True, 2 * 1024**3)
        (home / "work" / "thesis.tex").write_text("overwritten after the snapshot")
        source = {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": "home-dee-1"}
        create(cluster, PVCS, claim("home-dee-restored", "2Gi", dataSource=source))
        await wait_for(lambda: phase(cluster, PVCS, "home-dee-restored") == "Bound")
        restored = claim_path(cluster, "default", "home-dee-restored")
        assert (restored / "work" / "thesis.tex").read_text() == "\\chapter{One}"
        copy_dir = tmp_path / "snapshots" / "default" / taken["metadata"]["uid"]
        assert copy_dir.is_dir()
        cluster.store.delete(cluster.store.kind(*SNAPSHOTS), "default", "home-dee-1")
        await wait_for(lambda: not copy_dir.exists())
        assert get(cluster, SNAPSHOT_CONTENTS, content["metadata"]["name"], None) is None
    # the volumes and contents it reads are not reconciled as snapshots (a KeyError on every PersistentVolume)
    assert not [r.getMessage() for r in caplog.records if "snapshots failed" in r.getMessage()]


async def test_a_snapshot_without_a_class_to_take_it_reports_an_error(tmp_path):
    """No default VolumeSnapshotClass for the claim's driver (an administrator removed it), or a named class that
    does not exist: the snapshot is not taken, and says why."""
    async with LocalCluster(state_dir=tmp_path, controllers=("storage", "snapshots")) as cluster:
        store = cluster.store
        store.delete(store.kind(*SNAPSHOT_CLASSES), None, "csi-rbdplugin-snapclass")
        create(cluster, PVCS, claim("home-eve", "1Gi"))
        await wait_for(lambda: phase(cluster, PVCS, "home-eve") == "Bound")
        create(cluster, SNAPSHOTS, snapshot("no-default", "home-eve"))
        named = snapshot("no-such-class", "home-eve")
        named["spec"]["volumeSnapshotClassName"] = "gold"
        create(cluster, SNAPSHOTS, named)
        for name, words in (("no-default", "0 default VolumeSnapshotClasses for driver rbd.csi.ceph.com"),
                            ("no-such-class", 'volumesnapshotclasses.snapshot.storage.k8s.io "gold" not found')):
            await wait_for(lambda name=name: (get(cluster, SNAPSHOTS, name).get("status") or {}).get("error"))
            status = get(cluster, SNAPSHOTS, name)["status"]
            assert status["readyToUse"] is False and words in status["error"]["message"], status


async def test_snapshot_of_a_missing_claim_reports_an_error(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=("storage", "snapshots")) as cluster:
        create(cluster, SNAPSHOTS, snapshot("orphan", "nope"))
        await wait_for(lambda: (get(cluster, SNAPSHOTS, "orphan").get("status") or {}).get("error"))
        status = get(cluster, SNAPSHOTS, "orphan")["status"]
        assert status["readyToUse"] is False
        assert '"nope"' in status["error"]["message"]
        assert status["error"]["time"]
        # The claim appearing later lets the snapshot be taken.
        create(cluster, PVCS, claim("nope"))
        await wait_for(lambda: get(cluster, SNAPSHOTS, "orphan")["status"].get("readyToUse"))


async def test_a_claim_for_a_volume_populator_is_left_to_it(tmp_path):
    """A ``dataSourceRef`` of a populator's kind (CDI's VolumeCloneSource) is not the provisioner's to fill: the claim
    stays Pending with no volume, as external-provisioner leaves it, until the populator binds it; a CSI clone of a
    PVC beside it is provisioned with the PVC's data (what CDI's csi-clone asks for)."""
    async with LocalCluster(state_dir=tmp_path, controllers=("storage",)) as cluster:
        create(cluster, PVCS, claim("golden", "1Gi"))
        await wait_for(lambda: phase(cluster, PVCS, "golden") == "Bound")
        (claim_path(cluster, "default", "golden") / "os-release").write_text("Debian")
        populator = {"apiGroup": "cdi.kubevirt.io", "kind": "VolumeCloneSource", "name": "volume-clone-source-1"}
        create(cluster, PVCS, claim("root", "2Gi", dataSourceRef=populator))
        create(cluster, PVCS, claim("tmp-pvc-1", "1Gi", dataSourceRef={"kind": "PersistentVolumeClaim", "name": "golden"}))
        await wait_for(lambda: phase(cluster, PVCS, "tmp-pvc-1") == "Bound")
        assert (claim_path(cluster, "default", "tmp-pvc-1") / "os-release").read_text() == "Debian"
        assert phase(cluster, PVCS, "root") == "Pending" and not get(cluster, PVCS, "root")["spec"].get("volumeName")
        assert not events(cluster, "root", "ProvisioningSucceeded")


async def test_a_second_look_at_a_provisioned_claim_neither_copies_again_nor_removes_the_volume(tmp_path, monkeypatch):
    """As on the real plane, where kube-controller-manager binds: a reconcile queued before the provisioner made the
    volume finds the claim still Pending. Meanwhile CDI's restore from a snapshot moved the volume to its target claim
    (the PV's ``claimRef``) and deleted its temporary claim. That second look used to copy the snapshot again and,
    finding the claim gone, remove the volume's folder: a restored disk empty though CDI said Succeeded (seen in CI).
    It now does nothing, as sig-storage's external-provisioner does; and a claim deleted during a copy leaves no
    folder behind, the volume's or the copy's."""
    from localcluster.controllers import storage

    copies = []
    copy_tree = storage.copy_tree

    async def counted(src, dst):
        copies.append(dst)
        await copy_tree(src, dst)

    monkeypatch.setattr(storage, "copy_tree", counted)
    async with LocalCluster(state_dir=tmp_path / "state", controllers=()) as cluster:
        cluster.real_control_plane = True  # the claim stays Pending once its volume is made
        await storage.ensure_storage_classes(cluster)
        klass = get(cluster, SCS, "ceph-rbd", None)
        source = tmp_path / "snapshot"
        source.mkdir()
        (source / "block.img").write_bytes(b"the snapshot's disk" + bytes(8192))
        prime = create(cluster, PVCS, claim("tmp-pvc-restore", "2Gi"))
        assert await storage.provision_volume(cluster, prime, klass, source=source) is not None
        pv_name = f"pvc-{prime['metadata']['uid']}"
        image = volume_path(cluster, pv_name) / "block.img"
        inode = image.stat().st_ino
        # CDI's rebind: the volume now belongs to the DataVolume's claim, and the temporary claim is gone
        target = create(cluster, PVCS, claim("ws-restored-root", "2Gi"))
        pvs = cluster.store.kind(*PVS)
        pv = get(cluster, PVS, pv_name, None)
        pv["spec"]["claimRef"] = {"kind": "PersistentVolumeClaim", "namespace": "default", "name": "ws-restored-root",
                                  "uid": target["metadata"]["uid"]}
        cluster.store.replace(pvs, None, pv_name, pv)
        cluster.store.patch(cluster.store.kind(*PVCS), "default", "tmp-pvc-restore", {"metadata": {"finalizers": None}},
                            "application/merge-patch+json")
        cluster.store.delete(cluster.store.kind(*PVCS), "default", "tmp-pvc-restore")
        assert get(cluster, PVCS, "tmp-pvc-restore") is None

        await storage.provision_volume(cluster, prime, klass, source=source)  # the queued second look
        assert len(copies) == 1
        assert image.stat().st_ino == inode and image.read_bytes().startswith(b"the snapshot's disk")

        gone = create(cluster, PVCS, claim("deleted-while-copied", "2Gi"))
        cluster.store.patch(cluster.store.kind(*PVCS), "default", "deleted-while-copied", {"metadata": {"finalizers": None}},
                            "application/merge-patch+json")
        cluster.store.delete(cluster.store.kind(*PVCS), "default", "deleted-while-copied")
        assert await storage.provision_volume(cluster, gone, klass, source=source) is None
        assert sorted(p.name for p in volume_path(cluster, pv_name).parent.iterdir()) == [pv_name]
