"""Publishing a golden image from the Workspaces dashboard, as the hub runs it, on both control planes.

Covers: through the dashboard's JSON API, a member of ``c.ImagePublish.teacher_groups`` publishes her own stopped VM
workspace (a DataSource appears in the golden-image namespace, audited with her name, and a new system disk clones
from it holding what she installed: on the real plane through CDI's own cdi-controller) but not a student's (403); a
student may not publish his own (403, nothing written, no audit record); a hub admin publishes the student's, and a
second publish under a taken name is refused in words (409).
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
import requests

from tests.hub.test_dashboard_hub import DashboardHub, audit_records, dashboard_config, token_of
from tests.support import planes
from tests.support.hubharness import free_port
from tests.support.lifecycleenv import with_kube
from tests.support.vmworkspace import GOLDEN_NS, NS, SETTINGS, clone_from, make_stopped_vm
from workspacespawner.demo import GOLDEN_IMAGE
from workspacespawner.k8s.kinds import DATA_SOURCE, VOLUME_SNAPSHOT

#: The stopped workspaces are cloned from the demo's golden image (10Gi): a root disk no smaller than it, which
#: CDI's own cdi-controller requires.
DEMO_SETTINGS = dataclasses.replace(SETTINGS, golden_image=GOLDEN_IMAGE[1], golden_image_namespace=GOLDEN_IMAGE[0],
                                    root_disk_size="10Gi")
TEACHERS_FILE = {"opt/course/README": "ML 101\n"}


def kube_call(cluster, work):
    """``await work(kube)`` on ``cluster``'s API server, from the test's thread."""
    return asyncio.run(with_kube(cluster.kubeconfig, work))


@pytest.fixture(scope="module")
def cluster(control_plane, tmp_path_factory):
    with planes.running(control_plane, tmp_path_factory.mktemp("cluster"), golden=True) as cluster:
        for user in ("teach", "stud"):
            files = TEACHERS_FILE if user == "teach" else None
            kube_call(cluster, lambda kube, user=user, files=files: make_stopped_vm(kube, cluster, user, files=files,
                                                                                   settings=DEMO_SETTINGS))
        yield cluster


@pytest.fixture(scope="module")
def ledger_url(control_plane, tmp_path_factory):
    """A ledger of the plane's own, as its cluster and hub are."""
    return f"sqlite:///{tmp_path_factory.mktemp('ledger') / 'ledger.sqlite'}"


@pytest.fixture(scope="module")
def hub(cluster, tmp_path_factory, ledger_url):
    plane_config, start_timeout = planes.hub_settings(cluster)
    config = dashboard_config(ledger_url) + 'c.ImagePublish.teacher_groups = ["teachers"]\n' + plane_config
    hub = DashboardHub(tmp_path_factory.mktemp("hub"), cluster.kubeconfig, config, dashboard_port=free_port(),
                       start_timeout=start_timeout)
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


def published(cluster, name: str) -> dict | None:
    async def get(kube):
        return await kube.get(DATA_SOURCE, GOLDEN_NS, name)

    return kube_call(cluster, get)


def snapshots(cluster) -> list[str]:
    async def names(kube):
        return sorted(s["metadata"]["name"] for s in await kube.list(VOLUME_SNAPSHOT, NS))

    return kube_call(cluster, names)


def publish(hub, headers, owner: str, name: str) -> requests.Response:
    return requests.post(hub.service_url(f"api/workspaces/{owner}/publish"), headers=headers,
                         json={"server": "", "name": name}, timeout=60)


def test_a_student_may_not_publish_and_nothing_is_written(hub, cluster, ledger_url):
    r = publish(hub, token_of(hub, "stud"), "stud", "stud-image")
    assert r.status_code == 403, r.text
    assert "may not publish" in r.json()["message"]
    assert published(cluster, "stud-image") is None and snapshots(cluster) == []
    assert audit_records(ledger_url, action="publish") == []


def test_a_teacher_publishes_her_own_workspace_only(hub, cluster, ledger_url):
    teach = token_of(hub, "teach")
    r = publish(hub, teach, "stud", "from-stud")
    assert r.status_code == 403, r.text
    assert published(cluster, "from-stud") is None
    r = publish(hub, teach, "teach", "ml101.v1")
    assert r.status_code == 200, r.text
    assert r.json()["name"] == f"{GOLDEN_NS}/ml101.v1"
    ds = published(cluster, "ml101.v1")
    assert ds is not None and "snapshot" in ds["spec"]["source"]
    [record] = audit_records(ledger_url, action="publish")
    assert (record.actor, record.user, record.result) == ("teach", "teach", "ok")
    # a new system disk clones from it (on the real plane: CDI's own snapshot clone) and holds what she installed
    files = kube_call(cluster, lambda kube: clone_from(kube, cluster, "ml101.v1", "from-ml101", size="10Gi"))
    assert (files / "opt/course/README").read_text() == "ML 101\n"


def test_an_admin_publishes_anyones_and_a_taken_name_is_refused(hub, cluster, ledger_url):
    boss = token_of(hub, "boss")
    r = publish(hub, boss, "stud", "stud-project")
    assert r.status_code == 200, r.text
    assert published(cluster, "stud-project") is not None
    r = publish(hub, boss, "stud", "ml101.v1")
    assert r.status_code == 409 and "exists already" in r.json()["message"]
    assert [(rec.actor, rec.user, rec.result.split(":")[0]) for rec in audit_records(ledger_url, action="publish")][1:] == [
        ("boss", "stud", "ok"), ("boss", "stud", "refused")]

