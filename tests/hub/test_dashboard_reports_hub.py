"""The dashboard's Reports view as the hub runs it (a managed service at /services/workspaces/) on the local cluster.

Covers: an admin's report for this month has the same user rows as ``workspacespawner usage --csv`` run against
the same hub (its config, its database, its ledger), and the CSV download parses to the same numbers as the JSON;
a department's row sums its groups' distinct users (a user in two of its groups once) and the disk their
PersistentVolumeClaims ask for; a plain user and a team lead get 403 for the page, the JSON and the CSV (by token
and by a browser session); a bad month is 400 naming ``month``; the audit log filtered by user, action, result and
days returns only the matching records; the purge preview names the retained disk past its retain-until as the
next purge's and deletes nothing (the PersistentVolumeClaim is still there afterwards).
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import pytest
import requests

from tests.hub.test_dashboard_hub import DashboardHub, dashboard_config, token_of
from tests.support import planes
from tests.support.hubharness import core_and_custom, free_port, login
from workspacespawner.core import names
from workspacespawner.lifecycle.audit import AuditLog
from workspacespawner.quota import policy
from workspacespawner.quota.ledger import Ledger
from workspacespawner.quota.policy import Reservation

GROUPS = {"physics": ("alice", "bob"), "research": ("bob", "carol", "lead")}
#: user -> (GPUs, hours) of one closed run this month
RUNS = {"alice": (1, 2.0), "bob": (2, 3.0), "carol": (1, 0.5)}


@pytest.fixture(scope="module")
def control_plane():
    return "embedded"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with planes.running("embedded", tmp_path_factory.mktemp("cluster")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def ledger_url(tmp_path_factory):
    return f"sqlite:///{tmp_path_factory.mktemp('ledger') / 'ledger.sqlite'}"


def pvc_body(user: str, name: str, size: str, *, retained_until: str | None = None) -> dict:
    labels = {**names.owner_labels(user), names.DISK_LABEL: "home"}
    annotations = dict(names.owner_annotations(user))
    if retained_until:
        labels[names.PHASE_LABEL] = "Retained"
        annotations[names.LIFECYCLE_ANNOTATION] = json.dumps(
            {"phase": "Retained", "since": "2020-01-01T00:00:00Z", "server": "old", "retainUntil": retained_until})
    return {"metadata": {"name": name, "labels": labels, "annotations": annotations},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}}


@pytest.fixture(scope="module")
def hub(cluster, tmp_path_factory, ledger_url):
    config = dashboard_config(ledger_url) + 'c.WorkspacesDashboard.departments = {"Science": ["physics", "research"]}\n'
    hub = DashboardHub(tmp_path_factory.mktemp("hub"), cluster.kubeconfig, config, dashboard_port=free_port())
    hub.start()
    try:
        hub.wait_service()
        for group, users in GROUPS.items():
            for user in users:
                hub.create_user(user, groups=(group,))
        hub.create_user("root")
        r = hub.api("PATCH", "/users/root", json={"admin": True})
        assert r.ok, r.text
        # closed runs this month, written as the hub's quota does (a reservation opened, then closed)
        ledger = Ledger(ledger_url)
        start = max(policy.month_bounds(datetime.now(UTC), "UTC")[0], datetime.now(UTC) - timedelta(days=1))
        for user, (gpus, hours) in RUNS.items():
            run_id = ledger.open_run(Reservation(None, user, "", "jupyterlab-1gpu", "container", gpus, start), start)
            ledger.close_run(run_id, start + timedelta(hours=hours))
        ledger.dispose()
        with core_and_custom(cluster) as (core, _custom):
            core.create_namespaced_persistent_volume_claim("default", pvc_body("alice", "home-alice", "10Gi"))
            core.create_namespaced_persistent_volume_claim("default", pvc_body("bob", "home-bob", "20Gi"))
            core.create_namespaced_persistent_volume_claim(
                "default", pvc_body("carol", "carol-old-home", "5Gi", retained_until="2020-02-01T00:00:00Z"))
        yield hub
    finally:
        hub.stop()


@pytest.fixture(scope="module")
def admin(hub):
    return token_of(hub, "root")


def report_when_disks_are_seen(hub, headers, **params) -> dict:
    """The JSON report once the service's watch cache holds the three PersistentVolumeClaims made above."""
    deadline = time.monotonic() + 30
    while True:
        r = requests.get(hub.service_url("api/reports"), headers=headers, params=params, timeout=60)
        assert r.status_code == 200, r.text
        data = r.json()
        owners = {u["name"] for u in data["report"]["users"] if u["disk_gib"] > 0}
        if owners >= {"alice", "bob", "carol"} or time.monotonic() > deadline:
            return data
        time.sleep(0.3)


def usage_csv(hub) -> list[dict]:
    """``workspacespawner usage --csv`` run against the test hub's config file, database and ledger."""
    done = subprocess.run([sys.executable, "-m", "workspacespawner", "usage", "-f", str(hub.config_file), "--csv"],
                          capture_output=True, text=True, timeout=120, cwd=hub.workdir, env=hub.env)
    assert done.returncode == 0, done.stderr
    return list(csv.DictReader(io.StringIO(done.stdout)))


def test_the_admins_report_equals_workspacespawner_usage_and_its_csv(hub, admin):
    data = report_when_disks_are_seen(hub, admin)
    report = data["report"]
    assert report["month"] == f"{datetime.now(UTC):%Y-%m}"
    users = {row["name"]: row for row in report["users"]}
    cli = usage_csv(hub)
    assert {row["user"] for row in cli} == set(RUNS)
    for row in cli:
        mine = users[row["user"]]
        for column in ("card_hours_used", "card_hours_limit", "card_hours_left"):
            assert mine[column] == float(row[column]), (row["user"], column)
        assert mine["groups"] == row["groups"]
    assert users["bob"]["card_hours_used"] == 6.0 and users["alice"]["disk_gib"] == 10.0

    r = requests.get(hub.service_url("api/reports.csv"), headers=admin, params={"month": report["month"]}, timeout=60)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Disposition"].startswith("attachment;")
    rows = list(csv.DictReader(io.StringIO(r.text)))
    shown = [row for level in ("departments", "groups", "users") for row in report[level]] + [report["total"]]
    assert [(row["level"], row["name"]) for row in rows] == [(row["level"], row["name"]) for row in shown]
    for got, want in zip(rows, shown, strict=True):
        for column in ("card_hours_used", "card_hours_limit", "card_hours_left", "disk_gib"):
            assert float(got[column]) == want[column]
        assert int(got["users"]) == want["users"]


def test_a_department_counts_each_of_its_users_once(hub, admin):
    report = report_when_disks_are_seen(hub, admin)["report"]
    users = {row["name"]: row for row in report["users"]}
    science, nowhere = report["departments"]
    assert (science["name"], nowhere["name"]) == ("Science", "(no department)")
    members = {"alice", "bob", "carol", "lead"}  # bob is in both of its groups
    assert science["users"] == len(members)
    assert science["card_hours_used"] == round(sum(users[u]["card_hours_used"] for u in members), 2) == 8.5
    assert science["disk_gib"] == 35.0
    groups = {row["name"]: row for row in report["groups"]}
    assert groups["physics"]["card_hours_used"] + groups["research"]["card_hours_used"] == 14.5  # bob in both
    # everyone else is in the "(no department)" row, and the departments add up to the total
    assert nowhere["users"] == len(set(users) - members)
    total = report["total"]
    assert (total["name"], total["users"]) == ("All users", len(users))
    for column in ("card_hours_used", "card_hours_limit", "card_hours_left", "disk_gib"):
        assert total[column] == round(science[column] + nowhere[column], 2) == round(sum(u[column] for u in users.values()), 2)


@pytest.mark.parametrize("path", ["reports", "api/reports", "api/reports.csv", "api/audit"])
def test_a_user_and_a_team_lead_are_refused(hub, path):
    alice = token_of(hub, "alice")
    lead = token_of(hub, "lead", "custom:workspaces:read!group=research", "custom:workspaces:cluster")
    for headers in (alice, lead):
        r = requests.get(hub.service_url(path), headers=headers, timeout=60)
        assert r.status_code == 403, (path, r.text)
        assert "Card-hours" not in r.text and "carol" not in r.text


def test_a_users_browser_session_is_refused_the_page_and_the_csv(hub):
    session = login(hub, "alice")
    assert session.get(hub.service_url(), timeout=60).status_code == 200  # logged in to the service
    assert session.get(hub.service_url("reports"), timeout=60).status_code == 403
    assert session.get(hub.service_url("api/reports.csv"), timeout=60).status_code == 403


def test_the_admins_page_lists_the_report_and_a_bad_month_is_refused(hub, admin):
    session = login(hub, "root")
    r = session.get(hub.service_url("reports"), timeout=60)
    assert r.status_code == 200, r.text
    assert 'data-name="Science"' in r.text and "api/reports.csv?month=" in r.text and "<svg" in r.text
    for month in ("2026-13", "soon", "2999-01"):
        r = requests.get(hub.service_url("api/reports"), headers=admin, params={"month": month}, timeout=60)
        assert r.status_code == 400 and r.json()["message"].startswith("month:"), r.text
    assert session.get(hub.service_url("reports"), params={"month": "soon"}, timeout=60).status_code == 400


def test_the_audit_filter_returns_only_the_filtered_records(hub, admin, ledger_url):
    log = AuditLog.from_url(ledger_url)
    try:
        old = datetime.now(UTC) - timedelta(days=10)
        log.record(actor="root", user="carol", disk="home-carol", action="snapshot", before=None, after=None,
                   result="ok", time=old)
        log.record(actor="carol", user="carol", disk="home-carol", action="snapshot", before=None, after=None,
                   result="ok")
        log.record(actor="carol", user="carol", disk="home-carol", action="expand", before=None, after=None,
                   result="refused: over the disk quota")
        log.record(actor="alice", user="alice", disk="home-alice", action="snapshot", before=None, after=None,
                   result="ok")
    finally:
        log.dispose()
    get = lambda **params: requests.get(hub.service_url("api/audit"), headers=admin, params=params, timeout=60)  # noqa: E731
    records = get(user="carol", action="snapshot").json()["records"]
    assert [(r["user"], r["action"], r["actor"]) for r in records] == [("carol", "snapshot", "carol"),
                                                                       ("carol", "snapshot", "root")]
    today = f"{datetime.now(UTC):%Y-%m-%d}"
    records = get(user="carol", action="snapshot", since=today).json()["records"]
    assert [r["actor"] for r in records] == ["carol"]
    records = get(user="carol", result="refused").json()["records"]
    assert [(r["action"], r["result"]) for r in records] == [("expand", "refused: over the disk quota")]
    page = get(user="carol", limit="1").json()
    assert len(page["records"]) == 1 and page["has_more"] and page["next_offset"] == 1
    r = get(action="nonsense")
    assert r.status_code == 400 and r.json()["message"].startswith("action:")


def test_the_purge_preview_names_the_disk_past_its_retain_until_and_deletes_nothing(hub, admin, cluster):
    disks = {d["name"]: d for d in report_when_disks_are_seen(hub, admin)["purge"]["disks"]}
    old = disks["carol-old-home"]
    assert (old["owner"], old["purge_next"], old["size_gib"]) == ("carol", True, 5.0)
    assert "home-alice" not in disks  # not retained
    session = login(hub, "root")
    page = session.get(hub.service_url("reports"), timeout=60).text
    assert 'data-name="carol-old-home" class="reports-goes"' in page
    with core_and_custom(cluster) as (core, _custom):
        pvc = core.read_namespaced_persistent_volume_claim("carol-old-home", "default")
    assert pvc.metadata.deletion_timestamp is None
    assert pvc.metadata.labels[names.PHASE_LABEL] == "Retained"
