"""Quotas through a real JupyterHub on the local cluster, with WorkspaceSpawner. Covers:
a GPU start refused for card-hours answered 403 with the plain-words
message (used, left, reset, whom to ask), more times than
``consecutive_failure_limit`` without the hub exiting; instance-size and
disk refusals with their numbers; a CPU start never refused for card-hours, metered
in the ledger from Running to its stop; a server whose Pod vanished
(JupyterHub's poll notices, stop() is not called) closed at its last
sighting (post-stop hook or enforcer pass, whichever comes first); the
spawn form showing a GPU
profile's cost and the user's card-hours; the enforcer stopping a GPU
server through the hub's REST API once its card-hours ran out, with the
reason in the ledger and the message on the user's home page; the refusal
counter on ``/hub/metrics``. All of it with the ledger on SQLite and on PostgreSQL,
on the embedded control plane, and with the SQLite ledger on the real one
(tests/support/planes.py).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import kubernetes
import pytest
import sqlalchemy as sa

from tests.support import planes
from tests.support.hubharness import CONFIG_D, Hub, core_and_custom, home_phase, login
from tests.support.paths import REPO
from tests.support.pgserver import fresh_database
from workspacespawner.quota.ledger import Ledger
from workspacespawner.quota.policy import CLOSED, OPEN


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def ledger_url(request, control_plane, tmp_path_factory):
    """The hub's ledger: a SQLite file, or a database on the PostgreSQL server (the z2jh hub's own, in production).

    The real control plane runs the SQLite one: the ledger's database and
    the API server are independent, and the real tier's time is dear.
    """
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path_factory.mktemp('ledger') / 'ledger.sqlite'}"
    if control_plane == "real":
        pytest.skip("the PostgreSQL ledger runs on the embedded control plane (the real one runs the SQLite one)")
    return fresh_database(request.getfixturevalue("postgres_server"), "quota_hub")


@pytest.fixture(scope="module")
def cluster(control_plane, tmp_path_factory, ledger_url):
    # a cluster per ledger: the second hub starts from no users and no workspaces, as the first did
    with planes.running(control_plane, tmp_path_factory.mktemp("cluster")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, ledger_url):
    return tmp_path_factory.mktemp("hub")


@pytest.fixture(scope="module")
def hub(cluster, workdir, ledger_url):
    config = f"import sys\nsys.path.insert(0, {str(REPO)!r})\n"
    config += "\n".join(
        f"load_subconfig({str(CONFIG_D / piece)!r})" for piece in ("10-workspace-spawner.py", "20-profiles.py")
    )
    config += f"""
c.JupyterHub.spawner_class = "workspace"
c.Spawner.consecutive_failure_limit = 2
c.Spawner.poll_interval = 1
c.WorkspaceQuota.ledger_url = {ledger_url!r}
c.WorkspaceQuota.card_hours_per_month = 0
c.WorkspaceQuota.max_gpus = 8
c.WorkspaceQuota.group_limits = {{"research": {{"card_hours_per_month": 100}}}}
c.WorkspaceQuota.user_limits = {{"dee": {{"max_gpus": 1}}, "bob": {{"card_hours_per_month": 0.01}}, "fay": {{"max_disk": "5Gi"}}}}
c.WorkspaceQuota.min_gpu_start_time = 0
c.WorkspaceQuota.grace_period = 0
c.WorkspaceQuota.enforce_interval = 1
c.WorkspaceQuota.contact = "the GPU team"


def admin_pre_spawn_hook(spawner):
    # An admin's own hook: it sees the resolved profile, and what it sets reaches the server.
    with open({str(workdir / "pre-spawn-hook.log")!r}, "a") as log:
        log.write(f"{{spawner.user.name}} {{spawner.profile.slug}}\\n")
    spawner.environment = {{**spawner.environment, "ADMIN_HOOK_SAW": spawner.profile.slug}}


c.Spawner.pre_spawn_hook = admin_pre_spawn_hook
from workspacespawner.quota.announce import with_quota_announcements
c.JupyterHub.template_vars = with_quota_announcements(c.JupyterHub.template_vars)
"""
    plane_config, start_timeout = planes.hub_settings(cluster)
    hub = Hub(workdir, cluster.kubeconfig, config + plane_config, start_timeout=start_timeout)
    hub.env["WORKSPACESPAWNER_QUOTA_TOKEN"] = hub.token  # the harness's admin service token has the servers scope
    hub.start()
    yield hub
    hub.stop()


@pytest.fixture
def ledger(ledger_url):
    ledger = Ledger(ledger_url)
    yield ledger
    ledger.dispose()


def runs_of(ledger: Ledger, user: str):
    with ledger.engine.connect() as conn:
        rows = (
            conn.execute(sa.text("SELECT id FROM workspacespawner_runs WHERE user_name = :user ORDER BY id"), {"user": user})
            .scalars()
            .all()
        )
    return [ledger.get(i) for i in rows]


def test_gpu_refusals_reach_the_user_and_do_not_stop_the_hub(hub):
    hub.create_user("ann")
    for _ in range(4):  # more than consecutive_failure_limit (2)
        r = hub.spawn("ann", {"profile": "jupyterlab-1gpu"})
        assert r.status_code == 403, r.text
        message = r.json()["message"]
        for words in ("Not enough GPU time left", "used 0 of your 0 card-hours", "reset on", "ask the GPU team"):
            assert words in message, message
    time.sleep(3)  # the hub would exit 2 s after reaching the limit
    assert hub.proc.poll() is None, hub.log()
    assert hub.user("ann")["servers"] == {}
    metrics = hub.api("GET", "/../metrics").text
    assert 'workspacespawner_spawns_refused_total{reason="card-hours"} 4.0' in metrics
    hook_log = (hub.workdir / "pre-spawn-hook.log").read_text().splitlines()
    assert hook_log.count("ann jupyterlab-1gpu") == 4  # the admin's hook ran before each refusal


def test_instance_size_and_disk_refusals_name_the_numbers(hub):
    hub.create_user("dee", groups=("research",))
    r = hub.spawn("dee", {"profile": "jupyterlab-8gpu"})
    assert r.status_code == 403, r.text
    assert "asks for 8 GPUs; the largest workspace you may start has 1 GPU" in r.json()["message"]
    hub.create_user("fay")
    r = hub.spawn("fay", {"profile": "jupyterlab-cpu"})  # a new 10Gi home over a 5Gi limit
    assert r.status_code == 403, r.text
    assert "needs 10 GiB of new disk" in r.json()["message"] and "0 GiB of your 5 GiB" in r.json()["message"]


def test_cpu_start_is_metered_from_running_to_stop(hub, ledger, cluster):
    hub.create_user("cy")
    hub.start_server("cy", {"profile": "jupyterlab-cpu"})  # 0 card-hours never block a CPU profile
    [run] = runs_of(ledger, "cy")
    assert (run.state, run.gpus, run.profile, run.server_name) == (OPEN, 0, "jupyterlab-cpu", "")
    with core_and_custom(cluster) as (core, _custom):
        pod = core.read_namespaced_pod("jupyter-cy", "default")
    env = {e.name: e.value for e in pod.spec.containers[0].env}
    assert env["ADMIN_HOOK_SAW"] == "jupyterlab-cpu"  # the admin's pre_spawn_hook kept, after the profile applied
    hub.stop_server("cy")
    [run] = runs_of(ledger, "cy")
    assert run.state == CLOSED and run.stopped > run.started


def test_a_server_that_died_on_its_own_is_closed_at_its_last_sighting(hub, ledger, cluster):
    hub.create_user("gil")
    hub.start_server("gil", {"profile": "jupyterlab-cpu"})
    time.sleep(3)  # a few enforcer passes see it alive
    client = kubernetes.config.new_client_from_config(str(cluster.kubeconfig))
    try:
        kubernetes.client.CoreV1Api(client).delete_namespaced_pod("jupyter-gil", "default", grace_period_seconds=0)
    finally:
        client.close()
    gone_at = datetime.now(UTC)
    deadline = time.monotonic() + 60
    while hub.user("gil")["servers"] and time.monotonic() < deadline:  # JupyterHub's poll notices, stop() is not called
        time.sleep(0.5)
    assert hub.user("gil")["servers"] == {}, hub.log()
    [run] = runs_of(ledger, "gil")
    assert run.state == CLOSED and run.started + timedelta(seconds=1) < run.stopped <= gone_at + timedelta(seconds=1)


def test_spawn_form_shows_cost_and_card_hours(hub):
    hub.create_user("eve", groups=("research",))
    r = login(hub, "eve").get(f"{hub.url}/hub/spawn", timeout=30)
    assert r.status_code == 200, r.text
    assert "Costs 1 card-hour per hour" in r.text
    assert "<strong>0</strong> of 100 card-hours used, <strong>100</strong> left" in r.text
    # named servers are off here: one server each, so no "Workspaces: 0 of 2" limit that no one can reach
    assert '<span class="js-ws-running">' not in r.text


def test_enforcer_stops_a_gpu_server_whose_card_hours_ran_out(hub, ledger, cluster):
    # bob's own limit: 0.01 card-hours (36 seconds of one GPU), more than a start takes on a loaded CI machine
    # (a 7-second budget ran out during a 15-second start, and the start itself failed)
    hub.create_user("bob", groups=("research",))
    hub.start_server("bob", {"profile": "jupyterlab-1gpu"})
    deadline = time.monotonic() + 60
    while hub.user("bob")["servers"] and time.monotonic() < deadline:
        time.sleep(0.5)
    assert hub.user("bob")["servers"] == {}, hub.log()
    [run] = runs_of(ledger, "bob")
    assert run.state == CLOSED and run.gpus == 1
    assert run.stop_reason.startswith("card-hours: ") and run.stop_reason.endswith(" of 0.01 used")
    phase = home_phase(cluster, "bob")
    assert (phase["phase"], phase["reason"]) == ("Stopped", "card-hours") and "of 0.01 card-hours" in phase["message"]
    home = login(hub, "bob").get(f"{hub.url}/hub/home", timeout=30).text
    assert "card-hours of this month" in home and "CPU profiles remain available" in home
