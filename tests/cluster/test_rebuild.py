"""Rebuilding a VM workspace's root disk (:mod:`workspacespawner.vmdisk.rebuild`, ``workspacespawner disk rebuild``).

Covers, against the local cluster: a rebuild of a stopped workspace (a new
DataVolume cloned from the chosen golden image and Succeeded, with the
start's labels and annotations; the VM names it, so the backend's
``current_root_disk`` picks it and the old disk's slot does not; the old
disk Retained with its retain-until and its files; the home untouched; no
attach claim left; the audit records ``retain`` and ``rebuild``); what the
retained disk costs (the user's disk bytes count it until the purge, which
deletes it after retain-until and never the new disk nor the VM; a rebuild
past the disk limit says to give it back, while the first rebuild's own retained
copy does not count against it); the
refusals (unknown user or server, unknown image, a running VMI, a live
attach claim, a disk limit passed, a Pod using the disk), each recorded and
changing nothing; a failure before the VM is pointed at the new disk (the
workspace still boots the old one; a rerun reuses the new disk) and a crash
after it (a rerun finishes); the command end to end.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from functools import partial

import pytest
from localcluster.goldenimage import make_golden_image
from localcluster.volumes import claim_path

from tests.support.lifecycleenv import NS, admin_command_args, make_home, run_strategy, start_pod, wait_async, with_kube
from workspacespawner.admin import disk as disk_command
from workspacespawner.backends.vm.manifests import VMIdentity, VMSettings, make_root_datavolume, make_virtual_machine
from workspacespawner.backends.vm.rootlookup import current_root_disk, slot_disks
from workspacespawner.core import names
from workspacespawner.k8s.kinds import DATA_VOLUME, PVC, VIRTUAL_MACHINE, VMI
from workspacespawner.lifecycle import phases, retention
from workspacespawner.lifecycle.attach import Holder, holder_of
from workspacespawner.lifecycle.audit import AuditLog
from workspacespawner.lifecycle.disks import DiskOpError, DiskOps, user_disk_bytes
from workspacespawner.lifecycle.phases import Phase, Status
from workspacespawner.vmdisk.rebuild import rebuild
from workspacespawner.vmdisk.rootdisk import repoint_operations, root_disk_of

GI = 2**30
T0 = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
GOLDEN = "golden-images"
IMAGES = {"ubuntu": "VERSION_ID=24.04\n", "ubuntu-next": "VERSION_ID=26.04\n"}


def identity(user: str, server: str = "") -> VMIdentity:
    base = f"ws-{user}" + (f"--{server}" if server else "")
    return VMIdentity.for_workspace(namespace=NS, user_name=user, kubespawner_username=user, base_name=base,
                                   home_pvc=f"home-{user}", server_name=server)


SETTINGS = VMSettings(golden_image="ubuntu", golden_image_namespace=GOLDEN, root_disk_size="2Gi", cpu_cores=1, memory="1Gi")


async def vm_workspace(kube, cluster_thread, user: str, server: str = "") -> VMIdentity:
    """``user``'s stopped VM workspace as a start leaves it: home, root disk cloned from ``ubuntu`` (Succeeded), VM."""
    cluster_thread.cluster.controllers["cdi"].clone_seconds = 0.2
    for name, release in IMAGES.items():
        await cluster_thread.acall(partial(make_golden_image, size="1Gi"), GOLDEN, name, {"etc/os-release": release})
    ident = identity(user, server)
    await make_home(kube, user)
    stopped = Status(Phase.STOPPED, since=T0 - timedelta(days=3), server=server)
    await kube.create(DATA_VOLUME, NS, phases.made_in(make_root_datavolume(ident=ident, settings=SETTINGS), stopped))
    await kube.create(VIRTUAL_MACHINE, NS, phases.made_in(make_virtual_machine(ident=ident, settings=SETTINGS), stopped))
    await succeeded(kube, ident.root_disk)
    return ident


async def succeeded(kube, name: str) -> dict:
    async def done():
        dv = await kube.get(DATA_VOLUME, NS, name)
        return dv if (dv.get("status") or {}).get("phase") == "Succeeded" else None

    return await wait_async(done)


def phase(obj: dict) -> Status:
    return Status.from_object(obj)


async def datavolumes(kube, user: str) -> list[dict]:
    return [dv for dv in await kube.list(DATA_VOLUME, NS, labels=names.owner_selector(user))]


def records(audit_log) -> list[tuple[str, str, str]]:
    return [(r.action, r.disk, r.result.split(":")[0]) for r in audit_log.query()]


# -- a rebuild --------------------------------------------------------------------------------------


async def test_rebuild_of_a_stopped_workspace(kube_objects, cluster_thread, cluster, audit_log):
    kube = kube_objects
    ident = await vm_workspace(kube, cluster_thread, "ann")
    (claim_path(cluster, NS, ident.root_disk) / "opt").mkdir()
    (claim_path(cluster, NS, ident.root_disk) / "opt/note").write_text("installed by ann\n")
    (claim_path(cluster, NS, "home-ann") / "thesis.tex").write_text("chapter 1\n")
    home_before = await kube.get(PVC, NS, "home-ann")
    ops = DiskOps(kube, NS, audit=audit_log, actor="root", retention_days=7)

    done = await rebuild(ops, "ann", image="ubuntu-next", now=T0)

    new = await succeeded(kube, done.new)
    assert (done.vm, done.old, done.new, done.image) == ("ws-ann", "ws-ann-root", "ws-ann-root-20250601120000", f"{GOLDEN}/ubuntu-next")
    assert new["spec"]["sourceRef"] == {"kind": "DataSource", "name": "ubuntu-next", "namespace": GOLDEN}
    assert new["spec"]["storage"]["resources"]["requests"]["storage"] == "2Gi"
    assert new["spec"]["storage"]["storageClassName"] == "ceph-rbd" and new["spec"]["storage"]["volumeMode"] == "Block"
    annotations = new["metadata"]["annotations"]
    assert annotations[names.ROOT_SLOT_ANNOTATION] == "ws-ann" and annotations[names.GOLDEN_IMAGE_ANNOTATION] == f"{GOLDEN}/ubuntu-next"
    assert annotations[names.REBUILT_FROM_ANNOTATION] == "ws-ann-root" and annotations["cdi.kubevirt.io/allowClaimAdoption"] == "true"
    assert names.owned_by(new["metadata"], "ann") and new["metadata"]["labels"][names.DISK_LABEL] == names.ROOT_DISK
    assert (claim_path(cluster, NS, done.new) / "etc/os-release").read_text() == IMAGES["ubuntu-next"]
    assert not (claim_path(cluster, NS, done.new) / "opt/note").exists()

    vm = await kube.get(VIRTUAL_MACHINE, NS, "ws-ann")
    assert root_disk_of(vm) == done.new
    dvs = await datavolumes(kube, "ann")
    assert current_root_disk(ident, vm, dvs) == done.new  # what the next start boots
    assert [d["metadata"]["name"] for d in slot_disks(ident, dvs)] == [done.new]  # the old one is parked

    old = await kube.get(DATA_VOLUME, NS, "ws-ann-root")
    assert phase(old).phase == Phase.RETAINED and phase(old).retain_until == T0 + timedelta(days=7)
    assert phase(old).reason == phases.REPLACED  # the home page says a newer disk replaced it, not "start again"
    assert phase(new).phase == Phase.STOPPED
    assert holder_of(old) is None and holder_of(new) is None
    assert (claim_path(cluster, NS, "ws-ann-root") / "opt/note").read_text() == "installed by ann\n"  # kept as it was
    home_after = await kube.get(PVC, NS, "home-ann")
    assert home_after["metadata"]["resourceVersion"] == home_before["metadata"]["resourceVersion"]
    assert (claim_path(cluster, NS, "home-ann") / "thesis.tex").read_text() == "chapter 1\n"

    assert records(audit_log) == [("retain", "ws-ann-root", "ok"), ("rebuild", "ws-ann-root", "ok")]
    [record] = audit_log.query(action="rebuild")
    assert (record.actor, record.user, record.server) == ("root", "ann", "")
    assert record.before == {"root_disk": "ws-ann-root", "image": f"{GOLDEN}/ubuntu"}
    assert record.after == {"root_disk": done.new, "image": f"{GOLDEN}/ubuntu-next"}

    # what the retained disk costs: it counts against the user's disks until the purge deletes it
    assert await ops.usage("ann") == 1 * GI + 2 * GI + 2 * GI
    assert await ops.usage("ann", parked=True) == 2 * GI  # what giving it back would free
    with pytest.raises(DiskOpError) as over:  # a second rebuild counts the first one's retained disk, and says so
        await rebuild(ops, "ann", limit=4 * GI, now=T0)
    assert ("besides the system disk it replaces, they hold 3 GiB, 2 GiB of it in retained disks; give back a retained "
            "disk first.") in str(over.value), over.value
    pvcs = await kube.list(PVC, NS, labels=names.owner_selector("ann"))
    assert sorted(user_disk_bytes(pvcs, dvs, "ann")) == ["home-ann", "ws-ann-root", done.new]
    plan = await retention.Purger(kube, NS, audit=audit_log).purge(now=T0 + timedelta(days=6))
    assert plan.purge == [] and [d["metadata"]["name"] for d, _why in plan.kept] == ["ws-ann-root"]
    plan = await retention.Purger(kube, NS, audit=audit_log).purge(now=T0 + timedelta(days=8))
    assert [(item.name, item.result, item.goes_with) for item in plan.purge] == [("ws-ann-root", "ok", [])]  # not the VM
    assert await kube.get(DATA_VOLUME, NS, "ws-ann-root") is None
    assert await kube.get(DATA_VOLUME, NS, done.new) is not None and await kube.get(VIRTUAL_MACHINE, NS, "ws-ann") is not None

    async def freed():
        return await ops.usage("ann") == 1 * GI + 2 * GI

    await wait_async(freed)


async def test_rebuild_of_a_named_server_defaults_to_the_old_image(kube_objects, cluster_thread, audit_log):
    kube = kube_objects
    await vm_workspace(kube, cluster_thread, "bo", "gpu")
    ops = DiskOps(kube, NS, audit=audit_log, actor="bo")
    with pytest.raises(DiskOpError) as default_server:
        await rebuild(ops, "bo", now=T0)
    assert default_server.value.reason == "not-found" and "default server has no virtual machine" in str(default_server.value)
    done = await rebuild(ops, "bo", server="gpu", now=T0)
    assert (done.vm, done.image) == ("ws-bo--gpu", f"{GOLDEN}/ubuntu")
    assert (await kube.get(DATA_VOLUME, NS, done.new))["metadata"]["annotations"][names.ROOT_SLOT_ANNOTATION] == "ws-bo--gpu"
    assert [(r.action, r.server, r.result.split(":")[0]) for r in audit_log.query(action="rebuild")] == [
        ("rebuild", "", "refused"), ("rebuild", "gpu", "ok")]


# -- refusals ---------------------------------------------------------------------------------------


async def test_refusals_change_nothing_and_are_recorded(kube_objects, cluster_thread, audit_log):
    kube = kube_objects
    await vm_workspace(kube, cluster_thread, "cy")
    ops = DiskOps(kube, NS, audit=audit_log, actor="root")

    async def refused(reason: str, words: str, **kwargs) -> None:
        with pytest.raises(DiskOpError) as caught:
            await rebuild(ops, kwargs.pop("user", "cy"), now=T0, **kwargs)
        assert caught.value.reason == reason and words in str(caught.value), str(caught.value)
        assert [d["metadata"]["name"] for d in await datavolumes(kube, "cy")] == ["ws-cy-root"]
        assert root_disk_of(await kube.get(VIRTUAL_MACHINE, NS, "ws-cy")) == "ws-cy-root"
        assert holder_of(await kube.get(DATA_VOLUME, NS, "ws-cy-root")) is None

    await refused("not-found", "has no virtual machine workspace", user="nobody")
    await refused("not-found", "has no virtual machine workspace", server="other")
    await refused("not-found", "There is no golden image golden-images/debian", image="debian")
    await refused("over-quota", "besides the system disk it replaces, they hold 1 GiB, so it needs a disk quota of 3 GiB; "
                  "ask the administrators", limit=2 * GI)  # home 1 + new 2 > 2 (the old root disk is swapped out), none retained

    claimed = Holder("cy", VMI.kind, "ws-cy", T0 - timedelta(seconds=30))
    await kube.patch(DATA_VOLUME, NS, "ws-cy-root", [
        {"op": "add", "path": f"/metadata/annotations/{names.ATTACH_ANNOTATION.replace('/', '~1')}", "value": claimed.to_json()}])
    with pytest.raises(DiskOpError) as starting:
        await rebuild(ops, "cy", now=T0)
    assert starting.value.reason == "in-use" and "which is starting" in str(starting.value)
    await kube.patch(DATA_VOLUME, NS, "ws-cy-root", [
        {"op": "remove", "path": f"/metadata/annotations/{names.ATTACH_ANNOTATION.replace('/', '~1')}"}])

    await run_strategy(kube, "ws-cy", "Always")
    await refused("in-use", "The workspace is running (VirtualMachineInstance ws-cy)")
    await run_strategy(kube, "ws-cy", "Halted")
    await start_pod(kube, "cy", "borrower", "ws-cy-root")  # anything else mounting the disk
    await refused("in-use", "Pod borrower")
    found = audit_log.query(action="rebuild")
    assert [(r.user, r.result.split(":")[0]) for r in found] == [("nobody", "refused")] + [("cy", "refused")] * 6
    assert found[2].after == {"root_disk": None, "image": f"{GOLDEN}/debian"}
    assert all(r.action == "rebuild" for r in audit_log.query())


# -- crashes ----------------------------------------------------------------------------------------


async def failed_before_the_vm_names_the_new_disk(kube, cluster_thread, cluster, audit_log):
    """``di``'s workspace and a rebuild that failed after creating its disk (the VM's write refused):
    ``(identity, DiskOps, the new disk's name)``."""
    ident = await vm_workspace(kube, cluster_thread, "di")
    ops = DiskOps(kube, NS, audit=audit_log, actor="root")
    cluster.faults.add("PATCH", "/virtualmachines/", status=403, reason="Forbidden", message="injected")
    with pytest.raises(DiskOpError, match="403 Forbidden") as caught:
        await rebuild(ops, "di", image="ubuntu-next", now=T0)
    assert caught.value.reason == "kubernetes-api" and "still boots from ws-di-root" in str(caught.value)
    assert all(holder_of(d) is None for d in await datavolumes(kube, "di"))  # the failure let go of its claims
    [new] = [d["metadata"]["name"] for d in await datavolumes(kube, "di") if d["metadata"]["name"] != "ws-di-root"]
    return ident, ops, new


async def test_a_failure_before_the_vm_is_pointed_leaves_the_old_disk_booting(kube_objects, cluster_thread, cluster, audit_log):
    kube = kube_objects
    ident, ops, made = await failed_before_the_vm_names_the_new_disk(kube, cluster_thread, cluster, audit_log)
    vm = await kube.get(VIRTUAL_MACHINE, NS, "ws-di")
    assert current_root_disk(ident, vm, await datavolumes(kube, "di")) == "ws-di-root"  # still starts, from the old disk
    assert phase(await kube.get(DATA_VOLUME, NS, "ws-di-root")).phase == Phase.STOPPED

    done = await rebuild(ops, "di", image="ubuntu-next", now=T0 + timedelta(minutes=1))
    assert done.new == made and not done.resumed  # the disk made before the failure, reused
    assert root_disk_of(await kube.get(VIRTUAL_MACHINE, NS, "ws-di")) == made
    assert len(await datavolumes(kube, "di")) == 2
    assert phase(await kube.get(DATA_VOLUME, NS, "ws-di-root")).phase == Phase.RETAINED
    assert all(holder_of(d) is None for d in await datavolumes(kube, "di"))


async def test_a_rerun_finishes_a_rebuild_that_stopped_after_pointing_the_vm(kube_objects, cluster_thread, cluster, audit_log):
    kube = kube_objects
    ident, ops, made = await failed_before_the_vm_names_the_new_disk(kube, cluster_thread, cluster, audit_log)
    vm = await kube.get(VIRTUAL_MACHINE, NS, "ws-di")
    await kube.patch_owned(VIRTUAL_MACHINE, NS, "ws-di", "di", repoint_operations(vm, made))  # step 4, then a crash
    dvs = await datavolumes(kube, "di")
    assert current_root_disk(ident, await kube.get(VIRTUAL_MACHINE, NS, "ws-di"), dvs) == made  # starts, from the new disk

    done = await rebuild(ops, "di", image="ubuntu", now=T0 + timedelta(minutes=1))
    assert (done.old, done.new, done.image, done.resumed) == ("ws-di-root", made, f"{GOLDEN}/ubuntu-next", True)
    assert phase(await kube.get(DATA_VOLUME, NS, "ws-di-root")).phase == Phase.RETAINED
    assert phase(await kube.get(DATA_VOLUME, NS, made)).phase == Phase.STOPPED
    assert all(holder_of(d) is None for d in await datavolumes(kube, "di"))
    failed, record = audit_log.query(action="rebuild")
    assert failed.result == "error: 403 Forbidden"
    assert (record.result, record.before, record.after) == (
        "ok: resumed", {"root_disk": "ws-di-root", "image": f"{GOLDEN}/ubuntu"}, {"root_disk": made, "image": f"{GOLDEN}/ubuntu-next"})


# -- the command ------------------------------------------------------------------------------------


def test_disk_rebuild_command(cluster_thread, cluster, tmp_path, capsys):
    common, url = admin_command_args(tmp_path, cluster, "c.WorkspaceQuota.enabled = False\nc.WorkspaceSpawner.retention_period = 3 * 86400\n"
                                     f"c.WorkspaceSpawner.vm_golden_image_namespace = {GOLDEN!r}\n")

    async def setup(kube):
        return await vm_workspace(kube, cluster_thread, "gil")

    asyncio.run(with_kube(cluster.kubeconfig, setup))
    assert disk_command.main(["rebuild", "gil", "--image", "ubuntu-next", *common]) == 0
    out = capsys.readouterr().out
    assert "ws-gil now boots from ws-gil-root-" in out and "(from golden-images/ubuntu-next)" in out
    assert "ws-gil-root is retained until" in out and "the home is untouched" in out
    assert disk_command.main(["rebuild", "gil", "--image", "nope", *common]) == 1
    assert "There is no golden image golden-images/nope" in capsys.readouterr().err
    assert disk_command.main(["list", "gil", "--json", *common]) == 0
    rows = {r["name"]: r["phase"] for r in json.loads(capsys.readouterr().out)}
    assert rows["ws-gil-root"] == "Retained" and [p for n, p in rows.items() if n.startswith("ws-gil-root-")] == ["Stopped"]
    assert [(r.action, r.actor, r.result.split(":")[0]) for r in AuditLog.from_url(url).query(user="gil")] == [
        ("retain", "root", "ok"), ("rebuild", "root", "ok"), ("rebuild", "root", "refused")]
