"""``workspacespawner usage``: per-user card-hours used and left, and running workspaces, from the hub's own config.

Builds a hub config file (loading a piece with ``load_subconfig``, as
JupyterHub's loader allows), a JupyterHub database with users and groups,
and a ledger; then checks the table and the CSV, ``--month`` (a run
across the 1st split by the configured timezone), ``--user``, ``--group``
(members without use listed too, group limits applied), a missing config
file, a bad month, a ledger file that is not there (never made); a relative ledger path resolved against the config
file's folder, for ``usage``, ``audit`` and the hub; the sample ``40-quota.py`` piece
loaded as the hub loads it.
"""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

import pytest

from tests.support.paths import CONFIG_D
from workspacespawner.cli import main as workspacespawner
from workspacespawner.lifecycle.audit import AuditLog
from workspacespawner.quota import policy
from workspacespawner.quota.cli import COLUMNS
from workspacespawner.quota.ledger import Ledger
from workspacespawner.quota.policy import Limits, Request

NOW = datetime(2025, 6, 10, 12, tzinfo=UTC)


@pytest.fixture
def hub_dir(tmp_path, monkeypatch):
    """A hub directory: config (with a sub-config), JupyterHub database, ledger with runs."""
    from jupyterhub import orm

    monkeypatch.setattr(policy, "utcnow", lambda: NOW)
    (tmp_path / "quota.py").write_text(
        'c.WorkspaceQuota.card_hours_per_month = 10\nc.WorkspaceQuota.group_limits = {"research": {"card_hours_per_month": 100}}\n'
    )
    (tmp_path / "jupyterhub_config.py").write_text(
        f'load_subconfig("quota.py")\n'
        f'c.WorkspaceQuota.timezone = "Europe/Berlin"\n'
        f'c.WorkspaceQuota.ledger_url = "sqlite:///{tmp_path / "ledger.sqlite"}"\n'
        f'c.JupyterHub.db_url = "sqlite:///{tmp_path / "jupyterhub.sqlite"}"\n'
    )
    session = orm.new_session_factory(f"sqlite:///{tmp_path / 'jupyterhub.sqlite'}")()
    users = {name: orm.User(name=name) for name in ("ann", "bob", "cy")}
    session.add_all(users.values())
    session.add(orm.Group(name="research", users=[users["bob"], users["cy"]]))
    session.commit()
    session.close()

    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    roomy = Limits(max_concurrent=5, card_hours_per_month=1000)

    def run(user, server, gpus, start, hours=None, kind="container"):
        decision = ledger.check_and_reserve(
            user, Request(gpus=gpus, server_name=server, workspace_kind=kind), roomy, start
        )
        ledger.open_run(decision.reservation, start)
        if hours is not None:
            ledger.close_run(decision.reservation.id, start + timedelta(hours=hours))

    # ann: 2 GPUs from 23:00 on 31 May to 01:00 on 1 June, Berlin time (21:00-23:00 UTC): 2 card-hours in each month
    run("ann", "", 2, datetime(2025, 5, 31, 21, tzinfo=UTC), hours=2)
    run("ann", "thesis", 1, NOW - timedelta(hours=3))  # running: 3 card-hours so far
    run("bob", "", 4, datetime(2025, 6, 2, 8, tzinfo=UTC), hours=5, kind="vm")  # 20
    ledger.dispose()
    monkeypatch.chdir(tmp_path)
    return tmp_path


def rows_of(text: str) -> dict[str, dict]:
    return {row["user"]: row for row in csv.DictReader(io.StringIO(text))}


def test_csv_for_this_month_with_group_limits(hub_dir, capsys):
    assert workspacespawner(["usage", "--csv", "-f", str(hub_dir / "jupyterhub_config.py")]) == 0
    rows = rows_of(capsys.readouterr().out)
    assert set(rows) == {"ann", "bob"}  # users with use
    ann, bob = rows["ann"], rows["bob"]
    assert (float(ann["card_hours_used"]), float(ann["card_hours_limit"]), float(ann["card_hours_left"])) == (
        5.0,
        10.0,
        5.0,
    )
    assert (ann["running"], ann["running_gpus"], ann["workspaces"]) == ("1", "1", "thesis:container:1gpu")
    assert (bob["groups"], float(bob["card_hours_used"]), float(bob["card_hours_left"])) == ("research", 20.0, 80.0)


def test_table_from_the_working_directory(hub_dir, capsys):
    assert workspacespawner(["usage"]) == 0  # ./jupyterhub_config.py, as the hub finds it
    out = capsys.readouterr().out
    assert (
        out.splitlines()[0] == "Card-hours for 2025-06 (Europe/Berlin); they reset on 2025-07-01 00:00 (Europe/Berlin)."
    )
    assert out.splitlines()[1].split() == list(COLUMNS)
    assert any(line.split()[:1] == ["bob"] and "research" in line for line in out.splitlines())


def test_month_user_and_group_filters(hub_dir, capsys):
    config = ["-f", str(hub_dir / "jupyterhub_config.py"), "--csv"]
    assert workspacespawner(["usage", *config, "--month", "2025-05"]) == 0
    may = rows_of(capsys.readouterr().out)
    assert list(may) == ["ann"] and float(may["ann"]["card_hours_used"]) == 2.0  # the hour before midnight, Berlin time
    assert (may["ann"]["running"], may["ann"]["workspaces"]) == ("0", "")  # running belongs to this month
    assert workspacespawner(["usage", *config, "--user", "ann"]) == 0
    assert list(rows_of(capsys.readouterr().out)) == ["ann"]
    assert workspacespawner(["usage", *config, "--group", "research"]) == 0
    rows = rows_of(capsys.readouterr().out)
    assert list(rows) == ["bob", "cy"] and float(rows["cy"]["card_hours_left"]) == 100.0  # members without use too


def test_errors(hub_dir, capsys, tmp_path):
    assert workspacespawner(["usage", "-f", str(tmp_path / "nowhere.py")]) == 2
    assert "no config file" in capsys.readouterr().err
    assert workspacespawner(["usage", "--month", "June"]) == 2
    assert "YYYY-MM" in capsys.readouterr().err
    (hub_dir / "broken.py").write_text(
        f'c.WorkspaceQuota.ledger_url = "sqlite:///{hub_dir / "missing" / "ledger.sqlite"}"\n'
    )
    assert workspacespawner(["usage", "-f", str(hub_dir / "broken.py")]) == 1
    assert capsys.readouterr().err.strip() == (
        f"workspacespawner usage: no ledger at {hub_dir / 'missing' / 'ledger.sqlite'}; is WorkspaceQuota.ledger_url right? (an admin command "
        "reads it from the hub's config: -f jupyterhub_config.py)"
    )


def relative_hub(folder):
    """A hub folder whose config names its ledger with a relative path, as the sample config and the demo do."""
    folder.mkdir()
    (folder / "jupyterhub_config.py").write_text('c.WorkspaceQuota.ledger_url = "sqlite:///workspacespawner-ledger.sqlite"\n')
    ledger = Ledger(f"sqlite:///{folder / 'workspacespawner-ledger.sqlite'}")
    decision = ledger.check_and_reserve("ann", Request(gpus=1), Limits(max_concurrent=5, card_hours_per_month=100), NOW)
    ledger.open_run(decision.reservation, NOW - timedelta(hours=2))
    ledger.dispose()
    AuditLog.from_url(f"sqlite:///{folder / 'workspacespawner-ledger.sqlite'}").record(
        actor="root", user="ann", disk="home-ann", action="expand", before=None, after=None, result="ok", time=NOW
    )
    return folder / "jupyterhub_config.py"


@pytest.mark.parametrize("command", ["usage", "audit"])
def test_a_relative_ledger_path_is_relative_to_the_config_file(tmp_path, monkeypatch, capsys, command):
    monkeypatch.setattr(policy, "utcnow", lambda: NOW)
    config = relative_hub(tmp_path / "hub")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert workspacespawner([command, "-f", str(config)]) == 0
    out = capsys.readouterr().out
    assert "ann" in out and "(no users)" not in out and "(no records)" not in out
    assert list(elsewhere.iterdir()) == []  # nothing made here


@pytest.mark.parametrize("command", ["usage", "audit"])
def test_a_read_only_command_never_makes_an_empty_ledger(tmp_path, monkeypatch, capsys, command):
    (tmp_path / "jupyterhub_config.py").write_text("c.WorkspaceQuota.card_hours_per_month = 5\n")  # the default ledger_url
    monkeypatch.chdir(tmp_path)
    assert workspacespawner([command, "-f", "jupyterhub_config.py"]) == 1
    expected = (f"no ledger at {tmp_path / 'workspacespawner-ledger.sqlite'}; is WorkspaceQuota.ledger_url right? "
                "(an admin command reads it from the hub's config: -f jupyterhub_config.py)")
    assert expected in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jupyterhub_config.py"]


def test_the_hub_resolves_a_relative_ledger_against_its_config_file(tmp_path, monkeypatch):
    from traitlets.config import Config

    from workspacespawner.quota.config import WorkspaceQuota

    monkeypatch.chdir(tmp_path)
    config = Config({"JupyterHub": {"config_file": "/srv/hub/jupyterhub_config.py"}})  # as `jupyterhub -f` sets it
    assert WorkspaceQuota(config=config).database_url() == "sqlite:////srv/hub/workspacespawner-ledger.sqlite"
    config.WorkspaceQuota.ledger_url = "sqlite:///data/ledger.sqlite"
    assert WorkspaceQuota(config=config).database_url() == "sqlite:////srv/hub/data/ledger.sqlite"
    assert WorkspaceQuota().database_url() == f"sqlite:///{tmp_path / 'workspacespawner-ledger.sqlite'}"  # no config file: here
    config.WorkspaceQuota.ledger_url = "postgresql+psycopg://hub@db/jupyterhub"
    assert WorkspaceQuota(config=config).database_url() == "postgresql+psycopg://hub@db/jupyterhub"


def test_the_sample_config_piece_loads_as_the_hub_loads_it(tmp_path, monkeypatch):

    from workspacespawner.quota.cli import load_hub_config
    from workspacespawner.quota.config import WorkspaceQuota

    monkeypatch.delenv("WORKSPACESPAWNER_QUOTA_TOKEN", raising=False)
    piece = CONFIG_D / "40-quota.py"
    (tmp_path / "jupyterhub_config.py").write_text(f"load_subconfig({str(piece)!r})\n")
    config = load_hub_config(str(tmp_path / "jupyterhub_config.py"))
    quota = WorkspaceQuota(config=config)
    assert quota.limits_for("ann", {"students", "research"}).card_hours_per_month == 500
    [service] = config.JupyterHub.services.get_value([])
    [role] = config.JupyterHub.load_roles.get_value([])
    assert service["api_token"] == quota.hub_api_token and len(quota.hub_api_token) == 64
    assert role == {
        "name": "workspacespawner-quota",
        # the idle-GPU pass (45-gpu-idle.py) lists active users with their groups and activity with it too
        "scopes": ["delete:servers", "read:servers", "list:users", "read:users:groups", "read:users:activity"],
        "services": ["workspacespawner-quota"],
    }
    assert callable(config.JupyterHub.template_vars["announcement_home"])


def test_a_hub_started_elsewhere_with_f_makes_its_ledger_next_to_its_config(tmp_path):
    """`jupyterhub -f DIR/jupyterhub_config.py` run from another folder: the start-up upgrade and the spawner's settings agree."""
    import os
    import subprocess
    import sys

    from tests.support.paths import REPO

    hub_dir, elsewhere = tmp_path / "hub", tmp_path / "elsewhere"
    hub_dir.mkdir()
    elsewhere.mkdir()
    (hub_dir / "jupyterhub_config.py").write_text(
        'c.WorkspaceQuota.ledger_url = "sqlite:///ledger.sqlite"\n'
        "from workspacespawner.services import upgrade_database\n"
        "upgrade_database(c)  # as 90-check-config.py does, with the file's own c\n"
    )
    code = (
        "from jupyterhub.app import JupyterHub\n"
        "from workspacespawner.quota.config import WorkspaceQuota\n"
        "app = JupyterHub.instance()\n"
        f"app.parse_command_line(['-f', {str(hub_dir / 'jupyterhub_config.py')!r}])\n"
        "app.load_config_file(app.config_file)\n"
        "print(WorkspaceQuota(config=app.config).database_url())\n"  # what the spawner's services open
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=elsewhere, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}).stdout
    assert out.strip() == f"sqlite:///{hub_dir / 'ledger.sqlite'}"
    assert (hub_dir / "ledger.sqlite").exists() and list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("command", ["usage", "audit"])
def test_a_ledger_file_that_is_not_a_database_is_named_not_a_traceback(tmp_path, capsys, command):
    (tmp_path / "workspacespawner-ledger.sqlite").write_text("these are someone's notes, not a database\n")
    (tmp_path / "jupyterhub_config.py").write_text('c.WorkspaceQuota.ledger_url = "sqlite:///workspacespawner-ledger.sqlite"\n')
    assert workspacespawner([command, "-f", str(tmp_path / "jupyterhub_config.py")]) == 1
    err = capsys.readouterr().err
    assert str(tmp_path / "workspacespawner-ledger.sqlite") in err and "file is not a database" in err, err
    assert "Traceback" not in err
    assert (tmp_path / "workspacespawner-ledger.sqlite").read_text().startswith("these are someone's notes")
