"""Storage tiers as pure builders (:mod:`workspacespawner.storage.tiers`, :mod:`workspacespawner.backends.vm.tiers`) and settings.

Covers: team-folder mounts follow group membership (joining and leaving a
group), read-only team folders, odd group names (capitals, spaces, ``_``,
unicode, 100 characters) and groups that slug alike getting distinct
claims, teams sharing a claim by sub-path, start-up checks whose errors
name the setting and the value (including a profile's override), the
team claim's labels (never an owner's, never a per-user disk), scratch as
an ``emptyDir`` with ``sizeLimit`` or a local-NVMe ephemeral volume and its
notice, the model cache read-only, cache variables, a profile's
``scratch_size`` resolved per start, the Pod additions on kubespawner's
``V1Pod``; VM tiers (virtiofs team folders, an empty scratch disk, the
model cache) valid against KubeVirt's schema and their cloud-init
additions. Every Pod, PVC and VM is checked with the local cluster's
validator (kubernetes-validate strict, KubeVirt OpenAPI).
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from kubernetes_asyncio.client import ApiClient, V1Container, V1ObjectMeta, V1Pod, V1PodSpec, V1SecurityContext
from localcluster.kinds import by_kind
from localcluster.validation import Validator
from traitlets import TraitError
from traitlets.config import Config

from workspacespawner.backends.container.backend import ContainerBackend
from workspacespawner.backends.vm import tiers as vmtiers
from workspacespawner.backends.vm.manifests import VMIdentity, VMSettings, cloud_config, make_virtual_machine
from workspacespawner.config.check import traits_from_config
from workspacespawner.core import names
from workspacespawner.lifecycle import disks
from workspacespawner.storage import tiers
from workspacespawner.storage.prepare import PreparedTiers
from workspacespawner.storage.settings import StorageTraits
from workspacespawner.storage.startcheck import check_storage_config
from workspacespawner.storage.tiers import ModelCache, Scratch, StorageSettings, TierConfigError
from workspacespawner.storage.values import SETTINGS, storage_settings

TEAMS = {
    "physics": {"size": "200Gi"},
    "course-101": {"claim": "course-101-material", "read_only": True, "create": False},
    "ML Lab": {"claim": "labs", "sub_path": "ml"},
    "bio": {"claim": "labs", "sub_path": "bio", "read_only": True},
}
ODD_GROUPS = ["Physics", "physics", "ML_Lab", "ml-lab", "ML Lab", "Fysik-åäö", "研究组", "x" * 100, "101"]


def causes(obj: dict) -> list[dict]:
    return Validator().causes(by_kind()[(obj["apiVersion"], obj["kind"])], obj)


def folders(value=None, **kwargs):
    return tiers.resolve_team_folders(TEAMS if value is None else value, **kwargs)


def pod_with(additions: tiers.PodTiers) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "jupyter-alice", "namespace": "default"},
        "spec": {
            "initContainers": list(additions.init_containers),
            "containers": [{"name": "notebook", "image": "quay.io/jupyter/base-notebook", "volumeMounts": list(additions.volume_mounts)}],
            "volumes": list(additions.volumes),
        },
    }


def mounts_of(groups) -> dict[str, dict]:
    _volumes, mounts = tiers.team_volumes(groups_of_user=groups, team_folders=folders())
    return {m["mountPath"]: m for m in mounts}


# -- team folders ------------------------------------------------------------------------------------


def test_members_get_their_teams_only():
    assert sorted(mounts_of(["physics", "students"])) == ["/shared/physics"]
    assert mounts_of(["students"]) == {}
    volumes, _mounts = tiers.team_volumes(groups_of_user=["physics"], team_folders=folders())
    assert volumes == [{"name": "shared-team-physics", "persistentVolumeClaim": {"claimName": "team-physics", "readOnly": False}}]


def test_joining_and_leaving_a_group_changes_the_next_start():
    before = mounts_of(["physics"])
    joined = mounts_of(["physics", "course-101"])
    left = mounts_of(["course-101"])
    assert sorted(joined) == ["/shared/course-101", "/shared/physics"]
    assert "/shared/physics" in before and "/shared/physics" not in left


def test_read_only_team_folder():
    mount = mounts_of(["course-101"])["/shared/course-101"]
    assert mount["readOnly"] is True
    volumes, _ = tiers.team_volumes(groups_of_user=["course-101"], team_folders=folders())
    assert volumes[0]["persistentVolumeClaim"] == {"claimName": "course-101-material", "readOnly": True}


def test_teams_sharing_a_claim_by_sub_path():
    volumes, mounts = tiers.team_volumes(groups_of_user=["ML Lab", "bio"], team_folders=folders())
    assert volumes == [{"name": "shared-labs", "persistentVolumeClaim": {"claimName": "labs", "readOnly": False}}]
    by_path = {m["mountPath"]: m for m in mounts}
    assert by_path["/shared/bio"] == {"name": "shared-labs", "mountPath": "/shared/bio", "readOnly": True, "subPath": "bio"}
    ml = next(m for m in mounts if m["subPath"] == "ml")
    assert ml["readOnly"] is False and ml["mountPath"].startswith("/shared/ml-lab-")
    only_bio, _ = tiers.team_volumes(groups_of_user=["bio"], team_folders=folders())
    assert only_bio[0]["persistentVolumeClaim"]["readOnly"] is True


def test_unavailable_claims_are_left_out():
    _volumes, mounts = tiers.team_volumes(groups_of_user=["physics", "bio"], team_folders=folders(), unavailable=["labs"])
    assert [m["mountPath"] for m in mounts] == ["/shared/physics"]


def test_odd_group_names_get_valid_distinct_claims_volumes_and_paths():
    resolved = folders({group: {} for group in ODD_GROUPS})
    claims = [f.claim for f in resolved.values()]
    volumes = [f.volume_name for f in resolved.values()]
    paths = [f.mount_path for f in resolved.values()]
    assert len(set(claims)) == len(set(volumes)) == len(set(paths)) == len(ODD_GROUPS)
    assert resolved["physics"].claim == "team-physics" and resolved["Physics"].claim.startswith("team-physics-")
    assert resolved["ML_Lab"].claim != resolved["ml-lab"].claim
    for f in resolved.values():
        assert len(f.claim) <= 63 and len(f.volume_name) <= tiers.VOLUME_NAME_MAX
    pod = pod_with(tiers.pod_tiers(settings=StorageSettings(team_folders=resolved), groups_of_user=ODD_GROUPS, image="x"))
    assert causes(pod) == []
    for f in resolved.values():
        assert causes(tiers.make_team_claim(folder=f, namespace="default")) == []


def test_group_name_mapping_is_stable():
    assert folders({"ML Lab": {}})["ML Lab"] == folders({"ML Lab": {}})["ML Lab"]
    assert tiers.team_slug("ML Lab") == names.dns_label("ML Lab", 40)


@pytest.mark.parametrize(
    "value, words",
    [
        ({"physics": {"sise": "1Gi"}}, "team_folders['physics'].sise = '1Gi' is invalid: unknown key"),
        ({"physics": {"size": "lots"}}, "team_folders['physics'].size = 'lots' is invalid"),
        ({"physics": {"sub_path": "../other"}}, "team_folders['physics'].sub_path = '../other' is invalid"),
        ({"physics": {"claim": "Team_Physics"}}, "team_folders['physics'].claim = 'Team_Physics' is invalid"),
        ({"physics": {"read_only": "yes"}}, "team_folders['physics'].read_only = 'yes' is invalid"),
        ({"physics": {"mount_path": "shared"}}, "team_folders['physics'].mount_path = 'shared' is invalid"),
        ({"physics": "team-physics"}, "team_folders['physics'] = 'team-physics' is invalid"),
        (["physics"], "team_folders = ['physics'] is invalid"),
        ({"a": {"claim": "labs"}, "b": {"claim": "labs"}}, "teams 'a' and 'b' share the claim 'labs'"),
        ({"a": {"claim": "labs", "sub_path": "x"}, "b": {"claim": "labs", "sub_path": "x/y"}}, "non-nested sub_paths"),
        ({"a": {"claim": "labs", "sub_path": "x", "size": "1Gi"}, "b": {"claim": "labs", "sub_path": "y"}}, "different size"),
        ({"a": {"mount_path": "/shared/x"}, "b": {"mount_path": "/shared/x/y"}}, "teams 'a' and 'b' would mount at"),
    ],
)
def test_bad_team_folders_name_setting_and_value(value, words):
    with pytest.raises(TierConfigError) as e:
        tiers.resolve_team_folders(value)
    assert words in str(e.value)
    assert "c.WorkspaceSpawner.team_folders" in str(e.value)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"claim_template": "shared-claim"}, "team_folder_claim_template = 'shared-claim' is invalid: must hold '{team}'"),
        ({"claim_template": "{team}-{user}"}, "may use no placeholder but '{team}'"),
        ({"mount_template": "/shared"}, "team_folder_mount_template = '/shared' is invalid"),
        ({"claim_template": "Team-{team}"}, "claim from team_folder_claim_template) = 'Team-physics' is invalid"),
    ],
)
def test_bad_templates_name_setting_and_value(kwargs, words):
    with pytest.raises(TierConfigError, match="c.WorkspaceSpawner.") as e:
        tiers.resolve_team_folders({"physics": {}}, **kwargs)
    assert words in str(e.value)


def test_team_claim_is_rwx_cephfs_labelled_as_team_not_owner():
    physics = folders()["physics"]
    claim = tiers.make_team_claim(folder=physics, namespace="jhub")
    assert causes(claim) == []
    assert claim["spec"] == {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": "200Gi"}},
        "storageClassName": "cephfs",
    }
    labels = claim["metadata"]["labels"]
    assert labels == names.team_labels("physics")
    assert names.OWNER_LABEL not in labels and "ownerReferences" not in claim["metadata"]
    assert labels[names.DISK_LABEL] == names.TEAM_DISK
    assert json.loads(claim["metadata"]["annotations"][names.TEAM_ANNOTATION]) == ["physics"]
    shared = tiers.make_team_claim(folder=folders()["bio"], namespace="jhub", groups=["ML Lab", "bio"])
    assert json.loads(shared["metadata"]["annotations"][names.TEAM_ANNOTATION]) == ["ML Lab", "bio"]
    assert tiers.disk_role(claim["metadata"]) == "team"
    assert not tiers.is_user_disk(claim["metadata"]) and not tiers.is_user_disk(claim["metadata"], "alice")


def test_claim_refusal_protects_user_disks():
    home = {"metadata": {"labels": names.disk_labels("alice", "alice", names.HOME_DISK)}}
    assert "user's own disk" in tiers.claim_refusal(home)
    assert tiers.claim_refusal({"metadata": {"labels": {names.DISK_LABEL: names.ROOT_DISK}}})
    assert tiers.claim_refusal({"metadata": {"name": "made-by-admin"}}) is None
    assert tiers.claim_refusal(tiers.make_team_claim(folder=folders()["physics"], namespace="x")) is None


def test_per_user_disks_are_only_home_and_root():
    def pvc(name, labels, size="10Gi", annotations=None):
        meta = {"name": name, "labels": labels, "annotations": annotations or {}}
        return {"kind": "PersistentVolumeClaim", "metadata": meta, "spec": {"resources": {"requests": {"storage": size}}}}

    home = pvc("home-ann", names.disk_labels("ann", "ann", names.HOME_DISK), "10Gi", names.owner_annotations("ann"))
    annas = pvc("home-anna", names.disk_labels("anna", "anna", names.HOME_DISK), "10Gi", names.owner_annotations("anna"))
    team = tiers.make_team_claim(folder=folders()["physics"], namespace="x")
    scratch = pvc("jupyter-ann-scratch", names.scratch_labels(), "100Gi")
    foreign = pvc("made-by-hand", {}, "1Ti")
    claims = [home, annas, team, scratch, foreign]
    assert [tiers.is_user_disk(c["metadata"]) for c in claims] == [True, True, False, False, False]
    assert [tiers.is_user_disk(c["metadata"], "ann") for c in claims] == [True, False, False, False, False]
    assert [tiers.disk_role(c["metadata"]) for c in claims] == ["home", "home", "team", "scratch", None]
    assert disks.user_disk_bytes(claims, [], "ann") == {"home-ann": 10 * 1024**3}  # what the disk quota sums


def test_volume_usage_from_kubelet_summary():
    summary = {
        "pods": [
            {"podRef": {"name": "jupyter-a"}, "volume": [
                {"name": "shared-team-physics", "usedBytes": 5, "capacityBytes": 100, "pvcRef": {"name": "team-physics", "namespace": "jhub"}},
                {"name": "scratch", "usedBytes": 1},
            ]},
        ]
    }
    assert tiers.volume_usage(summary) == {("jhub", "team-physics"): (5, 100)}


# -- scratch, model cache, environment ------------------------------------------------------------------


def test_scratch_is_an_empty_dir_with_size_limit_and_a_notice():
    scratch = Scratch(size="50Gi")
    volume, mount = tiers.scratch_volume(scratch=scratch)
    assert volume == {"name": "scratch", "emptyDir": {"sizeLimit": "50Gi"}}
    assert mount == {"name": "scratch", "mountPath": "/scratch"}
    init = tiers.scratch_notice_init_container(scratch=scratch, image="img", security_context={"runAsUser": 1000})
    env = {e["name"]: e["value"] for e in init["env"]}
    assert env["NOTICE_FILE"] == "/scratch/README-SCRATCH.txt"
    assert "deleted when your server stops" in env["NOTICE"] and "50Gi" in env["NOTICE"]
    assert init["image"] == "img" and init["securityContext"] == {"runAsUser": 1000}
    assert "$NOTICE" in init["command"][2] and "deleted" not in init["command"][2]
    additions = tiers.pod_tiers(settings=StorageSettings({}, scratch=scratch), groups_of_user=[], image="img")
    assert causes(pod_with(additions)) == []


def test_scratch_on_a_local_nvme_class_is_an_ephemeral_volume():
    volume, _mount = tiers.scratch_volume(scratch=Scratch(size="200Gi", storage_class="local-nvme"))
    template = volume["ephemeral"]["volumeClaimTemplate"]
    assert template["spec"]["storageClassName"] == "local-nvme"
    assert template["spec"]["resources"]["requests"]["storage"] == "200Gi"
    assert template["metadata"]["labels"] == names.scratch_labels() and names.OWNER_LABEL not in template["metadata"]["labels"]
    settings = StorageSettings({}, scratch=Scratch(size="200Gi", storage_class="local-nvme"))
    additions = tiers.pod_tiers(settings=settings, groups_of_user=[], image="img")
    assert causes(pod_with(additions)) == []


@pytest.mark.parametrize(
    "value, volume",
    [
        ({"claim": "model-cache"}, {"name": "models", "persistentVolumeClaim": {"claimName": "model-cache", "readOnly": True}}),
        ({"host_path": "/mnt/models"}, {"name": "models", "hostPath": {"path": "/mnt/models", "type": "DirectoryOrCreate"}}),
        ({"host_path": "/mnt/models", "host_path_type": "Directory"}, {"name": "models", "hostPath": {"path": "/mnt/models", "type": "Directory"}}),
    ],
)
def test_model_cache_is_read_only(value, volume):
    cache = tiers.resolve_model_cache(value)
    got_volume, mount = tiers.model_cache_volume(cache=cache)
    assert got_volume == volume
    assert mount == {"name": "models", "mountPath": "/models", "readOnly": True}
    assert causes(pod_with(tiers.pod_tiers(settings=StorageSettings({}, model_cache=cache), groups_of_user=[], image="x"))) == []


@pytest.mark.parametrize(
    "value, words",
    [
        ({"claim": "a", "host_path": "/b"}, "exactly one of"),
        ({"path": "/b"}, "model_cache.path = '/b' is invalid: unknown key"),
        ({"host_path": "relative"}, "model_cache.host_path = 'relative' is invalid"),
        ({"host_path": "/m", "host_path_type": "File"}, "model_cache.host_path_type = 'File' is invalid"),
    ],
)
def test_bad_model_cache(value, words):
    with pytest.raises(TierConfigError) as e:
        tiers.resolve_model_cache(value)
    assert words in str(e.value)
    assert tiers.resolve_model_cache({}) is None


def test_cache_env_points_package_managers_at_scratch_and_keeps_hf_token_home():
    env = tiers.workspace_env(settings=StorageSettings({}, scratch=Scratch(size="1Gi")), teams=[])
    assert env["PIP_CACHE_DIR"] == "/scratch/.cache/pip"
    assert env["CONDA_PKGS_DIRS"] == "/scratch/.cache/conda/pkgs"
    assert env["XDG_CACHE_HOME"] == "/scratch/.cache"
    assert env["HF_HUB_CACHE"] == "/scratch/.cache/huggingface/hub"
    assert env["HF_HOME"] == "/home/jovyan/.cache/huggingface"
    assert env["WORKSPACE_SCRATCH"] == "/scratch" and "deleted" in env["WORKSPACE_SCRATCH_NOTICE"]
    home = tiers.workspace_env(settings=StorageSettings({}), teams=[])
    assert home["PIP_CACHE_DIR"] == "/home/jovyan/.cache/pip" and "WORKSPACE_SCRATCH" not in home
    off = tiers.workspace_env(settings=StorageSettings({}, scratch=Scratch(size="1Gi"), cache_location="none"), teams=[])
    assert "PIP_CACHE_DIR" not in off and "HF_HOME" not in off
    settings = StorageSettings({}, model_cache=ModelCache(claim="m"), cache_location="home")
    listed = tiers.workspace_env(settings=settings, teams=[folders()["course-101"]])
    assert json.loads(listed["WORKSPACE_TEAM_FOLDERS"]) == [
        {"team": "course-101", "path": "/shared/course-101", "read_only": True, "size": "100Gi"}
    ]
    assert listed["WORKSPACE_MODELS"] == "/models"


# -- settings, start-up check, the mixin ----------------------------------------------------------------------


def config_with(section: str = "WorkspaceSpawner", **settings) -> Config:
    c = Config()
    for key, value in settings.items():
        c[section][key] = value
    return c


def test_default_settings_resolve():
    settings = check_storage_config(Config())
    assert settings.team_folders == {}
    assert settings.scratch == Scratch(size="20Gi") and settings.model_cache is None
    assert settings.cache_location == "scratch"


@pytest.mark.parametrize(
    "settings, words",
    [
        ({"scratch_size": "big"}, "c.WorkspaceSpawner.scratch_size = 'big' is invalid"),
        ({"scratch_mount_path": "scratch"}, "c.WorkspaceSpawner.scratch_mount_path = 'scratch' is invalid"),
        ({"cache_environment": "nfs"}, "c.WorkspaceSpawner.cache_environment = 'nfs' is invalid"),
        ({"team_folder_storage_class": "CephFS"}, "c.WorkspaceSpawner.team_folder_storage_class = 'CephFS' is invalid"),
        ({"team_folders": {"x": {"mount_path": "/scratch/x"}}}, "team_folders['x'] mounts at '/scratch/x', which overlaps"),
        ({"model_cache": {"claim": "m"}, "model_cache_mount_path": "/scratch"}, "overlaps"),
        ({"team_folders": {"x": {"mount_path": "/home"}}}, "overlaps c.WorkspaceSpawner.home_mount_path = '/home/jovyan'"),
    ],
)
def test_start_up_check_names_setting_and_value(settings, words):
    with pytest.raises(TraitError) as e:
        check_storage_config(config_with(**settings))
    assert words in str(e.value)


def test_tier_inside_home_is_allowed():
    settings = check_storage_config(config_with(team_folder_mount_template="/home/jovyan/shared/{team}", team_folders={"physics": {}}))
    assert settings.team_folders["physics"].mount_path == "/home/jovyan/shared/physics"


def test_profile_override_of_scratch_size_is_checked_at_start_up():
    good = [{"display_name": "GPU", "slug": "gpu", "kubespawner_override": {"scratch_size": "500Gi"}}]
    check_storage_config(config_with(profile_list=good))
    bad = [
        {"display_name": "CPU", "slug": "cpu"},
        {"display_name": "GPU", "slug": "gpu", "profile_options": {"disk": {"display_name": "Scratch", "choices": {
            "huge": {"display_name": "huge", "kubespawner_override": {"scratch_size": "-1Gi"}}}}}},
    ]
    with pytest.raises(TraitError) as e:
        check_storage_config(config_with(profile_list=bad))
    message = str(e.value)
    assert "profile 'gpu'" in message and "choices.huge.kubespawner_override" in message and "'-1Gi'" in message


def test_storage_traits_validate_like_the_start_up_check():
    with pytest.raises(TraitError, match="scratch_size = '10 GB' is invalid"):
        traits_from_config(StorageTraits, config_with(scratch_size="10 GB"))
    traits = StorageTraits()
    with pytest.raises(TraitError, match="cache_environment = 'tmp' is invalid"):
        traits.cache_environment = "tmp"
    with pytest.raises(TraitError, match="exactly one of"):
        traits.model_cache = {"claim": "a", "host_path": "/b"}


def test_profile_scratch_size_applies_to_that_start_only():
    traits = traits_from_config(StorageTraits, config_with(scratch_size="20Gi"))
    traits.scratch_size = "300Gi"  # what a profile's kubespawner_override does before the start
    assert traits.storage_settings().scratch.size == "300Gi"
    traits.scratch_size = "20Gi"  # the next start resets it to the configured value
    assert traits.storage_settings().scratch.size == "20Gi"
    traits.scratch_size = None
    assert traits.storage_settings().scratch is None


async def test_container_backend_adds_home_and_tiers_to_kubespawners_pod():
    traits = traits_from_config(StorageTraits, config_with(team_folders=TEAMS, model_cache={"claim": "model-cache"}, scratch_size="40Gi"))
    prepared = PreparedTiers(traits.storage_settings(), frozenset({"physics", "course-101", "students"}))
    api = SimpleNamespace(api_client=ApiClient())
    backend = ContainerBackend(SimpleNamespace(api=api, pvc_name="home-a"))
    pod = V1Pod(
        metadata=V1ObjectMeta(name="jupyter-a"),
        spec=V1PodSpec(containers=[V1Container(name="notebook", image="img", security_context=V1SecurityContext(run_as_user=1000))],
                       volumes=[{"name": "scratch", "emptyDir": {}}]),
    )
    pod = backend.add_workspace_volumes(pod, home_pvc="home-a", home_mount_path="/home/jovyan", user_name="a", tiers_now=prepared)
    plain = api.api_client.sanitize_for_serialization(pod)
    volumes = {v["name"]: v for v in plain["spec"]["volumes"]}
    assert volumes["scratch"] == {"name": "scratch", "emptyDir": {"sizeLimit": "40Gi"}}
    assert volumes["home"] == {"name": "home", "persistentVolumeClaim": {"claimName": "home-a"}}
    assert set(volumes) == {"home", "scratch", "models", "shared-team-physics", "shared-course-101-material"}
    mounts = {m["mountPath"] for m in plain["spec"]["containers"][0]["volumeMounts"]}
    assert mounts == {"/home/jovyan", "/scratch", "/models", "/shared/physics", "/shared/course-101"}
    assert plain["spec"]["containers"][0]["workingDir"] == "/home/jovyan"
    assert plain["metadata"]["labels"] == names.owner_labels("a")
    [init] = plain["spec"]["initContainers"]
    assert init["name"] == "scratch-notice" and init["securityContext"] == {"runAsUser": 1000}
    env = prepared.env()
    assert env["PIP_CACHE_DIR"] == "/scratch/.cache/pip"
    assert [t["team"] for t in json.loads(env["WORKSPACE_TEAM_FOLDERS"])] == ["course-101", "physics"]
    await api.api_client.close()


def test_storage_settings_needs_every_value():
    values = {name: StorageTraits.class_traits()[name].default() for name in SETTINGS}
    assert storage_settings(values).scratch.mount_path == "/scratch"


# -- VM workspaces --------------------------------------------------------------------------------------


IDENT = VMIdentity.for_workspace(namespace="jhub", user_name="alice", kubespawner_username="alice", base_name="ws-alice", home_pvc="home-alice")
VM_SETTINGS = VMSettings(golden_image="ubuntu-22.04-gpu", golden_image_namespace="golden-images")


def vm_tiers_for(groups, **kwargs):
    values = {"scratch": Scratch(size="30Gi"), "model_cache": ModelCache(claim="model-cache")} | kwargs
    return vmtiers.vm_tiers(settings=StorageSettings(folders(), **values), groups_of_user=groups)


def test_vm_gets_team_folders_scratch_and_models_valid_for_kubevirt():
    result = vm_tiers_for(["physics", "course-101", "bio"])
    vm = vmtiers.add_tiers_to_vm(make_virtual_machine(ident=IDENT, settings=VM_SETTINGS), result)
    assert causes(vm) == []
    spec = vm["spec"]["template"]["spec"]
    assert spec["domain"]["devices"]["disks"][0]["name"] == "rootdisk"
    filesystems = {f["name"] for f in spec["domain"]["devices"]["filesystems"]}
    assert filesystems == {"home", "shared-team-physics", "shared-course-101-material", "models"}  # home: shared by default
    assert all(f["virtiofs"] == {} for f in spec["domain"]["devices"]["filesystems"])
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["shared-course-101-material"]["persistentVolumeClaim"] == {"claimName": "course-101-material", "readOnly": True}
    assert volumes["shared-team-physics"]["persistentVolumeClaim"]["readOnly"] is False
    assert volumes["scratch"] == {"name": "scratch", "emptyDisk": {"capacity": "30Gi"}}
    scratch_disk = next(d for d in spec["domain"]["devices"]["disks"] if d["name"] == "scratch")
    assert scratch_disk["serial"] == "scratch"
    assert any("sub-folder" in reason and "/shared/bio" in reason for reason in result.left_out)
    assert vmtiers.mount_points(result) == {
        "/shared/physics": "shared-team-physics",
        "/shared/course-101": "shared-course-101-material",
        "/scratch": vmtiers.SCRATCH_DEVICE,
        "/models": "models",
    }


def test_vm_without_tiers_is_unchanged():
    vm = make_virtual_machine(ident=IDENT, settings=VM_SETTINGS)
    assert vmtiers.add_tiers_to_vm(vm, vmtiers.VMTiers()) == vm
    empty = vmtiers.vm_tiers(settings=StorageSettings(folders()), groups_of_user=["students"])
    assert vmtiers.add_tiers_to_vm(vm, empty) == vm


def test_vm_host_path_model_cache_is_left_out():
    result = vm_tiers_for([], model_cache=ModelCache(host_path="/mnt/models"))
    assert "models" not in {v["name"] for v in result.volumes}
    assert any("model cache" in reason for reason in result.left_out)


def test_vm_cloud_config_mounts_tiers_on_every_boot():
    result = vm_tiers_for(["physics", "course-101"])
    base = cloud_config(env={"A": "1"}, command=["jupyterhub-singleuser"], home_mount_path="/home/jovyan", attach_home=True)
    config = vmtiers.add_tiers_to_cloud_config(base, result)
    assert ["mounts", "always"] in config["cloud_init_modules"] and "mounts" not in config["cloud_init_modules"]
    assert len(config["cloud_init_modules"]) == len(base["cloud_init_modules"])
    assert config["mounts"][0] == base["mounts"][0]  # home first
    assert ["shared-course-101-material", "/shared/course-101", "virtiofs", "defaults,nofail,ro", "0", "0"] in config["mounts"]
    assert ["shared-team-physics", "/shared/physics", "virtiofs", "defaults,nofail", "0", "0"] in config["mounts"]
    assert [vmtiers.SCRATCH_DEVICE, "/scratch", "ext4", "defaults,nofail"] in config["mounts"]
    [boot] = config["bootcmd"]
    assert boot[:2] == ["sh", "-c"] and "mkfs.ext4" in boot[2] and "chmod 1777" in boot[2]
    notice = next(f for f in config["write_files"] if f["path"] == "/scratch/README-SCRATCH.txt")
    assert "deleted when your server stops" in notice["content"]
    assert base["write_files"][0] in config["write_files"]
    assert vmtiers.add_tiers_to_cloud_config({"mounts": []}, result).get("cloud_init_modules") is None


def test_vm_leaving_a_team_drops_its_filesystem():
    with_team = vmtiers.add_tiers_to_vm(make_virtual_machine(ident=IDENT, settings=VM_SETTINGS), vm_tiers_for(["physics"]))
    without = vmtiers.add_tiers_to_vm(make_virtual_machine(ident=IDENT, settings=VM_SETTINGS), vm_tiers_for([]))
    fs_with = with_team["spec"]["template"]["spec"]["domain"]["devices"]["filesystems"]
    fs_without = without["spec"]["template"]["spec"]["domain"]["devices"].get("filesystems", [])
    assert [f["name"] for f in fs_with] == ["home", "shared-team-physics", "models"]
    assert [f["name"] for f in fs_without] == ["home", "models"]
