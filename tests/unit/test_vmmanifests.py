"""Pure builders of VM workspaces (:mod:`workspacespawner.backends.vm.manifests`) and VM status interpretation (:mod:`workspacespawner.backends.vm.vmstatus`).

Covers: every manifest validates against the schemas the local cluster
enforces (KubeVirt/CDI OpenAPI, kubernetes-validate strict); the root
DataVolume clones a DataSource through ``sourceRef`` with Block/RBD storage
and only constant annotations; the VM is Halted, uses the disk by
``dataVolume.name`` (no ``dataVolumeTemplates``, no ownerReferences), has the
profile's GPUs with ``evictionStrategy: None``, the home disk by serial and
``kubevirt.io/domain`` on its template; the Service selects it with named
ports; the cloud-init user data parses back into the env file and systemd
unit, with odd user names and values quoted safely; profile resolution;
status interpretation (clone progress, each error status, Running+Ready,
stale VM status during a start) and ``poll()`` exit codes.
"""

from __future__ import annotations

import base64
import re
import shlex

import pytest
import yaml
from localcluster.controllers.guest import parse_environment_file, parse_unit
from localcluster.kinds import by_kind
from localcluster.validation import Validator

from workspacespawner.backends.vm import vmstatus
from workspacespawner.backends.vm.manifests import (
    ENV_FILE,
    HOME_DEVICE,
    UNIT_FILE,
    VMIdentity,
    VMSettings,
    env_file_line,
    exec_start,
    make_cloudinit_secret,
    make_root_datavolume,
    make_virtual_machine,
    make_vm_service,
    singleuser_command,
)
from workspacespawner.config.profiles import ResolvedProfile
from workspacespawner.core import names
from workspacespawner.core.milestones import Milestone
from workspacespawner.vmdisk.rootdisk import root_disk_of

ODD_USERS = ["alice", "Ann.O'Brien@school.example", "ünïcødé-用户", "x" * 70, "-lead$dash%"]


def ident_for(user: str = "alice") -> VMIdentity:
    return VMIdentity.for_workspace(
        namespace="jhub",
        user_name=user,
        kubespawner_username=names.dns_label(user, 40),
        base_name=f"vm-{user}",
        home_pvc="home-x",
    )


SETTINGS = VMSettings(golden_image="ubuntu-2404-gpu", golden_image_namespace="golden-images")
GPU_SETTINGS = VMSettings(
    golden_image="ubuntu-2404-gpu",
    golden_image_namespace="golden-images",
    gpus=2,
    gpu_device_name="nvidia.com/GA100_A100_SXM4_80GB",
    node_selector=(("nvidia.com/gpu.product", "NVIDIA-A100-SXM4-80GB"),),
)


def causes(obj: dict) -> list[dict]:
    kind = by_kind()[(obj["apiVersion"], obj["kind"])]
    return Validator().causes(kind, obj)


def user_data(secret: dict) -> str:
    return base64.b64decode(secret["data"]["userdata"]).decode()


def guest_files(secret: dict) -> dict[str, dict]:
    config = yaml.safe_load(user_data(secret))
    return {entry["path"]: entry for entry in config["write_files"]}


ENV = {
    "JUPYTERHUB_API_TOKEN": "0123456789abcdef",
    "JUPYTERHUB_API_URL": "http://hub:8081/hub/api",
    "JUPYTERHUB_SERVICE_PREFIX": "/user/alice/",
    "JUPYTERHUB_SERVICE_URL": "http://0.0.0.0:8888/user/alice/",
    "JUPYTERHUB_OAUTH_SCOPES": '["access:servers!server=alice/", "access:servers!user=alice"]',
    "JUPYTERHUB_DEFAULT_URL": "/vscode/",
}


# -- validation against the real schemas ---------------------------------------------------------


@pytest.mark.parametrize("user", ODD_USERS)
@pytest.mark.parametrize("settings", [SETTINGS, GPU_SETTINGS], ids=["cpu", "gpu"])
def test_every_manifest_is_valid(user, settings):
    ident = ident_for(user)
    env = dict(ENV, JUPYTERHUB_USER=user)
    secret = make_cloudinit_secret(ident=ident, env=env, command=singleuser_command(["jupyterhub-singleuser"]))
    for obj in (
        make_root_datavolume(ident=ident, settings=settings),
        make_virtual_machine(ident=ident, settings=settings, extra_labels={"app": "jupyterhub"}),
        make_vm_service(ident=ident),
        secret,
    ):
        assert causes(obj) == [], obj["kind"]
        assert obj["metadata"]["annotations"][names.OWNER_ANNOTATION] == user
        assert obj["metadata"]["labels"][names.OWNER_LABEL] == names.owner_id(user)
        assert "ownerReferences" not in obj["metadata"]


def test_identity_round_trips_through_state():
    ident = ident_for("Ann.O'Brien@school.example")
    assert VMIdentity.from_state(ident.to_state()) == ident


def test_object_names_are_dns_labels():
    ident = ident_for("Ann.O'Brien@school.example")
    for name in (ident.vm, ident.service, ident.root_disk, ident.cloudinit_secret):
        assert len(name) <= 63 and name == names.dns_label(name)
    assert ident_for("ann").vm != ident_for("anna").vm


# -- DataVolume ---------------------------------------------------------------------------------


def test_root_datavolume_clones_the_golden_image():
    dv = make_root_datavolume(ident=ident_for(), settings=SETTINGS)
    assert dv["apiVersion"] == "cdi.kubevirt.io/v1beta1"
    assert dv["spec"]["sourceRef"] == {"kind": "DataSource", "name": "ubuntu-2404-gpu", "namespace": "golden-images"}
    assert dv["spec"]["storage"] == {
        "accessModes": ["ReadWriteOnce"],
        "volumeMode": "Block",
        "storageClassName": "ceph-rbd",
        "resources": {"requests": {"storage": "50Gi"}},
    }
    assert dv["metadata"]["labels"][names.DISK_LABEL] == names.ROOT_DISK
    assert "source" not in dv["spec"] and "pvc" not in dv["spec"]


def test_no_user_value_reaches_datavolume_annotations_but_the_owner_name():
    user = 'mallory"; cdi.kubevirt.io/storage.import.endpoint=http://evil'
    dv = make_root_datavolume(ident=ident_for(user), settings=SETTINGS)
    annotations = dict(dv["metadata"]["annotations"])
    assert annotations.pop(names.OWNER_ANNOTATION) == user
    assert annotations == {
        "cdi.kubevirt.io/allowClaimAdoption": "true",
        names.ROOT_SLOT_ANNOTATION: dv["metadata"]["name"].removesuffix("-root"),
        names.GOLDEN_IMAGE_ANNOTATION: "golden-images/ubuntu-2404-gpu",
    }


def test_storage_class_none_leaves_the_default():
    settings = VMSettings(golden_image="g", golden_image_namespace="n", storage_class=None, volume_mode="Filesystem")
    storage = make_root_datavolume(ident=ident_for(), settings=settings)["spec"]["storage"]
    assert "storageClassName" not in storage and storage["volumeMode"] == "Filesystem"


# -- VirtualMachine -----------------------------------------------------------------------------


def test_virtual_machine_shape():
    ident = ident_for()
    vm = make_virtual_machine(ident=ident, settings=SETTINGS)
    spec = vm["spec"]
    template = spec["template"]["spec"]
    assert spec["runStrategy"] == "Halted" and "running" not in spec
    assert "dataVolumeTemplates" not in spec
    assert spec["template"]["metadata"]["labels"][names.DOMAIN_LABEL] == ident.vm
    assert template["domain"]["cpu"]["cores"] == 2 and template["domain"]["memory"] == {"guest": "8Gi"}
    assert [d["name"] for d in template["domain"]["devices"]["disks"]] == ["rootdisk", "cloudinitdisk"]
    assert template["domain"]["devices"]["disks"][0]["bootOrder"] == 1
    assert template["domain"]["devices"]["filesystems"] == [{"name": "home", "virtiofs": {}}]  # the home is shared by default
    volumes = {v["name"]: v for v in template["volumes"]}
    assert volumes["rootdisk"] == {"name": "rootdisk", "dataVolume": {"name": ident.root_disk}}
    assert volumes["home"]["persistentVolumeClaim"] == {"claimName": "home-x"}
    assert volumes["cloudinitdisk"]["cloudInitNoCloud"] == {"secretRef": {"name": ident.cloudinit_secret}}
    assert template["domain"]["devices"]["interfaces"][0]["masquerade"] == {}
    assert template["networks"] == [{"name": "default", "pod": {}}]
    assert "gpus" not in template["domain"]["devices"] and "evictionStrategy" not in template
    assert template["terminationGracePeriodSeconds"] == 180
    assert template["domain"]["firmware"]["uuid"] == make_virtual_machine(ident=ident, settings=GPU_SETTINGS)["spec"]["template"]["spec"]["domain"]["firmware"]["uuid"]


def test_gpus_and_eviction_strategy():
    template = make_virtual_machine(ident=ident_for(), settings=GPU_SETTINGS)["spec"]["template"]["spec"]
    assert template["domain"]["devices"]["gpus"] == [
        {"name": "gpu0", "deviceName": "nvidia.com/GA100_A100_SXM4_80GB"},
        {"name": "gpu1", "deviceName": "nvidia.com/GA100_A100_SXM4_80GB"},
    ]
    assert template["evictionStrategy"] == "None"
    assert template["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}


def test_home_disk_is_optional():
    settings = VMSettings(golden_image="g", golden_image_namespace="n", attach_home=False)
    template = make_virtual_machine(ident=ident_for(), settings=settings)["spec"]["template"]["spec"]
    assert [d["name"] for d in template["domain"]["devices"]["disks"]] == ["rootdisk", "cloudinitdisk"]
    assert all("persistentVolumeClaim" not in v for v in template["volumes"])


def test_settings_for_profile():
    profile = ResolvedProfile(
        slug="gpu1", display_name="1 GPU", workspace_kind="vm", ide="code-server", gpus=1,
        gpu_product="NVIDIA-A100-SXM4-80GB", cpu=3.5, memory="34359738368", image="", default_url="/vscode/",
    )
    settings = VMSettings.for_profile(profile, golden_image="g", golden_image_namespace="n", root_disk_size="80Gi", gpus=5)
    assert (settings.cpu_cores, settings.memory, settings.gpus, settings.root_disk_size) == (4, "34359738368", 1, "80Gi")
    assert dict(settings.node_selector) == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    cpu_only = VMSettings.for_profile(
        ResolvedProfile(slug="c", display_name="c", workspace_kind="vm", ide="jupyterlab", gpus=0, gpu_product=None,
                        cpu=None, memory=None, image="", default_url=""),
        golden_image="g", golden_image_namespace="n",
    )
    assert (cpu_only.gpus, cpu_only.node_selector, cpu_only.cpu_cores) == (0, (), 2)


# -- Service ------------------------------------------------------------------------------------


def test_service_selects_the_vm_with_named_ports():
    ident = ident_for()
    service = make_vm_service(ident=ident)
    assert service["spec"]["selector"] == {names.DOMAIN_LABEL: ident.vm, names.OWNER_LABEL: names.owner_id("alice")}
    assert {(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]} == {
        ("jupyter", 8888, 8888),
        ("code-server", 8080, 8080),
    }
    vm = make_virtual_machine(ident=ident, settings=SETTINGS)
    template_labels = vm["spec"]["template"]["metadata"]["labels"]
    assert all(template_labels[k] == v for k, v in service["spec"]["selector"].items())


# -- cloud-init ---------------------------------------------------------------------------------


def test_cloud_config_contents():
    secret = make_cloudinit_secret(
        ident=ident_for(), env=ENV, command=singleuser_command(["jupyterhub-singleuser"], ["--debug"])
    )
    assert secret["type"] == "Opaque" and list(secret["data"]) == ["userdata"]
    text = user_data(secret)
    assert text.startswith("#cloud-config\n")
    config = yaml.safe_load(text)
    files = guest_files(secret)
    assert files[ENV_FILE]["permissions"] == "0600"
    assert parse_environment_file(files[ENV_FILE]["content"]) == ENV
    unit = parse_unit("workspace-ide.service", files[UNIT_FILE]["content"])
    assert unit.exec_start == ["jupyterhub-singleuser", "--ip=0.0.0.0", "--port=8888", "--debug"]
    assert unit.environment_files == [(ENV_FILE, False)]
    assert unit.working_directory == "-/home/jovyan" and unit.wanted_by == ["multi-user.target"]
    assert config["mounts"] == [["home", "/home/jovyan", "virtiofs", "defaults,nofail", "0", "0"]]
    assert config["runcmd"] == ["systemctl daemon-reload", "systemctl enable --now workspace-ide.service"]
    assert ["write_files", "always"] in config["cloud_init_modules"]


def test_a_home_disk_is_formatted_once_and_its_root_given_to_the_workspace_user():
    """A fresh filesystem's root is root's: the workspace user could not write in its home (JupyterLab then fails
    at its first write, and the VM never gets Ready: seen in a real guest). cloud-init's first boot gives it to the
    user, before the unit starts."""
    secret = make_cloudinit_secret(ident=ident_for(), env=ENV, command=["jupyterhub-singleuser"], home_via="disk",
                                   unix_uid=1000, home_mount_path="/home/jovyan")
    config = yaml.safe_load(user_data(secret))
    assert config["fs_setup"] == [{"label": "home", "filesystem": "ext4", "device": HOME_DEVICE, "overwrite": False}]
    assert config["mounts"] == [[HOME_DEVICE, "/home/jovyan", "auto", "defaults,nofail"]]
    assert config["runcmd"] == [["chown", "1000:1000", "/home/jovyan"], "systemctl daemon-reload",
                                "systemctl enable --now workspace-ide.service"]


def test_no_home_no_mounts():
    secret = make_cloudinit_secret(ident=ident_for(), env=ENV, command=["jupyterhub-singleuser"], attach_home=False)
    config = yaml.safe_load(user_data(secret))
    assert "mounts" not in config and "fs_setup" not in config


@pytest.mark.parametrize("user", ODD_USERS)
def test_odd_values_survive_yaml_and_systemd_quoting(user):
    env = dict(ENV, JUPYTERHUB_USER=user, ODD="a 'b' \"c\" $HOME `x` \\ # ; %i: - [z]")
    argv = ["jupyterhub-singleuser", f"--notebook-dir=/home/{user}", "--arg=a b"]
    secret = make_cloudinit_secret(ident=ident_for(user), env=env, command=argv)
    files = guest_files(secret)
    content = files[ENV_FILE]["content"]
    assert dict(systemd_env_line(line) for line in content.splitlines()) == env
    guest_view = parse_environment_file(content)  # the node agent's reading, as the guest's server gets it
    assert all(guest_view[k] == v for k, v in env.items() if not re.search(r"[$`]", v))
    unit = parse_unit("workspace-ide.service", files[UNIT_FILE]["content"])
    assert [systemd_unescape(word) for word in unit.exec_start] == argv


MULTILINE = {
    "MOTD": "Welcome\n\nto the lab\n",
    "QUOTED": "it's\r\n  \"two\" $lines\\\n",
    "LOOKS_LIKE_A_KEY": "x\nJUPYTERHUB_API_TOKEN=not-a-token\n",
}


def test_line_breaks_reach_the_guest_byte_for_byte():
    env = dict(ENV, **MULTILINE)
    secret = make_cloudinit_secret(ident=ident_for(), env=env, command=singleuser_command(["jupyterhub-singleuser"]))
    assert parse_environment_file(guest_files(secret)[ENV_FILE]["content"]) == env


def systemd_env_line(line: str) -> tuple[str, str]:
    """One ``KEY=value`` line as systemd's EnvironmentFile parser (src/basic/env-file.c) reads our quoting.

    Single quotes: literal. Double quotes: a backslash before one of
    ``"``, ``\\``, backquote or ``$`` is dropped (the node agent's
    shlex-based reading keeps it before backquote and ``$``).
    """
    key, raw = line.split("=", 1)
    if raw[:1] == "'" and raw[-1:] == "'":
        return key, raw[1:-1]
    assert raw[:1] == '"' and raw[-1:] == '"', line
    return key, re.sub(r'\\([\\"`$])', r"\1", raw[1:-1])


def systemd_unescape(word: str) -> str:
    """What systemd makes of ``%%`` (a specifier escape) and ``$$`` (no expansion); the node agent keeps them doubled."""
    return word.replace("%%", "%").replace("$$", "$")


def test_systemd_quoting():
    assert env_file_line("A", "plain") == "A='plain'"
    assert env_file_line("A", "it's $x") == 'A="it\'s \\$x"'
    assert exec_start(["a", "b c", "100%", "$HOME"]) == 'a "b c" "100%%" "$$HOME"'
    assert shlex.split(exec_start(["x", 'q"uote'])) == ["x", 'q"uote']
    for bad in (lambda: env_file_line("A", "nul\0"), lambda: env_file_line("1A", "x"), lambda: exec_start([]),
                lambda: exec_start(["a\nb"])):
        with pytest.raises(ValueError):
            bad()


# -- status -------------------------------------------------------------------------------------


def cond(ctype, status, reason="", message=""):
    return {"type": ctype, "status": status, "reason": reason, "message": message}


def vm_with(printable="Stopped", run="Halted", failures=0):
    status = {"printableStatus": printable}
    if failures:
        status["startFailure"] = {"consecutiveFailCount": failures}
    return {"metadata": {"name": "vm"}, "spec": {"runStrategy": run}, "status": status}


def vmi_with(phase, *conditions, node=None, ip=None, deleting=False, reason=None):
    status = {"phase": phase, "conditions": list(conditions)}
    if node:
        status["nodeName"] = node
    if ip:
        status["interfaces"] = [{"name": "default", "ipAddress": ip}]
    if reason:
        status["reason"] = reason
    meta = {"name": "vm", "uid": "u1"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "status": status}


def dv_with(phase, progress=None, message=""):
    status = {"phase": phase, "conditions": [cond("Running", "False", "Error" if phase == "Failed" else "", message)]}
    if progress is not None:
        status["progress"] = progress
    return {"metadata": {"name": "root"}, "status": status}


def test_status_provisioning_with_clone_percentage():
    st = vmstatus.interpret(vm_with("Provisioning", "Always"), None, dv_with("CloneInProgress", "45.50%"), failures_before=0)
    assert (st.state, st.progress, st.failure, st.milestone) == ("Provisioning", 45.5, None, Milestone.ROOT_DISK_READY)
    assert "46%" in st.message
    assert vmstatus.interpret(vm_with("Provisioning", "Always"), None, dv_with("CloneScheduled", "N/A")).milestone is None
    assert vmstatus.clone_progress(dv_with("CloneScheduled", "N/A")) is None


def test_status_starting_running_ready():
    vm = vm_with("Starting", "Always")
    assert vmstatus.interpret(vm, None, dv_with("Succeeded", "100.0%"), failures_before=0).state == "Starting"
    scheduling = vmstatus.interpret(vm, vmi_with("Scheduling"), None, failures_before=0)
    assert "node" in scheduling.message and scheduling.milestone is None
    assert vmstatus.interpret(vm, vmi_with("Scheduled", node="n1"), None, failures_before=0).milestone is Milestone.NODE_FOUND
    booting = vmstatus.interpret(vm, vmi_with("Running", cond("Ready", "False", "GuestNotRunning", "units not running"), node="n1", ip="10.0.0.5"), None)
    assert (booting.state, booting.ready) == ("Starting", False)
    # issue #38 item 12: plain words, not the Ready condition's ("readiness probe", "units not running")
    assert booting.message == "Your virtual machine is booting on n1; waiting for its server to answer"
    assert booting.milestone is Milestone.STARTED
    running = vmstatus.interpret(vm_with("Running", "Always"), vmi_with("Running", cond("Ready", "True"), node="n1", ip="10.0.0.5"), None)
    assert (running.state, running.ready, running.ip, running.node) == ("Running", True, "10.0.0.5", "n1")
    assert running.milestone is Milestone.ANSWERING


@pytest.mark.parametrize(
    ("vm", "vmi", "dv", "reason"),
    [
        (vm_with("ErrorUnschedulable", "Always"), vmi_with("Scheduling", cond("PodScheduled", "False", "Unschedulable", "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.")), None, "unschedulable"),
        (vm_with("DataVolumeError", "Always"), None, dv_with("Failed", "50.00%", "no space left on device"), "root-disk"),
        (vm_with("ErrorPvcNotFound", "Always"), vmi_with("Pending", cond("Synchronized", "False", "FailedPvcNotFound", "PVC jhub/home-x does not exist")), None, "disk-missing"),
        (vm_with("Starting", "Always"), vmi_with("Failed", reason="GuestFailedToBoot"), None, "crash-loop"),
        (vm_with("CrashLoopBackOff", "Always", failures=1), None, None, "crash-loop"),
    ],
)
def test_error_statuses(vm, vmi, dv, reason):
    st = vmstatus.interpret(vm, vmi, dv, failures_before=0)
    assert st.failure is not None and st.failure.reason == reason
    assert st.message == st.failure.message
    if dv is not None:
        assert "no space left on device" in st.message
    if vmi is not None and vmi["status"]["conditions"]:
        assert vmi["status"]["conditions"][0]["message"] in st.message


def test_scale_up_is_progress_not_failure():
    vmi = vmi_with("Scheduling", cond("PodScheduled", "False", "Unschedulable", "0/2 nodes are available"))
    st = vmstatus.interpret(vm_with("ErrorUnschedulable", "Always"), vmi, None, failures_before=0, scale_up=True)
    assert st.failure is None and "adding a node" in st.message


def test_stale_vm_status_is_not_a_failure_during_a_start():
    """Right after a start, the cached VM may still show the last start's error: only new facts count."""
    stale = vm_with("CrashLoopBackOff", "Always", failures=2)
    assert vmstatus.interpret(stale, None, None, failures_before=2).failure is None
    assert vmstatus.interpret(vm_with("ErrorUnschedulable", "Always"), None, None, failures_before=0).failure is None
    assert vmstatus.interpret(stale, None, None).failure.reason == "crash-loop"


def test_exit_status():
    assert vmstatus.exit_status(vm_with("Running", "Always"), vmi_with("Running", cond("Ready", "True"))) is None
    assert vmstatus.exit_status(vm_with("Starting", "Always"), vmi_with("Scheduling")) is None
    assert vmstatus.exit_status(vm_with("Starting", "Always"), None) is None
    assert vmstatus.exit_status(vm_with("Stopped"), None) == 0
    assert vmstatus.exit_status(None, None) == 0
    assert vmstatus.exit_status(vm_with("Stopping", "Halted"), vmi_with("Running", deleting=True)) == 0
    # a guest that ended while its VM's runStrategy keeps it running: KubeVirt boots it again, the server goes on
    assert vmstatus.exit_status(vm_with("Running", "Always"), vmi_with("Failed")) is None
    assert vmstatus.exit_status(vm_with("Running", "Always"), vmi_with("Failed", deleting=True)) is None
    assert vmstatus.exit_status(vm_with("Starting", "Always"), vmi_with("Succeeded")) is None
    assert vmstatus.exit_status(vm_with("Running", "RerunOnFailure"), vmi_with("Failed")) is None
    assert vmstatus.exit_status(vm_with("Running", "RerunOnFailure"), vmi_with("Succeeded")) == 0
    # the hub's stop makes the VM Halted first: then the guest's end is the server's
    assert vmstatus.exit_status(vm_with("Stopping", "Halted"), vmi_with("Failed")) == 1
    assert vmstatus.exit_status(vm_with("CrashLoopBackOff", "Always", failures=1), None) == 1


@pytest.mark.parametrize("user", ODD_USERS)
def test_vmi_template_names_user_and_server_for_reconciliation(user):
    from workspacespawner.quota.enforcer import alive_from_objects

    ident = VMIdentity.for_workspace(
        namespace="jhub", user_name=user, kubespawner_username=names.dns_label(user, 40),
        base_name=f"vm-{user}", home_pvc="home-x", server_name="thesis",
    )
    vm = make_virtual_machine(ident=ident, settings=SETTINGS)
    assert causes(vm) == []
    vmi_like = {"metadata": vm["spec"]["template"]["metadata"]}
    assert alive_from_objects([vmi_like]) == {(user, "thesis")}
    assert VMIdentity.from_state({k: v for k, v in ident.to_state().items() if k != "server_name"}).server_name == ""


def test_the_vm_names_its_root_disk():
    ident = ident_for()
    vm = make_virtual_machine(ident=ident, settings=SETTINGS)
    assert root_disk_of(vm) == ident.root_disk
    assert root_disk_of(None) is None
    assert root_disk_of({"spec": {"template": {"spec": {"volumes": [{"name": "rootdisk", "persistentVolumeClaim": {}}]}}}}) is None


def test_the_virt_launcher_pods_own_unschedulable_fails_the_start_before_kubevirt_copies_it():
    """kube-scheduler marks the virt-launcher Pod unschedulable at once; KubeVirt v1.4's virt-controller copies that
    onto the VMI only after its retry backoff (minutes on a loaded machine: the real plane's VM start timed out at
    145 s instead of being refused in numbers). The Pod's own condition counts; a placed VMI is not looked at again."""
    waiting = vmi_with("Scheduling")
    launcher = {"metadata": {"name": "virt-launcher-vm-x"},
                "status": {"conditions": [cond("PodScheduled", "False", "Unschedulable", "0/5 nodes are available: 1 Insufficient nvidia.com/gpu.")]}}
    assert vmstatus.interpret(vm_with("Starting", "Always"), waiting, None, failures_before=0).failure is None
    st = vmstatus.interpret(vm_with("Starting", "Always"), waiting, None, failures_before=0, launcher=launcher)
    assert st.failure is not None and st.failure.reason == "unschedulable"
    assert vmstatus.interpret(vm_with("Starting", "Always"), None, None, failures_before=0, launcher=launcher).failure is None
    assert vmstatus.interpret(vm_with("Starting", "Always"), waiting, None, failures_before=0, launcher=launcher,
                              scale_up=True).failure is None  # the autoscaler may add a node: progress, not a failure


def test_a_clone_cdi_refuses_names_the_setting_to_change_and_its_size():
    """CDI's own cdi-controller leaves a root disk smaller than its golden image Pending with condition Bound reason
    CloneValidationFailed for ever (seen on the real plane); the start fails at once in words naming the setting."""
    message = ("The clone doesn't meet the validation requirements: target resources requests storage size is smaller "
               "than the source 2147483648 < 4294967296")
    dv = {"metadata": {"name": "root", "namespace": "default"},
          "spec": {"sourceRef": {"kind": "DataSource", "name": "ubuntu", "namespace": "golden-images"},
                   "storage": {"resources": {"requests": {"storage": "2Gi"}}}},
          "status": {"phase": "Pending", "conditions": [cond("Bound", "Unknown", "CloneValidationFailed", message),
                                                        cond("Ready", "False", "CloneValidationFailed", message)]}}
    failure = vmstatus.clone_refused(dv)
    assert failure.reason == "clone-refused"
    assert "system image golden-images/ubuntu" in failure.message and "2147483648 < 4294967296" in failure.message
    assert "vm_root_disk_size (now 2Gi)" in failure.message and "your disks are kept" in failure.message
    assert vmstatus.golden_image_not_ready(dv) is None
    assert vmstatus.clone_refused(dv_with("CloneInProgress", "10.00%")) is None
    assert vmstatus.clone_refused(None) is None
