"""The home's settings are kubespawner's own storage settings, as zero-to-jupyterhub's ``singleuser.storage`` sets them.

Covers: with nothing set, today's home (``home-{username}``, ceph-rbd,
10Gi, ReadWriteOnce, ``/home/jovyan``); z2jh's storage values (type
dynamic: capacity, storage class, access modes, extra labels, name
template, home mount path) reach the spawner's home; the old ``home_*``
names are deprecated aliases that read and set the new settings and log
what to use instead, once; the start-up check names a bad value under the
spelling the config used; a home PVC carries the admin's extra labels under
our owner labels; the Pod mounts our home in place of kubespawner's own
``{pvc_name}`` volume.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
from kubernetes_asyncio.client import ApiClient, V1Container, V1ObjectMeta, V1Pod, V1PodSpec
from traitlets import TraitError
from traitlets.config import Config

from tests.support.chartvalues import z2jh_config
from workspacespawner.backends.container.backend import ContainerBackend
from workspacespawner.config import traittypes
from workspacespawner.core import names
from workspacespawner.storage import home
from workspacespawner.storage.prepare import PreparedTiers
from workspacespawner.storage.tiers import StorageSettings
from workspacespawner.storage.values import home_mount_default, kubespawner_home_volumes

#: zero-to-jupyterhub values that set every home setting (merged over the chart's defaults: storage type dynamic).
Z2JH_STORAGE = {
    "singleuser": {
        "storage": {
            "capacity": "7Gi",
            "extraLabels": {"example.edu/backup": "daily"},
            "homeMountPath": "/home/student",
            "dynamic": {"storageClass": "cephfs", "storageAccessModes": ["ReadWriteMany"], "pvcNameTemplate": "claim-{username}"},
        }
    }
}


@pytest.fixture
def spawner_from(kube_env, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default quota ledger is a file next to the (absent) config file
    from workspacespawner.spawner import WorkspaceSpawner

    return lambda config=None: WorkspaceSpawner(_mock=True, config=config or Config())


@pytest.fixture(autouse=True)
def fresh_warnings():
    traittypes.said.clear()
    yield
    traittypes.said.clear()


async def test_nothing_set_is_todays_home(spawner_from):
    spawner = spawner_from()
    assert (spawner.pvc_name_template, spawner.storage_class, spawner.storage_capacity, spawner.storage_access_modes) == (
        "home-{username}", "ceph-rbd", "10Gi", ["ReadWriteOnce"])
    assert spawner.home_mount_path == "/home/jovyan"
    assert spawner.home_pvc_name == spawner.pvc_name == f"home-{spawner._expand_user_properties('{username}')}"
    assert spawner.storage_pvc_ensure is False and spawner.delete_pvc is False


async def test_z2jh_storage_values_configure_the_home(spawner_from):
    spawner = spawner_from(z2jh_config(Z2JH_STORAGE))
    assert (spawner.storage_capacity, spawner.storage_class, spawner.storage_access_modes) == ("7Gi", "cephfs", ["ReadWriteMany"])
    assert spawner.storage_extra_labels == {"example.edu/backup": "daily"}
    assert spawner.pvc_name_template == "claim-{username}"
    assert spawner.home_mount_path == "/home/student"
    # kubespawner's own PVC machinery stays off although z2jh turns it on (storage_pvc_ensure)
    assert spawner.storage_pvc_ensure is False and spawner.delete_pvc is False
    # the old names read the new settings (what older code and configs see)
    assert (spawner.home_size, spawner.home_storage_class, spawner.home_access_modes, spawner.home_pvc_name_template) == (
        "7Gi", "cephfs", ["ReadWriteMany"], "claim-{username}")


async def test_an_explicit_home_mount_path_wins_over_z2jhs(spawner_from):
    config = z2jh_config(Z2JH_STORAGE)
    config.WorkspaceSpawner.home_mount_path = "/home/jovyan"
    assert spawner_from(config).home_mount_path == "/home/jovyan"


@pytest.mark.parametrize("old, new, value", [
    ("home_size", "storage_capacity", "3Gi"),
    ("home_storage_class", "storage_class", "fast"),
    ("home_access_modes", "storage_access_modes", ["ReadWriteOncePod"]),
    ("home_pvc_name_template", "pvc_name_template", "home-{user_server}"),
])
async def test_old_names_are_aliases_that_say_what_to_use(spawner_from, caplog, old, new, value):
    config = Config()
    config.WorkspaceSpawner[old] = value
    with caplog.at_level(logging.WARNING):
        spawner = spawner_from(config)
        spawner_from(config)
    assert getattr(spawner, new) == value == getattr(spawner, old)
    warnings = [r.getMessage() for r in caplog.records if "deprecated" in r.getMessage()]
    assert len(warnings) == 1, warnings  # once per process, not once per spawner
    assert warnings[0].startswith(f"WorkspaceSpawner.{old} is deprecated; use c.KubeSpawner.{new} (z2jh: singleuser.storage.")


async def test_a_profile_may_still_override_an_old_name(spawner_from):
    spawner = spawner_from()
    spawner.home_size = "20Gi"  # what a kubespawner_override of home_size does
    assert spawner.storage_capacity == "20Gi"


@pytest.mark.parametrize("section, name, value, words", [
    ("WorkspaceSpawner", "home_size", "lots", "c.WorkspaceSpawner.home_size = 'lots' is invalid"),
    ("KubeSpawner", "storage_capacity", "0", "c.KubeSpawner.storage_capacity = '0' is invalid"),
    ("KubeSpawner", "storage_access_modes", ["ReadWriteSometimes"], "c.KubeSpawner.storage_access_modes = ['ReadWriteSometimes']"),
    ("WorkspaceSpawner", "home_access_modes", [], "c.WorkspaceSpawner.home_access_modes = [] is invalid"),
    ("WorkspaceSpawner", "home_mount_path", "home", "c.WorkspaceSpawner.home_mount_path = 'home' is invalid"),
])
def test_start_up_check_names_a_bad_home_value(section, name, value, words):
    from workspacespawner.spawner import check_hub_config

    config = Config()
    config[section][name] = value
    with pytest.raises(TraitError) as err:
        check_hub_config(config)
    assert words in str(err.value)


def test_start_up_check_takes_z2jhs_values():
    from workspacespawner.spawner import check_hub_config

    check_hub_config(z2jh_config(Z2JH_STORAGE))
    bad = {"singleuser": {"storage": {**Z2JH_STORAGE["singleuser"]["storage"], "capacity": "seven"}}}
    with pytest.raises(TraitError, match=r"c.KubeSpawner.storage_capacity = 'seven' is invalid"):
        check_hub_config(z2jh_config(bad))


def test_kubespawners_home_volume_and_its_mount_path():
    config = z2jh_config(Z2JH_STORAGE)
    assert kubespawner_home_volumes(config.KubeSpawner.volumes) == {"volume-{user_server}"}
    assert home_mount_default(config.KubeSpawner.volumes, config.KubeSpawner.volume_mounts) == "/home/student"
    assert home_mount_default({}, {}) == "/home/jovyan"
    as_lists = ([{"name": "h", "persistentVolumeClaim": {"claimName": "{pvc_name}"}}], [{"name": "h", "mountPath": "/srv/h"}])
    assert home_mount_default(*as_lists) == "/srv/h"
    static = z2jh_config({"singleuser": {"storage": {"type": "static", "static": {"pvcName": "shared"}}}})
    assert kubespawner_home_volumes(static.KubeSpawner.volumes) == set()


def test_home_pvc_carries_extra_labels_under_ours():
    extra = {"example.edu/backup": "daily", names.OWNER_LABEL: "someone-else"}
    pvc = home.make_home_pvc(name="claim-ann", namespace="jhub", user_name="ann", kubespawner_username="ann",
                             storage_class="cephfs", size="7Gi", access_modes=["ReadWriteMany"], extra_labels=extra)
    labels = pvc["metadata"]["labels"]
    assert labels["example.edu/backup"] == "daily"
    assert labels[names.OWNER_LABEL] == names.owner_id("ann")  # an extra label never changes whose disk it is
    assert pvc["spec"]["storageClassName"] == "cephfs" and pvc["spec"]["resources"]["requests"]["storage"] == "7Gi"


async def test_pod_mounts_our_home_in_place_of_kubespawners_volume():
    api = SimpleNamespace(api_client=ApiClient())
    backend = ContainerBackend(SimpleNamespace(api=api, pvc_name="claim-ann"))
    pod = V1Pod(
        metadata=V1ObjectMeta(name="jupyter-ann"),
        spec=V1PodSpec(
            containers=[V1Container(name="notebook", image="img", volume_mounts=[
                {"name": "volume-ann", "mountPath": "/home/student"}, {"name": "data", "mountPath": "/data"}])],
            volumes=[{"name": "volume-ann", "persistentVolumeClaim": {"claimName": "claim-ann"}},
                     {"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}}],
        ),
    )
    tiers = PreparedTiers(StorageSettings(team_folders={}, scratch=None, model_cache=None, cache_location="home",
                                          home_mount_path="/home/student"), frozenset())
    pod = backend.add_workspace_volumes(pod, home_pvc="home-ann", home_mount_path="/home/student", user_name="ann", tiers_now=tiers)
    plain = api.api_client.sanitize_for_serialization(pod)
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in plain["spec"]["volumes"]}
    assert claims == {"home": "home-ann", "data": "datasets"}  # the home found by owner, not the template's name
    mounts = {m["name"]: m["mountPath"] for m in plain["spec"]["containers"][0]["volumeMounts"]}
    assert mounts == {"home": "/home/student", "data": "/data"}
    await api.api_client.close()
