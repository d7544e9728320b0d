"""Retention instead of deletion, and the purge (:mod:`workspacespawner.lifecycle.retention`, ``workspacespawner retention``).

Covers, with the clock moved forward by hand (``now``): ``select_purgeable``
on plain objects (before and after retain-until, a disk in use by a running
Pod or VMI, inconsistent owner labels, an interrupted purge resumed, a root
disk taking its VM, Service and cloud-init Secret along); against the local
cluster: a retained home kept before its time and deleted after it, with the
retain, purge and delete audit records; a retained disk a Pod still uses
never deleted; a foreign PVC carrying our phase label never touched;
``reclaim`` giving a user's disks back (and losing the race against the
purge cleanly); the command's ``list``, ``purge --dry-run``, ``purge`` and
``reclaim``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from tests.support.lifecycleenv import (
    NS,
    admin_command_args,
    make_home,
    make_root_and_vm,
    phase_label,
    start_pod,
    with_kube,
)
from workspacespawner.admin import retention as retention_command
from workspacespawner.core import names
from workspacespawner.k8s.api import NotOurs
from workspacespawner.k8s.kinds import DATA_VOLUME, PVC, SECRET, SERVICE, VIRTUAL_MACHINE
from workspacespawner.lifecycle import phases, retention
from workspacespawner.lifecycle.phases import Phase, Status, WorkspaceRef

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)


def ours(kind: str, name: str, user: str, *, phase: Status | None = None, **extra) -> dict:
    labels = names.owner_labels(user)
    annotations = names.owner_annotations(user)
    if phase is not None:
        labels[names.PHASE_LABEL] = str(phase.phase)
        annotations[names.LIFECYCLE_ANNOTATION] = json.dumps(phase.to_state())
    return {"kind": kind, "metadata": {"name": name, "uid": f"uid-{name}", "labels": labels, "annotations": annotations}, **extra}


def retained_until(moment: datetime) -> Status:
    return Status(Phase.RETAINED, since=moment - 30 * DAY, retain_until=moment)


def claim_user(kind: str, name: str, claim: str, phase: str = "Running") -> dict:
    return {"kind": kind, "metadata": {"name": name}, "spec": {"volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": claim}}]},
            "status": {"phase": phase}}


def test_select_purgeable_before_and_after_retain_until():
    disk = ours("PersistentVolumeClaim", "home-ann", "ann", phase=retained_until(NOW))
    assert retention.select_purgeable([disk], NOW - DAY).purge == []
    assert [i.name for i in retention.select_purgeable([disk], NOW).purge] == ["home-ann"]


def test_select_purgeable_never_a_disk_in_use():
    disk = ours("PersistentVolumeClaim", "home-ann", "ann", phase=retained_until(NOW))
    for user in (claim_user("Pod", "debug", "home-ann"), claim_user("VirtualMachineInstance", "ws-x", "home-ann", "Scheduled")):
        plan = retention.select_purgeable([disk, user], NOW + DAY)
        assert plan.purge == [] and "in use by" in plan.kept[0][1]
    finished = claim_user("Pod", "done", "home-ann", "Succeeded")
    assert [i.name for i in retention.select_purgeable([disk, finished], NOW + DAY).purge] == ["home-ann"]


def test_select_purgeable_needs_consistent_owner_labels():
    copied = ours("PersistentVolumeClaim", "home-eve", "eve", phase=retained_until(NOW))
    copied["metadata"]["annotations"][names.OWNER_ANNOTATION] = "ann"  # eve's labels, ann's name: not ours to judge
    bare = ours("PersistentVolumeClaim", "data", "eve", phase=retained_until(NOW))
    del bare["metadata"]["labels"][names.OWNER_LABEL]
    plan = retention.select_purgeable([copied, bare], NOW + DAY)
    assert plan.purge == [] and {why for _d, why in plan.kept} == {"owner labels missing or inconsistent"}


def test_select_purgeable_resumes_an_interrupted_purge_and_skips_the_rest():
    deleting = ours("PersistentVolumeClaim", "home-ann", "ann", phase=Status(Phase.DELETING_DISK, since=NOW))
    stopped = ours("PersistentVolumeClaim", "home-bob", "bob", phase=Status(Phase.STOPPED, since=NOW))
    no_time = ours("PersistentVolumeClaim", "home-cy", "cy", phase=Status(Phase.RETAINED, since=NOW))
    plan = retention.select_purgeable([deleting, stopped, no_time], NOW)
    assert [i.name for i in plan.purge] == ["home-ann"]
    assert [(d["metadata"]["name"], why) for d, why in plan.kept] == [("home-cy", "no retain-until time")]


def test_root_disk_takes_its_vm_service_and_secret():
    dv = ours("DataVolume", "ws-ann-root", "ann", phase=retained_until(NOW))
    template = {"spec": {"volumes": [{"name": "root", "dataVolume": {"name": "ws-ann-root"}},
                                     {"name": "ci", "cloudInitNoCloud": {"secretRef": {"name": "ws-ann-cloudinit"}}}]}}
    vm = ours("VirtualMachine", "ws-ann", "ann", spec={"template": template})
    service = ours("Service", "ws-ann", "ann", spec={"selector": {names.DOMAIN_LABEL: "ws-ann"}})
    secret = ours("Secret", "ws-ann-cloudinit", "ann")
    others = [ours("VirtualMachine", "ws-bob", "bob", spec={"template": template}), ours("Service", "ws-other", "ann", spec={"selector": {}})]
    [item] = retention.select_purgeable([dv, vm, service, secret, *others], NOW).purge
    assert [(o["kind"], o["metadata"]["name"]) for o in item.goes_with] == [
        ("VirtualMachine", "ws-ann"), ("Service", "ws-ann"), ("Secret", "ws-ann-cloudinit")]


# -- on the cluster --------------------------------------------------------------------------------


def ref(user: str, home: str) -> WorkspaceRef:
    return WorkspaceRef(namespace=NS, user_name=user, home_pvc=home)


async def test_retained_home_is_purged_only_after_its_time(kube_objects, audit_log):
    await make_home(kube_objects, "ann")
    status = await retention.retain(kube_objects, ref("ann", "home-ann"), Status(Phase.STOPPED), days=30, audit=audit_log, now=NOW)
    assert status.retain_until == NOW + 30 * DAY and await phase_label(kube_objects, "home-ann") == "Retained"
    purger = retention.Purger(kube_objects, NS, audit=audit_log)

    early = await purger.purge(now=NOW + 29 * DAY)
    assert early.purge == [] and await kube_objects.get(PVC, NS, "home-ann") is not None
    dry = await purger.purge(now=NOW + 31 * DAY, dry_run=True)
    assert [(i.name, i.result) for i in dry.purge] == [("home-ann", "dry run")]
    assert await kube_objects.get(PVC, NS, "home-ann") is not None

    done = await purger.purge(now=NOW + 31 * DAY)
    assert [(i.name, i.result) for i in done.purge] == [("home-ann", "ok")]
    assert await kube_objects.get(PVC, NS, "home-ann") is None
    records = audit_log.query(user="ann")
    assert [(r.action, r.before["phase"], r.result) for r in records] == [
        ("retain", "Stopped", "ok"), ("purge", "Retained", "ok"), ("delete", "DeletingDisk", "ok")]
    assert records[2].after == {"deleted": ["PersistentVolumeClaim/home-ann"]} and records[2].actor == "system"


async def test_purge_never_touches_a_disk_in_use_or_a_foreign_pvc(kube_objects, audit_log):
    await make_home(kube_objects, "bob")
    await retention.retain(kube_objects, ref("bob", "home-bob"), Status(Phase.STOPPED), days=0, now=NOW)
    await start_pod(kube_objects, "bob", "debug-bob", "home-bob")  # someone mounts the retained disk anyway
    foreign = {"metadata": {"name": "scratch", "labels": {names.MANAGED_BY_LABEL: names.MANAGED_BY, names.PHASE_LABEL: "Retained"},
                            "annotations": {names.LIFECYCLE_ANNOTATION: json.dumps(retained_until(NOW).to_state())}},
               "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}
    await kube_objects.create(PVC, NS, foreign)
    unlabelled = {"metadata": {"name": "home-zed"}, "spec": foreign["spec"]}
    await kube_objects.create(PVC, NS, unlabelled)

    plan = await retention.Purger(kube_objects, NS, audit=audit_log).purge(now=NOW + 365 * DAY)
    assert plan.purge == []
    assert sorted((d["metadata"]["name"], why.split(" by ")[0]) for d, why in plan.kept) == [
        ("home-bob", "in use"), ("scratch", "owner labels missing or inconsistent")]
    for name in ("home-bob", "scratch", "home-zed"):
        assert await kube_objects.get(PVC, NS, name) is not None
    assert await phase_label(kube_objects, "home-bob") == "Retained"
    assert audit_log.query(action="delete") == []


async def test_vm_service_and_secret_go_with_their_root_disk(kube_objects, cluster_thread, audit_log):
    await make_root_and_vm(kube_objects, cluster_thread, "cy", "ws-cy", secret="ws-cy-cloudinit")
    meta = {"namespace": NS, "labels": names.owner_labels("cy"), "annotations": names.owner_annotations("cy")}
    await kube_objects.create(SERVICE, NS, {"metadata": {"name": "ws-cy", **meta},
                                            "spec": {"selector": {names.DOMAIN_LABEL: "ws-cy"}, "ports": [{"name": "jupyter", "port": 8888}]}})
    await kube_objects.create(SECRET, NS, {"metadata": {"name": "ws-cy-cloudinit", **meta}, "stringData": {"userdata": "#cloud-config\n"}})
    workspace = WorkspaceRef(namespace=NS, user_name="cy", server_name="vm", root_disk="ws-cy-root", vm="ws-cy")
    await retention.retain(kube_objects, workspace, Status(Phase.STOPPED), days=1, now=NOW)
    assert await phase_label(kube_objects, "ws-cy", VIRTUAL_MACHINE) == "Retained"

    plan = await retention.Purger(kube_objects, NS, audit=audit_log).purge(now=NOW + 2 * DAY)
    assert [(i.name, i.result) for i in plan.purge] == [("ws-cy-root", "ok")]
    for kind, name in ((VIRTUAL_MACHINE, "ws-cy"), (SERVICE, "ws-cy"), (SECRET, "ws-cy-cloudinit"), (DATA_VOLUME, "ws-cy-root")):
        assert await kube_objects.get(kind, NS, name) is None
    [delete] = audit_log.query(action="delete")
    assert delete.after["deleted"] == ["VirtualMachine/ws-cy", "Service/ws-cy", "Secret/ws-cy-cloudinit", "DataVolume/ws-cy-root"]


async def test_reclaim_gives_disks_back_and_loses_to_the_purge_cleanly(kube_objects, audit_log):
    await make_home(kube_objects, "dee")
    workspace = ref("dee", "home-dee")
    retained = await retention.retain(kube_objects, workspace, Status(Phase.STOPPED), days=1, now=NOW)
    back = await retention.reclaim(kube_objects, workspace, audit=audit_log, actor="root")
    assert back.phase == Phase.STOPPED and await phase_label(kube_objects, "home-dee") == "Stopped"
    assert [(r.action, r.actor) for r in audit_log.query(user="dee")] == [("reclaim", "root")]
    assert await retention.reclaim(kube_objects, workspace) is None  # nothing retained any more

    retained = await retention.retain(kube_objects, workspace, back, days=0, now=NOW)
    await phases.move(kube_objects, workspace, retained, Phase.DELETING_DISK, expect=Phase.RETAINED)  # the purge got there first
    assert await retention.reclaim(kube_objects, workspace) is None
    with pytest.raises(NotOurs):
        await phases.move(kube_objects, workspace, retained, Phase.STOPPED, expect=Phase.RETAINED)


def test_retention_command(cluster, cluster_thread, tmp_path, capsys):
    common, url = admin_command_args(tmp_path, cluster)

    async def setup(kube):
        for user in ("eli", "fox"):
            await make_home(kube, user)
            await retention.retain(kube, ref(user, f"home-{user}"), Status(Phase.STOPPED), days=0 if user == "eli" else 30)

    cluster_thread.call(lambda cl: with_kube(cl.kubeconfig, setup))
    assert retention_command.main(["list", *common, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["owner"], r["name"], r["phase"], r["size"]) for r in rows] == [("eli", "home-eli", "Retained", "1 GiB"), ("fox", "home-fox", "Retained", "1 GiB")]
    assert all(r["retain_until"] for r in rows)

    assert retention_command.main(["purge", "--dry-run", *common]) == 0
    out = capsys.readouterr().out
    assert "home-eli" in out and "dry run" in out and "retained until" in out

    assert retention_command.main(["reclaim", "fox", *common]) == 0
    assert "home-fox" in capsys.readouterr().out
    assert retention_command.main(["purge", *common, "--json"]) == 0
    assert [(r["name"], r["action"], r["why"]) for r in json.loads(capsys.readouterr().out)] == [("home-eli", "purge", "ok")]
    assert retention_command.main(["list", *common]) == 0
    assert "(no retained disks)" in capsys.readouterr().out


def test_retention_purge_exits_non_zero_naming_the_disk_whose_delete_failed(cluster, cluster_thread, tmp_path, capsys):
    common, url = admin_command_args(tmp_path, cluster)

    async def setup(kube):
        for user in ("gus", "hal"):
            await make_home(kube, user)
            await retention.retain(kube, ref(user, f"home-{user}"), Status(Phase.STOPPED), days=0)

    cluster_thread.call(lambda cl: with_kube(cl.kubeconfig, setup))
    cluster.faults.add("DELETE", r"/persistentvolumeclaims/home-gus$", status=403, reason="Forbidden", message="no delete for you")
    assert retention_command.main(["purge", *common]) == 1
    out, err = capsys.readouterr()
    assert "home-hal" in out and "home-gus" in out
    [line] = [line for line in err.splitlines() if "home-gus" in line]
    assert "PersistentVolumeClaim" in line and "gus" in line and "403" in line and "no delete for you" in line
    assert "home-hal" not in err
    # the disk that failed stays DeletingDisk, and the next purge finishes it
    assert retention_command.main(["purge", *common, "--json"]) == 0
    assert [(r["name"], r["why"]) for r in json.loads(capsys.readouterr().out)] == [("home-gus", "ok")]
