"""One consumer per ReadWriteOnce home, through a real JupyterHub on the local cluster (issue #13, item 1).

Covers: with the default ``home-{username}`` template (one home for the
default and every named server) and two workspaces allowed at once, two
named servers of one user started at the same moment: exactly one becomes
Ready, the other is refused at once (409) with a message naming the server
that holds the home; the home is never used by two Pods (the cluster's
attacher history, :func:`tests.support.invariants.assert_invariants`) and
never deleted. Once the holder stops, the other server starts.
"""

from __future__ import annotations

import threading
import time

import pytest
import requests

from localcluster import ClusterThread
from tests.support.hubharness import CONFIG_D, Hub
from tests.support.invariants import assert_invariants

CONFIG = """
c.JupyterHub.allow_named_servers = True
c.JupyterHub.named_server_limit_per_user = 5
c.Spawner.poll_interval = 1
c.WorkspaceQuota.ledger_url = "sqlite:///{ledger}"
c.WorkspaceQuota.max_concurrent = 2
"""


@pytest.fixture(scope="module")
def cluster_thread(tmp_path_factory):
    thread = ClusterThread(state_dir=tmp_path_factory.mktemp("cluster"))
    thread.start()
    yield thread
    thread.stop()


@pytest.fixture(scope="module")
def cluster(cluster_thread):
    return cluster_thread.cluster


@pytest.fixture(scope="module")
def hub(cluster, tmp_path_factory):
    config = "\n".join(f"load_subconfig({str(CONFIG_D / piece)!r})" for piece in ("10-workspace-spawner.py", "20-profiles.py"))
    config += CONFIG.replace("{ledger}", str(tmp_path_factory.mktemp("ledger") / "ledger.sqlite"))
    hub = Hub(tmp_path_factory.mktemp("hub"), cluster.kubeconfig, config).start()
    yield hub
    hub.stop()


def servers_of(hub: Hub, user: str) -> dict:
    return hub.user(user).get("servers", {})


def wait_until(predicate, timeout: float = 90, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"{what} not met within {timeout} s")


def start_together(hub: Hub, user: str, names: list[str]) -> dict[str, requests.Response]:
    """POST a start of each named server of ``user`` at the same moment; their answers by name."""
    barrier = threading.Barrier(len(names))
    answers: dict[str, requests.Response] = {}

    def post(name: str) -> None:
        barrier.wait()
        answers[name] = hub.api("POST", f"/users/{user}/servers/{name}", json={"profile": "jupyterlab-cpu"})

    threads = [threading.Thread(target=post, args=(name,)) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return answers


def settled(hub: Hub, user: str, names: list[str]) -> bool:
    """No server of ``names`` is still on its way (each is ready or gone)."""
    servers = servers_of(hub, user)
    return all(name not in servers or servers[name].get("ready") or servers[name].get("stopped") for name in names) and not any(
        (servers.get(name) or {}).get("pending") for name in names
    )


def test_two_named_servers_sharing_one_home_start_one_at_a_time(hub, cluster):
    user = "twin"
    hub.create_user(user)
    answers = start_together(hub, user, ["a", "b"])
    codes = {name: r.status_code for name, r in answers.items()}
    wait_until(lambda: settled(hub, user, ["a", "b"]), 120, "both starts settled")
    ready = sorted(name for name, server in servers_of(hub, user).items() if server.get("ready"))
    try:
        assert len(ready) == 1, f"ready: {ready}, answers: {codes}\n{hub.log()}"
        (winner,) = ready
        loser = "b" if winner == "a" else "a"
        assert codes[winner] in (201, 202), answers[winner].text
        assert codes[loser] == 409, f"{codes[loser]} {answers[loser].text}"
        message = answers[loser].json()["message"]
        assert "home-twin" in message and f"{user}/{winner}" in message, message
        assert_invariants(cluster)
        # once the holder has stopped, the other server may have the home
        r = hub.api("DELETE", f"/users/{user}/servers/{winner}")
        assert r.status_code in (202, 204), r.text
        wait_until(lambda: not (servers_of(hub, user).get(winner) or {}).get("ready") and settled(hub, user, [winner]), 60, "holder stopped")
        r = hub.api("POST", f"/users/{user}/servers/{loser}", json={"profile": "jupyterlab-cpu"})
        assert r.status_code in (201, 202), f"{r.status_code} {r.text}\n{hub.log()}"
        wait_until(lambda: (servers_of(hub, user).get(loser) or {}).get("ready"), 90, f"{loser} ready")
        assert_invariants(cluster)
    finally:
        for name in ("a", "b"):
            hub.api("DELETE", f"/users/{user}/servers/{name}")
