"""A hub restarted while workspaces run finds and keeps them (spawner state and the shared watch caches).

JupyterHub is stopped with ``cleanup_servers = False`` (as z2jh runs it) and
started again on the same database: the container and the VM workspace are
still running, still reachable through the proxy, and still the same Pod and
VMI; stopping them afterwards works from the reloaded state. On both control
planes (tests/support/planes.py).
"""

from __future__ import annotations

import time

import kubernetes
import pytest

from tests.support import planes
from tests.support.hubharness import Hub, config_pieces
from workspacespawner.core import names


@pytest.fixture(scope="module")
def cluster(control_plane, tmp_path_factory):
    with planes.running(control_plane, tmp_path_factory.mktemp("cluster"), golden=True) as cluster:
        yield cluster


def owned(custom, core, user):
    """The uids of ``user``'s workspaces: their server Pods and VMIs (a VMI's virt-launcher Pod, which carries the VMI's
    labels, is left out: the VMI stands for it)."""
    selector = names.owner_selector(user)
    pods = core.list_namespaced_pod("default", label_selector=f"{selector},{names.VIRT_LAUNCHER_LABEL}!={names.VIRT_LAUNCHER}").items
    vmis = custom.list_namespaced_custom_object(
        "kubevirt.io", "v1", "default", "virtualmachineinstances", label_selector=selector
    )["items"]
    return [p.metadata.uid for p in pods] + [v["metadata"]["uid"] for v in vmis]


def test_restarted_hub_keeps_running_workspaces(cluster, tmp_path):
    client = kubernetes.config.new_client_from_config(str(cluster.kubeconfig))
    core, custom = kubernetes.client.CoreV1Api(client), kubernetes.client.CustomObjectsApi(client)
    plane_config, start_timeout = planes.hub_settings(cluster)
    config = config_pieces("10-workspace-spawner.py", "20-profiles.py") + "c.JupyterHub.cleanup_servers = False\n" \
        + "c.WorkspaceSpawner.reconcile_interval = 1\n" + plane_config
    hub = Hub(tmp_path / "hub", cluster.kubeconfig, config, start_timeout=start_timeout).start()
    try:
        for user, profile in (("cora", "jupyterlab-cpu"), ("vic", "ubuntu-vm")):
            hub.create_user(user)
            hub.start_server(user, {"profile": profile})
        before = {user: owned(custom, core, user) for user in ("cora", "vic")}
        assert all(len(uids) == 1 for uids in before.values())

        hub.stop()
        hub.start()

        for user in ("cora", "vic"):
            assert hub.wait_ready(user, timeout=30)["ready"]
            assert owned(custom, core, user) == before[user]
            r = hub.server_request(user, "GET", "api/status")
            assert r.status_code == 200, r.text
        time.sleep(3)  # a few reconciler passes, the first at start-up (orphans are reported from the first pass on)
        assert "Orphan compute" not in hub.log(tail=None)  # the reloaded servers are the hub's
        for user in ("cora", "vic"):
            hub.stop_server(user)
            assert owned(custom, core, user) == [] or _eventually_gone(custom, core, user)
    finally:
        hub.stop()
        client.close()


def _eventually_gone(custom, core, user, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if owned(custom, core, user) == []:
            return True
        time.sleep(0.2)
    return False
