"""A golden image that cannot run the workspace: the start ends with a sentence naming what the image lacks (issue #40).

Four images derived from the golden image tools/golden-image builds (localcluster.testing.derived_image: debugfs
edits, no mount): one with cloud-init turned off (``/etc/cloud/cloud-init.disabled``), as an image without it, one
without the IDE's command (``jupyterhub-singleuser``), one without a kernel (``/vmlinuz``), and one whose filesystem
has no block left (localcluster.testing.full_image), as a system disk its user filled. Three guests boot for real
under QEMU; the fourth runs QEMU's firmware (SeaBIOS, on the serial console as the VM asks), which finds nothing to
boot. The hub reads each guest's serial console from its virt-launcher Pod's ``guest-console-log``
container (``pods/log``, workspacespawner.backends.vm.consolelog) and ends each start as soon as the console shows
what the image lacks (or that the system disk is full), far inside the profile's 600 s: the VM stopped (no QEMU
process left), its VM, root DataVolume and home PVC kept, every ledger run closed. Three TCG boots and a firmware's
side by side: about three and a half minutes.
And the golden image itself as the demo's GPU VM (no GPU passed through, the CPUs and memory this machine has) with
the home as a disk (``vm_home_via = "disk"``): the home PVC's ``disk.img``, which cloud-init formats and mounts, owned
by the workspace user; its profile opens code-server, which the image carries
(tools/golden-image: code-server and Node.js from tools/code-server's build, jupyter-vscode-proxy in the server's
venv): the start's own check asks ``/vscode/`` in the guest, and VS Code's workbench answers: about two minutes more.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time

import pytest
from localcluster.controllers.qemudomain import fitted_size, machine_size
from localcluster.guestimage import newest_guest_image
from localcluster.testing import derived_image, full_image, qemu_processes, real_guest_skip_reason
from localcluster.volumes import claim_path

from tests.support import planes
from tests.support.codeserver import WORKBENCH_MARKER
from tests.support.faultcases import matrix_ledger, wait_until
from tests.support.hubharness import CONFIG_D, Hub, core_and_custom, progress_of_a_start
from tests.support.invariants import assert_invariants
from tests.support.realguest import golden, vm_objects, vm_profile
from tests.support.terminal import run_in_terminal

pytestmark = pytest.mark.skipif(real_guest_skip_reason() is not None, reason=real_guest_skip_reason() or "")

#: The golden image with cloud-init turned off (as an image without it), one without the IDE's command, one without
#: a kernel to boot (its ``/vmlinuz`` link gone: the firmware finds nothing bootable), and one with a full filesystem
#: (systemd, journald and cloud-init meet ``No space left on device``).
BROKEN = {
    "no-cloud-init": lambda disk, target: derived_image(disk, target, "write /dev/null /etc/cloud/cloud-init.disabled"),
    "no-ide": lambda disk, target: derived_image(disk, target, "rm /usr/local/bin/jupyterhub-singleuser"),
    "no-kernel": lambda disk, target: derived_image(disk, target, "rm /vmlinuz"),
    "full-disk": full_image,
}
#: The demo's GPU VM as the real guest boots it here: one A100 (not passed through: a QEMU guest gets no device of
#: this machine), 4 CPUs and 16 GiB (cut to what this machine has), the home as a disk, code-server.
GPU_VM = {"vm_home_via": "disk", "ide": "code-server", "extra_resource_limits": {"nvidia.com/gpu": 1},
          "node_selector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}, "vm_cpu_cores": 4, "vm_memory": "16Gi"}
PROFILES = f"""
c.WorkspaceQuota.ledger_url = "sqlite:///ledger.sqlite"
c.KubeSpawner.profile_list = [{", ".join(vm_profile(name, name, image=f"debian-12-{name}") for name in BROKEN)},
    {vm_profile("home-disk", "GPU VM, home as a disk, code-server", override=GPU_VM)}]
"""


@pytest.fixture(scope="module")
def images_hub(tmp_path_factory):
    """A hub on the embedded plane, whose VM profiles clone the broken images (the real plane's guest, and its
    console through kube-apiserver and the node agent's kubelet API, are tests/hub/test_real_guest_hub.py's)."""
    image = newest_guest_image()
    assert image is not None
    folder = tmp_path_factory.mktemp("images")
    goldens = [golden(image), *(golden(image, f"debian-12-{name}", make(image.disk, folder / f"{name}.img"))
                                for name, make in BROKEN.items())]
    with planes.running("embedded", tmp_path_factory.mktemp("cluster"), real_golden=goldens) as cluster:
        shutil.rmtree(folder)  # published: each is copied into its DataSource's claim (1.6 GiB of disk each)
        config = f"load_subconfig({str(CONFIG_D / '10-workspace-spawner.py')!r})\n" + PROFILES
        hub = Hub(tmp_path_factory.mktemp("hub"), cluster.kubeconfig, config, start_timeout=60).start()
        try:
            yield cluster, hub
        finally:
            hub.stop()


def test_an_image_without_cloud_init_the_ide_or_a_kernel_fails_the_start_with_what_it_lacks(images_hub, record_property):
    """Three boot to the end (the full disk's with its writes refused), one never boots (the guest's serial console shows it); each start ends long before its 600 s with a
    sentence that names what the image lacks; the VM is stopped, its disks kept, every run closed. (The stages on the
    way are tests/hub/test_real_guest_hub.py's, on KubeVirt's own launcher Pods.)"""
    cluster, hub = images_hub
    events, seconds = {}, {}

    def attempt(name: str) -> None:
        started = time.monotonic()
        events[name] = progress_of_a_start(hub, name, {"profile": name})
        seconds[name] = round(time.monotonic() - started)

    for name in BROKEN:
        hub.create_user(name)
    threads = [threading.Thread(target=attempt, args=(name,)) for name in BROKEN]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for name in BROKEN:
        record_property(f"{name}: start to its failure (s)", seconds[name])
        messages = [event.get("message", "") for event in events[name]]
        assert events[name][-1].get("failed"), messages
        assert seconds[name] < 400, messages
    image = "VM golden image debian-12-{}"
    assert f"The {image.format('no-cloud-init')} booted without running cloud-init" in events["no-cloud-init"][-1]["message"]
    assert f"The {image.format('no-ide')} has no jupyterhub-singleuser" in events["no-ide"][-1]["message"]
    assert (f"The virtual machine's firmware found nothing to boot on the disk of the {image.format('no-kernel')}"
            in events["no-kernel"][-1]["message"])
    assert "Your virtual machine's system disk is full" in events["full-disk"][-1]["message"]

    for name in BROKEN:
        [vm] = vm_objects(cluster, name)["virtualmachines"]
        assert wait_until(lambda vm=vm: qemu_processes(f"default_{vm}") == [], timeout=120), "the VM was not stopped"
        left = vm_objects(cluster, name)
        assert left["virtualmachineinstances"] == [] and left["virtualmachines"] == [vm]
        [root] = left["datavolumes"]
        assert root in left["persistentvolumeclaims"] and f"home-{name}" in left["persistentvolumeclaims"]
    with matrix_ledger(hub) as ledger:
        assert_invariants(cluster, ledger=ledger)  # nothing metered after the stop: no run open


def test_the_home_as_a_disk_is_the_home_pvcs_disk_image_formatted_once_and_kept(images_hub, tmp_path):
    """``vm_home_via = "disk"``: the home PVC is the guest's disk with serial ``home`` (its ``disk.img``, made at the
    claim's size as KubeVirt makes it), which cloud-init formats once and mounts at the home; the workspace user
    writes there; what they wrote is in the PVC's disk image after the stop. The profile opens code-server: the
    guest's own, behind jupyter-vscode-proxy, serves VS Code's workbench. It is a GPU VM, as the demo's: placed on a
    GPU node, booted without the GPU (a Warning Event names the host device not given) and with what this machine
    has of the CPUs and memory it asks (the guest's own count)."""
    cluster, hub = images_hub
    user = "home-disk"
    hub.create_user(user)
    r = hub.spawn(user, {"profile": user})
    assert r.status_code in (201, 202), r.text
    hub.wait_ready(user, timeout=630)
    # the start asked /vscode/ once the server answered, which started code-server in the guest
    workbench = hub.server_request(user, "GET", "vscode/")
    assert workbench.status_code == 200 and WORKBENCH_MARKER in workbench.text, workbench.text[:2000]
    [vm] = vm_objects(cluster, user)["virtualmachines"]
    with core_and_custom(cluster) as (core, custom):
        vmi = custom.get_namespaced_custom_object("kubevirt.io", "v1", "default", "virtualmachineinstances", vm)
        events = core.list_namespaced_event("default", field_selector=f"involvedObject.name={vm}").items
    not_passed = [e.message for e in events if e.reason == "DeviceNotGiven"]
    assert len(not_passed) == 1 and not_passed[0].startswith("host device "), not_passed
    (cpus, mib), _cut = fitted_size(vmi, machine_size())
    results = run_in_terminal(hub, user, [
        "nproc && awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo",
        "command -v code-server",
        "findmnt -n -o FSTYPE,SOURCE ~",
        "readlink -f /dev/disk/by-id/virtio-home",
        "stat -c %U ~",
        "echo on-the-disk > ~/notes.txt && cat ~/notes.txt",
    ], timeout=300)
    assert all(code == 0 for code, _ in results), results
    (_, size), (_, code_server), (_, mounted), (_, device), (_, owner), (_, notes) = results
    guest_cpus, guest_mib = (int(n) for n in size.split())
    assert guest_cpus == cpus and 0.9 * mib < guest_mib <= mib, (results, cpus, mib)  # the kernel keeps some memory
    assert code_server == "/usr/local/bin/code-server\n", results
    assert mounted.split() == ["ext4", device.strip()], results
    assert owner.strip() == "jovyan" and notes == "on-the-disk\n"
    hub.stop_server(user, timeout=180)
    image = claim_path(cluster, "default", f"home-{user}") / "disk.img"
    dumped = subprocess.run(["debugfs", "-R", "cat /notes.txt", str(image)], capture_output=True, text=True, check=True)
    assert dumped.stdout == "on-the-disk\n"
    assert vm_objects(cluster, user)["virtualmachineinstances"] == []
