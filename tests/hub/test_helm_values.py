"""helm-values/values.yaml for the zero-to-jupyterhub chart, and how the chart's hub hands it to WorkspaceSpawner.

Covers: the values (merged over the chart's defaults, as helm does) pass
the chart's values schema, and broken copies fail it; the values carry the
same profiles and spawner settings as ``jupyterhub_config.d/`` and the
start-up check verbatim; loaded the chart's way (:mod:`chartvalues`), they
configure WorkspaceSpawner unchanged (profiles, home and VM settings, no
kubespawner PVC, the Pod it would create) and pass ``check_hub_config``;
the quota settings, service and role equal ``40-quota.py`` with the
service's token kept by the chart; the OAuth client secret comes from a
Kubernetes Secret; culling never deletes users or named servers; the
Dockerfile, the operator tutorial and values name the same chart release; the
tutorial's golden-image example passes an API server's validation; the dashboard's
prometheus_url is a value (null by default) whose commented example works.
"""

from __future__ import annotations

import copy
import functools
import os
import re
import shutil
import subprocess
from importlib.metadata import entry_points

import pytest
from traitlets.config import Config
from traitlets.config.loader import LazyConfigValue

from tests.support.chartvalues import (
    CONFIG_D_MOUNT,
    HELM_VALUES,
    ROOT,
    chart_defaults,
    coalesce,
    hub_environment,
    load_yaml,
    our_values,
    schema_errors,
    z2jh_config,
)
from workspacespawner.config.gpueconomy import GPUEconomy
from workspacespawner.core import names
from workspacespawner.quota.config import WorkspaceQuota
from workspacespawner.spawner import WorkspaceSpawner, check_hub_config

CONFIG_D = ROOT / "jupyterhub_config.d"
#: The operator's tutorial: the helm command and the golden-image example it shows.
OPERATOR_TUTORIAL = ROOT / "docs" / "source" / "tutorials" / "operator-z2jh.md"
SECRETS = {("school-oauth", "client-secret"): "s3cret-from-kubernetes"}
#: The chart release these files target (hub image tag, helm --version).
CHART_VERSION = "4.4.0"


@pytest.fixture(autouse=True)
def empty_working_directory(tmp_path, monkeypatch):
    """Each test runs in an empty folder and must leave it empty (the chart's ledger lives on the hub's volume)."""
    here = tmp_path / "working-directory"
    here.mkdir()
    monkeypatch.chdir(here)
    yield
    assert list(here.iterdir()) == []


def without_config_files(values: dict) -> dict:
    """``values`` without hub.extraFiles (the start-up check), to look at the Config before the check runs."""
    values = copy.deepcopy(values)
    values["hub"]["extraFiles"] = None
    return values


def config_pieces(*pieces: str) -> Config:
    """The Config that ``jupyterhub_config.d/<piece>`` files give, run in order."""
    c = Config()
    for piece in pieces:
        exec(compile((CONFIG_D / piece).read_text(), piece, "exec"), {"c": c})
    return c


# -- the chart's schema -------------------------------------------------------------------------


def test_values_validate_against_chart_schema():
    assert schema_errors(our_values()) == []


@pytest.mark.parametrize(
    "path, value, words",
    [
        (("singleuser", "storage", "type"), "ephemeral", "singleuser.storage.type"),
        (("hub", "config", "loadRoles"), {"x": {}}, "hub.config"),
        (("singleuser", "profilelist"), [], "singleuser"),
        (("hub", "image", "tag"), 0.1, "hub.image.tag"),  # an unquoted tag is a number
        (("cull", "users"), "no", "cull.users"),
        (("hub", "extraFiles", "90-check-config"), {"mountPath": "/x.py"}, "hub.extraFiles.90-check-config"),
    ],
)
def test_schema_rejects_broken_values(path, value, words):
    values = our_values()
    node = values
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    errors = schema_errors(values)
    assert errors, f"{'.'.join(path)} = {value!r} passed the chart's schema"
    assert any(error.startswith(words) for error in errors), errors


def test_broken_copy_of_the_file_fails(tmp_path):
    broken = tmp_path / "values.yaml"
    text = (HELM_VALUES / "values.yaml").read_text()
    assert "    type: dynamic\n" in text
    broken.write_text(text.replace("    type: dynamic\n", "    type: ephemeral\n"))
    assert any("singleuser.storage.type" in error for error in schema_errors(load_yaml(broken)))


def test_coalesce_merges_like_helm():
    defaults = {"a": {"b": 1, "c": [1, 2]}, "d": 1, "e": {"f": 1}}
    assert coalesce(defaults, {"a": {"c": [3]}, "d": None, "e": 2}) == {"a": {"b": 1, "c": [3]}, "e": 2}
    assert defaults == {"a": {"b": 1, "c": [1, 2]}, "d": 1, "e": {"f": 1}}


# -- the same settings as jupyterhub_config.d ---------------------------------------------------


def test_start_up_check_is_the_config_piece():
    [spec] = our_values()["hub"]["extraFiles"].values()
    assert spec["mountPath"] == CONFIG_D_MOUNT + "90-check-config.py"
    assert spec["stringData"] == (CONFIG_D / "90-check-config.py").read_text()


def test_profiles_and_settings_equal_the_config_pieces():
    """Everything 10-workspace-spawner.py and 20-profiles.py set reaches the spawner from the values too.

    Except the image: the sample piece names a public notebook image without
    code-server; the values name the image built from singleuser-image.md.
    """
    pieces = config_pieces("10-workspace-spawner.py", "20-profiles.py")
    loaded = z2jh_config(without_config_files(our_values()), secrets=SECRETS)
    for section, settings in pieces.items():
        for key, value in settings.items():
            if (section, key) == ("KubeSpawner", "image"):
                continue
            got = loaded[section][key]
            if isinstance(value, LazyConfigValue):  # c.X.y.extend(...): equal when they extend alike
                got, value = got.get_value([]), value.get_value([])
            assert got == value, f"c.{section}.{key}"


# -- loaded the chart's way ---------------------------------------------------------------------


@pytest.fixture
async def spawner(kube_env):
    """A WorkspaceSpawner (kubespawner's mock user and hub) configured from our values the chart's way."""
    values = our_values()
    c = z2jh_config(without_config_files(values), secrets=SECRETS)
    return WorkspaceSpawner(config=c, _mock=True), values


def test_spawner_class_is_workspacespawner():
    c = z2jh_config(without_config_files(our_values()), secrets=SECRETS)
    assert c.JupyterHub.spawner_class == "workspace"
    [entry] = [e for e in entry_points(group="jupyterhub.spawners") if e.name == "workspace"]
    assert entry.load() is WorkspaceSpawner


async def test_chart_settings_reach_workspace_spawner_unchanged(spawner):
    spawner, values = spawner
    assert spawner.profile_list == values["singleuser"]["profileList"]
    for key, value in values["hub"]["config"]["WorkspaceSpawner"].items():
        assert getattr(spawner, key) == value, key
    assert spawner.start_timeout == values["singleuser"]["startTimeout"]
    image = values["singleuser"]["image"]
    assert spawner.image == f"{image['name']}:{image['tag']}"
    assert chart_defaults()["singleuser"]["memory"]["guarantee"] == "1G"
    assert spawner.mem_guarantee == 2**30  # JupyterHub's ByteSpecification: "1G" is 1 GiB
    # singleuser.storage configures the home (kubespawner's own PVC machinery stays off)
    storage = values["singleuser"]["storage"]
    assert (spawner.storage_capacity, spawner.storage_class, spawner.storage_access_modes, spawner.pvc_name_template) == (
        storage["capacity"], storage["dynamic"]["storageClass"], storage["dynamic"]["storageAccessModes"],
        storage["dynamic"]["pvcNameTemplate"])
    assert spawner.home_mount_path == storage["homeMountPath"]
    assert spawner.storage_pvc_ensure is False and spawner.delete_pvc is False


async def test_pod_from_chart_config_mounts_home(spawner):
    spawner, values = spawner
    spawner.user_options = {"profile": "jupyterlab-cpu"}
    await spawner.load_user_options()
    pod = await spawner.get_pod_manifest()
    claims = {v.name: v.persistent_volume_claim.claim_name for v in pod.spec.volumes if v.persistent_volume_claim}
    assert claims == {"home": spawner.home_pvc_name}  # ours in place of kubespawner's {pvc_name} volume (and no team folder)
    assert spawner.home_pvc_name.startswith("home-")
    container = pod.spec.containers[0]
    assert ("home", "/home/jovyan") in [(m.name, m.mount_path) for m in container.volume_mounts]
    assert container.resources.limits == {"cpu": 2.0, "memory": 4 * 2**30}  # the profile's 2 CPUs, "4G"
    assert container.resources.requests["memory"] == 2**30  # the chart's singleuser.memory.guarantee
    assert pod.metadata.labels[names.MANAGED_BY_LABEL] == names.MANAGED_BY
    assert pod.metadata.labels[names.OWNER_LABEL] == names.owner_id(spawner.user.name)


def test_quota_equals_the_config_piece(monkeypatch):
    """The quota settings, service and role of jupyterhub_config.d/40-quota.py come from the values the chart's way.

    The piece makes the enforcer's service token itself; the chart generates
    and keeps it (hub.services), and the hub reads it from the chart's Secret.
    """
    piece = CONFIG_D / "40-quota.py"
    values = our_values()
    monkeypatch.setenv("WORKSPACESPAWNER_QUOTA_TOKEN", "token-of-the-piece")
    expected = Config()
    expected.JupyterHub.services, expected.JupyterHub.load_roles, expected.JupyterHub.template_vars = [], [], {}
    exec(compile(piece.read_text(), piece.name, "exec"), {"c": expected})
    loaded = z2jh_config(without_config_files(values), secrets=SECRETS)
    for key, value in expected.WorkspaceQuota.items():
        if key not in ("hub_api_token", "ledger_url"):
            assert loaded.WorkspaceQuota[key] == value, f"c.WorkspaceQuota.{key}"
    # the same file next to the hub's database: the piece's relative path is the config file's folder,
    # the chart's config folder is a read-only mount, so the values name the hub's database volume
    assert expected.WorkspaceQuota.ledger_url == "sqlite:///workspacespawner-ledger.sqlite"
    assert WorkspaceQuota(config=loaded).database_url() == "sqlite:////srv/jupyterhub/workspacespawner-ledger.sqlite"
    service_names = {service["name"] for service in loaded.JupyterHub.services}
    for service in expected.JupyterHub.services:
        assert service["name"] in service_names
    for role in expected.JupyterHub.load_roles:
        assert role in loaded.JupyterHub.load_roles
    assert callable(loaded.JupyterHub.template_vars.get("announcement_home"))

    [token] = [s["api_token"] for s in loaded.JupyterHub.services if s["name"] == "workspacespawner-quota"]
    monkeypatch.delenv("WORKSPACESPAWNER_QUOTA_TOKEN")
    for name, value in hub_environment(values, SECRETS).items():
        monkeypatch.setenv(name, value)
    quota = WorkspaceQuota(config=loaded)
    assert quota.hub_api_token == token


def test_gpu_economy_equals_the_config_piece():
    """The card-hour weights of jupyterhub_config.d/44-gpu-economy.py come from the values the chart's way."""
    piece = CONFIG_D / "44-gpu-economy.py"
    expected = Config()
    exec(compile(piece.read_text(), piece.name, "exec"), {"c": expected})
    loaded = z2jh_config(without_config_files(our_values()), secrets=SECRETS)
    assert loaded.GPUEconomy.card_hour_weights == expected.GPUEconomy.card_hour_weights
    assert GPUEconomy(config=loaded).weight("nvidia.com/gpu", "Tesla-V100-SXM2-16GB") == 0.5


def test_root_disk_pool_equals_the_config_piece():
    """The pools of jupyterhub_config.d/46-vm-root-disk-pool.py come from the values the chart's way."""
    piece = CONFIG_D / "46-vm-root-disk-pool.py"
    expected = Config()
    exec(compile(piece.read_text(), piece.name, "exec"), {"c": expected})
    loaded = z2jh_config(without_config_files(our_values()), secrets=SECRETS)
    assert loaded.RootDiskPool.ready_disks == expected.RootDiskPool.ready_disks == {"ubuntu-22.04-gpu-2026-11": 1}


def test_chart_config_passes_start_up_check():
    c = z2jh_config(without_config_files(our_values()), secrets=SECRETS)
    check_hub_config(c)
    z2jh_config(our_values(), secrets=SECRETS)  # the mounted 90-check-config.py runs it too


# -- login, culling, release --------------------------------------------------------------------


def test_oauth_client_secret_comes_from_a_kubernetes_secret():
    values = our_values()
    assert values["hub"]["config"]["JupyterHub"]["authenticator_class"] == "generic-oauth"
    assert "client_secret" not in values["hub"]["config"]["GenericOAuthenticator"]
    c = z2jh_config(without_config_files(values), secrets=SECRETS)
    assert c.GenericOAuthenticator.client_secret == "s3cret-from-kubernetes"
    with pytest.raises(SystemExit, match="school-oauth"):
        z2jh_config(without_config_files(values), secrets={})


def test_culling_stops_servers_but_keeps_users_and_named_servers():
    c = z2jh_config(without_config_files(our_values()), secrets=SECRETS)
    [culler] = [s for s in c.JupyterHub.services if s["name"] == "jupyterhub-idle-culler"]
    assert "--cull-users" not in culler["command"]
    assert "--remove-named-servers" not in culler["command"]
    [role] = [r for r in c.JupyterHub.load_roles if r["name"] == "jupyterhub-idle-culler"]
    assert "admin:users" not in role["scopes"]


def test_files_name_the_same_chart_release():
    dockerfile = (HELM_VALUES / "Dockerfile").read_text()
    assert re.search(rf"^ARG HUB_IMAGE=quay\.io/jupyterhub/k8s-hub:{re.escape(CHART_VERSION)}$", dockerfile, re.M)
    helm = f"helm upgrade --install jupyterhub jupyterhub/jupyterhub --version {CHART_VERSION} -f helm-values/values.yaml -n jhub"
    assert helm in " ".join(OPERATOR_TUTORIAL.read_text().replace("\\\n", " ").split())
    assert f"--version {CHART_VERSION}" in (HELM_VALUES / "values.yaml").read_text()


@pytest.mark.kubectl
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
@pytest.mark.parametrize("cluster_thread", [{"controllers": ()}], indirect=True)
def test_operator_tutorial_golden_image_example_is_accepted(kubeconfig, tmp_path):
    """The operator tutorial's DataVolume and DataSource pass an API server's validation (the local cluster's)."""
    section = OPERATOR_TUTORIAL.read_text()
    example = tmp_path / "golden-image.yaml"
    blocks = [block.split("```", 1)[0] for block in section.split("```yaml\n")[1:]]
    [golden] = [block for block in blocks if "kind: DataVolume" in block]  # the golden image's, not the KubeVirt CR's patch
    example.write_text(golden)
    env = dict(os.environ, KUBECONFIG=kubeconfig)
    kubectl = functools.partial(subprocess.run, env=env, capture_output=True, text=True, timeout=60)
    assert kubectl(["kubectl", "create", "namespace", "golden-images"]).returncode == 0
    applied = kubectl(["kubectl", "apply", "-f", str(example)])
    assert applied.returncode == 0, applied.stderr
    listed = kubectl(["kubectl", "-n", "golden-images", "get", "datasource,dv", "-o", "name"])
    assert sorted(listed.stdout.split()) == [
        "datasource.cdi.kubevirt.io/ubuntu-22.04-gpu-2026-11",
        "datavolume.cdi.kubevirt.io/ubuntu-22.04-gpu-2026-11",
    ]
    names_in_values = our_values()["hub"]["config"]["WorkspaceSpawner"]
    assert (names_in_values["vm_golden_image_namespace"], names_in_values["vm_golden_image"]) == ("golden-images", "ubuntu-22.04-gpu-2026-11")


def every_user_scopes(c) -> set[str]:
    """The scopes the config gives every user: JupyterHub 6's extra_user_scopes, else the redefined default user role."""
    from jupyterhub.app import JupyterHub

    if "extra_user_scopes" in JupyterHub.class_trait_names():
        return c.JupyterHub.extra_user_scopes.get_value(set())
    return {scope for role in c.JupyterHub.load_roles if role["name"] == "user" for scope in role["scopes"]}


def test_the_workspaces_dashboard_is_the_config_pieces():
    """The chart's hub runs the Workspaces dashboard as jupyterhub_config.d/50-workspaces-dashboard.py makes it, from
    hub.config.WorkspacesDashboard: the managed service at http://hub:10101, its custom scopes, every user's own
    scopes, the service's role and one role per team group."""
    from workspacespawner.dashboard.settings import dashboard_settings, roles, user_scopes

    c = z2jh_config(without_config_files(our_values()), secrets=SECRETS)
    settings = dashboard_settings(c)
    [service] = [s for s in c.JupyterHub.services if s["name"] == "workspaces"]
    assert service["url"] == "http://hub:10101"
    assert service["command"][1:4] == ["-m", "workspacespawner", "dashboard"]
    assert service["command"][-4:] == ["--ip", "0.0.0.0", "--port", "10101"]  # bound before the config loads
    assert (settings.ip, settings.port) == ("0.0.0.0", 10101)
    assert set(user_scopes(settings)) <= every_user_scopes(c)
    for role in roles(settings):
        assert role in c.JupyterHub.load_roles
    assert "workspaces-team-research" in {r["name"] for r in c.JupyterHub.load_roles}
    assert "custom:workspaces:read" in c.JupyterHub.custom_scopes.get_value({})


def test_the_prometheus_url_is_a_value_and_its_example_works():
    """hub.config.GPUIdle.prometheus_url is in the values (null: no Prometheus), and the commented
    kube-prometheus-stack example, set there, is the URL the idle-GPU pass and the dashboard both ask."""
    from workspacespawner.dashboard.settings import dashboard_settings
    from workspacespawner.idle.settings import GPUIdle

    values = without_config_files(our_values())
    assert "prometheus_url" in values["hub"]["config"]["GPUIdle"]
    assert "prometheus_url" not in values["hub"]["config"]["WorkspacesDashboard"]  # deprecated there
    assert dashboard_settings(z2jh_config(values, secrets=SECRETS)).prometheus() is None
    text = (HELM_VALUES / "values.yaml").read_text()
    [example] = re.findall(r"#\s*prometheus_url:\s*(\S+)", text)
    values["hub"]["config"]["GPUIdle"]["prometheus_url"] = example
    assert example.startswith("http://") and ".monitoring:9090" in example
    loaded = z2jh_config(values, secrets=SECRETS)
    assert dashboard_settings(loaded).prometheus() == GPUIdle(config=loaded).prometheus() == example
