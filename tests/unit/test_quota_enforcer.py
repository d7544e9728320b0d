"""The hub's quota pass with the clock moved: warning, grace, stop of GPU servers only, and why, in the ledger.

Runs the real :class:`QuotaService` and :class:`Enforcer` against a SQLite
ledger, with stand-in spawners (user, groups, a recording Kubernetes API)
and a recording stopper. Covers: no word while card-hours last; a warning
on the home page and one Kubernetes Event when they run out soon; the grace
after they ran out; the GPU server (not the CPU one) stopped after the
grace with the reason recorded on its run and kept when the hub's stop
closes it; the message that stays until the reset; a research group's
larger limit respected; a user with no spawner in this hub left alone;
reconciliation through the ``alive`` source; the Prometheus gauges and the
refusal counter; the stopper's REST calls against a stand-in hub API; the
site's own home-page announcement kept next to ours.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from prometheus_client import REGISTRY
from tornado import web
from tornado.httpserver import HTTPServer
from tornado.testing import bind_unused_port
from traitlets.config import Config

from tests.support.sqlcount import SQLCount
from workspacespawner.quota import policy
from workspacespawner.quota.announce import ANNOUNCEMENTS, announcement_home, with_quota_announcements
from workspacespawner.quota.config import WorkspaceQuota
from workspacespawner.quota.enforcer import Enforcer, alive_from_objects
from workspacespawner.quota.hubapi import HubApiStopper
from workspacespawner.quota.ledger import Ledger
from workspacespawner.quota.policy import CLOSED, OPEN, Request
from workspacespawner.quota.refusal import QuotaRefused
from workspacespawner.quota.service import QuotaService, TrackedWorkspace

T0 = datetime(2025, 6, 10, 12, tzinfo=UTC)


class Clock:
    """The quota package's clock, moved by hand."""

    def __init__(self, monkeypatch, start: datetime):
        self.now = start
        monkeypatch.setattr(policy, "utcnow", lambda: self.now)

    def to(self, minutes: float) -> None:
        self.now = T0 + timedelta(minutes=minutes)


class RecordingApi:
    """A kubernetes_asyncio CoreV1Api stand-in that records created Events."""

    def __init__(self):
        self.events: list[dict] = []

    async def create_namespaced_event(self, namespace, body):
        self.events.append(body)


def tracked(user: str, server: str, groups=(), api=None) -> TrackedWorkspace:
    """A workspace as a spawner tells the service about it: its Pod, the user's groups, the API for Events."""
    pod = f"jupyter-{user}{'-' + server if server else ''}"
    return TrackedWorkspace(user, server, "jhub", {"apiVersion": "v1", "kind": "Pod", "name": pod}, frozenset(groups), api)


@pytest.fixture
def clock(monkeypatch):
    return Clock(monkeypatch, T0)


@pytest.fixture
async def service(tmp_path):
    config = Config()
    config.WorkspaceQuota.card_hours_per_month = 1
    config.WorkspaceQuota.group_limits = {"research": {"card_hours_per_month": 100}}
    config.WorkspaceQuota.warn_before = 1800
    config.WorkspaceQuota.grace_period = 900
    config.WorkspaceQuota.max_concurrent = 3
    service = QuotaService(WorkspaceQuota(config=config), ledger=Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}"))
    yield service
    for user in ANNOUNCEMENTS.users():
        ANNOUNCEMENTS.clear(user)
    await service.close()


async def start(service, user, server, gpus, groups=()):
    """A start as the spawner makes it: reserve, open the run before compute, then the start ends (up)."""
    reservation = await service.reserve(user=user, groups=groups, request=Request(gpus=gpus, server_name=server))
    run_id = await service.running(reservation)
    service.start_done(user, server)
    return run_id


def home_text(user: str) -> str:
    return announcement_home(SimpleNamespace(name=user))


async def test_warn_then_grace_then_stop_gpu_servers_only(service, clock):
    api = RecordingApi()
    spawners = [tracked("ann", "", api=api), tracked("ann", "cpu", api=api)]
    for workspace in spawners:
        service.track(workspace)
    stopped: list[tuple[str, str]] = []

    async def stop(user, server):
        stopped.append((user, server))

    enforcer = Enforcer(service, stop=stop)
    gpu_run = await start(service, "ann", "", gpus=1)  # 1 card-hour per hour; 1 allowed: out at 13:00
    await start(service, "ann", "cpu", gpus=0)

    clock.to(10)
    assert await enforcer.tick() == []
    assert home_text("ann") == ""

    clock.to(35)  # 25 minutes left
    assert await enforcer.tick() == [("ann", "", "warn")]
    assert "runs out soon" in home_text("ann") and "13:15 (UTC)" in home_text("ann")
    assert [(e["reason"], e["involvedObject"]["name"]) for e in api.events] == [("QuotaLow", "jupyter-ann")]
    clock.to(36)
    assert await enforcer.tick() == []  # told once per change
    assert len(api.events) == 1

    clock.to(65)  # ran out at 13:00; grace until 13:15
    assert await enforcer.tick() == [("ann", "", "grace")]
    assert "will be stopped at 13:15" in home_text("ann")
    assert stopped == []

    clock.to(76)
    assert await enforcer.tick() == [("ann", "", "stop"), ("ann", "", "stopped")]
    assert stopped == [("ann", "")]  # the CPU server keeps running
    assert service.ledger.get(gpu_run).stop_reason == "card-hours: 1.27 of 1 used"
    assert [e["reason"] for e in api.events] == ["QuotaLow", "QuotaExhausted", "QuotaStop"]
    assert "were stopped" in home_text("ann")

    clock.to(77)
    assert await enforcer.tick() == []  # asked already: not asked again at once
    await service.stopped("ann", "")  # the hub's stop reaches the spawner
    run = service.ledger.get(gpu_run)
    assert (run.state, run.stop_reason) == (CLOSED, "card-hours: 1.27 of 1 used")

    clock.to(80)
    assert await enforcer.tick() == []
    assert "used all 1 card-hours" in home_text("ann") and "2025-07-01" in home_text("ann")
    assert stopped == [("ann", "")]

    # the GPU profile is now refused before anything is created
    with pytest.raises(QuotaRefused) as info:
        await service.reserve(user="ann", groups=[], request=Request(gpus=1))
    assert info.value.reason == "card-hours"
    assert REGISTRY.get_sample_value("workspacespawner_spawns_refused_total", {"reason": "card-hours"}) >= 1


async def test_group_limits_and_unknown_users(service, clock):
    spawner = tracked("res", "", groups=["research"])
    service.track(spawner)
    stopped = []

    async def stop(user, server):
        stopped.append((user, server))

    enforcer = Enforcer(service, stop=stop)
    await start(service, "res", "", gpus=2, groups=["research"])
    await start(service, "ghost", "", gpus=1)  # no spawner of theirs in this hub: groups unknown
    clock.to(180)  # res: 6 of 100 card-hours; ghost: 3 of (maybe) 1
    assert await enforcer.tick() == []
    assert stopped == [] and home_text("ghost") == ""
    assert REGISTRY.get_sample_value("workspacespawner_card_hours_used", {"user": "res"}) == pytest.approx(6.0)
    assert REGISTRY.get_sample_value("workspacespawner_running_gpus") == 3


async def sql_of_a_pass(service, users: int) -> SQLCount:
    """What one steady pass sends to the ledger with ``users`` users each running one tracked 1-GPU server."""
    names = [f"user{i:03d}" for i in range(users)]
    for name in names:
        service.track(tracked(name, ""))
        await start(service, name, "", gpus=1)
    enforcer = Enforcer(service, alive=lambda: {(name, "") for name in names})
    await enforcer.tick()
    with SQLCount(service.ledger.engine) as sql:
        await enforcer.tick()
    return sql


@pytest.mark.parametrize("users", [10, 200])
async def test_a_pass_costs_the_same_sql_however_many_users_run(service, clock, users):
    """One read of the ledger for all users, one reconciliation: 5 statements in 2 transactions, at 10 or 200 users."""
    clock.to(5)
    sql = await sql_of_a_pass(service, users)
    assert (sql.statements, sql.transactions) == (5, 2), str(sql)
    reads = [text for text in sql.texts if text.startswith("SELECT") and "workspacespawner_runs" in text]
    assert len(reads) == 2, str(sql)  # the reconciliation's active runs, and this month's runs of everyone


async def test_a_pass_reconciles_with_what_the_cluster_holds(service, clock):
    seen = {("ann", "")}
    enforcer = Enforcer(service, alive=lambda: set(seen))
    run_id = await start(service, "ann", "", gpus=1)
    clock.to(5)
    await enforcer.tick()
    seen.clear()  # the Pod vanished while nobody stopped it
    clock.to(30)
    await enforcer.tick()
    run = service.ledger.get(run_id)
    assert (run.state, run.stopped) == (CLOSED, T0 + timedelta(minutes=5))


def test_alive_from_kubespawner_annotations():
    pods = [
        {"metadata": {"annotations": {"hub.jupyter.org/username": "ann"}}},
        {"metadata": {"annotations": {"hub.jupyter.org/username": "ann", "hub.jupyter.org/servername": "thesis"}}},
        {"metadata": {"annotations": {"workspacespawner.io/owner-name": "bob"}}},
        {"metadata": {"name": "not-ours"}},
    ]
    assert alive_from_objects(pods) == {("ann", ""), ("ann", "thesis"), ("bob", "")}


def test_site_announcement_is_kept_next_to_ours():
    ANNOUNCEMENTS.set("ann", "Card-hours <low>")
    try:
        merged = with_quota_announcements({"announcement_home": "Maintenance on Friday", "other": 1})
        assert (
            merged["announcement_home"](SimpleNamespace(name="ann"))
            == "Maintenance on Friday<br>Card-hours &lt;low&gt;"
        )
        assert merged["announcement_home"](None) == "Maintenance on Friday"
        assert merged["other"] == 1
        assert with_quota_announcements({})["announcement_home"](SimpleNamespace(name="bob")) == ""
    finally:
        ANNOUNCEMENTS.clear("ann")


class RecordingHub(web.RequestHandler):
    calls: list = []
    #: user name -> the ``pending`` of their servers, as ``GET /users/{name}`` answers.
    pending: dict = {}

    def get(self, path):
        user = path.split("/")[1]
        pending = RecordingHub.pending.get(user)
        servers = {} if pending is None else {"": {"name": "", "pending": pending, "ready": pending is None}}
        self.finish(json.dumps({"name": user, "servers": servers}))

    def delete(self, path):
        RecordingHub.calls.append((self.request.path, self.request.headers.get("Authorization")))
        if "not-running" in path:
            self.set_status(400)
            self.finish(json.dumps({"status": 400, "message": "not running"}))
        else:
            self.set_status(204)


async def test_stopper_calls_the_hub_rest_api():
    sock, port = bind_unused_port()
    server = HTTPServer(web.Application([(r"/hub/api/(.*)", RecordingHub)]))
    server.add_sockets([sock])
    RecordingHub.calls = []
    try:
        stopper = HubApiStopper(f"http://127.0.0.1:{port}/hub/api/", "secret")
        assert await stopper("ann@school", "") is True
        assert await stopper("ann", "thesis 1") is True
        assert await stopper("not-running", "") is False
    finally:
        server.stop()
    assert RecordingHub.calls == [
        ("/hub/api/users/ann%40school/server", "token secret"),
        ("/hub/api/users/ann/servers/thesis%201", "token secret"),
        ("/hub/api/users/not-running/server", "token secret"),
    ]


async def test_a_pending_spawn_is_stopped_only_once_it_is_done(service, clock):
    """JupyterHub answers a start interrupted by a stop with a 500: the enforcer waits for the spawn instead."""
    sock, port = bind_unused_port()
    server = HTTPServer(web.Application([(r"/hub/api/(.*)", RecordingHub)]))
    server.add_sockets([sock])
    RecordingHub.calls, RecordingHub.pending = [], {"ann": "spawn"}
    try:
        enforcer = Enforcer(service, stop=HubApiStopper(f"http://127.0.0.1:{port}/hub/api/", "secret"))
        service.track(tracked("ann", ""))
        await start(service, "ann", "", gpus=1)
        clock.to(76)  # out of card-hours, past the grace
        assert await enforcer.tick() == [("ann", "", "stop")]  # asked to stop, but not stopped
        assert RecordingHub.calls == []  # no DELETE while the spawn is pending
        RecordingHub.pending = {}
        clock.to(77)
        assert ("ann", "", "stopped") in await enforcer.tick()
        assert RecordingHub.calls == [("/hub/api/users/ann/server", "token secret")]
    finally:
        server.stop()
        RecordingHub.pending = {}


async def test_a_start_under_way_is_never_reconciled_away(service, clock):
    """The run opens before compute exists; until the start ends the enforcer counts it alive (its Pod may not be cached yet)."""
    seen: set = set()
    enforcer = Enforcer(service, alive=lambda: seen)
    reservation = await service.reserve(user="ann", groups=(), request=Request(gpus=1, server_name=""))
    run_id = await service.running(reservation)
    clock.to(30)
    await enforcer.tick()
    assert service.ledger.get(run_id).state == OPEN
    service.start_done("ann", "")
    clock.to(60)
    await enforcer.tick()
    assert service.ledger.get(run_id).state == CLOSED


async def test_a_stop_under_way_closes_its_run_when_it_sees_the_compute_gone(service, clock):
    """After a hub restart the enforcer's first sighting can come after a stop removed the compute: a pass during the
    stop would close the run at the old hub's last sighting, and the minutes the GPU was held since go unmetered."""
    seen = {("ann", "")}
    enforcer = Enforcer(service, alive=lambda: seen)
    run_id = await start(service, "ann", "", gpus=1)
    await enforcer.tick()  # last seen at T0 (the old hub's last pass)
    clock.to(10)
    with service.stopping("ann", ""):
        seen = set()  # the stop removed the Pod before this hub's first pass saw it
        await enforcer.tick()
        assert service.ledger.get(run_id).state == OPEN
        clock.to(11)
        await service.stopped("ann", "")
    run = service.ledger.get(run_id)
    assert (run.state, run.stopped) == (CLOSED, T0 + timedelta(minutes=11))


async def test_a_stop_that_left_its_compute_hands_the_run_to_the_enforcer(service, clock):
    seen = {("ann", "")}
    enforcer = Enforcer(service, alive=lambda: seen)
    run_id = await start(service, "ann", "", gpus=1)
    with service.stopping("ann", ""):
        pass  # its DELETE kept failing: the compute is still there
    clock.to(10)
    await enforcer.tick()
    seen = set()
    clock.to(11)
    await enforcer.tick()  # seen gone one pass after it was seen
    run = service.ledger.get(run_id)
    assert (run.state, run.stopped) == (CLOSED, T0 + timedelta(minutes=11))
