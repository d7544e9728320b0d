"""zero-to-jupyterhub's ``singleuser.storage`` values configure the home, through the chart's own hub config.

The z2jh 4.4.0 chart is rendered by Helm with values that set
``singleuser.storage.capacity``, ``...dynamic.storageClass``,
``...dynamic.storageAccessModes``, ``...dynamic.pvcNameTemplate``,
``...extraLabels`` and ``...homeMountPath``; a real JupyterHub runs the
chart's rendered ``jupyterhub_config.py`` (tests/support/charthub.py) with
WorkspaceSpawner on the local cluster and starts a server. Covers: the home
PVC has that size, class, access modes, name and labels, the Pod mounts it
(and nothing of kubespawner's own) at that path as its working directory;
deleting the user retains the home (kubespawner's ``delete_pvc`` stays off
although the chart's values turn its PVC machinery on).
"""

from __future__ import annotations

import pytest

from tests.support import planes
from tests.support.charthub import hub_config, hub_files
from tests.support.hubharness import Hub, core_v1, home_phase
from workspacespawner.core import names

NS = "default"  # the harness's hub namespace (c.KubeSpawner.namespace)
USER = "ann"

VALUES = {
    "hub": {"config": {"JupyterHub": {"spawner_class": "workspace"}}},
    "scheduling": {"userScheduler": {"enabled": False}},  # the local cluster has one scheduler, the default one
    "singleuser": {
        "cloudMetadata": {"blockWithIptables": False},  # no privileged iptables init container on this host
        "storage": {
            "type": "dynamic",
            "capacity": "7Gi",
            "homeMountPath": "/home/student",
            "extraLabels": {"example.edu/backup": "daily"},
            "dynamic": {"storageClass": "cephfs", "storageAccessModes": ["ReadWriteMany"], "pvcNameTemplate": "claim-{username}"},
        },
    },
}


@pytest.fixture(scope="module")
def cluster(control_plane, tmp_path_factory):
    with planes.running(control_plane, tmp_path_factory.mktemp("cluster")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def hub(cluster, tmp_path_factory):
    root = tmp_path_factory.mktemp("chart-hub-files")
    env = hub_files(VALUES, namespace=NS, root=root)
    plane_config, start_timeout = planes.hub_settings(cluster)
    hub = Hub(tmp_path_factory.mktemp("hub"), cluster.kubeconfig, hub_config(root) + plane_config, start_timeout=start_timeout)
    hub.env.update(env)
    hub.start()
    hub.create_user(USER)
    hub.start_server(USER)
    yield hub
    hub.stop()


def homes(cluster) -> list:
    """The user's PVCs, found as the spawner finds them: by owner label."""
    with core_v1(cluster) as core:
        return core.list_namespaced_persistent_volume_claim(NS, label_selector=names.owner_selector(USER)).items


def test_the_home_has_the_values_size_class_access_modes_and_name(hub, cluster):
    [pvc] = homes(cluster)
    assert pvc.spec.resources.requests["storage"] == "7Gi"
    assert pvc.spec.storage_class_name == "cephfs"
    assert pvc.spec.access_modes == ["ReadWriteMany"]
    assert pvc.metadata.name == f"claim-{USER}"  # the name template names a new home


def test_the_home_carries_the_values_extra_labels(hub, cluster):
    [pvc] = homes(cluster)
    assert pvc.metadata.labels["example.edu/backup"] == "daily"
    assert names.owned_by({"labels": pvc.metadata.labels, "annotations": pvc.metadata.annotations}, USER)


def test_the_pod_mounts_the_home_at_the_values_path(hub, cluster):
    with core_v1(cluster) as core:
        [pod] = core.list_namespaced_pod(NS, label_selector=names.owner_selector(USER)).items
    claims = {v.name: v.persistent_volume_claim.claim_name for v in pod.spec.volumes if v.persistent_volume_claim}
    assert claims == {"home": f"claim-{USER}"}  # kubespawner's own {pvc_name} volume replaced by the home
    notebook = pod.spec.containers[0]
    assert [(m.name, m.mount_path) for m in notebook.volume_mounts if m.name == "home"] == [("home", "/home/student")]
    assert notebook.working_dir == "/home/student"


def test_deleting_the_user_retains_the_home(hub, cluster):
    hub.stop_server(USER)
    r = hub.api("DELETE", f"/users/{USER}")
    assert r.status_code == 204, r.text
    [pvc] = homes(cluster)
    assert pvc.metadata.deletion_timestamp is None
    assert home_phase(cluster, USER)["phase"] == "Retained"
