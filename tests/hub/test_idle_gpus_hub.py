"""Idle GPUs given back, through a real JupyterHub on the local cluster with WorkspaceSpawner. Covers: a
JupyterLab GPU server nobody uses (its only activity, the hub's own, as old as its start) stopped by the hub's
idle-GPU pass through the hub's REST API, its home PVC kept with the reason on its ``Stopped`` phase, an audit record (action ``stop``, reason ``idle
GPU``), the reason on its ledger run, and the line on the owner's home page; a GPU server of an exempt group
left running through the same passes. Also: the chart's values give the same ``c.GPUIdle`` as
``jupyterhub_config.d/45-gpu-idle.py``, and the quota service's role has the scopes the pass needs.

Without Prometheus here, so ``stop_without_prometheus`` is set: the pass's decision with GPU utilisation, the
code-server and VM joins and the faults are covered in tests/unit/test_idle_pass.py.
"""

from __future__ import annotations

import time

import pytest
from traitlets.config import Config

from tests.support import planes
from tests.support.chartvalues import our_values, z2jh_config
from tests.support.hubharness import CONFIG_D, Hub, home_phase, login
from tests.support.paths import REPO
from workspacespawner.idle.settings import GPUIdle
from workspacespawner.lifecycle.audit import AuditLog
from workspacespawner.quota.ledger import Ledger
from workspacespawner.quota.policy import CLOSED


@pytest.fixture(scope="module")
def ledger_url(tmp_path_factory):
    return f"sqlite:///{tmp_path_factory.mktemp('ledger') / 'ledger.sqlite'}"


@pytest.fixture(scope="module")
def cluster(control_plane, tmp_path_factory):
    with planes.running(control_plane, tmp_path_factory.mktemp("cluster")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def hub(cluster, tmp_path_factory, ledger_url):
    config = f"import sys\nsys.path.insert(0, {str(REPO)!r})\n"
    config += "\n".join(
        f"load_subconfig({str(CONFIG_D / piece)!r})" for piece in ("10-workspace-spawner.py", "20-profiles.py")
    )
    config += f"""
c.JupyterHub.spawner_class = "workspace"
c.WorkspaceQuota.ledger_url = {ledger_url!r}
c.WorkspaceQuota.card_hours_per_month = 100
c.GPUIdle.gpu_idle_timeout = 1
c.GPUIdle.gpu_idle_grace = 0
c.GPUIdle.interval = 5
c.GPUIdle.stop_without_prometheus = True
c.GPUIdle.exempt_groups = ["research"]
"""
    plane_config, start_timeout = planes.hub_settings(cluster)
    hub = Hub(tmp_path_factory.mktemp("hub"), cluster.kubeconfig, config + plane_config, start_timeout=start_timeout)
    hub.env["WORKSPACESPAWNER_QUOTA_TOKEN"] = hub.token  # the harness's admin service token holds every scope
    hub.start()
    yield hub
    hub.stop()


def test_an_idle_gpu_server_is_stopped_with_its_disks_kept_and_the_reason_recorded(hub, cluster, ledger_url):
    hub.create_user("rae", groups=("research",))
    hub.start_server("rae", {"profile": "jupyterlab-1gpu"})
    hub.create_user("ann")
    hub.start_server("ann", {"profile": "jupyterlab-1gpu"})
    deadline = time.monotonic() + 120
    while hub.user("ann")["servers"] and time.monotonic() < deadline:
        time.sleep(0.5)
    assert hub.user("ann")["servers"] == {}, hub.log()
    assert hub.user("rae")["servers"][""]["ready"]  # the exempt group's server went through the same passes

    audit = AuditLog.from_url(ledger_url)
    try:
        [record] = audit.query(action="stop", user="ann")
    finally:
        audit.dispose()
    assert (record.actor, record.server, record.result, record.after["reason"]) == ("system", "", "ok", "idle GPU")
    ledger = Ledger(ledger_url)
    try:
        runs = [run for run in ledger.runs_all((record.time.replace(year=2000), record.time.replace(year=2100)))
                .get("ann", []) if run.gpus == 1]
    finally:
        ledger.dispose()
    assert [(run.state, run.stop_reason) for run in runs] == [(CLOSED, "idle GPU")]
    phase = home_phase(cluster, "ann")  # the disk kept, the reason with its phase
    assert (phase["phase"], phase["reason"]) == ("Stopped", "idle-gpu") and "no activity" in phase["message"], phase

    page = login(hub, "ann").get(f"{hub.url}/hub/workspaces-data/ann", timeout=30).json()
    [line] = page["idle"]
    assert line.startswith("Your workspace was stopped: it had shown no activity for") and "disks are kept" in line
    assert login(hub, "rae").get(f"{hub.url}/hub/workspaces-data/rae", timeout=30).json()["idle"] == []


def test_the_chart_values_equal_the_config_piece_and_the_role_has_the_scopes():
    piece = CONFIG_D / "45-gpu-idle.py"
    expected = Config()
    exec(compile(piece.read_text(), piece.name, "exec"), {"c": expected})
    values = our_values()
    values["hub"]["extraFiles"] = None  # the start-up check: the Config before it runs
    loaded = z2jh_config(values, secrets={("school-oauth", "client-secret"): "s3cret"})
    for key, value in expected.GPUIdle.items():
        assert loaded.GPUIdle[key] == value, f"c.GPUIdle.{key}"
    GPUIdle(config=loaded)
    [role] = [r for r in loaded.JupyterHub.load_roles if r["name"] == "workspacespawner-quota"]
    assert {"delete:servers", "read:servers", "list:users", "read:users:groups", "read:users:activity"} <= set(
        role["scopes"])
