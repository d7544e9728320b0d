"""A fence refusal reaches the spawn page at once: the old Pod stuck Terminating on a node that stopped answering.

Issue #13 item 5: the user's Pod is on a node that went NotReady; the stop
deleted it but the node cannot finish (it stays Terminating) and the hub
shows the server stopped. The next start is refused (``node-unreachable``,
409, naming the node and the admin's fence command) and JupyterHub's
cleanup after the refusal must not wait for the stuck Pod: the answer to
the POST is the 409 itself (JupyterHub turns a start slower than its
``slow_spawn_timeout``, 10 s, into a 202 that hides the message).
"""

from __future__ import annotations

import kubernetes
import pytest

from localcluster import ClusterThread
from tests.support.faultcases import matrix_case, wait_until
from tests.support.hubharness import Hub, config_pieces
from tests.support.invariants import assert_invariants
from workspacespawner.core import names


@pytest.fixture(scope="module")
def cluster_thread(tmp_path_factory):
    thread = ClusterThread(state_dir=tmp_path_factory.mktemp("cluster"))
    thread.start()
    yield thread
    thread.stop()


@pytest.fixture(scope="module")
def hub(cluster_thread, tmp_path_factory):
    config = config_pieces("10-workspace-spawner.py", "20-profiles.py")
    config += "c.Spawner.poll_interval = 1\n"
    hub = Hub(tmp_path_factory.mktemp("hub"), cluster_thread.cluster.kubeconfig, config).start()
    yield hub
    hub.stop()


@matrix_case("lost-node-refusal", "node loss", "node NotReady, the old Pod stuck Terminating: the refusal reaches the spawn page")
def test_refusal_on_a_lost_node_reaches_the_spawn_page(hub, cluster_thread):
    cluster = cluster_thread.cluster
    client = kubernetes.config.new_client_from_config(str(cluster.kubeconfig))
    core = kubernetes.client.CoreV1Api(client)
    try:
        hub.create_user("lu")
        hub.start_server("lu", {"profile": "jupyterlab-cpu"})
        [pod] = core.list_namespaced_pod("default", label_selector=names.owner_selector("lu")).items
        node = pod.spec.node_name
        cluster_thread.call(lambda cl: cl.controllers["scheduler"].set_node_ready(node, False))
        hub.stop_server("lu", timeout=90)  # the stop gives up after start_timeout (60 s): the Pod stays Terminating
        [stuck] = core.list_namespaced_pod("default", label_selector=names.owner_selector("lu")).items
        assert stuck.metadata.deletion_timestamp is not None

        r = hub.spawn("lu", {"profile": "jupyterlab-cpu"})
        assert r.status_code == 409, r.text
        assert node in r.json()["message"] and "fence lu --confirm-node-down" in r.json()["message"]
        assert [p.metadata.uid for p in core.list_namespaced_pod("default", label_selector=names.owner_selector("lu")).items] == [
            stuck.metadata.uid]  # no second Pod on the disk
        cluster_thread.call(lambda cl: cl.controllers["scheduler"].set_node_ready(node, True))
        assert wait_until(lambda: not core.list_namespaced_pod("default", label_selector=names.owner_selector("lu")).items)
        assert_invariants(cluster)
    finally:
        client.close()
