"""Restoring a VM workspace's system disk from a VolumeSnapshot of it (:func:`workspacespawner.vmdisk.rebuild.restore_root_disk`,
:func:`workspacespawner.vmdisk.restore.restore`, ``workspacespawner disk restore``).

Covers, against the local cluster: a snapshot of a root disk records the VM it serves and the golden image it descends
from; after a rebuild to another image, restoring that snapshot gives the VM a new root DataVolume restored from it
(CDI's ``spec.source.snapshot``: the files of the moment it was taken, not the rebuild's), the rebuilt disk retained,
the home untouched, audited ``restore``; the refusals (a snapshot not yet ready, a running VMI, another user's
snapshot), each changing nothing; a home's snapshot still restores the home through the same entry; the command.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from localcluster.volumes import claim_path

from tests.cluster.test_rebuild import GOLDEN, IMAGES, T0, datavolumes, phase, succeeded, vm_workspace
from tests.support.lifecycleenv import NS, admin_command_args, run_strategy, wait_async, with_kube
from workspacespawner.admin import disk as disk_command
from workspacespawner.core import names
from workspacespawner.k8s.kinds import DATA_VOLUME, PVC, VIRTUAL_MACHINE, VOLUME_SNAPSHOT
from workspacespawner.lifecycle.attach import holder_of
from workspacespawner.lifecycle.disks import DiskOpError, DiskOps, make_volume_snapshot
from workspacespawner.lifecycle.phases import Phase
from workspacespawner.vmdisk.rebuild import rebuild, restore_root_disk
from workspacespawner.vmdisk.restore import restore
from workspacespawner.vmdisk.rootdisk import root_disk_of


async def ready(kube, name: str) -> dict:
    async def done():
        snap = await kube.get(VOLUME_SNAPSHOT, NS, name)
        return snap if (snap.get("status") or {}).get("readyToUse") else None

    return await wait_async(done)


async def test_a_system_disk_snapshot_restores_into_the_vm_after_a_rebuild(kube_objects, cluster_thread, cluster, audit_log):
    kube = kube_objects
    ident = await vm_workspace(kube, cluster_thread, "ro")
    root = claim_path(cluster, NS, ident.root_disk)
    (root / "opt").mkdir()
    (root / "opt/tool").write_text("installed before the snapshot\n")
    (claim_path(cluster, NS, "home-ro") / "notes.md").write_text("mine\n")
    ops = DiskOps(kube, NS, audit=audit_log, actor="ro", retention_days=7)

    taken = await ops.snapshot("ro", ident.root_disk, "ro-root-monday", now=T0)
    annotations = taken["metadata"]["annotations"]
    assert annotations[names.ROOT_SLOT_ANNOTATION] == "ws-ro" and annotations[names.GOLDEN_IMAGE_ANNOTATION] == f"{GOLDEN}/ubuntu"
    assert taken["metadata"]["labels"][names.DISK_LABEL] == names.ROOT_DISK
    assert names.HOME_SLOT_ANNOTATION not in annotations
    await ready(kube, "ro-root-monday")
    (root / "opt/tool").write_text("changed after the snapshot\n")
    rebuilt = await rebuild(ops, "ro", image="ubuntu-next", now=T0 + timedelta(hours=1))
    await succeeded(kube, rebuilt.new)

    done = await restore(ops, "ro", "ro-root-monday", now=T0 + timedelta(hours=1))  # in the rebuild's second

    assert (rebuilt.new, done.disk) == ("ws-ro-root-20250601130000", "ws-ro-root-20250601130000-2")

    assert done.system and done.rebuilt is not None
    assert (done.rebuilt.vm, done.rebuilt.old, done.rebuilt.snapshot) == ("ws-ro", rebuilt.new, "ro-root-monday")
    new = await succeeded(kube, done.disk)
    assert new["spec"]["source"] == {"snapshot": {"namespace": NS, "name": "ro-root-monday"}} and "sourceRef" not in new["spec"]
    assert new["spec"]["storage"]["resources"]["requests"]["storage"] == "2Gi"
    new_annotations = new["metadata"]["annotations"]
    assert new_annotations[names.RESTORED_FROM_ANNOTATION] == "ro-root-monday"
    assert new_annotations[names.GOLDEN_IMAGE_ANNOTATION] == f"{GOLDEN}/ubuntu"  # the snapshot's image, not the rebuild's
    assert new_annotations[names.REBUILT_FROM_ANNOTATION] == rebuilt.new
    files = claim_path(cluster, NS, done.disk)
    assert (files / "opt/tool").read_text() == "installed before the snapshot\n"
    assert (files / "etc/os-release").read_text() == IMAGES["ubuntu"]
    assert root_disk_of(await kube.get(VIRTUAL_MACHINE, NS, "ws-ro")) == done.disk
    replaced = await kube.get(DATA_VOLUME, NS, rebuilt.new)
    assert phase(replaced).phase == Phase.RETAINED and phase(replaced).retain_until == T0 + timedelta(hours=1, days=7)
    assert phase(new).phase == Phase.STOPPED and holder_of(new) is None and holder_of(replaced) is None
    assert (claim_path(cluster, NS, "home-ro") / "notes.md").read_text() == "mine\n"
    [record] = audit_log.query(action="restore")
    assert (record.actor, record.user, record.disk, record.result) == ("ro", "ro", rebuilt.new, "ok")
    assert record.before == {"root_disk": rebuilt.new, "image": f"{GOLDEN}/ubuntu-next"}
    assert record.after == {"root_disk": done.disk, "image": f"{GOLDEN}/ubuntu", "snapshot": "ro-root-monday"}


async def test_refusals_change_nothing_and_a_home_snapshot_restores_the_home(kube_objects, cluster_thread, cluster, audit_log):
    kube = kube_objects
    ident = await vm_workspace(kube, cluster_thread, "su")
    ops = DiskOps(kube, NS, audit=audit_log, actor="root")
    await ops.snapshot("su", ident.root_disk, "su-root", now=T0)
    await ready(kube, "su-root")

    async def refused(reason: str, words: str, user: str = "su", snapshot: str = "su-root") -> None:
        with pytest.raises(DiskOpError) as caught:
            await restore_root_disk(ops, user, snapshot, now=T0)
        assert caught.value.reason == reason and words in str(caught.value), str(caught.value)
        assert [d["metadata"]["name"] for d in await datavolumes(kube, "su")] == ["ws-su-root"]
        assert root_disk_of(await kube.get(VIRTUAL_MACHINE, NS, "ws-su")) == "ws-su-root"

    await refused("not-found", "has no snapshot 'su-root'", user="other")
    await refused("not-found", "has no snapshot 'nope'", snapshot="nope")
    await run_strategy(kube, "ws-su", "Always")
    await refused("in-use", "The workspace is running (VirtualMachineInstance ws-su)")
    await run_strategy(kube, "ws-su", "Halted")
    # a snapshot of the system disk the cluster cannot take (its PVC is gone): never ready
    dv = await kube.get(DATA_VOLUME, NS, "ws-su-root")
    gone = {"metadata": {"name": "ws-su-root-gone", "namespace": NS, "labels": {names.DISK_LABEL: names.ROOT_DISK}}}
    await kube.create(VOLUME_SNAPSHOT, NS, make_volume_snapshot(name="su-late", source=gone, user_name="su", snapshot_class=None,
                                                                datavolume=dv))
    await refused("not-ready", "Snapshot su-late is not ready to use yet", snapshot="su-late")
    assert [(r.action, r.result.split(":")[0]) for r in audit_log.query(action="restore")] == [("restore", "refused")] * 2

    # a home's snapshot, through the same entry: a new home, the VM's root disk untouched
    await ops.snapshot("su", "home-su", "su-home", now=T0)
    await ready(kube, "su-home")
    home = await restore(ops, "su", "su-home", now=T0)
    assert not home.system and home.rebuilt is None
    assert (await kube.get(PVC, NS, home.disk))["metadata"]["annotations"][names.RESTORED_FROM_ANNOTATION] == "su-home"
    assert root_disk_of(await kube.get(VIRTUAL_MACHINE, NS, "ws-su")) == "ws-su-root"


def test_disk_restore_command_restores_a_system_disk(cluster_thread, cluster, tmp_path, capsys):
    common, _url = admin_command_args(tmp_path, cluster, "c.WorkspaceQuota.enabled = False\n"
                                      f"c.WorkspaceSpawner.vm_golden_image_namespace = {GOLDEN!r}\n")

    async def setup(kube):
        return await vm_workspace(kube, cluster_thread, "co")

    ident = asyncio.run(with_kube(cluster.kubeconfig, setup))
    assert disk_command.main(["snapshot", "co", "--pvc", ident.root_disk, "--name", "co-root", "--wait", "60", *common]) == 0
    assert disk_command.main(["restore", "co", "--snapshot", "co-root", *common]) == 0
    out = capsys.readouterr().out

    async def vm(kube):
        return await kube.get(VIRTUAL_MACHINE, NS, "ws-co")

    now_boots = root_disk_of(asyncio.run(with_kube(cluster.kubeconfig, vm)))
    assert now_boots != ident.root_disk
    assert f"ws-co now boots from {now_boots} (from co-root); ws-co-root is retained until" in out, out
