"""The Reports page's numbers (:mod:`workspacespawner.dashboard.reports`): card-hours and disk per department,
group and user, and the CSV.

Builds a hub directory as ``workspacespawner usage`` reads it (config with a
group limit and the Europe/Berlin month, a JupyterHub database with users
and groups, a ledger with runs of known length) and plain PVC and DataVolume
objects. Covers: user rows equal to the command's own CSV for the same month
(and for a past month), a group member and a disk owner without use listed
with their limits; disk per user in GiB from owner labels only (a DataVolume
and its PVC counted once, a PVC with copied labels never); group rows
summing their members (a user in two groups in both); department rows
counting a user in two of their groups once; the CSV's header and rows,
with a formula-like name defused; the departments setting's check.
"""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

import pytest

from workspacespawner.cli import main as workspacespawner
from workspacespawner.core import names
from workspacespawner.dashboard import reports
from workspacespawner.quota import policy
from workspacespawner.quota.cli import hub_groups, load_hub_config
from workspacespawner.quota.config import WorkspaceQuota
from workspacespawner.quota.ledger import Ledger
from workspacespawner.quota.policy import Limits, Request

NOW = datetime(2025, 6, 10, 12, tzinfo=UTC)
GROUPS = {"physics-students": ["ann", "bob"], "research": ["bob", "cy"], "physics-staff": ["eve"]}
DEPARTMENTS = {"Physics": ["physics-students", "research"], "Staff": ["physics-staff", "no-such-group"]}


def disk(kind: str, name: str, owner: str | None, size: str, *, dv_style: bool = False) -> dict:
    meta = {"name": name, "labels": {}, "annotations": {}}
    if owner is not None:
        meta["labels"] = names.owner_labels(owner)
        meta["annotations"] = names.owner_annotations(owner)
    resources = {"resources": {"requests": {"storage": size}}}
    return {"kind": kind, "metadata": meta, "spec": {"storage": resources} if dv_style else resources}


PVCS = [
    disk("PersistentVolumeClaim", "home-ann", "ann", "10Gi"),
    disk("PersistentVolumeClaim", "home-bob", "bob", "20Gi"),
    disk("PersistentVolumeClaim", "ws-bob-gpu-root", "bob", "30Gi"),  # the DataVolume's own PVC
    disk("PersistentVolumeClaim", "home-eve", "eve", "5Gi"),
    disk("PersistentVolumeClaim", "scratch", None, "100Gi"),  # nobody's
]
DATAVOLUMES = [disk("DataVolume", "ws-bob-gpu-root", "bob", "30Gi", dv_style=True)]


@pytest.fixture
def hub_dir(tmp_path, monkeypatch):
    from jupyterhub import orm

    monkeypatch.setattr(policy, "utcnow", lambda: NOW)
    (tmp_path / "jupyterhub_config.py").write_text(
        "c.WorkspaceQuota.card_hours_per_month = 10\n"
        'c.WorkspaceQuota.group_limits = {"research": {"card_hours_per_month": 100}}\n'
        'c.WorkspaceQuota.timezone = "Europe/Berlin"\n'
        f'c.WorkspaceQuota.ledger_url = "sqlite:///{tmp_path / "ledger.sqlite"}"\n'
        f'c.JupyterHub.db_url = "sqlite:///{tmp_path / "jupyterhub.sqlite"}"\n'
    )
    session = orm.new_session_factory(f"sqlite:///{tmp_path / 'jupyterhub.sqlite'}")()
    users = {name: orm.User(name=name) for name in ("ann", "bob", "cy", "dee", "eve", "fay")}
    session.add_all(users.values())
    for group, members in GROUPS.items():
        session.add(orm.Group(name=group, users=[users[m] for m in members]))
    session.commit()
    session.close()

    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    roomy = Limits(max_concurrent=5, card_hours_per_month=1000)

    def run(user, server, gpus, start, hours=None):
        decision = ledger.check_and_reserve(user, Request(gpus=gpus, server_name=server), roomy, start)
        ledger.open_run(decision.reservation, start)
        if hours is not None:
            ledger.close_run(decision.reservation.id, start + timedelta(hours=hours))

    run("ann", "", 2, datetime(2025, 5, 31, 21, tzinfo=UTC), hours=2)  # 23:00-01:00 Berlin: 2 in May, 2 in June
    run("ann", "thesis", 1, NOW - timedelta(hours=3))  # running: 3 so far
    run("bob", "", 4, datetime(2025, 6, 2, 8, tzinfo=UTC), hours=5)  # 20
    run("cy", "", 1, datetime(2025, 6, 3, 8, tzinfo=UTC), hours=1.5)  # 1.5
    run("dee", "", 1, datetime(2025, 6, 4, 8, tzinfo=UTC), hours=0.25)  # 0.25
    ledger.dispose()
    return tmp_path


def report_of(hub_dir, month: str | None = None) -> reports.Report:
    config = load_hub_config(str(hub_dir / "jupyterhub_config.py"))
    settings = WorkspaceQuota(config=config)
    period = policy.named_month(month, settings.timezone) if month else policy.month_bounds(NOW, settings.timezone)
    ledger = Ledger(settings.existing_ledger_url())
    try:
        return reports.read_report(settings, ledger, hub_groups(config), DEPARTMENTS, PVCS, DATAVOLUMES, period, NOW)
    finally:
        ledger.dispose()


def command_rows(capsys, hub_dir, *extra) -> dict[str, dict]:
    assert workspacespawner(["usage", "--csv", "-f", str(hub_dir / "jupyterhub_config.py"), *extra]) == 0
    return {row["user"]: row for row in csv.DictReader(io.StringIO(capsys.readouterr().out))}


def numbers(row) -> tuple[float, float, float]:
    return float(row["card_hours_used"]), float(row["card_hours_limit"]), float(row["card_hours_left"])


def test_user_rows_are_the_usage_commands_numbers(hub_dir, capsys):
    report = report_of(hub_dir)
    assert report.month == "2025-06"
    users = {row.name: row for row in report.users}
    assert list(users) == ["ann", "bob", "cy", "dee", "eve"]  # fay: no group, no use, no disk
    expected = {
        "ann": (5.0, 10.0, 5.0, 10.0, "physics-students"),
        "bob": (20.0, 100.0, 80.0, 50.0, "physics-students research"),
        "cy": (1.5, 100.0, 98.5, 0.0, "research"),
        "dee": (0.25, 10.0, 9.75, 0.0, ""),
        "eve": (0.0, 10.0, 10.0, 5.0, "physics-staff"),
    }
    for name, (used, limit, left, disk_gib, groups) in expected.items():
        row = users[name]
        assert (row.card_hours_used, row.card_hours_limit, row.card_hours_left, row.disk_gib, row.groups) == (
            used, limit, left, disk_gib, groups,
        ), name
    listed = command_rows(capsys, hub_dir)
    assert set(listed) == {"ann", "bob", "cy", "dee"}
    for name, row in listed.items():
        assert numbers(row) == (users[name].card_hours_used, users[name].card_hours_limit, users[name].card_hours_left)
    [eve] = command_rows(capsys, hub_dir, "--user", "eve").values()
    assert numbers(eve) == (0.0, 10.0, 10.0)


def test_a_past_month_matches_the_command_too(hub_dir, capsys):
    report = report_of(hub_dir, "2025-05")
    users = {row.name: row for row in report.users}
    listed = command_rows(capsys, hub_dir, "--month", "2025-05")
    assert numbers(listed["ann"]) == (users["ann"].card_hours_used, 10.0, 8.0) == (2.0, 10.0, 8.0)
    assert users["bob"].card_hours_used == 0 and users["bob"].disk_gib == 50.0  # disk is what is held now


def test_groups_sum_their_members_and_departments_count_a_user_once(hub_dir):
    report = report_of(hub_dir)
    groups = {row.name: row for row in report.groups}
    assert list(groups) == ["physics-staff", "physics-students", "research"]
    numbers_of = lambda row: (row.card_hours_used, row.card_hours_limit, row.card_hours_left, row.disk_gib, row.users)  # noqa: E731
    assert numbers_of(groups["physics-students"]) == (25.0, 110.0, 85.0, 60.0, 2)
    assert numbers_of(groups["research"]) == (21.5, 200.0, 178.5, 50.0, 2)  # bob counts here too
    assert numbers_of(groups["physics-staff"]) == (0.0, 10.0, 10.0, 5.0, 1)
    departments = {row.name: row for row in report.departments}
    assert list(departments) == ["Physics", "Staff", "(no department)"]
    # Physics: ann, bob (in both of its groups, counted once), cy
    assert numbers_of(departments["Physics"]) == (26.5, 210.0, 183.5, 60.0, 3)
    assert departments["Physics"].groups == "physics-students research"
    assert numbers_of(departments["Staff"]) == (0.0, 10.0, 10.0, 5.0, 1)
    assert numbers_of(departments["(no department)"]) == (0.25, 10.0, 9.75, 0.0, 1)  # dee: in no group
    assert numbers_of(report.total) == (26.75, 230.0, 203.25, 65.0, 5)  # every user once
    assert numbers_of(report.total) == tuple(round(sum(x), 2) for x in zip(*map(numbers_of, departments.values())))
    assert report.to_json()["total"]["name"] == "All users"
    assert [row.level for row in report.rows()] == ["department"] * 3 + ["group"] * 3 + ["user"] * 5 + ["total"]


def test_disk_per_user_from_owner_labels_only():
    copied = disk("PersistentVolumeClaim", "home-mallory", "ann", "500Gi")
    copied["metadata"]["annotations"][names.OWNER_ANNOTATION] = "mallory"  # ann's label, another name
    assert reports.disk_bytes_by_user([*PVCS, copied], DATAVOLUMES) == {
        "ann": 10 * 2**30, "bob": 50 * 2**30, "eve": 5 * 2**30,
    }


def test_csv_has_a_header_and_every_row():
    period = policy.named_month("2025-06", "UTC")
    rows = [
        {"user": "ann", "groups": "lab", "card_hours_used": 5.0, "card_hours_limit": 10.0, "card_hours_left": 5.0},
        {"user": "=HYPERLINK(1)", "groups": "lab", "card_hours_used": 0.5, "card_hours_limit": 10.0, "card_hours_left": 9.5},
    ]
    report = reports.build_report(rows, {"ann": {"lab"}, "=HYPERLINK(1)": {"lab"}}, {"Lab": ["lab"]},
                                  {"ann": 3 * 2**29}, period)
    text = reports.to_csv(report)
    lines = list(csv.reader(io.StringIO(text)))
    assert lines[0] == list(reports.CSV_COLUMNS) == [
        "level", "name", "card_hours_used", "card_hours_limit", "card_hours_left", "disk_gib", "users", "groups",
    ]
    assert lines[1:] == [
        ["department", "Lab", "5.5", "20.0", "14.5", "1.5", "2", "lab"],
        ["department", "(no department)", "0.0", "0.0", "0.0", "0.0", "0", ""],
        ["group", "lab", "5.5", "20.0", "14.5", "1.5", "2", ""],
        ["user", "'=HYPERLINK(1)", "0.5", "10.0", "9.5", "0.0", "1", "lab"],
        ["user", "ann", "5.0", "10.0", "5.0", "1.5", "1", "lab"],
        ["total", "All users", "5.5", "20.0", "14.5", "1.5", "2", ""],
    ]
    assert report.to_json()["users"][1]["name"] == "ann"


def test_departments_setting_is_checked():
    assert reports.check_departments({"Physics": ["b", "a", "a"]}) == {"Physics": ["a", "b"]}
    for bad, words in [
        (["physics"], "must be a dict"),
        ({"Physics": "physics"}, "must be a list of JupyterHub group names"),
        ({"": ["a"]}, "non-empty strings"),
        ({"(no department)": ["a"]}, "the report's row of the users in none"),
        ({"Physics": ["a", 3]}, "non-empty group names"),
    ]:
        with pytest.raises(ValueError, match=words):
            reports.check_departments(bad)
