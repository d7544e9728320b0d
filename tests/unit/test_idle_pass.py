"""The hub's idle-GPU pass with the clock moved, against a stand-in hub REST API and a stand-in Prometheus.

Runs the real :class:`IdlePass` with the real :class:`HubUsers` and
:class:`HubApiStopper` (over HTTP to a small tornado app playing the hub's
``/hub/api/users`` with pagination, and the server DELETE), the real
:class:`PrometheusClient` (to a tornado app answering ``/api/v1/query``),
a real SQLite quota ledger and audit log. Covers: a JupyterLab server
whose hub activity is old warned on the home page once, then stopped after
the grace with an audit record (action ``stop``, reason ``idle GPU``), the
reason on its ledger run and a message saying its disks are kept; a
code-server server with a tab open (fresh activity) stopped because its
GPU stayed idle; a VM (its GPU named by its virt-launcher Pod) likewise;
a busy GPU never warned; without Prometheus, warned and never stopped; the
hub's API or Prometheus down: no warning change, no stop, the next pass
does it; exempt groups never warned; CPU servers and servers the hub does
not run left alone; timeout 0 clears every warning.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from tornado import web
from tornado.httpserver import HTTPServer
from tornado.testing import bind_unused_port
from traitlets.config import Config

from workspacespawner.core.names import OWNER_ANNOTATION, SERVER_ANNOTATION, owner_labels
from workspacespawner.core.prometheus import PrometheusClient
from workspacespawner.idle.activity import HubUsers
from workspacespawner.idle.gpupass import IdlePass
from workspacespawner.idle.notices import IdleNotices
from workspacespawner.idle.settings import GPUIdle
from workspacespawner.lifecycle.audit import AuditLog
from workspacespawner.quota import policy
from workspacespawner.quota.config import WorkspaceQuota
from workspacespawner.quota.hubapi import HubApiStopper
from workspacespawner.quota.ledger import Ledger
from workspacespawner.quota.policy import Request
from workspacespawner.quota.service import QuotaService

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def meta(name: str, user: str | None, server: str = "", **extra) -> dict:
    found = {"name": name, "namespace": "jhub", "uid": f"uid-{name}", **extra}
    if user is not None:
        found["labels"] = {**owner_labels(user), "component": "singleuser-server"}
        found["annotations"] = {"hub.jupyter.org/username": user, SERVER_ANNOTATION: server, OWNER_ANNOTATION: user}
    return found


def pod(name: str, user: str | None, server: str = "", *, gpus: int = 1, labels: dict | None = None) -> dict:
    metadata = meta(name, user, server)
    if labels:
        metadata["labels"] = {**metadata.get("labels", {}), **labels}
    limits = {"cpu": "1", **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
    return {"kind": "Pod", "metadata": metadata,
            "spec": {"nodeName": "gpu-1", "containers": [{"name": "c", "resources": {"limits": limits}}]},
            "status": {"phase": "Running"}}


def vmi(name: str, user: str, server: str) -> dict:
    return {"kind": "VirtualMachineInstance", "metadata": meta(name, user, server),
            "spec": {"domain": {"devices": {"gpus": [{"name": "g0", "deviceName": "nvidia.com/gpu"}]}}},
            "status": {"phase": "Running", "nodeName": "gpu-1"}}


class Hub:
    """The stand-in hub's state: users ``{name: {"groups": [...], "servers": {name: model}}}``, stops asked."""

    def __init__(self):
        self.users: dict[str, dict] = {}
        self.stopped: list[tuple[str, str]] = []
        self.down = False
        self.on_stop = None  # what the real hub's stop also does (the spawner's stop closes the ledger's run)

    def server(self, user: str, server: str, *, activity: datetime, profile: str = "gpu-1", groups=()) -> None:
        entry = self.users.setdefault(user, {"name": user, "groups": list(groups), "servers": {}})
        entry["servers"][server] = {"name": server, "last_activity": iso(activity), "started": iso(T0),
                                    "pending": None, "ready": True, "user_options": {"profile": profile}}


class UsersHandler(web.RequestHandler):
    def get(self):
        hub: Hub = self.settings["hub"]
        if hub.down:
            raise web.HTTPError(503)
        assert self.request.headers["Authorization"] == "token secret"
        assert self.get_argument("state") == "active"
        offset, limit = int(self.get_argument("offset")), 1  # one user a page: the pass must follow "next"
        names = sorted(hub.users)
        page = [hub.users[n] for n in names[offset:offset + limit]]
        following = {"offset": offset + limit} if offset + limit < len(names) else None
        self.write({"items": page, "_pagination": {"offset": offset, "limit": limit, "total": len(names),
                                                    "next": following}})


class UserHandler(web.RequestHandler):
    def get(self, user):
        self.write(self.settings["hub"].users.get(user, {"servers": {}}))

    def delete(self, user, server=""):
        hub: Hub = self.settings["hub"]
        if hub.down:
            raise web.HTTPError(503)
        hub.stopped.append((user, server or ""))
        if hub.on_stop is not None:
            hub.on_stop(user, server or "")
        hub.users[user]["servers"].pop(server or "", None)
        self.set_status(204)


class Prometheus:
    """The stand-in Prometheus: ``util`` ``{pod name: percent}`` as dcgm-exporter reports it per GPU."""

    def __init__(self):
        self.util: dict[str, float] = {}
        self.down = False
        self.queries: list[str] = []


class QueryHandler(web.RequestHandler):
    def get(self):
        prom: Prometheus = self.settings["prom"]
        if prom.down:
            raise web.HTTPError(503)
        prom.queries.append(self.get_argument("query"))
        result = [{"metric": {"gpu": str(i), "pod": name, "namespace": "jhub", "Hostname": "gpu-1"},
                   "value": [0, str(value)]} for i, (name, value) in enumerate(sorted(prom.util.items()))]
        self.write({"status": "success", "data": {"resultType": "vector", "result": result}})


@pytest.fixture
async def stand_ins():
    hub, prom = Hub(), Prometheus()
    app = web.Application([
        (r"/hub/api/users", UsersHandler),
        (r"/hub/api/users/([^/]+)/servers/([^/]+)", UserHandler),
        (r"/hub/api/users/([^/]+)/server", UserHandler),
        (r"/hub/api/users/([^/]+)", UserHandler),
        (r"/api/v1/query", QueryHandler),
    ], hub=hub, prom=prom)
    sock, port = bind_unused_port()
    server = HTTPServer(app)
    server.add_sockets([sock])
    yield hub, prom, f"http://127.0.0.1:{port}"
    server.stop()


class Clock:
    def __init__(self):
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
async def quota(tmp_path):
    service = QuotaService(WorkspaceQuota(), ledger=Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}"))
    yield service
    await service.close()


def make_pass(url, quota, objects, clock, *, prometheus=True, **settings) -> IdlePass:
    config = Config()
    config.GPUIdle.gpu_idle_timeout = 3600
    config.GPUIdle.gpu_idle_grace = 1800
    for name, value in settings.items():
        setattr(config.GPUIdle, name, value)
    hub_api = f"{url}/hub/api"
    return IdlePass(
        GPUIdle(config=config), hub=HubUsers(hub_api, "secret"), objects=lambda: objects,
        stop=HubApiStopper(hub_api, "secret"), prometheus=PrometheusClient(url) if prometheus else None,
        quota=quota, audit=AuditLog(quota.ledger), now=clock, notices=IdleNotices(),
    )


def idle_ann(stand_ins, quota, **settings) -> IdlePass:
    """The pass over ann's one GPU server, untouched since T0, its GPU idle, two hours later."""
    hub, prom, url = stand_ins
    hub.server("ann", "", activity=T0)
    prom.util = {"jupyter-ann": 0.0}
    clock = Clock()
    clock.now = T0 + 2 * timedelta(hours=1)
    return make_pass(url, quota, ([pod("jupyter-ann", "ann")], []), clock, **settings)


async def test_an_idle_jupyterlab_server_is_warned_then_stopped_with_the_reason_recorded(stand_ins, quota,
                                                                                         monkeypatch):
    hub, prom, url = stand_ins
    hub.server("ann", "", activity=T0)
    hub.server("bob", "cpu", activity=T0)
    prom.util = {"jupyter-ann": 0.0}
    clock = Clock()
    monkeypatch.setattr(policy, "utcnow", clock)  # the ledger's run opens at the test's time
    reservation = await quota.reserve(user="ann", groups=(), request=Request(gpus=1, server_name=""))
    await quota.running(reservation)
    idle = make_pass(url, quota, ([pod("jupyter-ann", "ann"), pod("jupyter-bob-cpu", "bob", "cpu", gpus=0)], []),
                     clock)
    hub.on_stop = lambda user, server: quota.ledger.close_server(user, server, clock.now)
    clock.now = T0 + 30 * MIN
    assert await idle.tick() == []
    clock.now = T0 + 61 * MIN
    assert await idle.tick() == [("ann", "", "warn")]
    assert idle.notices.of("ann") == [
        "Your workspace has used no GPU for 1 h; it will be stopped at 13:31 (UTC) (disks kept) unless you use it."]
    assert prom.queries[-1] == ('max_over_time(DCGM_FI_DEV_GPU_UTIL[3600s]) or '
                                '(max_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE{GPU_I_ID!=""}[3600s]) * 100)')
    clock.now = T0 + 80 * MIN
    assert await idle.tick() == []  # warned once; the stop time has not come
    assert hub.stopped == []
    clock.now = T0 + 91 * MIN
    assert await idle.tick() == [("ann", "", "stopped")]
    assert hub.stopped == [("ann", "")]
    assert idle.notices.of("ann")[0].startswith("Your workspace was stopped: it had used no GPU for 1 h")
    assert "disks are kept" in idle.notices.of("ann")[0]
    [record] = AuditLog(quota.ledger).query(action="stop")
    assert (record.user, record.server, record.actor, record.result) == ("ann", "", "system", "ok")
    assert record.after["reason"] == "idle GPU" and record.after["gpu_measured"] is True
    [run] = await quota.call(quota.ledger.runs_of, "ann", (T0 - timedelta(days=30), T0 + timedelta(days=30)))
    assert (run.state, run.stop_reason, run.stopped) == ("closed", "idle GPU", T0 + 91 * MIN)
    assert idle.notices.of("bob") == []


async def test_a_code_server_tab_open_on_an_idle_gpu_is_stopped_and_a_busy_gpu_is_not(stand_ins, quota):
    hub, prom, url = stand_ins
    clock = Clock()
    clock.now = T0 + 2 * timedelta(hours=1)
    hub.server("cora", "vscode", activity=clock.now)  # the tab's WebSocket keeps reporting activity
    hub.server("dan", "", activity=T0)  # nobody at the keyboard, but the GPU trains
    prom.util = {"jupyter-cora-vscode": 1.0, "jupyter-dan": 93.0}
    idle = make_pass(url, quota, ([pod("jupyter-cora-vscode", "cora", "vscode"), pod("jupyter-dan", "dan")], []),
                     clock, gpu_idle_grace=0)
    assert await idle.tick() == [("cora", "vscode", "warn"), ("cora", "vscode", "stopped")]
    assert hub.stopped == [("cora", "vscode")]
    assert idle.notices.of("dan") == []


async def test_an_idle_vm_is_found_by_its_virt_launcher_pod(stand_ins, quota):
    hub, prom, url = stand_ins
    hub.server("eve", "vm", activity=T0)
    machine = vmi("eve-vm", "eve", "vm")
    launcher = pod("virt-launcher-eve-vm-abcde", None, labels={"kubevirt.io": "virt-launcher",
                                                                "kubevirt.io/created-by": "uid-eve-vm"})
    prom.util = {"virt-launcher-eve-vm-abcde": 0.0}
    clock = Clock()
    clock.now = T0 + 2 * timedelta(hours=1)
    idle = make_pass(url, quota, ([launcher], [machine]), clock, gpu_idle_grace=0)
    assert await idle.tick() == [("eve", "vm", "warn"), ("eve", "vm", "stopped")]
    assert hub.stopped == [("eve", "vm")]


async def test_without_prometheus_idle_servers_are_warned_not_stopped(stand_ins, quota):
    hub, _prom, url = stand_ins
    hub.server("ann", "", activity=T0)
    clock = Clock()
    idle = make_pass(url, quota, ([pod("jupyter-ann", "ann")], []), clock, prometheus=False, gpu_idle_grace=0)
    clock.now = T0 + 5 * timedelta(hours=1)
    assert await idle.tick() == [("ann", "", "warn")]
    assert await idle.tick() == []
    assert hub.stopped == []
    assert "has shown no activity for 5 h while holding a GPU" in idle.notices.of("ann")[0]


async def test_stop_without_prometheus_stops_on_hub_activity(stand_ins, quota):
    hub, _prom, url = stand_ins
    hub.server("ann", "", activity=T0)
    clock = Clock()
    idle = make_pass(url, quota, ([pod("jupyter-ann", "ann")], []), clock, prometheus=False, gpu_idle_grace=0,
                     stop_without_prometheus=True)
    clock.now = T0 + 2 * timedelta(hours=1)
    assert (await idle.tick())[-1] == ("ann", "", "stopped")


async def test_hub_or_prometheus_down_means_no_stop_and_the_next_pass_does_it(stand_ins, quota, caplog):
    hub, prom, _url = stand_ins
    idle = idle_ann(stand_ins, quota, gpu_idle_grace=0)
    hub.down = True
    assert await idle.tick() == []
    assert "the hub's API did not answer" in caplog.text
    hub.down, prom.down = False, True
    assert await idle.tick() == []
    assert "Prometheus at" in caplog.text
    assert hub.stopped == [] and idle.notices.of("ann") == []
    prom.down = False
    assert await idle.tick() == [("ann", "", "warn"), ("ann", "", "stopped")]


async def test_a_stop_the_hub_refuses_is_asked_again(stand_ins, quota, caplog):
    idle = idle_ann(stand_ins, quota, gpu_idle_grace=600)
    clock = idle.now
    assert await idle.tick() == [("ann", "", "warn")]
    clock.now += 11 * MIN
    original = idle.stop

    async def failing(user, server):
        raise OSError("connection refused")

    idle.stop = failing
    assert await idle.tick() == []
    assert "trying again next pass" in caplog.text
    idle.stop = original
    clock.now += MIN
    assert await idle.tick() == [("ann", "", "stopped")]


async def test_exempt_groups_are_never_warned_and_timeout_zero_clears_warnings(stand_ins, quota):
    hub, prom, url = stand_ins
    hub.server("ann", "", activity=T0, groups=["research"])
    hub.server("bob", "", activity=T0)
    prom.util = {"jupyter-ann": 0.0, "jupyter-bob": 0.0}
    clock = Clock()
    clock.now = T0 + 65 * MIN
    objects = ([pod("jupyter-ann", "ann"), pod("jupyter-bob", "bob")], [])
    idle = make_pass(url, quota, objects, clock, exempt_groups=["research"])
    assert await idle.tick() == [("bob", "", "warn")]
    assert idle.notices.of("ann") == []
    idle.settings.gpu_idle_timeout = 0
    assert await idle.tick() == []
    assert idle.notices.keys() == set()


async def test_a_server_the_hub_does_not_run_is_left_alone(stand_ins, quota):
    _hub, prom, url = stand_ins
    prom.util = {"jupyter-zed": 0.0}
    clock = Clock()
    clock.now = T0 + 5 * timedelta(hours=1)
    idle = make_pass(url, quota, ([pod("jupyter-zed", "zed")], []), clock, gpu_idle_grace=0)
    assert await idle.tick() == []
