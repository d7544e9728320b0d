"""The audit trail (:mod:`workspacespawner.lifecycle.audit`) and ``workspacespawner audit``.

Covers: records written and read back (JSON before/after, aware UTC times),
filters by user, time and action; an unknown action refused; the audit
table added by migration 0003 to a ledger database of revision 0002 (rows
kept) and living in the same database as the ledger, each on SQLite and
PostgreSQL; the command reading
the hub's config (``-f``) for the database, as a table and as JSON, and its
``--since`` check.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from tests.support.migrations import at_revision
from workspacespawner.admin import audit as audit_command
from workspacespawner.db.migrate import head_revision
from workspacespawner.db.migrations import AUDIT_TABLE, RUNS_TABLE
from workspacespawner.lifecycle.audit import AuditLog
from workspacespawner.quota.ledger import Ledger

T0 = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def audit_log(database_url):
    """An empty audit log on SQLite and on PostgreSQL (``database_url``, tests/conftest.py)."""
    log = AuditLog.from_url(database_url)
    yield log
    log.dispose()


def fill(log: AuditLog) -> None:
    log.record(actor="root", user="ann", disk="home-ann", action="expand", before={"size": "10Gi"}, after={"size": "20Gi"},
               result="ok", time=T0)
    log.record(actor="system", user="ann", server="gpu", disk="ws-ann-gpu-root", action="retain", before={"phase": "Stopped"},
               after={"phase": "Retained"}, result="ok", time=T0 + timedelta(days=1))
    log.record(actor="root", user="anna", disk="home-anna", action="snapshot", before=None, after={"snapshot": "s1"},
               result="ok", time=T0 + timedelta(days=2))


def test_records_and_filters(audit_log):
    fill(audit_log)
    every = audit_log.query()
    assert [r.action for r in every] == ["expand", "retain", "snapshot"]
    assert every[0].time == T0 and every[0].before == {"size": "10Gi"} and every[0].after == {"size": "20Gi"}
    assert [r.user for r in audit_log.query(user="ann")] == ["ann", "ann"]  # not anna
    assert [r.action for r in audit_log.query(since=T0 + timedelta(hours=1))] == ["retain", "snapshot"]
    assert [r.disk for r in audit_log.query(action="retain")] == ["ws-ann-gpu-root"]
    assert every[1].to_json()["time"] == "2025-06-02T12:00:00Z"
    with pytest.raises(ValueError):
        audit_log.record(actor="root", user="ann", disk="x", action="format", before=None, after=None, result="ok")


def test_audit_table_joins_an_older_ledger(database_url):
    ledger = Ledger(database_url)
    with at_revision(ledger, "0002") as conn:
        conn.execute(sa.text(f"INSERT INTO {RUNS_TABLE} (user_name, server_name, profile, workspace_kind, gpus, started, state) "
                             "VALUES ('ann', '', 'cpu', 'container', 0, '2025-06-01 10:00:00', 'closed')"))
    log = AuditLog(ledger)
    log.record(actor="root", user="ann", disk="home-ann", action="expand", before=None, after=None, result="ok")
    tables = set(sa.inspect(ledger.engine).get_table_names())
    assert {AUDIT_TABLE, RUNS_TABLE} <= tables
    with ledger.engine.connect() as conn:
        assert conn.execute(sa.text(f"SELECT count(*) FROM {RUNS_TABLE}")).scalar_one() == 1
    assert ledger.upgrade() == head_revision() >= "0003"
    ledger.dispose()


def test_audit_command(tmp_path, database_url, capsys):
    url = database_url
    filled = AuditLog.from_url(url)
    fill(filled)
    filled.dispose()
    hub_config = tmp_path / "jupyterhub_config.py"
    hub_config.write_text(f"c.WorkspaceQuota.ledger_url = {url!r}\n")

    assert audit_command.main(["-f", str(hub_config), "--user", "ann", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["action"], r["actor"], r["disk"]) for r in rows] == [("expand", "root", "home-ann"), ("retain", "system", "ws-ann-gpu-root")]
    assert rows[0]["before"] == {"size": "10Gi"}

    assert audit_command.main(["-f", str(hub_config), "--since", "2025-06-03"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:3] == ["TIME", "ACTOR", "USER"] and len(table) == 2 and "snapshot=s1" in table[1]

    assert audit_command.main(["-f", str(hub_config), "--since", "last tuesday"]) == 2
    assert "--since" in capsys.readouterr().err
