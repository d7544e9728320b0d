"""Disk operations and their audit records (:mod:`workspacespawner.lifecycle.disks`, ``workspacespawner disk``).

Covers: which PVC is a workspace's home (pure: a restored home for the
template's slot, a restore in progress, the latest retained one, never
someone else's); the expand decision (shrink, over the limit); the disk
limit from the quota settings or the spawner's trait; against the local
cluster: expand (grown, refused when shrinking or over the limit, each with
its audit record), a profile asking for a bigger home at start, a snapshot
(VolumeSnapshot of the home, ready, audited), a restore refused while a Pod
uses the home and done once it is stopped (a new PVC with the snapshot's
data, the old home Retained, the next start's home the new one, audited);
the command's ``list``, ``expand``, ``snapshot --wait`` and ``restore``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import kubernetes
import pytest
from localcluster.volumes import claim_path

from tests.support.lifecycleenv import (
    NS,
    admin_command_args,
    home_manifest,
    make_home,
    phase_label,
    start_pod,
    wait_async,
)
from workspacespawner.admin import disk as disk_command
from workspacespawner.core import names
from workspacespawner.k8s.kinds import POD, PVC, VOLUME_SNAPSHOT
from workspacespawner.lifecycle import disks, phases
from workspacespawner.lifecycle.audit import AuditLog
from workspacespawner.lifecycle.phases import Phase, Status
from workspacespawner.quota.config import WorkspaceQuota

GI = 2**30
T0 = datetime(2025, 6, 1, tzinfo=UTC)


def pvc(name: str, user: str = "ann", *, slot: str | None = None, phase: Status | None = None, created: datetime = T0) -> dict:
    annotations = names.owner_annotations(user)
    labels = names.owner_labels(user)
    if slot:
        annotations[names.HOME_SLOT_ANNOTATION] = slot
    if phase:
        labels[names.PHASE_LABEL] = str(phase.phase)
        annotations[names.LIFECYCLE_ANNOTATION] = json.dumps(phase.to_state())
    return {"metadata": {"name": name, "labels": labels, "annotations": annotations, "creationTimestamp": created.isoformat()}}


def test_choose_home():
    old = pvc("home-ann", phase=Status(Phase.RETAINED, since=T0 + timedelta(days=1)))
    new = pvc("home-ann-r1", slot="home-ann", phase=Status(Phase.STOPPED), created=T0 + timedelta(days=1))
    restoring = pvc("home-ann-r2", slot="home-ann", phase=Status(Phase.PROVISIONING_DISK), created=T0 + timedelta(days=2))
    other_slot = pvc("home-ann--gpu")
    theirs = pvc("home-ann-x", user="anna", slot="home-ann", created=T0 + timedelta(days=3))
    assert disks.choose_home([old, new, restoring, other_slot, theirs], "ann", "home-ann") is new
    assert disks.choose_home([old, restoring], "ann", "home-ann") is restoring
    later = pvc("home-ann-r1", slot="home-ann", phase=Status(Phase.RETAINED, since=T0 + timedelta(days=5)))
    assert disks.choose_home([old, later], "ann", "home-ann") is later  # a deleted user gets the home they had last
    gone = pvc("home-ann", phase=Status(Phase.DELETING_DISK))
    assert disks.choose_home([gone, theirs], "ann", "home-ann") is None
    assert disks.choose_home([pvc("home-ann")], "ann", "home-ann")["metadata"]["name"] == "home-ann"  # made before the lifecycle


def test_home_candidates_are_found_by_owner_and_slot():
    claim = pvc("claim-ann", phase=Status(Phase.STOPPED))  # made under the template of before: claim-{username}
    assert disks.home_candidates([claim], "ann", "home-ann", server="") == [claim]
    by_hand = pvc("anns-files")  # an admin's PVC with ann's owner labels, no phase record
    assert disks.home_candidates([by_hand, pvc("x", user="anna")], "ann", "home-ann", server="") == [by_hand]
    assert disks.home_candidates([claim, by_hand], "ann", "home-ann", server="") == [by_hand, claim]  # the caller refuses
    exact = pvc("home-ann", phase=Status(Phase.STOPPED))
    assert disks.home_candidates([claim, exact], "ann", "home-ann", server="") == [exact]
    gpu = pvc("claim-ann--gpu", phase=Status(Phase.STOPPED, server="gpu"))
    assert disks.home_candidates([gpu], "ann", "home-ann", server="") == []  # another server's home
    assert disks.home_candidates([gpu], "ann", "home-ann--gpu", server="gpu") == [gpu]
    assert disks.home_candidates([gpu], "ann", "home-ann", server=None) == [gpu]  # a home shared by every server
    root = pvc("vm-ann-root")
    root["metadata"]["labels"][names.DISK_LABEL] = names.ROOT_DISK
    gone = pvc("claim-ann", phase=Status(Phase.DELETING_DISK))
    assert disks.home_candidates([root, gone], "ann", "home-ann", server="") == []


def test_check_expand():
    assert disks.check_expand(10 * GI, 5 * GI, 0, None) == "shrink"
    assert disks.check_expand(10 * GI, 20 * GI, 30 * GI, 50 * GI) is None
    assert disks.check_expand(10 * GI, 21 * GI, 30 * GI, 50 * GI) == "over-quota"
    assert disks.check_expand(10 * GI, 10 * GI, 60 * GI, 50 * GI) is None  # no growth, nothing to refuse


def test_disk_limit_from_quota_or_trait():
    quota = WorkspaceQuota(max_disk="50Gi", group_limits={"research": {"max_disk": "500Gi"}})
    assert disks.disk_limit(quota, "ann", {"research"}, "1Gi") == 500 * GI
    assert disks.disk_limit(quota, "ann", set(), None) == 50 * GI
    off = WorkspaceQuota(enabled=False)
    assert disks.disk_limit(off, "ann", set(), "100Gi") == 100 * GI
    assert disks.disk_limit(off, "ann", set(), None) is None


# -- on the cluster --------------------------------------------------------------------------------


async def test_expand_and_its_audit_records(kube_objects, audit_log):
    await make_home(kube_objects, "ann")
    await make_home(kube_objects, "ann", "home-ann--gpu")
    ops = disks.DiskOps(kube_objects, NS, audit=audit_log, actor="root")
    grown = await ops.expand("ann", "home-ann", "2Gi", limit=3 * GI)
    assert grown["spec"]["resources"]["requests"]["storage"] == "2Gi"

    async def resized():
        return ((await kube_objects.get(PVC, NS, "home-ann"))["status"].get("capacity") or {}).get("storage") == "2Gi"

    await wait_async(resized)
    with pytest.raises(disks.DiskOpError) as shrink:
        await ops.expand("ann", "home-ann", "1Gi", limit=None)
    assert shrink.value.reason == "shrink"
    with pytest.raises(disks.DiskOpError) as over:
        await ops.expand("ann", "home-ann", "3Gi", limit=3 * GI)
    assert over.value.reason == "over-quota" and "hold 1Gi of their 3Gi, so at most 2Gi" in str(over.value)
    with pytest.raises(disks.DiskOpError) as theirs:
        await ops.expand("bob", "home-ann", "5Gi", limit=None)
    assert theirs.value.reason == "not-found"
    assert (await kube_objects.get(PVC, NS, "home-ann"))["spec"]["resources"]["requests"]["storage"] == "2Gi"
    records = audit_log.query(action="expand")
    assert [(r.actor, r.disk, r.before, r.after, r.result.split(":")[0]) for r in records] == [
        ("root", "home-ann", {"size": "1Gi"}, {"size": "2Gi"}, "ok"),
        ("root", "home-ann", {"size": "2Gi"}, {"size": "1Gi"}, "refused"),
        ("root", "home-ann", {"size": "2Gi"}, {"size": "3Gi"}, "refused"),
    ]


async def test_profile_asking_for_a_bigger_home_grows_it(kube_objects, audit_log):
    home = await make_home(kube_objects, "ann")
    ops = disks.DiskOps(kube_objects, NS, audit=audit_log)
    assert await ops.grow_home("ann", home, "1Gi", limit=None) is False  # the same size: nothing
    assert await ops.grow_home("ann", home, "512Mi", limit=None) is False  # a smaller profile never shrinks
    assert await ops.grow_home("ann", home, "4Gi", limit=10 * GI) is True
    assert (await kube_objects.get(PVC, NS, "home-ann"))["spec"]["resources"]["requests"]["storage"] == "4Gi"
    with pytest.raises(disks.DiskOpError):
        await ops.grow_home("ann", await kube_objects.get(PVC, NS, "home-ann"), "20Gi", limit=10 * GI)
    assert [(r.action, r.actor, r.result.split(":")[0]) for r in audit_log.query()] == [("expand", "system", "ok"), ("expand", "system", "refused")]


async def _snapshot_ready(kube, name):
    async def ready():
        snap = await kube.get(VOLUME_SNAPSHOT, NS, name)
        return snap if (snap.get("status") or {}).get("readyToUse") else None

    return await wait_async(ready)


async def test_snapshot_and_restore_only_while_stopped(kube_objects, cluster, audit_log):
    await make_home(kube_objects, "ann")

    async def home_bound():
        return claim_path(cluster, NS, "home-ann")

    (await wait_async(home_bound) / "notes.txt").write_text("before")
    ops = disks.DiskOps(kube_objects, NS, audit=audit_log, actor="root", retention_days=7)
    snap = await ops.snapshot("ann", "home-ann", "ann-monday", now=T0)
    assert snap["spec"]["source"] == {"persistentVolumeClaimName": "home-ann"}
    assert names.owned_by(snap["metadata"], "ann") and snap["metadata"]["annotations"][names.HOME_SLOT_ANNOTATION] == "home-ann"
    await _snapshot_ready(kube_objects, "ann-monday")
    (claim_path(cluster, NS, "home-ann") / "notes.txt").write_text("after a mistake")

    await start_pod(kube_objects, "ann", "jupyter-ann", "home-ann")
    with pytest.raises(disks.DiskOpError) as running:
        await ops.restore("ann", "ann-monday", now=T0)
    assert running.value.reason == "in-use" and "jupyter-ann" in str(running.value)
    assert [p["metadata"]["name"] for p in await ops.disks_of("ann")] == ["home-ann"]

    await kube_objects.delete(POD, NS, "jupyter-ann")

    async def stopped():
        return await kube_objects.get(POD, NS, "jupyter-ann") is None

    await wait_async(stopped)
    new = await ops.restore("ann", "ann-monday", now=T0)
    new_name = new["metadata"]["name"]
    assert new_name != "home-ann" and new["spec"]["dataSource"] == {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": "ann-monday"}
    assert await phase_label(kube_objects, "home-ann") == "Retained"
    replaced = Status.from_object(await kube_objects.get(PVC, NS, "home-ann"))
    assert replaced.reason == phases.REPLACED  # a newer home replaced it: the home page says so
    assert await phase_label(kube_objects, new_name) == "Stopped"
    old = Status.from_object(await kube_objects.get(PVC, NS, "home-ann"))
    assert old.retain_until == T0 + timedelta(days=7)
    assert (await ops.home_of("ann"))["metadata"]["name"] == new_name

    async def bound():
        return claim_path(cluster, NS, new_name)

    restored = await wait_async(bound)
    assert (restored / "notes.txt").read_text() == "before"
    assert (claim_path(cluster, NS, "home-ann") / "notes.txt").read_text() == "after a mistake"  # the old home is kept as it was
    assert [(r.action, r.disk, r.result.split(":")[0]) for r in audit_log.query()] == [
        ("snapshot", "home-ann", "ok"), ("restore", "home-ann", "refused"), ("retain", "home-ann", "ok"), ("restore", "home-ann", "ok")]
    assert audit_log.query(action="restore")[-1].after == {"pvc": new_name, "snapshot": "ann-monday"}


async def test_restore_refuses_someone_elses_snapshot(kube_objects, audit_log):
    await make_home(kube_objects, "ann")
    await make_home(kube_objects, "anna")
    ops = disks.DiskOps(kube_objects, NS, audit=audit_log)
    await ops.snapshot("anna", "home-anna", "anna-1")
    with pytest.raises(disks.DiskOpError) as caught:
        await ops.restore("ann", "anna-1")
    assert caught.value.reason == "not-found"
    with pytest.raises(disks.DiskOpError):
        await ops.snapshot("ann", "home-anna", "sneaky")


def test_disk_command(cluster, tmp_path, capsys):
    common, url = admin_command_args(
        tmp_path, cluster, "c.WorkspaceQuota.enabled = False\nc.WorkspaceSpawner.disk_limit = '5Gi'\nc.WorkspaceSpawner.retention_period = 3 * 86400\n"
    )
    api = kubernetes.config.new_client_from_config(str(cluster.kubeconfig))
    kubernetes.client.CoreV1Api(api).create_namespaced_persistent_volume_claim(NS, home_manifest("gil"))
    api.close()

    assert disk_command.main(["expand", "gil", "--size", "3Gi", *common]) == 0
    assert "home-gil of gil: 3Gi" in capsys.readouterr().out
    assert disk_command.main(["expand", "gil", "--size", "6Gi", *common]) == 1
    assert "at most 5Gi" in capsys.readouterr().err
    assert disk_command.main(["expand", "gil", "--size", "1Mi", *common]) == 1
    err = capsys.readouterr().err
    assert "home-gil holds 3072Mi (3 GiB); a disk cannot shrink to 1Mi." in err and "0 GiB" not in err
    assert disk_command.main(["expand", "gil", "--size", "6000M", *common]) == 1
    err = capsys.readouterr().err
    assert "cannot grow to 6000M" in err and "at most 5368.71M (5 GiB)" in err
    assert disk_command.main(["snapshot", "gil", "--name", "gil-1", "--wait", "30", *common]) == 0
    assert "gil-1" in capsys.readouterr().out
    assert disk_command.main(["restore", "gil", "--snapshot", "gil-1", *common]) == 0
    assert "the old one is retained" in capsys.readouterr().out
    assert disk_command.main(["list", "gil", *common, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert sorted((r["name"].startswith("home-gil-r"), r["phase"], r["size"]) for r in rows) == [(False, "Retained", "3 GiB"), (True, "Stopped", "3 GiB")]
    assert [(r.action, r.actor) for r in AuditLog.from_url(url).query(user="gil")] == [
        ("expand", "root"), ("expand", "root"), ("expand", "root"), ("expand", "root"), ("snapshot", "root"), ("retain", "root"),
        ("restore", "root")]


def test_disk_expand_refused_by_the_cluster_says_why(cluster, tmp_path, capsys):
    """The API server's own explanation of a refused resize (its Status message) reaches the admin, not just "403 Forbidden"."""
    common, _url = admin_command_args(tmp_path, cluster, "c.WorkspaceQuota.enabled = False\n")
    api = kubernetes.config.new_client_from_config(str(cluster.kubeconfig))
    kubernetes.client.StorageV1Api(api).create_storage_class(
        {"metadata": {"name": "fixed-size"}, "provisioner": "rbd.csi.ceph.com", "allowVolumeExpansion": False}
    )
    manifest = home_manifest("hal")
    manifest["spec"]["storageClassName"] = "fixed-size"
    kubernetes.client.CoreV1Api(api).create_namespaced_persistent_volume_claim(NS, manifest)
    api.close()

    assert disk_command.main(["expand", "hal", "--size", "2Gi", *common]) == 1
    err = capsys.readouterr().err
    assert "403 Forbidden" in err and "the storageclass that provisions the pvc must support resize" in err, err
