"""A VM workspace is a real Linux: the product's VM profile boots the golden image under QEMU (issue #40).

The seed's check, through a real JupyterHub and the embedded cluster's storage, CDI, virt-controller and node agent:
the student's VM workspace, cloned from the golden image tools/golden-image builds (Debian 12 with JupyterLab), runs
the product's cloud-init user data and ``workspace-ide.service`` unchanged, its home the user's home PVC shared
through virtiofs (virtiofsd, tools/virtiofsd); JupyterLab in the guest reaches the hub's API at the profile's
``hub_connect_url`` (the host's loopback as QEMU's user network shows it to the guest) and the
hub's proxy reaches JupyterLab at the VMI's address; the profile's own ``start_timeout`` (600 s, over the hub's
60 s) is the one the VM start keeps. In a Jupyter terminal, as the student works: the guest's own
kernel, the workspace user with sudo, ``apt-get install ./wstiny.deb``, a change in ``/etc``, files in ``/opt``,
``/usr/local`` and the home, which is the PVC's own folder (a file a container workspace left there is the
workspace user's in the guest, and the guest's file is in the PVC); ``/scratch`` is the scratch tier's emptyDisk,
formatted in the guest. A stop leaves no QEMU process and keeps the VM, DataVolume and PVC; the next start finds
all of it, the package still installed. QEMU killed behind the hub's back: the VMI fails (its Event says so), KubeVirt
boots the VM again from the same root disk (runStrategy ``Always``), the hub keeps the server (its poll does not
end it: :func:`workspacespawner.backends.vm.vmstatus.exit_status`) and its route reaches the new guest, with the
package still there; after the stop every run is closed with its compute (tests/support/invariants.py) and the
disks stay. Three software-emulated (TCG) boots: about six minutes on two cores; skipped
with the reason where QEMU or the image is missing (localcluster.testing.real_guest_skip_reason).
"""

from __future__ import annotations

import base64
import os
import signal
import time

import pytest
import requests
from localcluster.guestimage import newest_guest_image
from localcluster.testing import qemu_processes, real_guest_skip_reason, tiny_deb
from localcluster.volumes import claim_path

from tests.support import planes
from tests.support.faultcases import matrix_ledger, wait_until
from tests.support.hubharness import CONFIG_D, Hub, core_and_custom
from tests.support.invariants import assert_invariants
from tests.support.realguest import GOLDEN, vm_profile
from tests.support.terminal import run_in_terminal
from workspacespawner.core import names

pytestmark = pytest.mark.skipif(real_guest_skip_reason() is not None, reason=real_guest_skip_reason() or "")

# the profile's own start_timeout (600 s, tests.support.realguest) is over the hub's 60 s
PROFILES = f"""
c.WorkspaceQuota.ledger_url = "sqlite:///ledger.sqlite"  # in the hub's folder, where matrix_ledger reads it
c.KubeSpawner.profile_list = [{vm_profile("debian-vm", "Debian 12 VM", default=True)}]
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    image = newest_guest_image()
    assert image is not None
    with planes.running("embedded", tmp_path_factory.mktemp("cluster"), real_golden=(*GOLDEN, image)) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def hub(cluster, tmp_path_factory):
    config = f"load_subconfig({str(CONFIG_D / '10-workspace-spawner.py')!r})\n" + PROFILES
    hub = Hub(tmp_path_factory.mktemp("hub"), cluster.kubeconfig, config, start_timeout=60).start()
    yield hub
    hub.stop()


def _guest_kernel() -> str:
    image = newest_guest_image()
    assert image is not None
    return image.kernel_release()


def _objects(cluster, user: str) -> dict[str, list[str]]:
    with core_and_custom(cluster) as (core, custom):
        selector = names.owner_selector(user)
        found = {plural: [o["metadata"]["name"] for o in custom.list_namespaced_custom_object(
            group, "v1" if group == "kubevirt.io" else "v1beta1", "default", plural, label_selector=selector)["items"]]
            for group, plural in (("kubevirt.io", "virtualmachines"), ("kubevirt.io", "virtualmachineinstances"),
                                  ("cdi.kubevirt.io", "datavolumes"))}  # fmt: skip
        found["persistentvolumeclaims"] = [p.metadata.name for p in core.list_namespaced_persistent_volume_claim("default").items]
    return found


def test_a_students_vm_is_a_real_linux_keeps_what_they_installed_and_comes_back_after_qemu_is_killed(hub, cluster, tmp_path, record_property):
    user = "student"
    hub.create_user(user)
    started = time.monotonic()
    _start(hub, user)
    record_property("first start to JupyterLab ready (s)", round(time.monotonic() - started))
    [vm] = _objects(cluster, user)["virtualmachines"]
    assert qemu_processes(f"default_{vm}"), "the VM workspace is not a QEMU guest"

    home = claim_path(cluster, "default", f"home-{user}")
    assert home is not None
    (home / "from-the-container.txt").write_text("written by a container workspace\n")
    deb = base64.b64encode(tiny_deb(tmp_path)).decode()
    r = hub.server_request(user, "PUT", "api/contents/wstiny.deb", json={"type": "file", "format": "base64", "content": deb})
    assert r.ok, r.text
    results = run_in_terminal(hub, user, [
        "uname -r",
        "id -un",
        "sudo -n apt-get install -y ./wstiny.deb",
        "echo wstiny-was-here | sudo -n tee -a /etc/motd",
        "sudo -n mkdir -p /opt/persist && echo 'written in the first start' | sudo -n tee /opt/persist/marker",
        "echo local | sudo -n tee /usr/local/share/persist",
        "echo mine > ~/notes.txt",
        "findmnt -n -o FSTYPE ~",
        "stat -c %U ~/from-the-container.txt",
        "findmnt -n -o FSTYPE /scratch && echo scratch > /scratch/x && cat /scratch/x",
    ], timeout=300)
    assert all(code == 0 for code, _ in results), results
    (_, kernel), (_, who) = results[:2]
    assert kernel.strip() == _guest_kernel() != os.uname().release
    assert who.strip() == "jovyan"
    assert [out for _, out in results[-3:]] == ["virtiofs\n", "jovyan\n", "ext4\nscratch\n"]
    assert (home / "notes.txt").read_text() == "mine\n"

    started = time.monotonic()
    hub.stop_server(user, timeout=180)
    record_property("stop (s)", round(time.monotonic() - started))
    assert qemu_processes(f"default_{vm}") == []
    left = _objects(cluster, user)
    assert left["virtualmachineinstances"] == [] and left["virtualmachines"] == [vm]
    [root] = left["datavolumes"]
    assert root in left["persistentvolumeclaims"]

    started = time.monotonic()
    _start(hub, user)
    record_property("second start to JupyterLab ready (s)", round(time.monotonic() - started))
    results = run_in_terminal(hub, user, [
        "dpkg-query -W -f '${Status} ${Version}\\n' wstiny",
        "cat /usr/share/wstiny/hello",
        "grep -c wstiny-was-here /etc/motd",
        "cat /opt/persist/marker /usr/local/share/persist ~/notes.txt",
    ])
    assert [out for _, out in results] == [
        "install ok installed 1.0\n",
        "hello from wstiny\n",
        "1\n",
        "written in the first start\nlocal\nmine\n",
    ], results

    # QEMU killed behind the hub's back: the VMI fails and KubeVirt (runStrategy Always) boots the VM again from the
    # same root disk, as the kubelet restarts a workspace Pod's container; the hub's route reaches the new guest
    [killed] = qemu_processes(f"default_{vm}")
    os.kill(killed, signal.SIGKILL)
    assert wait_until(lambda: _events(cluster, vm, "SyncFailed"), timeout=60), "the guest's end was not reported"
    assert wait_until(lambda: qemu_processes(f"default_{vm}") not in ([], [killed]), timeout=60)
    assert wait_until(lambda: _answers(hub, user), timeout=300, interval=2), hub.log()
    assert hub.user(user)["servers"][""]["ready"]
    [(code, out)] = run_in_terminal(hub, user, ["dpkg-query -W -f '${Status}\\n' wstiny"])
    assert (code, out) == (0, "install ok installed\n")
    hub.stop_server(user, timeout=180)
    with matrix_ledger(hub) as ledger:
        assert_invariants(cluster, ledger=ledger)  # every run closed with its compute; none without
    assert _objects(cluster, user)["datavolumes"] == [root]


def _start(hub: Hub, user: str) -> None:
    r = hub.spawn(user, {"profile": "debian-vm"})
    assert r.status_code in (201, 202), r.text
    hub.wait_ready(user, timeout=630)


def _answers(hub: Hub, user: str) -> bool:
    try:
        return hub.server_request(user, "GET", "api").status_code == 200
    except requests.RequestException:
        return False


def _events(cluster, name: str, reason: str) -> list:
    with core_and_custom(cluster) as (core, _):
        return [e for e in core.list_namespaced_event("default", field_selector=f"involvedObject.name={name}").items
                if e.reason == reason]
