"""Publishing a golden image from the Workspaces dashboard, as the hub runs it, on the local cluster.

Covers: through the dashboard's JSON API, a member of ``c.ImagePublish.teacher_groups`` publishes her own stopped VM
workspace (a DataSource appears in the golden-image namespace, audited with her name) but not a student's (403); a
student may not publish his own (403, nothing written, no audit record); a hub admin publishes the student's, and a
second publish under a taken name is refused in words (409).
"""

from __future__ import annotations

import pytest
import requests

from localcluster import ClusterThread
from tests.hub.test_dashboard_hub import DashboardHub, audit_records, dashboard_config, token_of
from tests.support.hubharness import free_port
from tests.support.lifecycleenv import with_kube
from tests.support.vmworkspace import GOLDEN_NS, base_image, make_stopped_vm
from workspacespawner.k8s.kinds import DATA_SOURCE, VOLUME_SNAPSHOT


@pytest.fixture(scope="module")
def cluster_thread(tmp_path_factory):
    thread = ClusterThread(state_dir=tmp_path_factory.mktemp("cluster"),
                           controllers=("storage", "protection", "snapshots", "cdi"))
    thread.start()
    base_image(thread)
    for user in ("teach", "stud"):
        thread.call(lambda cl, user=user: with_kube(cl.kubeconfig, lambda kube: make_stopped_vm(kube, cl, user)), timeout=90)
    yield thread
    thread.stop()


@pytest.fixture(scope="module")
def ledger_url(tmp_path_factory):
    return f"sqlite:///{tmp_path_factory.mktemp('ledger') / 'ledger.sqlite'}"


@pytest.fixture(scope="module")
def hub(cluster_thread, tmp_path_factory, ledger_url):
    config = dashboard_config(ledger_url) + 'c.ImagePublish.teacher_groups = ["teachers"]\n'
    hub = DashboardHub(tmp_path_factory.mktemp("hub"), cluster_thread.cluster.kubeconfig, config, dashboard_port=free_port())
    hub.start()
    try:
        hub.wait_service()
        hub.create_user("teach", groups=("teachers",))
        hub.create_user("stud")
        r = hub.api("POST", "/users/boss", json={"admin": True})
        assert r.status_code == 201, r.text
        yield hub
    finally:
        hub.stop()


def published(thread, name: str) -> dict | None:
    async def get(kube):
        return await kube.get(DATA_SOURCE, GOLDEN_NS, name)

    return thread.call(lambda cl: with_kube(cl.kubeconfig, get))


def snapshots(thread) -> list[str]:
    async def names(kube):
        return sorted(s["metadata"]["name"] for s in await kube.list(VOLUME_SNAPSHOT, "default"))

    return thread.call(lambda cl: with_kube(cl.kubeconfig, names))


def publish(hub, headers, owner: str, name: str) -> requests.Response:
    return requests.post(hub.service_url(f"api/workspaces/{owner}/publish"), headers=headers,
                         json={"server": "", "name": name}, timeout=60)


def test_a_student_may_not_publish_and_nothing_is_written(hub, cluster_thread, ledger_url):
    r = publish(hub, token_of(hub, "stud"), "stud", "stud-image")
    assert r.status_code == 403, r.text
    assert "may not publish" in r.json()["message"]
    assert published(cluster_thread, "stud-image") is None and snapshots(cluster_thread) == []
    assert audit_records(ledger_url, action="publish") == []


def test_a_teacher_publishes_her_own_workspace_only(hub, cluster_thread, ledger_url):
    teach = token_of(hub, "teach")
    r = publish(hub, teach, "stud", "from-stud")
    assert r.status_code == 403, r.text
    assert published(cluster_thread, "from-stud") is None
    r = publish(hub, teach, "teach", "ml101.v1")
    assert r.status_code == 200, r.text
    assert r.json()["name"] == f"{GOLDEN_NS}/ml101.v1"
    ds = published(cluster_thread, "ml101.v1")
    assert ds is not None and "snapshot" in ds["spec"]["source"]
    [record] = audit_records(ledger_url, action="publish")
    assert (record.actor, record.user, record.result) == ("teach", "teach", "ok")


def test_an_admin_publishes_anyones_and_a_taken_name_is_refused(hub, cluster_thread, ledger_url):
    boss = token_of(hub, "boss")
    r = publish(hub, boss, "stud", "stud-project")
    assert r.status_code == 200, r.text
    assert published(cluster_thread, "stud-project") is not None
    r = publish(hub, boss, "stud", "ml101.v1")
    assert r.status_code == 409 and "exists already" in r.json()["message"]
    assert [(rec.actor, rec.user, rec.result.split(":")[0]) for rec in audit_records(ledger_url, action="publish")][1:] == [
        ("boss", "stud", "ok"), ("boss", "stud", "refused")]

