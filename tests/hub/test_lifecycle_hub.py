"""The lifecycle through a real JupyterHub on the local cluster (needs the spawner wired to :mod:`workspacespawner.lifecyclespawner`).

Covers: the phase on the home PVC following a start and a stop (Running,
then Stopped); an idle culler deleting a named server through the REST API
exactly as ``jupyterhub-idle-culler --remove-named-servers`` does (``DELETE
/hub/api/users/{name}/servers/{server}`` with ``{"remove": true}``) leaving
its disk Retained with a retain-until time and an audit record, never
deleted; a deleted user's home Retained, and the same user, recreated,
getting that very disk back at their next start (reclaim policy
``automatic``), audited; a start finding the user's leftover Pod on a node
that stopped answering refused with 409 and the fence command to run, the
home ``Degraded``, and the start going ahead once an admin fenced it. On
both control planes (tests/support/planes.py), the lost node on the embedded
one only.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import kubernetes
import pytest
import requests

from tests.support import planes
from tests.support.hubharness import CONFIG_D, Hub
from tests.support.lifecycleenv import pod_manifest
from workspacespawner.admin import fence as fence_command
from workspacespawner.core import names
from workspacespawner.lifecycle.audit import AuditLog

LIFECYCLE_CONFIG = """
c.JupyterHub.allow_named_servers = True
c.KubeSpawner.pvc_name_template = "home-{user_server}"
c.WorkspaceSpawner.retention_period = 30 * 86400
c.WorkspaceSpawner.reclaim_policy = "automatic"
c.WorkspaceQuota.ledger_url = "sqlite:///{ledger}"
"""


@pytest.fixture(scope="module")
def cluster(control_plane, tmp_path_factory):
    with planes.running(control_plane, tmp_path_factory.mktemp("cluster")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def ledger(tmp_path_factory):
    return tmp_path_factory.mktemp("ledger") / "ledger.sqlite"


@pytest.fixture(scope="module")
def hub(cluster, ledger, tmp_path_factory):
    config = "\n".join(f"load_subconfig({str(CONFIG_D / piece)!r})" for piece in ("10-workspace-spawner.py", "20-profiles.py"))
    config += LIFECYCLE_CONFIG.replace("{ledger}", str(ledger))
    plane_config, start_timeout = planes.hub_settings(cluster)
    hub = Hub(tmp_path_factory.mktemp("hub"), cluster.kubeconfig, config + plane_config, start_timeout=start_timeout).start()
    yield hub
    hub.stop()


@pytest.fixture
def core(sync_api):
    return kubernetes.client.CoreV1Api(sync_api)


def quoted(name: str) -> str:
    return requests.utils.quote(name, safe="")


def lifecycle_of(pvc) -> dict:
    return json.loads(pvc.metadata.annotations[names.LIFECYCLE_ANNOTATION])


def wait_until(predicate, timeout: float = 60, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"{what} not met within {timeout} s")


def start_named(hub: Hub, user: str, server: str, profile: str = "jupyterlab-cpu") -> None:
    r = hub.api("POST", f"/users/{quoted(user)}/servers/{server}", json={"profile": profile})
    assert r.status_code in (201, 202), f"{r.status_code} {r.text}\n{hub.log()}"
    wait_until(lambda: (hub.user(user).get("servers", {}).get(server) or {}).get("ready"), 90, f"{user}/{server} ready")


def in_use_by(pvc, user: str) -> bool:
    """A home in use as issue #15 records it: the phase at rest (``Stopped``; the Pod shows Running) and the
    attach claim of ``user``'s default server."""
    claim = (pvc.metadata.annotations or {}).get(names.ATTACH_ANNOTATION)
    return pvc.metadata.labels[names.PHASE_LABEL] == "Stopped" and claim is not None and json.loads(claim)["server"] == user


def test_phase_follows_start_and_stop(hub, core):
    hub.create_user("pia")
    hub.start_server("pia", {"profile": "jupyterlab-cpu"})
    pvc = core.read_namespaced_persistent_volume_claim("home-pia", "default")
    assert in_use_by(pvc, "pia")
    hub.stop_server("pia")
    pvc = wait_until(lambda: (p := core.read_namespaced_persistent_volume_claim("home-pia", "default")).metadata.annotations
                     .get(names.ATTACH_ANNOTATION) is None and p, 30, "claim released")
    assert pvc.metadata.labels[names.PHASE_LABEL] == "Stopped"


def test_idle_culler_removing_a_named_server_keeps_its_disk(hub, core, ledger):
    hub.create_user("ivy")
    start_named(hub, "ivy", "work")
    pvc = core.read_namespaced_persistent_volume_claim("home-ivy--work", "default")
    uid = pvc.metadata.uid
    before = datetime.now(UTC)

    # what jupyterhub-idle-culler --remove-named-servers sends for an idle named server
    r = hub.api("DELETE", "/users/ivy/servers/work", json={"remove": True})
    assert r.status_code in (202, 204), r.text
    wait_until(lambda: "work" not in hub.user("ivy").get("servers", {}), 60, "named server removed")
    wait_until(lambda: not core.list_namespaced_pod("default", label_selector=names.owner_selector("ivy")).items, 60, "pod gone")

    def retained():  # the hub removes the server (delete_forever) once it has stopped, after answering
        pvc = core.read_namespaced_persistent_volume_claim("home-ivy--work", "default")
        return pvc if pvc.metadata.labels[names.PHASE_LABEL] == "Retained" else None

    pvc = wait_until(retained, 60, "disk retained")
    assert pvc.metadata.uid == uid and pvc.metadata.deletion_timestamp is None
    until = datetime.fromisoformat(lifecycle_of(pvc)["retainUntil"].replace("Z", "+00:00"))
    assert before + timedelta(days=29) < until < datetime.now(UTC) + timedelta(days=31)
    # the move is audited once the cluster holds it, so the row may land just after the label
    [record] = wait_until(lambda: AuditLog.from_url(f"sqlite:///{ledger}").query(user="ivy", action="retain"), 30, "retain audited")
    assert (record.disk, record.actor, record.server, record.result) == ("home-ivy--work", "system", "work", "ok")


def test_deleted_user_gets_their_disk_back(hub, core, ledger):
    hub.create_user("jon")
    hub.start_server("jon", {"profile": "jupyterlab-cpu"})
    r = hub.server_request("jon", "PUT", "api/contents/kept.txt", json={"type": "file", "format": "text", "content": "mine"})
    assert r.status_code in (200, 201), r.text
    uid = core.read_namespaced_persistent_volume_claim("home-jon", "default").metadata.uid
    hub.stop_server("jon")
    assert hub.api("DELETE", "/users/jon").status_code == 204
    pvc = core.read_namespaced_persistent_volume_claim("home-jon", "default")
    assert pvc.metadata.labels[names.PHASE_LABEL] == "Retained"

    hub.create_user("jon")
    hub.start_server("jon", {"profile": "jupyterlab-cpu"})
    pvc = core.read_namespaced_persistent_volume_claim("home-jon", "default")
    assert pvc.metadata.uid == uid and in_use_by(pvc, "jon")
    r = hub.server_request("jon", "GET", "api/contents/kept.txt")
    assert r.status_code == 200 and r.json()["content"] == "mine"
    hub.stop_server("jon")
    actions = [r.action for r in AuditLog.from_url(f"sqlite:///{ledger}").query(user="jon")]
    assert actions[-2:] == ["retain", "reclaim"]


@pytest.mark.embedded_only("the real plane's node agent reports its nodes Ready again; tests/hub/test_fault_matrix_real.py has no node loss")
def test_leaked_pod_on_a_lost_node_refuses_the_start_until_fenced(hub, core, cluster, ledger, tmp_path):
    hub.create_user("kim")
    hub.start_server("kim", {"profile": "jupyterlab-cpu"})
    hub.stop_server("kim")
    # a Pod of kim's left behind on a node that then stopped answering (the hub lost track of it)
    leaked = pod_manifest("kim", "jupyter-kim-leaked", "home-kim")
    leaked["metadata"]["namespace"] = "default"
    pod = core.create_namespaced_pod("default", leaked)
    node = wait_until(lambda: core.read_namespaced_pod(pod.metadata.name, "default").spec.node_name, 30, "pod placed")
    planes.set_node_ready(cluster, node, False)

    r = hub.spawn("kim", {"profile": "jupyterlab-cpu"})
    assert r.status_code == 409, r.text
    assert node in r.json()["message"] and "fence kim --confirm-node-down" in r.json()["message"]
    assert [p.metadata.name for p in core.list_namespaced_pod("default", label_selector=names.owner_selector("kim")).items] == [
        "jupyter-kim-leaked"]  # no second Pod on the disk
    home = core.read_namespaced_persistent_volume_claim("home-kim", "default")
    assert home.metadata.labels[names.PHASE_LABEL] == "Degraded" and lifecycle_of(home)["reason"] == "node-unreachable"

    hub_config = tmp_path / "jupyterhub_config.py"
    hub_config.write_text(f"c.WorkspaceQuota.ledger_url = 'sqlite:///{ledger}'\nc.KubeSpawner.namespace = 'default'\n")
    assert fence_command.main(["kim", "--confirm-node-down", "-f", str(hub_config), "--kubeconfig", str(cluster.kubeconfig),
                               "--actor", "root"]) == 0
    assert core.read_namespaced_persistent_volume_claim("home-kim", "default").metadata.labels[names.PHASE_LABEL] == "Stopped"
    planes.set_node_ready(cluster, node, True)  # the node is repaired (the demo has one CPU node)
    hub.start_server("kim", {"profile": "jupyterlab-cpu"})
    assert in_use_by(core.read_namespaced_persistent_volume_claim("home-kim", "default"), "kim")
    hub.stop_server("kim")
