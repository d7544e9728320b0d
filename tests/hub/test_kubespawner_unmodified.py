"""Plain kubespawner (unmodified KubeSpawner) against the local cluster, through a real JupyterHub.

The local cluster's promise: a client that works against it works against a
real API server. Here JupyterHub with ``kubespawner.KubeSpawner`` starts a
server (the node agent runs ``jupyterhub-singleuser``), the hub's own HTTP
check of that server succeeds (the server becomes ready), a request reaches
it through the proxy, poll() keeps it running, and stop removes the Pod.
On both control planes (tests/support/planes.py): on the real one
kube-scheduler places the Pod and our node agent runs it.
"""

from __future__ import annotations

import time

import kubernetes
import pytest

from tests.support import planes
from tests.support.hubharness import Hub


@pytest.fixture(scope="module")
def cluster(control_plane, tmp_path_factory):
    with planes.running(control_plane, tmp_path_factory.mktemp("cluster")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def hub(cluster, tmp_path_factory):
    config = """
c.JupyterHub.spawner_class = "kubespawner.KubeSpawner"
c.JupyterHub.last_activity_interval = 1
c.Spawner.poll_interval = 1
"""
    hub = Hub(tmp_path_factory.mktemp("hub"), cluster.kubeconfig, config).start()
    yield hub
    hub.stop()


def test_kubespawner_starts_polls_and_stops(hub, cluster):
    core = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(str(cluster.kubeconfig)))
    hub.create_user("plain")
    server = hub.start_server("plain")
    assert server["ready"]
    pods = core.list_namespaced_pod("default", label_selector="hub.jupyter.org/username=plain").items
    assert [p.status.phase for p in pods] == ["Running"]
    assert pods[0].status.pod_ip.startswith("127.")

    r = hub.server_request("plain", "GET", "api/status")
    assert r.status_code == 200, r.text

    # Poll runs every second: the server is still considered running afterwards.
    time.sleep(3)
    assert hub.user("plain")["servers"][""]["ready"]

    hub.stop_server("plain")
    assert core.list_namespaced_pod("default", label_selector="hub.jupyter.org/username=plain").items == []
