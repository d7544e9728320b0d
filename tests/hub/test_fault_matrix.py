"""The fault matrix: API faults, races and odd input through a real JupyterHub on the local cluster.

Each case does its worst to one user's workspace, then the invariants
(:func:`tests.support.invariants.assert_invariants`) are asserted: no disk
deleted, one consumer per ReadWriteOnce disk, every second of GPU compute
inside an open run of the ledger, no open run without compute once
reconciled, and the user's next start works.
"""

from __future__ import annotations

import kubernetes
import pytest

from tests.support.hubharness import Hub, config_pieces
from tests.support.invariants import assert_invariants
from tests.support.paths import REPO
from workspacespawner.core import names
from workspacespawner.localcluster import ClusterThread
from workspacespawner.quota.ledger import Ledger
from workspacespawner.quota.policy import OPEN

PODS = r"/namespaces/default/pods$"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    thread = ClusterThread(state_dir=tmp_path_factory.mktemp("cluster"))
    yield thread.start()
    thread.stop()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("hub")


@pytest.fixture(scope="module")
def hub(cluster, workdir):
    config = f"import sys\nsys.path.insert(0, {str(REPO)!r})\n" + config_pieces("10-workspace-spawner.py", "20-profiles.py")
    config += f"""
c.KubeSpawner.k8s_api_request_timeout = 3
c.Spawner.poll_interval = 1
c.WorkspaceQuota.ledger_url = "sqlite:///{workdir / "ledger.sqlite"}"
c.WorkspaceQuota.card_hours_per_month = 1000
c.WorkspaceQuota.max_gpus = 8
c.WorkspaceQuota.min_gpu_start_minutes = 0
c.WorkspaceQuota.enforce_interval = 1
"""
    hub = Hub(workdir, cluster.kubeconfig, config)
    hub.env["WORKSPACESPAWNER_QUOTA_TOKEN"] = hub.token
    hub.start()
    yield hub
    hub.stop()


@pytest.fixture(scope="module")
def ledger(workdir, hub):
    ledger = Ledger(f"sqlite:///{workdir / 'ledger.sqlite'}")
    yield ledger
    ledger.dispose()


@pytest.fixture(scope="module")
def core(cluster):
    client = kubernetes.config.new_client_from_config(str(cluster.kubeconfig))
    yield kubernetes.client.CoreV1Api(client)
    client.close()


def user_pods(core, user):
    return core.list_namespaced_pod("default", label_selector=names.owner_selector(user)).items


def open_runs(ledger: Ledger, user: str):
    with ledger.engine.connect() as conn:
        ids = conn.exec_driver_sql(
            "SELECT id FROM workspacespawner_runs WHERE user_name = ? AND state = ?", (user, OPEN)
        ).scalars().all()
    return [ledger.get(i) for i in ids]


@pytest.mark.parametrize("profile", ["jupyterlab-1gpu", "jupyterlab-cpu"])
def test_pod_create_409_keeps_the_run_open(hub, cluster, core, ledger, profile):
    """Item 2: kubespawner's answer to 409 AlreadyExists on the Pod create is ``stop(True)``; the run must survive it."""
    user = f"al-{profile.split('-')[1]}"
    hub.create_user(user)
    cluster.faults.add("POST", PODS, status=409, reason="AlreadyExists", message="pods already exists")
    hub.start_server(user, {"profile": profile})
    assert len(user_pods(core, user)) == 1
    runs = open_runs(ledger, user)
    assert [(r.server_name, r.profile) for r in runs] == [("", profile)], runs
    hub.stop_server(user)
    assert open_runs(ledger, user) == []
    assert_invariants(cluster)
