"""Storage tiers through a real JupyterHub on the local cluster.

Covers: a group member's Pod mounts its team folder at /shared/<team> (the
claim created ReadWriteMany on cephfs, labelled as a team claim, never an
owner's), a non-member's does not; leaving a group drops the mount at the
next start; a read-only team folder on an admin's claim; a team whose
admin claim is missing is left out while the server still starts; groups
whose names slug alike get distinct claims; a stop and a user deletion
never touch a team claim; scratch as an emptyDir with the configured
sizeLimit, a profile overriding it for one start only, its notice file
written by the init container, and the cache variables pointing at it; a
VM workspace getting the team folder (virtiofs), scratch (an empty disk)
and the cloud-init mounts, and losing the folder after leaving the group.
On both control planes (tests/support/planes.py).
"""

from __future__ import annotations

import base64

import pytest
import yaml

from tests.support import planes
from tests.support.hubharness import Hub, config_pieces, progress_messages
from workspacespawner.core import names

NAMESPACE = "default"

TIER_CONFIG = """
c.WorkspaceSpawner.team_folders = {
    "physics": {"size": "5Gi"},
    "ML_Lab": {},
    "ml-lab": {},
    "course-101": {"claim": "course-101-material", "read_only": True, "create": False},
    "course-999": {"claim": "course-999-material", "create": False},
}
c.WorkspaceSpawner.scratch_size = "3Gi"
c.JupyterHub.tornado_settings = {"slow_spawn_timeout": 0}
c.KubeSpawner.profile_list = c.KubeSpawner.profile_list + [
    {
        "display_name": "JupyterLab with big scratch",
        "slug": "big-scratch",
        "kubespawner_override": {"scratch_size": "7Gi"},
    },
]
"""


@pytest.fixture(scope="module")
def cluster(control_plane, tmp_path_factory):
    with planes.running(control_plane, tmp_path_factory.mktemp("cluster"), golden=True) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def hub(cluster, tmp_path_factory):
    plane_config, start_timeout = planes.hub_settings(cluster)  # first: TIER_CONFIG's slow_spawn_timeout wins
    config = config_pieces("10-workspace-spawner.py", "20-profiles.py") + plane_config + TIER_CONFIG
    config += config_pieces("90-check-config.py")
    hub = Hub(tmp_path_factory.mktemp("hub"), cluster.kubeconfig, config, start_timeout=start_timeout).start()
    hub.cluster = cluster
    yield hub
    hub.stop()


@pytest.fixture(scope="module")
def core(hub):
    import kubernetes

    client = kubernetes.config.new_client_from_config(str(hub.cluster.kubeconfig))
    api = kubernetes.client.CoreV1Api(client)
    # A team claim an admin made by hand: no labels of ours.
    spec = {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}, "storageClassName": "cephfs"}
    api.create_namespaced_persistent_volume_claim(NAMESPACE, {"metadata": {"name": "course-101-material"}, "spec": spec})
    yield api
    client.close()


def the_pod(core, user):
    [pod] = core.list_namespaced_pod(NAMESPACE, label_selector=names.owner_selector(user)).items
    return pod


def shared_mounts(pod) -> dict[str, object]:
    return {m.mount_path: m for m in pod.spec.containers[0].volume_mounts or [] if m.mount_path.startswith("/shared/")}


def claim_of(pod, mount) -> str:
    volume = next(v for v in pod.spec.volumes if v.name == mount.name)
    return volume.persistent_volume_claim.claim_name


def remove_from_group(hub, user, group):
    r = hub.api("DELETE", f"/groups/{group}/users", json={"users": [user]})
    assert r.ok, r.text


def test_member_mounts_team_folder_and_non_member_does_not(hub, core):
    hub.create_user("pia", groups=("physics",))
    hub.create_user("nina")
    hub.start_server("pia", {"profile": "jupyterlab-cpu"})
    hub.start_server("nina", {"profile": "jupyterlab-cpu"})
    pod = the_pod(core, "pia")
    mounts = shared_mounts(pod)
    assert list(mounts) == ["/shared/physics"]
    assert claim_of(pod, mounts["/shared/physics"]) == "team-physics"
    assert not mounts["/shared/physics"].read_only
    assert shared_mounts(the_pod(core, "nina")) == {}

    claim = core.read_namespaced_persistent_volume_claim("team-physics", NAMESPACE)
    assert claim.spec.access_modes == ["ReadWriteMany"] and claim.spec.storage_class_name == "cephfs"
    assert claim.spec.resources.requests["storage"] == "5Gi"
    assert claim.status.phase == "Bound"
    assert claim.metadata.labels == names.team_labels("physics")
    assert claim.metadata.owner_references is None
    env = {e.name: e.value for e in pod.spec.containers[0].env}
    assert '"/shared/physics"' in env["WORKSPACE_TEAM_FOLDERS"]
    hub.stop_server("pia")
    hub.stop_server("nina")


def test_leaving_a_group_drops_the_mount_at_the_next_start(hub, core):
    hub.create_user("lena", groups=("physics",))
    hub.start_server("lena", {"profile": "jupyterlab-cpu"})
    assert "/shared/physics" in shared_mounts(the_pod(core, "lena"))
    uid = core.read_namespaced_persistent_volume_claim("team-physics", NAMESPACE).metadata.uid
    hub.stop_server("lena")
    remove_from_group(hub, "lena", "physics")
    hub.start_server("lena", {"profile": "jupyterlab-cpu"})
    assert shared_mounts(the_pod(core, "lena")) == {}
    assert core.read_namespaced_persistent_volume_claim("team-physics", NAMESPACE).metadata.uid == uid
    hub.stop_server("lena")


def test_read_only_admin_claim_and_missing_admin_claim(hub, core):
    hub.create_user("rita", groups=("course-101", "course-999"))
    hub.start_server("rita", {"profile": "jupyterlab-cpu"})
    pod = the_pod(core, "rita")
    mounts = shared_mounts(pod)
    assert list(mounts) == ["/shared/course-101"]  # course-999's claim does not exist: left out, the server starts
    assert mounts["/shared/course-101"].read_only
    volume = next(v for v in pod.spec.volumes if v.name == mounts["/shared/course-101"].name)
    assert volume.persistent_volume_claim.read_only
    admin_claim = core.read_namespaced_persistent_volume_claim("course-101-material", NAMESPACE)
    assert admin_claim.metadata.labels is None  # used as found, never relabelled
    with pytest.raises(Exception) as e:
        core.read_namespaced_persistent_volume_claim("course-999-material", NAMESPACE)
    assert getattr(e.value, "status", None) == 404
    hub.stop_server("rita")


def test_stop_and_user_deletion_never_touch_team_claims(hub, core):
    hub.create_user("dora", groups=("physics", "ML_Lab", "ml-lab"))
    hub.start_server("dora", {"profile": "jupyterlab-cpu"})
    pod = the_pod(core, "dora")
    mounts = shared_mounts(pod)
    claims = {path: claim_of(pod, mount) for path, mount in mounts.items()}
    assert len(claims) == 3 and len(set(claims.values())) == 3  # ML_Lab and ml-lab slug alike, yet two claims
    assert claims["/shared/ml-lab"] == "team-ml-lab" and claims["/shared/ML_Lab"].startswith("team-ml-lab-")
    uids = {c: core.read_namespaced_persistent_volume_claim(c, NAMESPACE).metadata.uid for c in claims.values()}

    hub.stop_server("dora")
    r = hub.api("DELETE", "/users/dora")
    assert r.status_code == 204, r.text
    for claim, uid in uids.items():
        found = core.read_namespaced_persistent_volume_claim(claim, NAMESPACE)
        assert found.metadata.uid == uid and found.metadata.deletion_timestamp is None
    team_claims = core.list_namespaced_persistent_volume_claim(NAMESPACE, label_selector=names.team_selector()).items
    assert {c.metadata.name for c in team_claims} >= set(uids)


def scratch_volume(pod):
    return next(v for v in pod.spec.volumes if v.name == "scratch")


def test_scratch_size_limit_profile_override_and_notice(hub, core):
    hub.create_user("sam")
    hub.start_server("sam", {"profile": "jupyterlab-cpu"})
    pod = the_pod(core, "sam")
    assert scratch_volume(pod).empty_dir.size_limit == "3Gi"
    notebook = pod.spec.containers[0]
    assert any(m.mount_path == "/scratch" for m in notebook.volume_mounts)
    env = {e.name: e.value for e in notebook.env}
    assert env["PIP_CACHE_DIR"] == "/scratch/.cache/pip" and "deleted" in env["WORKSPACE_SCRATCH_NOTICE"]
    assert [c.name for c in pod.spec.init_containers] == ["scratch-notice"]
    notice = hub.cluster.state_dir / "pods" / pod.metadata.uid / "volumes" / "scratch" / "README-SCRATCH.txt"
    assert "deleted when your server stops" in notice.read_text()
    hub.stop_server("sam")

    hub.start_server("sam", {"profile": "big-scratch"})
    assert scratch_volume(the_pod(core, "sam")).empty_dir.size_limit == "7Gi"
    hub.stop_server("sam")
    hub.start_server("sam", {"profile": "jupyterlab-cpu"})
    assert scratch_volume(the_pod(core, "sam")).empty_dir.size_limit == "3Gi"  # the override did not stick
    hub.stop_server("sam")


def test_spawn_page_says_what_each_tier_is(hub):
    hub.create_user("paula", groups=("physics", "course-999"))
    r = hub.spawn("paula", {"profile": "jupyterlab-cpu"})
    assert r.status_code == 202, r.text  # slow_spawn_timeout 0: the spawn page follows the progress
    text = "\n".join(progress_messages(hub, "paula"))
    assert "/scratch is scratch space" in text and "deleted when your server stops" in text
    assert "Team folder /shared/physics" in text
    assert "course-999-material' does not exist yet" in text
    hub.wait_ready("paula")
    hub.stop_server("paula")


def test_vm_workspace_gets_the_same_tiers(hub, core):
    import kubernetes

    custom = kubernetes.client.CustomObjectsApi(core.api_client)
    hub.create_user("vic", groups=("physics",))
    hub.start_server("vic", {"profile": "ubuntu-vm"})
    [vm] = custom.list_namespaced_custom_object(
        "kubevirt.io", "v1", NAMESPACE, "virtualmachines", label_selector=names.owner_selector("vic"))["items"]
    spec = vm["spec"]["template"]["spec"]
    assert [f["name"] for f in spec["domain"]["devices"]["filesystems"]] == ["home", "shared-team-physics"]  # the home too, by default
    assert {"name": "scratch", "emptyDisk": {"capacity": "3Gi"}} in spec["volumes"]
    secret = core.read_namespaced_secret(f"{vm['metadata']['name']}-cloudinit", NAMESPACE)
    config = yaml.safe_load(base64.b64decode(secret.data["userdata"]).decode())
    assert ["shared-team-physics", "/shared/physics", "virtiofs", "defaults,nofail", "0", "0"] in config["mounts"]
    assert ["mounts", "always"] in config["cloud_init_modules"]
    env_file = next(f["content"] for f in config["write_files"] if f["path"].endswith("jupyterhub.env"))
    assert "PIP_CACHE_DIR='/scratch/.cache/pip'" in env_file
    assert any(f["path"] == "/scratch/README-SCRATCH.txt" for f in config["write_files"])
    hub.stop_server("vic")

    remove_from_group(hub, "vic", "physics")
    hub.start_server("vic", {"profile": "ubuntu-vm"})
    [vm] = custom.list_namespaced_custom_object(
        "kubevirt.io", "v1", NAMESPACE, "virtualmachines", label_selector=names.owner_selector("vic"))["items"]
    assert [f["name"] for f in vm["spec"]["template"]["spec"]["domain"]["devices"]["filesystems"]] == ["home"]  # no team folder
    hub.stop_server("vic")
    assert core.read_namespaced_persistent_volume_claim("team-physics", NAMESPACE).metadata.deletion_timestamp is None
