"""VM workspaces through a real JupyterHub on the local cluster.

Covers the sample VM profile end to end: the spawn creates the root
DataVolume (cloned from the golden image), the VirtualMachine, the
cloud-init Secret and the Service, starts the VM with KubeVirt's start
subresource, and the hub reaches JupyterLab in the guest; a file written in
home survives a stop and start; stop leaves no VMI but keeps the VM,
DataVolume, PVCs and Service; the second start writes a fresh API token;
a VM GPU request no node can satisfy fails fast with the reason and leaves
no VMI and every disk. On both control planes (tests/support/planes.py).
"""

from __future__ import annotations

import base64
import time

import kubernetes
import pytest

from tests.support import planes
from tests.support.hubharness import CONFIG_D, Hub
from workspacespawner.core import names
from workspacespawner.demo import GOLDEN_IMAGE

EXTRA_PROFILES = """
c.KubeSpawner.profile_list = c.KubeSpawner.profile_list + [
    {
        "display_name": "VM with too many GPUs",
        "slug": "vm-sixteen-gpus",
        "kubespawner_override": {"workspace_kind": "vm", "extra_resource_limits": {"nvidia.com/gpu": 16}},
    },
]
"""


@pytest.fixture(scope="module")
def cluster(control_plane, tmp_path_factory):
    with planes.running(control_plane, tmp_path_factory.mktemp("cluster"), golden=True) as cluster:
        yield cluster


def slower_plane(cluster) -> str:
    """Hub settings for the real plane, whose VM starts take more hops (three agents' caches, an aggregated
    API call, a clone by CDI): a longer slow-spawn window (15 s, under the proxy's 20 s request timeout), so
    that a quick failure still answers the spawn request itself, long before the longer start timeout."""
    if not getattr(cluster, "real_control_plane", False):
        return ""
    return '\nc.JupyterHub.tornado_settings = {"slow_spawn_timeout": 15}\n'


@pytest.fixture(scope="module")
def hub(cluster, tmp_path_factory):
    config = "\n".join(
        f"load_subconfig({str(CONFIG_D / piece)!r})" for piece in ("10-workspace-spawner.py", "20-profiles.py")
    )
    real = getattr(cluster, "real_control_plane", False)
    hub = Hub(
        tmp_path_factory.mktemp("hub"), cluster.kubeconfig, config + EXTRA_PROFILES + slower_plane(cluster), start_timeout=150 if real else 60
    ).start()
    yield hub
    hub.stop()


@pytest.fixture(scope="module")
def kube(cluster):
    client = kubernetes.config.new_client_from_config(str(cluster.kubeconfig))
    yield kubernetes.client.CoreV1Api(client), kubernetes.client.CustomObjectsApi(client)
    client.close()


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

    hub.start_server("vera", {"profile": "ubuntu-vm"})
    assert cloudinit_token(core, f"{vm_name}-cloudinit") != token_before
    r = hub.server_request("vera", "GET", "api/contents/in-the-vm.txt")
    assert r.status_code == 200, r.text
    assert r.json()["content"] == "kept"
    hub.stop_server("vera")


def test_vm_without_free_gpus_fails_fast_and_keeps_disks(hub, kube):
    core, custom = kube
    hub.create_user("vince")
    r = hub.spawn("vince", {"profile": "vm-sixteen-gpus"})
    assert r.status_code == 503, r.text
    assert "nvidia.com/gpu" in r.json()["message"]
    deadline = time.monotonic() + 30
    while vmis(custom, "vince") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert vmis(custom, "vince") == []
    dvs = custom.list_namespaced_custom_object(
        "cdi.kubevirt.io", "v1beta1", "default", "datavolumes", label_selector=names.owner_selector("vince")
    )["items"]
    assert len(dvs) == 1
    core.read_namespaced_persistent_volume_claim("home-vince", "default")
