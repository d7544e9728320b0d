"""A container stop against a slow API server, through a real JupyterHub on the local cluster.

Covers: a Pod DELETE the API server answers after 5 s while the hub's
client gives up after 3 s and sends it again; the first DELETE, served
late, may arrive after the next start made a new Pod of the same name (with
a 15 s delay it surely does). Every
DELETE carries the old Pod's uid as a precondition, so the late one is
refused (409) and the new Pod and its server survive.
"""

from __future__ import annotations

import time

import kubernetes
import pytest

from localcluster import ClusterThread
from tests.support.hubharness import CONFIG_D, Hub
from workspacespawner.core import names


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    thread = ClusterThread(state_dir=tmp_path_factory.mktemp("cluster"))
    cluster = thread.start()
    yield cluster
    thread.stop()


@pytest.fixture(scope="module")
def hub(cluster, tmp_path_factory):
    config = "".join(f"load_subconfig({str(CONFIG_D / piece)!r})\n" for piece in ("10-workspace-spawner.py", "20-profiles.py"))
    config += "c.KubeSpawner.k8s_api_request_timeout = 3\n"
    hub = Hub(tmp_path_factory.mktemp("hub"), cluster.kubeconfig, config).start()
    yield hub
    hub.stop()


@pytest.fixture(scope="module")
def core(cluster):
    client = kubernetes.config.new_client_from_config(str(cluster.kubeconfig))
    yield kubernetes.client.CoreV1Api(client)
    client.close()


def user_pods(core, user):
    return core.list_namespaced_pod("default", label_selector=names.owner_selector(user)).items


@pytest.mark.parametrize("delay", [5.0, 15.0])
def test_late_retried_pod_delete_does_not_remove_the_next_pod(hub, core, cluster, delay):
    """5 s: the issue's numbers (the late DELETE may land before or after the new Pod); 15 s: surely after it."""
    user = f"dora{int(delay)}"
    hub.create_user(user)
    hub.start_server(user, {"profile": "jupyterlab-cpu"})
    [old] = user_pods(core, user)
    pod_path = rf"/namespaces/default/pods/{old.metadata.name}$"
    cluster.requests.clear()
    cluster.faults.add("DELETE", pod_path, delay=delay)

    hub.stop_server(user)
    hub.start_server(user, {"profile": "jupyterlab-cpu"})
    [new] = user_pods(core, user)
    assert new.metadata.uid != old.metadata.uid

    deadline = time.monotonic() + delay + 15
    while len(cluster.requests.matching("DELETE", pod_path)) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    deletes = cluster.requests.matching("DELETE", pod_path)
    assert len(deletes) >= 2, deletes  # the retry, and the first one served late
    time.sleep(1.0)
    assert [p.metadata.uid for p in user_pods(core, user)] == [new.metadata.uid]
    assert all(((d.body or {}).get("preconditions") or {}).get("uid") == old.metadata.uid for d in deletes), deletes
    if delay > 10:
        assert 409 in [d.status for d in deletes], deletes  # the late DELETE met the new Pod and was refused
    assert hub.user(user)["servers"][""]["ready"]
    r = hub.server_request(user, "GET", "api/status")
    assert r.status_code == 200, r.text
    hub.stop_server(user)
    assert user_pods(core, user) == []
