"""VM workspaces through a real JupyterHub on the local cluster.

Covers the sample VM profile end to end: the spawn creates the root
DataVolume (cloned from the golden image), the VirtualMachine, the
cloud-init Secret and the Service, starts the VM with KubeVirt's start
subresource, and the hub reaches JupyterLab in the guest; a file written in
home survives a stop and start; stop leaves no VMI but keeps the VM,
DataVolume, PVCs and Service; the second start writes a fresh API token;
a VM GPU request no node can satisfy fails fast with the reason and leaves
no VMI and every disk; the phase is Stopped once a stop is done; a golden
image that is not ready fails the start at once, named with CDI's reason,
keeps the root DataVolume, and the next start after the fix clones and
boots, with environment values holding line breaks and braces written for
the guest as they are; a file the user's container workspace writes in
home is there in their VM workspace (the home shared through virtiofs, the
default) and not in a VM that gets the home as a disk (an image in the
PVC); a VM on the code-server profile serves the real VS Code workbench
(the same code-server binary as the containers'); a running 1-GPU VM, whose
virt-launcher Pod carries the VMI's labels (so the hub's Pod cache holds
it, as on a real cluster), leaves 7 of the node's 8 GPUs free on another
user's spawn form, and its disks list the VM once as their user; the spawn
page names each VM profile's golden image with its version, and after a
start on one image a profile on another says the user's system disk was
cloned from the first. On both
control planes (tests/support/planes.py); on the real one, with KubeVirt's own virt-api and
virt-controller and CDI's own cdi-apiserver and cdi-controller where tools/kubevirt built them.
"""

from __future__ import annotations

import base64
import time

import pytest
import requests
import yaml
from localcluster.codeserver import code_server_bin
from localcluster.controllers.guest import parse_environment_file

from tests.support import codeserver, planes
from tests.support.faultcases import attempt_start, wait_until
from tests.support.hubharness import CONFIG_D, Hub, core_and_custom, login, progress_of_a_start
from workspacespawner.backends.vm.manifests import ENV_FILE
from workspacespawner.config.goldenimages import parse_image_name
from workspacespawner.core import names
from workspacespawner.core.milestones import LADDER, Milestone
from workspacespawner.demo import GOLDEN_IMAGE

EXTRA_PROFILES = """
c.KubeSpawner.profile_list = c.KubeSpawner.profile_list + [
    {
        "display_name": "VM with too many GPUs",
        "slug": "vm-sixteen-gpus",
        "kubespawner_override": {"workspace_kind": "vm", "extra_resource_limits": {"nvidia.com/gpu": 16}},
    },
    {
        "display_name": "VM with one GPU",
        "slug": "vm-one-gpu",
        "kubespawner_override": {"workspace_kind": "vm", "extra_resource_limits": {"nvidia.com/gpu": 1},
                                 "node_selector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}},
    },
    {
        "display_name": "VM with all eight GPUs",
        "slug": "vm-eight-gpus",
        "kubespawner_override": {"workspace_kind": "vm", "extra_resource_limits": {"nvidia.com/gpu": 8},
                                 "node_selector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}},
    },
    {
        "display_name": "VM with its home as a disk",
        "slug": "vm-home-disk",
        "kubespawner_override": {"workspace_kind": "vm", "vm_home_via": "disk"},
    },
    {
        "display_name": "VM from next month's image",
        "slug": "vm-next-image",
        "kubespawner_override": {"workspace_kind": "vm", "vm_golden_image": "ubuntu-22.04-gpu-2026-12"},
    },
    {
        "display_name": "VM whose root disk is smaller than its image",
        "slug": "vm-small-root-disk",
        "kubespawner_override": {"workspace_kind": "vm", "vm_root_disk_size": "1Gi"},
    },
    {
        "display_name": "VM from an image that is not ready",
        "slug": "vm-broken-image",
        "kubespawner_override": {"workspace_kind": "vm", "vm_golden_image": "broken-golden",
                                 "environment": {"MOTD": "Welcome\\nto the lab\\n", "JSON": '{"a": 1}'}},
    },
]
"""


@pytest.fixture(scope="module")
def cluster(control_plane, tmp_path_factory):
    with planes.running(control_plane, tmp_path_factory.mktemp("cluster"), golden=True) as cluster:
        yield cluster


def code_server_profile() -> str:
    """A VM profile on code-server whose guest finds the real code-server first on its PATH ("" when it is not
    installed: its test skips)."""
    bin_dir = code_server_bin()
    if bin_dir is None:
        return ""
    profile = {
        "display_name": "VM with code-server",
        "slug": "vm-code-server",
        "kubespawner_override": {"workspace_kind": "vm", "ide": "code-server", "environment": {"PATH": codeserver.pod_path(bin_dir)}},
    }
    return f"\nc.KubeSpawner.profile_list = c.KubeSpawner.profile_list + [{profile!r}]\n"


@pytest.fixture(scope="module")
def hub(cluster, tmp_path_factory):
    config = "\n".join(
        f"load_subconfig({str(CONFIG_D / piece)!r})" for piece in ("10-workspace-spawner.py", "20-profiles.py")
    )
    plane_config, start_timeout = planes.hub_settings(cluster)
    config += EXTRA_PROFILES + code_server_profile() + plane_config
    hub = Hub(tmp_path_factory.mktemp("hub"), cluster.kubeconfig, config, start_timeout=start_timeout).start()
    yield hub
    hub.stop()


@pytest.fixture(scope="module")
def kube(cluster):
    with core_and_custom(cluster) as apis:
        yield apis


def vmis(custom, user):
    return custom.list_namespaced_custom_object(
        "kubevirt.io", "v1", "default", "virtualmachineinstances", label_selector=names.owner_selector(user)
    )["items"]


def cloudinit_token(core, secret_name):
    data = core.read_namespaced_secret(secret_name, "default").data["userdata"]
    text = base64.b64decode(data).decode()
    return next(line for line in text.splitlines() if "JUPYTERHUB_API_TOKEN" in line)


def test_vm_workspace_start_stop_start(hub, kube):
    core, custom = kube
    hub.create_user("vera")
    hub.start_server("vera", {"profile": "ubuntu-vm"})
    [vmi] = vmis(custom, "vera")
    assert vmi["status"]["phase"] == "Running"
    vm_name = vmi["metadata"]["name"]
    vm = custom.get_namespaced_custom_object("kubevirt.io", "v1", "default", "virtualmachines", vm_name)
    assert "dataVolumeTemplates" not in vm["spec"]
    dv = custom.get_namespaced_custom_object("cdi.kubevirt.io", "v1beta1", "default", "datavolumes", f"{vm_name}-root")
    assert dv["spec"]["sourceRef"] == {"kind": "DataSource", "name": GOLDEN_IMAGE[1], "namespace": GOLDEN_IMAGE[0]}
    assert dv["status"]["phase"] == "Succeeded"
    assert not dv["metadata"].get("ownerReferences")
    token_before = cloudinit_token(core, f"{vm_name}-cloudinit")

    r = hub.server_request("vera", "PUT", "api/contents/in-the-vm.txt", json={"type": "file", "format": "text", "content": "kept"})
    assert r.status_code in (200, 201), r.text

    hub.stop_server("vera")
    deadline = time.monotonic() + 30
    while vmis(custom, "vera") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert vmis(custom, "vera") == []
    vm = custom.get_namespaced_custom_object("kubevirt.io", "v1", "default", "virtualmachines", vm_name)
    assert vm["spec"]["runStrategy"] == "Halted"
    custom.get_namespaced_custom_object("cdi.kubevirt.io", "v1beta1", "default", "datavolumes", f"{vm_name}-root")
    core.read_namespaced_persistent_volume_claim(f"{vm_name}-root", "default")
    core.read_namespaced_persistent_volume_claim("home-vera", "default")
    core.read_namespaced_service(vm_name, "default")

    # The stopped VM's Secret keeps the token it had; JupyterHub revoked it at the stop.
    assert cloudinit_token(core, f"{vm_name}-cloudinit") == token_before
    old_token = token_before.split("=", 1)[1].strip("'\"")
    refused = requests.get(f"{hub.api_url}/user", headers={"Authorization": f"token {old_token}"}, timeout=30)
    assert refused.status_code in (401, 403), refused.text

    hub.start_server("vera", {"profile": "ubuntu-vm"})
    assert cloudinit_token(core, f"{vm_name}-cloudinit") != token_before
    r = hub.server_request("vera", "GET", "api/contents/in-the-vm.txt")
    assert r.status_code == 200, r.text
    assert r.json()["content"] == "kept"
    hub.stop_server("vera")


@pytest.mark.embedded_only("the guest runs the same code-server on either plane; test_vm_workspace_start_stop_start takes the VM chain through the real one")
def test_vm_code_server_profile_serves_the_real_workbench(hub):
    codeserver.real_bin()
    hub.create_user("vscodie")
    hub.start_server("vscodie", {"profile": "vm-code-server"})
    r = hub.server_request("vscodie", "GET", "vscode/")  # jupyter-vscode-proxy in the guest starts code-server
    assert r.status_code == 200 and codeserver.WORKBENCH_MARKER in r.text, r.text[:2000]
    hub.stop_server("vscodie")


def test_vm_without_free_gpus_fails_fast_and_keeps_disks(hub, kube):
    core, custom = kube
    hub.create_user("vince")
    r = hub.spawn("vince", {"profile": "vm-sixteen-gpus"})
    assert r.status_code == 503, r.text
    assert r.json()["message"].startswith("This profile needs 16 GPUs, more than any node has (8 "), r.json()
    deadline = time.monotonic() + 30
    while vmis(custom, "vince") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert vmis(custom, "vince") == []
    dvs = custom.list_namespaced_custom_object(
        "cdi.kubevirt.io", "v1beta1", "default", "datavolumes", label_selector=names.owner_selector("vince")
    )["items"]
    assert len(dvs) == 1
    core.read_namespaced_persistent_volume_claim("home-vince", "default")


def test_disk_list_shows_a_stopped_vms_disks_as_stopped(hub, kube, cluster, capsys):
    import json

    from workspacespawner.admin import disk

    hub.create_user("wes")
    hub.start_server("wes", {"profile": "ubuntu-vm"})
    hub.stop_server("wes")
    assert disk.main(["list", "wes", "--json", "--kubeconfig", str(cluster.kubeconfig), "--namespace", "default"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert sorted((row["role"], row["phase"]) for row in rows) == [("home", "Stopped"), ("root", "Stopped")], rows


def test_the_spawn_page_names_each_vm_profiles_image_and_the_one_the_disk_came_from(hub):
    """After a start on one image, a profile on another says the user's system disk stays cloned from the first."""
    hub.create_user("ivo")
    before = login(hub, "ivo").get(f"{hub.url}/hub/spawn", timeout=60)
    assert before.ok and "Your system disk" not in before.text, before.text  # no root disk yet
    hub.start_server("ivo", {"profile": "ubuntu-vm"})
    hub.stop_server("ivo")
    page = login(hub, "ivo").get(f"{hub.url}/hub/spawn", timeout=60)
    assert page.ok, page.text
    cards = {chunk.split('"', 1)[0]: chunk for chunk in page.text.split('data-slug="')[1:]}
    image = f"{GOLDEN_IMAGE[1]} ({parse_image_name(GOLDEN_IMAGE[1]).version})"  # the demo's image is versioned
    assert f"System image: {image}" in cards["ubuntu-vm"] and "Your system disk" not in cards["ubuntu-vm"]
    assert "System image: ubuntu-22.04-gpu-2026-12 (2026-12)" in cards["vm-next-image"]
    assert f"Your system disk: cloned from {image}" in cards["vm-next-image"]
    assert "System image" not in cards["jupyterlab-cpu"]


def phase_of(obj: dict) -> str | None:
    return (obj["metadata"].get("labels") or {}).get(names.PHASE_LABEL)


def test_phase_is_stopped_after_a_stop(hub, kube):
    core, custom = kube
    hub.create_user("stella")
    hub.start_server("stella", {"profile": "ubuntu-vm"})
    [vmi] = vmis(custom, "stella")
    vm_name = vmi["metadata"]["name"]
    hub.stop_server("stella")
    vm = custom.get_namespaced_custom_object("kubevirt.io", "v1", "default", "virtualmachines", vm_name)
    assert phase_of(vm) == "Stopped", vm["metadata"].get("annotations")
    dv = custom.get_namespaced_custom_object("cdi.kubevirt.io", "v1beta1", "default", "datavolumes", f"{vm_name}-root")
    home = core.api_client.sanitize_for_serialization(core.read_namespaced_persistent_volume_claim("home-stella", "default"))
    assert [phase_of(dv), phase_of(home)] == ["Stopped", "Stopped"]


def test_golden_image_not_ready_is_named_and_the_next_start_clones(hub, kube):
    core, custom = kube
    namespace = GOLDEN_IMAGE[0]
    custom.create_namespaced_custom_object("cdi.kubevirt.io", "v1beta1", namespace, "datasources", {
        "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataSource", "metadata": {"name": "broken-golden"},
        "spec": {"source": {"pvc": {"name": "no-such-image", "namespace": namespace}}},
    })
    hub.create_user("gwen")
    r = hub.spawn("gwen", {"profile": "vm-broken-image"})
    assert r.status_code == 503, r.text
    message = r.json()["message"]
    assert f"{namespace}/broken-golden is not ready (CloneWithoutSource: " in message and "no-such-image" in message
    # The root DataVolume that waited for the missing image is withdrawn: it never had a volume, and CDI's clone token
    # names the source the DataSource named at its creation, so it could never clone from a fixed image (on the real
    # CDI it answers "invalid token" for ever). The home disk stays.
    def owned_datavolumes() -> list[dict]:
        return custom.list_namespaced_custom_object(
            "cdi.kubevirt.io", "v1beta1", "default", "datavolumes", label_selector=names.owner_selector("gwen"))["items"]

    assert wait_until(lambda: not owned_datavolumes(), timeout=30), owned_datavolumes()
    assert core.read_namespaced_persistent_volume_claim("home-gwen", "default").status.phase == "Bound"
    custom.patch_namespaced_custom_object("cdi.kubevirt.io", "v1beta1", namespace, "datasources", "broken-golden",
                                          {"spec": {"source": {"pvc": {"name": GOLDEN_IMAGE[1], "namespace": namespace}}}})
    hub.start_server("gwen", {"profile": "vm-broken-image"})
    [again] = owned_datavolumes()
    assert again["status"]["phase"] == "Succeeded"
    [vmi] = vmis(custom, "gwen")
    text = base64.b64decode(core.read_namespaced_secret(f"{vmi['metadata']['name']}-cloudinit", "default").data["userdata"]).decode()
    env_file = next(f for f in yaml.safe_load(text)["write_files"] if f["path"] == ENV_FILE)["content"]
    guest_env = parse_environment_file(env_file)
    assert guest_env["MOTD"] == "Welcome\nto the lab\n" and guest_env["JSON"] == '{"a": 1}'
    hub.stop_server("gwen")


def test_a_root_disk_smaller_than_its_image_is_refused_in_words_naming_the_setting(hub, kube):
    """CDI refuses a clone smaller than its source and leaves the DataVolume Pending for ever (CloneValidationFailed,
    first seen on the real cdi-controller; our CDI agent does the same): the start fails at once, not at its timeout,
    with the setting an administrator must change; the unmade DataVolume is withdrawn, the home stays, no VM runs."""
    core, custom = kube
    hub.create_user("rhea")
    r = hub.spawn("rhea", {"profile": "vm-small-root-disk"})
    assert r.status_code == 500, r.text
    message = r.json()["message"]
    assert f"system image {GOLDEN_IMAGE[0]}/{GOLDEN_IMAGE[1]}: CDI refused the clone (CloneValidationFailed: " in message
    assert "vm_root_disk_size (now 1Gi) at least the image's size" in message and "timed out" not in message.lower()

    def owned(plural: str) -> list[dict]:
        group, version = ("cdi.kubevirt.io", "v1beta1") if plural == "datavolumes" else ("kubevirt.io", "v1")
        return custom.list_namespaced_custom_object(group, version, "default", plural,
                                                    label_selector=names.owner_selector("rhea"))["items"]

    assert wait_until(lambda: not owned("datavolumes"), timeout=30), owned("datavolumes")
    assert owned("virtualmachineinstances") == []
    assert core.read_namespaced_persistent_volume_claim("home-rhea", "default").status.phase == "Bound"


def test_a_vm_start_shows_its_own_progress_not_an_earlier_containers(hub, kube):
    """The spawn page of a VM start lists the steps and Events of this start (its VMI's), none of the Pod Events
    the user's earlier container server left under the same name (issue #17)."""
    core, _custom = kube
    hub.create_user("vera")
    hub.start_server("vera", {"profile": "jupyterlab-cpu"})
    hub.stop_server("vera")
    pod_events = [e for e in core.list_namespaced_event("default").items if e.involved_object.kind == "Pod"
                  and e.involved_object.name == "jupyter-vera"]
    assert pod_events, "the container start left no Pod Events: nothing to leak"
    events = progress_of_a_start(hub, "vera", {"profile": "ubuntu-vm"})
    leaked = [e["message"] for e in events if (e.get("raw_event") or {}).get("involvedObject", {}).get("kind") == "Pod"]
    assert leaked == [], leaked
    assert events[-1].get("ready"), events[-1]
    percents = [e["progress"] for e in events if "progress" in e]
    assert percents == sorted(percents), percents
    assert max(p for p in percents if p < 100) == LADDER[Milestone.ANSWERING], events  # ours stop short of 100
    messages = [e["message"] for e in events if e.get("message")]
    assert messages.count("Starting your virtual machine") == 1, messages  # each step said once
    hub.stop_server("vera")


def test_one_home_for_container_and_vm_but_not_as_a_disk(hub):
    hub.create_user("hedy")
    hub.start_server("hedy", {"profile": "jupyterlab-cpu"})
    r = hub.server_request("hedy", "PUT", "api/contents/from-the-container.txt",
                           json={"type": "file", "format": "text", "content": "one home"})
    assert r.status_code in (200, 201), r.text
    hub.stop_server("hedy")

    hub.start_server("hedy", {"profile": "ubuntu-vm"})
    r = hub.server_request("hedy", "GET", "api/contents/from-the-container.txt")
    assert r.status_code == 200, r.text
    assert r.json()["content"] == "one home"
    hub.stop_server("hedy")

    hub.start_server("hedy", {"profile": "vm-home-disk"})
    r = hub.server_request("hedy", "GET", "api/contents/from-the-container.txt")
    assert r.status_code == 404, r.text  # the guest sees the disk image's files, not the PVC's
    hub.stop_server("hedy")


def test_a_gpu_vm_and_its_virt_launcher_pod_hold_one_gpu(hub, kube, cluster, capsys):
    """The launcher Pod of a VM holds the VM's GPU and mounts its disks, with the VMI's labels: the hub counts it once."""
    import json

    from workspacespawner.admin import disk

    core, custom = kube
    hub.create_user("gina")
    hub.create_user("gus")
    hub.start_server("gina", {"profile": "vm-one-gpu"})
    [vmi] = vmis(custom, "gina")
    launchers = core.api_client.sanitize_for_serialization(core.list_namespaced_pod(
        "default", label_selector=f"{names.CREATED_BY_LABEL}={vmi['metadata']['uid']}"))["items"]
    [launcher] = launchers
    assert launcher["metadata"]["labels"]["component"] == names.SERVER_COMPONENT  # in kubespawner's Pod cache too
    assert launcher["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    page = login(hub, "gus").get(f"{hub.url}/hub/spawn", timeout=60)
    assert page.ok, page.text
    assert "7 of 8 NVIDIA A100 80GB free now" in page.text, page.text
    assert disk.main(["list", "gina", "--json", "--kubeconfig", str(cluster.kubeconfig), "--namespace", "default"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert sorted((row["role"], row["used_by"]) for row in rows) == [("home", vmi["metadata"]["name"]), ("root", vmi["metadata"]["name"])], rows
    hub.stop_server("gina")


def test_a_gpu_vm_no_node_can_run_is_refused_in_the_spawn_pages_numbers(hub, kube):
    """#38 item 1 for VMs: a GPU VM that no node can run is refused with the numbers the spawn page shows, not in the
    scheduler's words, and leaves no VMI behind."""
    _core, custom = kube
    hub.create_user("gwen")
    hub.create_user("gil")
    hub.start_server("gwen", {"profile": "vm-one-gpu"})
    page = login(hub, "gil").get(f"{hub.url}/hub/spawn", timeout=60)
    assert "Only 7 of 8 NVIDIA A100 80GB GPUs are free right now; this profile needs 8 GPUs." in page.text, page.text
    # a refusal within JupyterHub's slow_spawn_timeout answers 503; a later one (KubeVirt's virt-controller may take
    # its backoff to mark the VMI unschedulable) reaches the spawn page's progress as the failure message
    outcome, said = attempt_start(hub, "gil", {"profile": "vm-eight-gpus"})
    assert outcome == "failed", said
    assert ("Only 7 of 8 NVIDIA A100 80GB GPUs are free right now; this profile needs 8 GPUs. "
            "Try a CPU profile or one with fewer GPUs, or try again later.") in said, said
    assert "Insufficient" not in said and "node(s)" not in said, said  # no scheduler jargon
    assert wait_until(lambda: vmis(custom, "gil") == [], timeout=60)
    hub.stop_server("gwen")
