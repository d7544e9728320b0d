"""code-server's heartbeat as a GPU server's activity, end to end through a real JupyterHub on the local cluster.

A code-server profile holding one A100 of the cluster's 8-GPU node is
started through the hub with the workspace extension
``workspacespawner.idle.serverext`` enabled the way an operator enables it
from the hub (``c.KubeSpawner.args`` after the chart's ``singleuser.cmd``,
helm-values/singleuser-image.md) and jupyterhub-singleuser's
``JUPYTERHUB_ACTIVITY_INTERVAL`` short. The real code-server
(tests/support/codeserver.py) writes its heartbeat for a request through
the hub's proxy. A tab is then held open: a silent WebSocket through the
proxy. Nothing is asked, so jupyter-server records no activity of its own,
and the hub's idle-GPU pass (``gpu_idle_timeout`` 20 s, no Prometheus, so
warnings only) warns the server on its owner's home page. A minute after its
last beat code-server beats again by itself for the open connection; the
extension puts the file's time into jupyter-server's activity,
jupyterhub-singleuser reports it, ``GET /hub/api/users/{name}`` shows it as
the server's ``last_activity`` (exactly), and the pass takes its warning
back. The pure decision on the hub's view
(:class:`workspacespawner.idle.activity.HubUsers`) counts the server active
within the timeout of that heartbeat and idle after it; with the tab closed,
the pass warns again.

The proxy's per-route activity is turned off for the hub
(``last_activity_interval`` an hour), so the heartbeat is the only activity
that reaches it while the tab is open: without the extension (or with its
setting misnamed) ``last_activity`` never reaches the heartbeat's time.
The embedded control plane only: the chain under test (code-server, the
extension, jupyterhub-singleuser, the hub, the pass) does not go through the
API server, and code-server's one-minute beat makes each run about two
minutes (it passed on the real plane too when it was written).
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta

import pytest
import websocket

from tests.support import codeserver, planes
from tests.support.faultcases import wait_until
from tests.support.hubharness import Hub, config_pieces, core_v1, login
from tests.support.paths import REPO
from workspacespawner.core import names
from workspacespawner.core.times import parse_time
from workspacespawner.idle import serverext
from workspacespawner.idle.activity import HubUsers, gpu_servers, gpu_servers_held
from workspacespawner.idle.decision import ACTIVE, WARN, Policy, decide

pytestmark = pytest.mark.embedded_only("the heartbeat chain does not touch the API server; one run is two minutes")

USER = "coder"
PROFILE = "code-server-1gpu"
TIMEOUT = 20  # c.GPUIdle.gpu_idle_timeout, seconds
#: What an operator puts on the server's command line to enable the extension (helm-values/singleuser-image.md).
ENABLE = "--ServerApp.jpserver_extensions=workspacespawner.idle.serverext=True"
#: Seconds between code-server's heartbeats: at most one a minute, and one a minute while a connection is open.
BEAT_INTERVAL = 60


#: The hub's settings after the config pieces (a :meth:`str.format` template: the fixture fills it).
HUB_CONFIG = """
c.JupyterHub.spawner_class = "workspace"
c.KubeSpawner.profile_list = c.KubeSpawner.profile_list + [{{
    "display_name": "code-server, one A100",
    "slug": {profile!r},
    "kubespawner_override": {{
        "workspace_kind": "container",
        "ide": "code-server",
        "extra_resource_limits": {{"nvidia.com/gpu": 1}},
        "node_selector": {{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}},
    }},
}}]
c.KubeSpawner.cmd = ["jupyterhub-singleuser"]  # the chart's singleuser.cmd: KubeSpawner passes args only with it
c.KubeSpawner.args = [{enable!r}]
# the image's Python is the host's here: PYTHONPATH puts this checkout's workspacespawner first, as if installed
c.KubeSpawner.environment = {{
    "PATH": {path!r},
    "PYTHONPATH": {repo!r},
    "JUPYTERHUB_ACTIVITY_INTERVAL": "2",
}}
c.JupyterHub.last_activity_interval = 3600  # no proxy route activity: the heartbeat is the only source
c.WorkspaceQuota.ledger_url = "sqlite:///{ledger}"
c.WorkspaceQuota.card_hours_per_month = 100
c.GPUIdle.gpu_idle_timeout = {timeout}
c.GPUIdle.gpu_idle_grace = 3600
c.GPUIdle.interval = 5  # its least
"""


@pytest.fixture(scope="module")
def served(control_plane, tmp_path_factory):
    """``(cluster, hub)``: a local cluster on ``control_plane`` and a hub on it with the settings above."""
    bin_dir = codeserver.real_bin()  # skips without the real code-server (fails under $CI)
    with planes.running(control_plane, tmp_path_factory.mktemp("cluster")) as cluster:
        plane_config, start_timeout = planes.hub_settings(cluster)
        config = (f"import sys\nsys.path.insert(0, {str(REPO)!r})\n"
                  + config_pieces("10-workspace-spawner.py", "20-profiles.py")
                  + HUB_CONFIG.format(profile=PROFILE, enable=ENABLE, timeout=TIMEOUT, path=codeserver.pod_path(bin_dir),
                                      repo=str(REPO), ledger=tmp_path_factory.mktemp("ledger") / "ledger.sqlite")
                  + plane_config)
        hub = Hub(tmp_path_factory.mktemp("hub"), cluster.kubeconfig, config, start_timeout=start_timeout)
        hub.env["WORKSPACESPAWNER_QUOTA_TOKEN"] = hub.token  # the harness's admin service token holds every scope
        try:
            yield cluster, hub.start()
        finally:
            hub.stop()


@pytest.fixture(scope="module")
def hub(served):
    return served[1]


@pytest.fixture(scope="module")
def core(served):
    with core_v1(served[0]) as core:
        yield core


def wait_for(what: str, check, timeout: float, hub: Hub, every: float = 0.5):
    """``check()``'s first truthy value within ``timeout`` seconds (a bounded wait), else fail saying ``what``."""
    found = wait_until(check, timeout, every)
    assert found, f"{what} within {timeout} s\n{hub.log()}"
    return found


def last_activity(hub: Hub) -> datetime | None:
    text = hub.user(USER)["servers"][""].get("last_activity")
    return parse_time(text) if text else None


def idle_lines(session, hub: Hub) -> list[str]:
    return session.get(f"{hub.url}/hub/workspaces-data/{USER}", timeout=30).json()["idle"]


@contextlib.contextmanager
def open_tab(hub: Hub):
    """A WebSocket to the server's code-server held open through the hub's proxy, as a browser tab holds one, and
    silent: it opens on code-server's ``/healthz`` socket, which answers only when asked and makes no heartbeat."""
    url = f"{hub.url.replace('http://', 'ws://')}/user/{USER}/vscode/healthz"
    ws = websocket.create_connection(url, header=[f"Authorization: token {hub.token}"], suppress_origin=True,
                                     timeout=30)
    try:
        yield ws
    finally:
        ws.close()


def test_the_heartbeat_reaches_the_hub_and_the_idle_pass(hub, core):
    spawned = datetime.now(UTC).replace(microsecond=0)
    hub.create_user(USER)
    hub.start_server(USER, {"profile": PROFILE})
    [pod] = core.list_namespaced_pod("default", label_selector=names.owner_selector(USER)).items
    assert ENABLE in pod.spec.containers[0].args, pod.spec.containers[0].args
    token = {e.name: e.value for e in pod.spec.containers[0].env}["JUPYTERHUB_API_TOKEN"]
    session = login(hub, USER)

    # a request through the proxy (the start's own check made one too) has code-server write its heartbeat
    r = hub.server_request(USER, "GET", "vscode/")
    assert r.status_code == 200 and codeserver.WORKBENCH_MARKER in r.text, r.text[:2000]
    beat = wait_for("code-server's heartbeat file", lambda: (f := codeserver.heartbeat_file(token)) and f.exists() and f,
                    30, hub)
    first = serverext.heartbeat_time(beat)
    assert first >= spawned, (first, spawned)

    with open_tab(hub):
        # nothing newer than that request and the tab's opening: once older than the timeout, the hub's pass warns
        [line] = wait_for("the idle warning on the home page", lambda: idle_lines(session, hub), TIMEOUT + 60, hub,
                          every=1)
        assert line.startswith("Your workspace") and "shown no activity" in line, line

        # a minute after its last beat code-server beats again by itself, for the open connection: no request,
        # so no activity of jupyter-server's own; the extension reads the file, jupyterhub-singleuser reports
        # it, and the hub keeps it as the server's last_activity
        second = wait_for("code-server's own next heartbeat",
                          lambda: (t := serverext.heartbeat_time(beat)) > first and t, BEAT_INTERVAL + 30, hub)
        wait_for("the hub's last_activity at the heartbeat", lambda: last_activity(hub) >= second, 60, hub)
        assert last_activity(hub) == second, (last_activity(hub), second)
        # the pass counts the server used again: its warning is gone
        wait_for("the warning taken back", lambda: idle_lines(session, hub) == [], 30, hub)

    # the decision on the hub's view, at times given: active within the timeout of the heartbeat, warned after it
    view = asyncio.run(HubUsers(hub.api_url, hub.token)())
    held = gpu_servers_held([{"kind": "Pod", **core.api_client.sanitize_for_serialization(pod)}])
    [server] = gpu_servers(held, view, None)
    assert (server.user, server.profile, server.gpus) == (USER, PROFILE, 1)
    assert server.last_activity >= second  # or a later beat, while the tab was open
    policy = Policy(timeout=TIMEOUT, grace=3600)
    active = decide(server, policy, server.last_activity + timedelta(seconds=TIMEOUT - 1))
    assert (active.action, active.last_used) == (ACTIVE, server.last_activity)
    idle = decide(server, policy, server.last_activity + timedelta(seconds=TIMEOUT + 1))
    assert (idle.action, idle.last_used) == (WARN, server.last_activity)

    # the tab closed, the heartbeat ages: the hub's pass warns again once it is older than the timeout
    [line] = wait_for("the idle warning again", lambda: idle_lines(session, hub), TIMEOUT + 60, hub, every=1)
    assert "shown no activity" in line, line
    hub.stop_server(USER)
