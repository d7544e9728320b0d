"""Retained disks and the next purge as the dashboard shows them (:mod:`workspacespawner.dashboard.purgeview`).

Covers, on plain objects: every disk with the phase label Retained or
DeletingDisk listed with owner, kind, server, size in GiB and retain-until,
soonest first; which the next purge deletes (past retain-until, an
interrupted purge) and why the others stay (not yet, in use by a Pod,
inconsistent owner labels); a root disk listing the VM, Service and Secret
that go with it; the GiB it frees; a user's own retained disks; disks not
retained left out.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from workspacespawner.core import names
from workspacespawner.dashboard import purgeview
from workspacespawner.lifecycle.phases import Phase, Status

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)


def ours(kind: str, name: str, user: str, status: Status | None = None, size: str = "10Gi", **extra) -> dict:
    labels, annotations = names.owner_labels(user), names.owner_annotations(user)
    if status is not None:
        labels[names.PHASE_LABEL] = str(status.phase)
        annotations[names.LIFECYCLE_ANNOTATION] = json.dumps(status.to_state())
    spec = {"storage": {"resources": {"requests": {"storage": size}}}} if kind == "DataVolume" else {
        "resources": {"requests": {"storage": size}}}
    return {"kind": kind, "metadata": {"name": name, "uid": f"uid-{name}", "labels": labels, "annotations": annotations},
            "spec": spec, **extra}


def retained(until: datetime, server: str = "") -> Status:
    return Status(Phase.RETAINED, since=until - 30 * DAY, retain_until=until, server=server)


def objects() -> list[dict]:
    template = {"spec": {"volumes": [{"name": "root", "dataVolume": {"name": "ws-cy-root"}},
                                     {"name": "ci", "cloudInitNoCloud": {"secretRef": {"name": "ws-cy-cloudinit"}}}]}}
    copied = ours("PersistentVolumeClaim", "home-eve", "eve", retained(NOW - DAY))
    copied["metadata"]["annotations"][names.OWNER_ANNOTATION] = "ann"
    return [
        ours("PersistentVolumeClaim", "home-ann", "ann", retained(NOW - DAY)),
        ours("PersistentVolumeClaim", "home-bob", "bob", retained(NOW + 3 * DAY), size="20Gi"),
        ours("PersistentVolumeClaim", "home-cy", "cy", retained(NOW - 2 * DAY)),
        ours("DataVolume", "ws-cy-root", "cy", retained(NOW - 2 * DAY, server="vm"), size="30Gi"),
        ours("PersistentVolumeClaim", "home-dee", "dee", Status(Phase.DELETING_DISK, since=NOW - DAY)),
        ours("PersistentVolumeClaim", "home-fay", "fay", Status(Phase.STOPPED, since=NOW)),
        copied,
        ours("VirtualMachine", "ws-cy", "cy", spec={"template": template}),
        ours("Service", "ws-cy", "cy", spec={"selector": {names.DOMAIN_LABEL: "ws-cy"}}),
        ours("Secret", "ws-cy-cloudinit", "cy"),
        {"kind": "Pod", "metadata": {"name": "debug"}, "status": {"phase": "Running"},
         "spec": {"volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "home-cy"}}]}},
    ]


def test_retained_disks_and_what_the_next_purge_deletes():
    preview = purgeview.preview(objects(), NOW)
    rows = [(d.owner, d.name, d.kind, d.server, d.size_gib, d.phase, d.purge_next) for d in preview.disks]
    assert rows == [
        ("cy", "home-cy", "PersistentVolumeClaim", "", 10.0, "Retained", False),
        ("cy", "ws-cy-root", "DataVolume", "vm", 30.0, "Retained", True),
        ("", "home-eve", "PersistentVolumeClaim", "", 10.0, "Retained", False),
        ("ann", "home-ann", "PersistentVolumeClaim", "", 10.0, "Retained", True),
        ("bob", "home-bob", "PersistentVolumeClaim", "", 20.0, "Retained", False),
        ("dee", "home-dee", "PersistentVolumeClaim", "", 10.0, "DeletingDisk", True),
    ]
    why = {d.name: d.kept_because for d in preview.disks}
    assert why["home-cy"] == "in use by Pod debug"
    assert why["home-eve"] == "owner labels missing or inconsistent"
    assert why["home-bob"] == "retained until 2025-06-04T12:00:00Z"
    assert why["home-ann"] == why["ws-cy-root"] == ""
    root = next(d for d in preview.disks if d.name == "ws-cy-root")
    assert root.goes_with == ("VirtualMachine/ws-cy", "Service/ws-cy", "Secret/ws-cy-cloudinit")
    assert [d.name for d in preview.to_purge] == ["ws-cy-root", "home-ann", "home-dee"]
    assert preview.purge_gib == 50.0
    assert [d.name for d in preview.of_owner("cy")] == ["home-cy", "ws-cy-root"]
    assert preview.to_json()["disks"][3]["retain_until"] == "2025-05-31T12:00:00Z"


def test_later_the_waiting_disk_goes_too():
    preview = purgeview.preview(objects(), NOW + 4 * DAY)
    assert [d.name for d in preview.to_purge] == ["ws-cy-root", "home-ann", "home-bob", "home-dee"]
    assert purgeview.preview([], NOW).disks == []
