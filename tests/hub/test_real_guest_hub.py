"""A VM workspace is a real Linux: the product's VM profile boots the golden image under QEMU (issue #40).

The seed's check, through a real JupyterHub, on the real control plane where the real tier runs (kube-apiserver,
KubeVirt's own virt-controller and virt-api, CDI's own controllers; :data:`PLANE`), else on the embedded cluster:
the student's VM workspace, cloned from the golden image tools/golden-image builds (Debian 12 with JupyterLab), runs
the product's cloud-init user data and ``workspace-ide.service`` unchanged, its home the user's home PVC shared
through virtiofs (virtiofsd, tools/virtiofsd); JupyterLab in the guest reaches the hub's API at the profile's
``hub_connect_url`` (the host's loopback as QEMU's user network shows it to the guest) and the
hub's proxy reaches JupyterLab at the VMI's address; the profile's own ``start_timeout`` (600 s, over the hub's)
is the one the VM start keeps, and the progress page tells the boot's stages it read from the guest's serial console
(kernel, operating system, cloud-init, the server), in boot order. In a Jupyter terminal, as the student works: the guest's own
kernel, the workspace user with sudo, ``apt-get install ./wstiny.deb``, a change in ``/etc``, files in ``/opt``,
``/usr/local`` and the home, which is the PVC's own folder (a file a container workspace left there is the
workspace user's in the guest, and the guest's file is in the PVC); ``/scratch`` is the scratch tier's emptyDisk,
formatted in the guest. A stop leaves no QEMU process and keeps the VM, DataVolume and PVC; the next start finds
all of it, the package still installed. QEMU killed behind the hub's back: the VMI fails (its Event says so), KubeVirt
boots the VM again from the same root disk (runStrategy ``Always``), the hub keeps the server (its poll does not
end it: :func:`workspacespawner.backends.vm.vmstatus.exit_status`) and its route reaches the new guest, with the
package still there; after the stop every run is closed with its compute (tests/support/invariants.py) and the
disks stay. Then the disk operations on that disk, each disk's files read with debugfs: a snapshot and a publish as a
golden image; a rebuild from the golden image (``/opt`` and ``/etc`` as the image has them, the home kept); a restore
of the snapshot (the student's ``/opt`` and ``/etc`` back); a rebuild from the published image, booted: the student's
package, ``/opt`` file and home are there. Four software-emulated (TCG) boots: about eight minutes on two cores;
skipped with the reason where QEMU or the image is missing (localcluster.testing.real_guest_skip_reason).
"""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import time

import pytest
import requests
from localcluster.bootloader import read_file
from localcluster.guestimage import newest_guest_image
from localcluster.testing import qemu_processes, real_guest_skip_reason, tiny_deb
from localcluster.volumes import claim_path, disk_image_path

from tests.support import planes
from tests.support.faultcases import matrix_ledger, wait_until
from tests.support.hubharness import CONFIG_D, Hub, core_and_custom, progress_of_a_start
from tests.support.invariants import assert_invariants
from tests.support.lifecycleenv import wait_async, with_kube
from tests.support.realguest import GOLDEN, golden, vm_objects, vm_profile
from tests.support.terminal import run_in_terminal
from tests.support.vmworkspace import succeeded
from workspacespawner.k8s.kinds import VOLUME_SNAPSHOT
from workspacespawner.lifecycle.disks import DiskOps
from workspacespawner.vmdisk.publish import GoldenPublisher
from workspacespawner.vmdisk.rebuild import rebuild
from workspacespawner.vmdisk.restore import Restored, restore

pytestmark = pytest.mark.skipif(real_guest_skip_reason() is not None, reason=real_guest_skip_reason() or "")

# the profile's own start_timeout (600 s, tests.support.realguest) is over the hub's 60 s
PROFILES = f"""
c.WorkspaceQuota.ledger_url = "sqlite:///ledger.sqlite"  # in the hub's folder, where matrix_ledger reads it
c.KubeSpawner.profile_list = [{vm_profile("debian-vm", "Debian 12 VM", default=True)}]
"""


#: The one plane this module runs on: the real one (KubeVirt's and CDI's own controllers) where the real tier is
#: asked for, as in CI, else the embedded one. One plane, as each run is three TCG boots (tests/conftest.py groups a
#: ``[real]`` test with the real tier's); the embedded plane's real guests are the local cluster's boot test's and
#: tests/hub/test_real_guest_images_hub.py's.
PLANE = "real" if os.environ.get("WORKSPACESPAWNER_CONTROL_PLANE") == "real" else "embedded"


@pytest.fixture(scope="module", params=[PLANE])
def cluster(request, tmp_path_factory):
    image = newest_guest_image()
    assert image is not None
    proxy = {"fault_proxy": True} if request.param == "real" else {}  # the request log the invariants read
    with planes.running(request.param, tmp_path_factory.mktemp("cluster"), real_golden=[golden(image)], **proxy) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def hub(cluster, tmp_path_factory):
    config = f"load_subconfig({str(CONFIG_D / '10-workspace-spawner.py')!r})\n" + PROFILES
    extra, start_timeout = planes.hub_settings(cluster)
    hub = Hub(tmp_path_factory.mktemp("hub"), cluster.kubeconfig, config + extra, start_timeout=start_timeout).start()
    yield hub
    hub.stop()


def _guest_kernel() -> str:
    image = newest_guest_image()
    assert image is not None
    return image.kernel_release()


def test_a_students_vm_is_a_real_linux_keeps_what_they_installed_and_comes_back_after_qemu_is_killed(hub, cluster, tmp_path, record_property):
    user = "student"
    hub.create_user(user)
    started = time.monotonic()
    messages = [event.get("message", "") for event in progress_of_a_start(hub, user, {"profile": "debian-vm"})]
    hub.wait_ready(user, timeout=630)
    record_property("first start to JupyterLab ready (s)", round(time.monotonic() - started))
    # the boot's stages, from the guest's serial console (its launcher Pod's guest-console-log, through pods/log), as
    # they come where the launcher Pod runs before the guest boots: KubeVirt's (the embedded plane's imitation runs it
    # once the guest does, so the hub may read the whole boot at once there)
    stages = (f"kernel is booting (Linux {_guest_kernel()})", "Debian GNU/Linux 12 (bookworm) is starting",
              "cloud-init is setting up", "Your server has started in the virtual machine")
    # The stages the page showed come in boot order. Which of them it shows depends on when the hub's stream of the
    # console opens: on a loaded machine two may come in one look, or the Pod's container shows started only once the
    # boot is over (then none; the start goes on without them). That the console's lines drive the page and end a
    # start is tests/hub/test_real_guest_images_hub.py's and tests/unit/test_vm_guest_console.py's.
    seen = [next((i for i, message in enumerate(messages) if stage in message), None) for stage in stages]
    shown = [i for i in seen if i is not None]
    assert shown == sorted(shown), messages
    record_property("boot stages the spawn page showed", sum(i is not None for i in seen))
    [vm] = vm_objects(cluster, user)["virtualmachines"]
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
    left = vm_objects(cluster, user)
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
    assert vm_objects(cluster, user)["datavolumes"] == [root]

    # What the student installed, through the disk operations (as `workspacespawner disk` and `image` and the
    # dashboard run them): a snapshot and a publish of this disk, a rebuild (the /opt change gone, the home kept), a
    # restore of the snapshot (the change back: the restore CDI fills from a snapshot, whose volume it moves from a
    # temporary claim, which once came out empty under CI's load), each disk's files read with debugfs; then a
    # rebuild from the published image, booted: the guest finds what the student installed.
    started = time.monotonic()
    disks = asyncio.run(with_kube(cluster.kubeconfig, lambda kube: _snapshot_publish_rebuild_restore(kube, user, root)))
    record_property("snapshot, publish, rebuild, restore, rebuild from the published image (s)", round(time.monotonic() - started))
    marker = "/opt/persist/marker"
    assert _root_file(cluster, disks["rebuilt"], marker) is None
    assert b"wstiny-was-here" not in (_root_file(cluster, disks["rebuilt"], "/etc/motd") or b"")
    assert _root_file(cluster, disks["restored"], marker) == b"written in the first start\n"
    assert b"wstiny-was-here" in (_root_file(cluster, disks["restored"], "/etc/motd") or b"")
    assert _root_file(cluster, disks["from the published image"], marker) == b"written in the first start\n"
    assert (home / "notes.txt").read_text() == "mine\n"
    _start(hub, user)
    results = run_in_terminal(hub, user, ["dpkg-query -W -f '${Status}\\n' wstiny", f"cat {marker} ~/notes.txt"])
    assert [out for _, out in results] == ["install ok installed\n", "written in the first start\nmine\n"], results
    hub.stop_server(user, timeout=180)
    with matrix_ledger(hub) as ledger:
        assert_invariants(cluster, ledger=ledger)


async def _snapshot_publish_rebuild_restore(kube, user: str, root: str) -> dict[str, str]:
    """Snapshot ``user``'s stopped root disk ``root``, publish it as golden image ``<user>-debian``, rebuild from the
    golden image, restore the snapshot, rebuild from the published image; the root disk each step made, once CDI
    filled it. The VM boots the last."""
    ops = DiskOps(kube, "default", actor="admin")
    snapshot = (await ops.snapshot(user, root))["metadata"]["name"]
    await wait_async(lambda: _ready(kube, snapshot), timeout=120)
    await GoldenPublisher(kube, "default", GOLDEN[0], actor="admin").publish(user, "", f"{user}-debian")
    made = {}
    for step, swap in (("rebuilt", lambda: rebuild(ops, user, image=GOLDEN[1], golden_namespace=GOLDEN[0])),
                       ("restored", lambda: restore(ops, user, snapshot)),
                       ("from the published image", lambda: rebuild(ops, user, image=f"{user}-debian", golden_namespace=GOLDEN[0]))):
        done = await swap()
        made[step] = done.disk if isinstance(done, Restored) else done.new
        await succeeded(kube, "default", made[step], timeout=300)
    return made


async def _ready(kube, snapshot: str) -> bool:
    return bool(((await kube.get(VOLUME_SNAPSHOT, "default", snapshot)) or {}).get("status", {}).get("readyToUse"))


def _root_file(cluster, disk: str, path: str) -> bytes | None:
    """The file ``path`` on root DataVolume ``disk``'s image (where its PVC's volume mode keeps it), read by debugfs."""
    claim = claim_path(cluster, "default", disk)
    assert claim is not None, disk
    with core_and_custom(cluster) as (core, _):
        mode = core.read_namespaced_persistent_volume_claim(disk, "default").spec.volume_mode or "Filesystem"
    return asyncio.run(read_file(disk_image_path(claim, mode), path))


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
