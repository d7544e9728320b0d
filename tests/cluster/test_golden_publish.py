"""Publishing a stopped VM workspace's root disk as a golden image (:mod:`workspacespawner.vmdisk.publish`,
``workspacespawner image publish``) on the local cluster, whose snapshots and CDI clones are emulated.

Covers: the image-name check and the provenance (pure); by snapshot: a VolumeSnapshot of the root disk, ready, with
no owner label, and a DataSource in the golden-image namespace that becomes Ready, from which a new root disk gets
the files the workspace had; by clone: a DataVolume in the golden-image namespace and a DataSource naming its PVC,
likewise; the workspace (VM, DataVolume, PVC) unchanged and the user's disk bytes and disk list the same; refusals,
each audited and making nothing: the VM's VMI exists, the VM runs (runStrategy), a start holds the disk's attach
claim, the name is taken (by an earlier publish, or an imported image), a bad name, a user without that workspace;
the command end to end with its audit record.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from tests.support.lifecycleenv import NS, admin_command_args, wait_async
from tests.support.vmworkspace import GOLDEN_NS, base_image, clone_from, make_stopped_vm
from workspacespawner.admin import image as image_command
from workspacespawner.config.imagepublish import check_image_name
from workspacespawner.core import names
from workspacespawner.k8s.kinds import DATA_SOURCE, DATA_VOLUME, PVC, VIRTUAL_MACHINE, VMI, VOLUME_SNAPSHOT
from workspacespawner.k8s.objects import pointer, ready_condition
from workspacespawner.lifecycle.attach import Holder
from workspacespawner.lifecycle.audit import AuditLog
from workspacespawner.lifecycle.disks import DiskOpError, DiskOps, user_disk_bytes
from workspacespawner.vmdisk import publish

#: Storage, snapshots and CDI only: a VMI made by hand stays as it is (no virt-controller acts on it).
DISKS_ONLY = pytest.mark.parametrize("cluster_thread", [{"controllers": ("storage", "protection", "snapshots", "cdi")}],
                                     indirect=True)
COURSE = {"opt/course/setup.txt": "cuda 12.4, the course's conda env\n", "etc/motd": "Welcome to ML 101\n"}


def test_image_names():
    assert check_image_name("ubuntu-2404-ml101.v2") is None
    assert "at most 63" in check_image_name("a" * 64)
    assert "not a valid name" in check_image_name("ML_101")
    assert "not a valid name" in check_image_name("-x")
    assert check_image_name("")


def test_provenance_and_what_is_made_carry_no_owner_label():
    at = datetime(2026, 12, 4, 10, 0, tzinfo=UTC)
    prov = publish.Provenance("teach", at, "ann", "gpu", NS, "ws-ann-gpu-root", "golden-images/ubuntu")
    pvc = {"metadata": {"name": "ws-ann-gpu-root", "namespace": NS},
           "spec": {"accessModes": ["ReadWriteOnce"], "volumeMode": "Block", "storageClassName": "ceph-rbd",
                    "resources": {"requests": {"storage": "2Gi"}}}}
    snap = publish.make_golden_snapshot(name="golden-ml-1", pvc=pvc, provenance=prov, snapshot_class="rbd")
    clone = publish.make_golden_clone(name="ml", namespace=GOLDEN_NS, pvc=pvc, provenance=prov)
    for made in (snap, clone):
        assert names.OWNER_LABEL not in made["metadata"]["labels"]
        assert names.MANAGED_BY_LABEL not in made["metadata"]["labels"]
        assert publish.published_from(made) == {"by": "teach", "at": "2026-12-04T10:00:00Z", "user": "ann",
                                                      "server": "gpu", "namespace": NS, "disk": "ws-ann-gpu-root",
                                                      "golden_image": "golden-images/ubuntu"}
    assert snap["spec"] == {"source": {"persistentVolumeClaimName": "ws-ann-gpu-root"}, "volumeSnapshotClassName": "rbd"}
    assert clone["spec"] == {"source": {"pvc": {"namespace": NS, "name": "ws-ann-gpu-root"}},
                             "storage": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "2Gi"}},
                                         "storageClassName": "ceph-rbd", "volumeMode": "Block"}}


# -- on the cluster ---------------------------------------------------------------------------------------------------


async def _workspace_state(kube, ident) -> dict:
    """What must not change: the VM, root DataVolume and PVC (by resourceVersion), and the user's disks and bytes."""
    objs = {kind.kind: await kube.get(kind, NS, name) for kind, name in
            ((VIRTUAL_MACHINE, ident.vm), (DATA_VOLUME, ident.root_disk), (PVC, ident.root_disk))}
    selector = names.owner_selector(ident.user_name)
    pvcs, dvs = await kube.list(PVC, NS, labels=selector), await kube.list(DATA_VOLUME, NS, labels=selector)
    return {
        "versions": {k: o["metadata"]["resourceVersion"] for k, o in objs.items()},
        "bytes": user_disk_bytes(pvcs, dvs, ident.user_name),
        "listing": await DiskOps(kube, NS).listing(ident.user_name),
    }


async def _ready(kube, kind, namespace, name, check) -> dict:
    async def ready():
        obj = await kube.get(kind, namespace, name)
        return obj if obj is not None and check(obj) else None

    return await wait_async(ready, 60)


@DISKS_ONLY
@pytest.mark.parametrize("mode", ["snapshot", "clone"])
async def test_publish_makes_a_golden_image_new_disks_clone_and_leaves_the_workspace(cluster_thread, kube_objects,
                                                                                       audit_log, mode):
    base_image(cluster_thread)
    cluster = cluster_thread.cluster
    ident = await make_stopped_vm(kube_objects, cluster, "ann", "gpu", COURSE)
    before = await _workspace_state(kube_objects, ident)
    publisher = publish.GoldenPublisher(kube_objects, NS, GOLDEN_NS, audit=audit_log, actor="teach", mode=mode)

    done = await publisher.publish("ann", "gpu", "ml101.v1")

    assert (done.image, done.mode, done.disk, done.user) == (f"{GOLDEN_NS}/ml101.v1", mode, ident.root_disk, "ann")
    source_ns, source_name = done.source.split("/")
    if mode == "snapshot":
        assert source_ns == NS
        snap = await _ready(kube_objects, VOLUME_SNAPSHOT, NS, source_name, lambda s: (s.get("status") or {}).get("readyToUse"))
        assert snap["spec"]["source"] == {"persistentVolumeClaimName": ident.root_disk}
        assert not names.owner_name(snap["metadata"]) and names.OWNER_LABEL not in snap["metadata"]["labels"]
        expected_source = {"snapshot": {"namespace": NS, "name": source_name}}
    else:
        assert (source_ns, source_name) == (GOLDEN_NS, "ml101.v1")
        await _ready(kube_objects, DATA_VOLUME, GOLDEN_NS, "ml101.v1", lambda d: d["status"].get("phase") == "Succeeded")
        expected_source = {"pvc": {"namespace": GOLDEN_NS, "name": "ml101.v1"}}
    ds = await _ready(kube_objects, DATA_SOURCE, GOLDEN_NS, "ml101.v1", ready_condition)
    assert ds["spec"]["source"] == expected_source
    assert publish.published_from(ds) | {"at": ""} == {"by": "teach", "at": "", "user": "ann", "server": "gpu",
                                                               "namespace": NS, "disk": ident.root_disk,
                                                               "golden_image": f"{GOLDEN_NS}/ubuntu"}

    files = await clone_from(kube_objects, cluster, "ml101.v1", "ws-bob-root")
    for path, text in COURSE.items():
        assert (files / path).read_text() == text
    assert (files / "etc/os-release").read_text() == "ID=ubuntu\n"  # the base image's files came along

    assert await _workspace_state(kube_objects, ident) == before  # the source untouched, no quota counts the image
    [record] = audit_log.query(action="publish")
    assert (record.actor, record.user, record.server, record.disk, record.result) == ("teach", "ann", "gpu", ident.root_disk, "ok")
    assert record.before == {"disk": ident.root_disk, "golden_image": f"{GOLDEN_NS}/ubuntu"}
    via = {"snapshot": source_name} if mode == "snapshot" else {"datavolume": done.source}
    assert record.after == {"image": f"{GOLDEN_NS}/ml101.v1", "mode": mode, **via}


async def _nothing_published(kube) -> None:
    assert [d["metadata"]["name"] for d in await kube.list(DATA_SOURCE, GOLDEN_NS)] == ["ubuntu"]
    assert [s["metadata"]["name"] for s in await kube.list(VOLUME_SNAPSHOT, NS)] == []


@DISKS_ONLY
async def test_refusals_are_audited_and_make_nothing(cluster_thread, kube_objects, audit_log):
    base_image(cluster_thread)
    ident = await make_stopped_vm(kube_objects, cluster_thread.cluster, "ann")
    publisher = publish.GoldenPublisher(kube_objects, NS, GOLDEN_NS, audit=audit_log, actor="root")

    async def refused(user, image, reason, server=""):
        with pytest.raises(DiskOpError) as e:
            await publisher.publish(user, server, image)
        assert e.value.reason == reason, str(e.value)
        await _nothing_published(kube_objects)
        return str(e.value)

    assert "not a valid name" in await refused("ann", "ML_101", "bad-name")
    assert "at most 63" in await refused("ann", "a" * 64, "bad-name")
    assert "exists already" in await refused("ann", "ubuntu", "name-taken")  # the imported base image
    await refused("bob", "x", "not-found")  # bob has no VM workspace
    await refused("ann", "x", "not-found", server="gpu")  # nor ann one of that server

    # a start holds the attach claim on the root disk (its VMI not made yet)
    claim = Holder("ann", VMI.kind, ident.vm, datetime.now(UTC)).to_json()
    path = pointer("metadata", "annotations", names.ATTACH_ANNOTATION)
    await kube_objects.patch(DATA_VOLUME, NS, ident.root_disk, [{"op": "add", "path": path, "value": claim}])
    assert "is starting" in await refused("ann", "ml", "in-use")
    await kube_objects.patch(DATA_VOLUME, NS, ident.root_disk, [{"op": "remove", "path": path}])

    # the VM's VMI exists
    vmi = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
           "metadata": {"name": ident.vm, "namespace": NS, "labels": names.owner_labels("ann")},
           "spec": {"domain": {"devices": {}, "memory": {"guest": "1Gi"}},
                    "volumes": [{"name": "rootdisk", "dataVolume": {"name": ident.root_disk}}]}}
    await kube_objects.create(VMI, NS, vmi)
    assert "its VMI exists" in await refused("ann", "ml", "in-use")
    await kube_objects.delete(VMI, NS, ident.vm)

    # asked to run
    run = [{"op": "replace", "path": "/spec/runStrategy", "value": "Always"}]
    await kube_objects.patch(VIRTUAL_MACHINE, NS, ident.vm, run)
    assert "runStrategy Always" in await refused("ann", "ml", "in-use")
    await kube_objects.patch(VIRTUAL_MACHINE, NS, ident.vm, [{"op": "replace", "path": "/spec/runStrategy", "value": "Halted"}])

    # stopped again: published once, and a second publish under the same name is refused
    await publisher.publish("ann", "", "ml")
    with pytest.raises(DiskOpError) as again:
        await publisher.publish("ann", "", "ml")
    assert again.value.reason == "name-taken"
    results = [(r.user, r.after["image"].split("/")[1], r.result.split(":")[0]) for r in audit_log.query(action="publish")]
    assert results == [("ann", "ML_101", "refused"), ("ann", "a" * 64, "refused"), ("ann", "ubuntu", "refused"),
                       ("ann", "ml", "refused"), ("ann", "ml", "refused"), ("ann", "ml", "refused"),
                       ("ann", "ml", "ok"), ("ann", "ml", "refused")]


@DISKS_ONLY
def test_the_command_publishes_and_says_what_it_made(cluster_thread, tmp_path, capsys):
    from tests.support.lifecycleenv import with_kube

    base_image(cluster_thread)
    cluster = cluster_thread.cluster
    common, url = admin_command_args(tmp_path, cluster, "c.ImagePublish.mode = 'clone'\n")
    ident = cluster_thread.call(lambda cl: with_kube(cl.kubeconfig, lambda kube: make_stopped_vm(kube, cl, "ann", "", COURSE)),
                                timeout=90)

    assert image_command.main(["publish", "ann", "--name", "ml101", "--wait", "60", *common]) == 0
    out = capsys.readouterr().out
    assert f"as golden image {GOLDEN_NS}/ml101 (DataSource), by clone {GOLDEN_NS}/ml101" in out

    assert image_command.main(["publish", "ann", "--name", "ml101", "--via", "snapshot", *common]) == 1
    assert "exists already" in capsys.readouterr().err
    assert image_command.main(["publish", "ann", "--server", "nope", "--name", "x", *common]) == 1
    assert "not a VM workspace" in capsys.readouterr().err

    log = AuditLog.from_url(url)
    try:
        records = [(r.actor, r.disk, r.result.split(":")[0], json.dumps(r.after, sort_keys=True)) for r in log.query(action="publish")]
    finally:
        log.dispose()
    assert records == [
        ("root", ident.root_disk, "ok", json.dumps({"datavolume": f"{GOLDEN_NS}/ml101", "image": f"{GOLDEN_NS}/ml101",
                                                   "mode": "clone"}, sort_keys=True)),
        ("root", ident.root_disk, "refused", json.dumps({"image": f"{GOLDEN_NS}/ml101", "mode": "snapshot"}, sort_keys=True)),
    ]
