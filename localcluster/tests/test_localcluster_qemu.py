"""The QEMU guest: its command line, the NoCloud seed, the accelerator probe, and a VM that boots the golden image.

The real guest (:func:`test_a_vm_cloned_from_the_golden_image_boots_under_qemu_and_keeps_what_was_installed`) goes
through the embedded cluster's storage, CDI, scheduler, virt-controller and node agent. It needs
``qemu-system-x86_64``, dosfstools, mtools, ``dpkg-deb`` and the image tools/golden-image/build.sh builds; each
missing piece skips it with the reason (under ``$CI`` too, for now). Two software-emulated (TCG) boots take about
four minutes on two cores.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from localcluster.bootloader import BootError, boot_files, read_file
from localcluster.cidata import make_seed, meta_data, missing_tools
from localcluster.controllers.launcher import is_launcher
from localcluster.controllers.qemudomain import (
    QemuDomain,
    claim_disk_image,
    claim_disks,
    empty_disks,
    fitted_size,
    forwarded_ports,
    further_disks,
    guest_size,
    machine_size,
    not_given,
    shared_folders,
)
from localcluster.controllers.virthandler import virt_tail
from localcluster.goldenimage import make_golden_image
from localcluster.guestimage import MARKER, GuestImage, newest_guest_image
from localcluster.podlogs import LogOptions, PodLog
from localcluster.qemu import GuestSpec, QemuGuest, accelerator, qemu_command
from localcluster.testing import (
    create_object,
    events_for,
    get_object,
    qemu_processes,
    real_guest_skip_reason,
    tiny_deb,
    wait_for,
)
from localcluster.virtiofs import virtiofsd_command
from localcluster.vmactions import vm_action
from localcluster.volumes import RAW_DEVICE, claim_path

from localcluster import LocalCluster, qemu


def _spec(tmp_path: Path, **changes) -> GuestSpec:
    values = dict(
        name="ws-alice",
        cpus=2,
        memory_mib=2048,
        disk=tmp_path / "root.img",
        kernel=tmp_path / "vmlinuz",
        initrd=tmp_path / "initrd.img",
        console=tmp_path / "console.log",
        qmp=tmp_path / "qmp.sock",
        seed=tmp_path / "seed.img",
        forwards={41001: 8888, 41002: 8080},
    )
    values.update(changes)
    return GuestSpec(**values)


def _option(command: list[str], flag: str) -> list[str]:
    return [command[i + 1] for i, word in enumerate(command) if word == flag]


def test_command_line_carries_the_guest(tmp_path):
    command = qemu_command(_spec(tmp_path))
    assert command[0] == "qemu-system-x86_64"
    assert _option(command, "-machine") == ["q35,accel=tcg"]
    assert _option(command, "-cpu") == ["max"]
    assert _option(command, "-smp") == ["2"]
    assert _option(command, "-m") == ["2048"]
    assert _option(command, "-kernel") == [str(tmp_path / "vmlinuz")]
    assert _option(command, "-initrd") == [str(tmp_path / "initrd.img")]
    assert "root=/dev/vda" in _option(command, "-append")[0].split()
    # The root disk first (/dev/vda: the first disk slot), the seed read-only after it.
    assert _option(command, "-drive") == [
        f"file={tmp_path / 'root.img'},format=raw,if=none,id=disk0,cache=writeback,discard=unmap",
        f"file={tmp_path / 'seed.img'},format=raw,if=none,id=disk1,readonly=on",
    ]
    assert {"virtio-blk-pci,drive=disk0,bus=pcie.0,addr=0x10", "virtio-blk-pci,drive=disk1,bus=pcie.0,addr=0x11"} <= set(
        _option(command, "-device"))
    assert _option(command, "-netdev") == ["user,id=net0,hostfwd=tcp:127.0.0.1:41001-:8888,hostfwd=tcp:127.0.0.1:41002-:8080"]
    assert _option(command, "-serial") == [f"file:{tmp_path / 'console.log'}"]
    assert _option(command, "-qmp") == [f"unix:{tmp_path / 'qmp.sock'},server=on,wait=off"]


def test_command_line_kvm_passes_the_host_cpu_and_no_seed_means_one_disk(tmp_path):
    command = qemu_command(_spec(tmp_path, accel="kvm", seed=None, disk_format="qcow2", forwards={}))
    assert _option(command, "-machine") == ["q35,accel=kvm"]
    assert _option(command, "-cpu") == ["host"]
    assert _option(command, "-drive") == [f"file={tmp_path / 'root.img'},format=qcow2,if=none,id=disk0,cache=writeback,discard=unmap"]
    assert _option(command, "-netdev") == ["user,id=net0"]


def test_a_virtiofs_share_is_a_vhost_user_device_on_shared_memory(tmp_path):
    command = qemu_command(_spec(tmp_path, filesystems=(("home", tmp_path / "fs-0.sock"),)))
    assert _option(command, "-machine") == ["q35,accel=tcg,memory-backend=mem"]
    assert _option(command, "-object") == ["memory-backend-memfd,id=mem,size=2048M,share=on"]
    assert _option(command, "-chardev") == [f"socket,id=fs0,path={tmp_path / 'fs-0.sock'}"]
    assert "vhost-user-fs-pci,queue-size=1024,chardev=fs0,tag=home" in _option(command, "-device")
    # without a share the guest's memory is QEMU's own
    assert _option(qemu_command(_spec(tmp_path)), "-object") == []


def test_virtiofsd_maps_the_guests_workspace_user_to_the_host_user_that_runs_the_pods(tmp_path):
    command = virtiofsd_command(Path("/opt/virtiofsd"), tmp_path / "home", tmp_path / "fs.sock", uid=0, gid=0)
    assert command[0] == "/opt/virtiofsd"
    assert f"--shared-dir={tmp_path / 'home'}" in command and f"--socket-path={tmp_path / 'fs.sock'}" in command
    assert {"--translate-uid=map:1000:0:1", "--translate-gid=map:1000:0:1", "--sandbox=none"} <= set(command)


@pytest.mark.parametrize(("changes", "message"), [({"accel": "hvf"}, "accelerator 'hvf'"), ({"cpus": 0}, "at least 1 CPU")])
def test_command_line_refuses_what_qemu_cannot_run(tmp_path, changes, message):
    with pytest.raises(ValueError, match=message):
        qemu_command(_spec(tmp_path, **changes))


def test_command_line_without_a_kernel_boots_the_disk_through_the_firmware_on_the_serial_console(tmp_path):
    command = qemu_command(_spec(tmp_path, kernel=None, initrd=None, bios_serial=True))
    assert _option(command, "-kernel") == _option(command, "-initrd") == _option(command, "-append") == []
    assert _option(command, "-machine") == ["q35,accel=tcg,graphics=off"]  # libvirt's <bios useserial='yes'/>
    assert _option(command, "-drive")[0].startswith(f"file={tmp_path / 'root.img'},")  # the firmware boots the first disk


@pytest.mark.skipif(shutil.which(qemu.QEMU) is None or shutil.which("mkfs.ext4") is None or bool(missing_tools()),
                    reason="QEMU, e2fsprogs and the seed's tools are not installed")
async def test_a_disk_without_a_kernel_boots_through_seabios_which_says_it_found_nothing(tmp_path):
    """As on a KubeVirt node, whose firmware boots every disk: the VMI's disk is an ext4 filesystem that names no
    kernel, so QEMU runs SeaBIOS, which writes to the serial console as the VMI asks (``bios.useSerial``), tries the
    disk and the network, and says so; the guest keeps running, as KubeVirt's would (the hub reads the console:
    tests/unit/test_vm_guest_console.py)."""
    root = tmp_path / "disk.img"
    subprocess.run(["mkfs.ext4", "-q", "-F", str(root), "16M"], check=True, capture_output=True)
    vmi = _domain_vmi({"firmware": {"uuid": str(uuid.uuid4()), "bootloader": {"bios": {"useSerial": True}}},
                       "devices": {"disks": [{"name": "root"}]}, "memory": {"guest": "256Mi"}})
    domain = QemuDomain(vmi, tmp_path / "vmi", "127.0.0.1")
    await domain.start(root, "#cloud-config\n", None)
    try:
        assert "-kernel" not in domain.guest.command and domain.os_info == {}
        deadline = time.monotonic() + 120
        while "No bootable device" not in (domain.console.read_text(errors="replace") if domain.console.exists() else ""):
            assert domain.running, domain.failure()
            assert time.monotonic() < deadline, domain.console.read_text(errors="replace")[-2000:]
            await asyncio.sleep(0.5)
        assert "SeaBIOS" in domain.console.read_text(errors="replace") and domain.running
    finally:
        assert not await domain.stop(1)  # SeaBIOS ignores the power button: killed after the grace


@pytest.mark.skipif(bool(missing_tools()), reason=f"the seed needs the Debian packages {', '.join(missing_tools())}")
async def test_seed_is_a_cidata_filesystem_with_the_three_files(tmp_path):
    seed = await make_seed(
        tmp_path / "seed.img",
        user_data="#cloud-config\nruncmd: [true]\n",
        meta_data=meta_data("vmi-1", "ws-alice"),
        network_config="version: 2\n",
    )
    label = subprocess.run(["mlabel", "-s", "-i", str(seed), "::"], capture_output=True, text=True, check=True).stdout
    assert "CIDATA" in label

    def read(name: str) -> str:
        return subprocess.run(["mtype", "-i", str(seed), f"::/{name}"], capture_output=True, text=True, check=True).stdout

    assert read("user-data") == "#cloud-config\nruncmd: [true]\n"
    assert read("meta-data") == '{"instance-id": "vmi-1", "local-hostname": "ws-alice"}\n'
    assert read("network-config") == "version: 2\n"


async def test_accelerator_is_tcg_without_a_usable_kvm_device_and_is_probed_once(tmp_path):
    qemu.forget_accelerator()
    try:
        assert await accelerator(tmp_path / "vmlinuz", kvm_device=str(tmp_path / "no-kvm")) == "tcg"
        # Cached for the process: a second call with a device that would open does not probe again.
        assert await accelerator(tmp_path / "vmlinuz", kvm_device="/dev/null") == "tcg"
    finally:
        qemu.forget_accelerator()


def test_newest_guest_image_takes_only_finished_builds(tmp_path):
    assert newest_guest_image(tmp_path) is None
    for name, finished in (("bookworm-old", True), ("bookworm-half", False)):
        folder = tmp_path / name
        folder.mkdir()
        for file in ("disk.img", "vmlinuz", "initrd.img"):
            (folder / file).write_text("")
        if finished:
            (folder / MARKER).write_text("stamp=old\n")
    image = newest_guest_image(tmp_path)
    assert image is not None and image.folder == tmp_path / "bookworm-old"


def test_the_build_marker_says_the_kernel_and_when_and_nothing_it_lacks(tmp_path):
    (tmp_path / MARKER).write_text("suite=bookworm\nkernel=6.1.0-50-cloud-amd64\nbuilt=2026-12-06T06:51:16Z\n")
    image = GuestImage(tmp_path)
    assert (image.kernel_release(), image.built(), image.marker("stamp")) == ("6.1.0-50-cloud-amd64", "2026-12-06T06:51:16Z", "")


def test_qemu_processes_finds_the_guest_named_and_not_one_whose_name_it_begins(tmp_path):
    # "default_ws" (this module's guest) is a prefix of "default_ws-student" (tests/hub/test_real_guest_hub.py's), and
    # the two may run at once: a test that kills its own guest must not kill the other's. Names of their own here.
    prefix = f"probe-{uuid.uuid4().hex[:8]}_ws"
    # The kernel wakes Popen at exec's close-on-exec step, before it writes the new command line: CI once read an
    # empty one. So each sleeper says it runs before the test reads /proc.
    sleepers = [subprocess.Popen([sys.executable, "-c", "print(flush=True); import time; time.sleep(60)",
                                  "-name", f"guest={name}"], stdout=subprocess.PIPE)
                for name in (f"{prefix}", f"{prefix}-student")]
    for sleeper in sleepers:
        sleeper.stdout.readline()
    try:
        assert qemu_processes(prefix) == [sleepers[0].pid]
        assert qemu_processes(f"{prefix}-student") == [sleepers[1].pid]
    finally:
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()
            sleeper.stdout.close()


# A stand-in for qemu-system-x86_64: serves QMP on the -qmp socket; on system_powerdown it exits when its first
# argument is "obeys", else it carries on (a guest that ignores the power button).
FAKE_QEMU = """#!/usr/bin/env python3
import json, os, socket, sys, time
path = sys.argv[sys.argv.index("-qmp") + 1].split(",")[0].removeprefix("unix:")
server = socket.socket(socket.AF_UNIX)
server.bind(path)
server.listen()
while True:
    conn, _ = server.accept()
    conn.sendall(b'{"QMP": {"version": {}, "capabilities": []}}\\n')
    for line in conn.makefile():
        command = json.loads(line)["execute"]
        conn.sendall(b'{"return": {}}\\n')
        if command == "system_powerdown" and os.environ["FAKE_GUEST"] == "obeys":
            sys.exit(0)
"""


@pytest.mark.parametrize(("behaviour", "clean"), [("obeys", True), ("ignores", False)])
async def test_stop_presses_the_power_button_then_kills_after_the_grace_period(tmp_path, monkeypatch, behaviour, clean):
    fake = tmp_path / "fake-qemu"
    fake.write_text(FAKE_QEMU)
    fake.chmod(0o755)
    monkeypatch.setenv("FAKE_GUEST", behaviour)
    guest = QemuGuest(_spec(tmp_path, name=f"fake-{uuid.uuid4().hex[:8]}"), qemu=str(fake))
    await guest.start()
    assert guest.running
    started = time.monotonic()
    assert await guest.stop(grace=1.0) is clean
    assert time.monotonic() - started < 10
    assert guest.returncode == (0 if clean else -9)
    assert qemu_processes(guest.spec.name) == []
    assert not guest.spec.qmp.exists()


# -- real boots -----------------------------------------------------------------------------------------------


# Every boot (bootcmd runs on each one): what the host reads back at the VMI's address, served from /srv/www by a
# transient unit (--no-block: cloud-init's own unit runs before the units a transient one waits for).
_SERVE = [
    "rm -rf /srv/www && mkdir -p /srv/www",
    "uname -r > /srv/www/uname",
    "systemd-run --no-block --unit=probe-http python3 -m http.server 8888 --bind 0.0.0.0 --directory /srv/www",
]


def _user_data(deb: bytes) -> str:
    """The VM's user data: bootcmd serves; on the instance's first boot, write_files and runcmd install the package
    (cloud-init's per-instance modules) and serve its state."""
    config = {
        "bootcmd": _SERVE,
        "write_files": [{"path": "/var/tmp/wstiny.deb", "encoding": "b64", "content": base64.b64encode(deb).decode()}],
        "runcmd": ["dpkg -i /var/tmp/wstiny.deb", "dpkg-query -W -f '${Status} ${Version}' wstiny > /srv/www/package"],
    }
    return "#cloud-config\n" + json.dumps(config) + "\n"


def _get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return None


NS = "default"
VMS = ("kubevirt.io", "v1", "virtualmachines")
VMIS = ("kubevirt.io", "v1", "virtualmachineinstances")
DVS = ("cdi.kubevirt.io", "v1beta1", "datavolumes")
PVCS = ("", "v1", "persistentvolumeclaims")


def _root_disk() -> dict:
    """The VM's root disk as the spawner makes it, apart from the VM: a DataVolume cloned from the golden image's
    DataSource, Block mode as on RBD."""
    return {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": {"name": "root-ws"},
        "spec": {
            "sourceRef": {"kind": "DataSource", "namespace": "golden-images", "name": "debian-12"},
            "storage": {"accessModes": ["ReadWriteOnce"], "volumeMode": "Block", "storageClassName": "ceph-rbd",
                        "resources": {"requests": {"storage": "4Gi"}}},
        },
    }  # fmt: skip


def _virtual_machine() -> dict:
    """A VM as the spawner makes one: the root disk's DataVolume, cloud-init from a Secret, port 8888, a readiness
    probe, runStrategy Halted."""
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": "ws"},
        "spec": {
            "runStrategy": "Halted",
            "template": {
                "metadata": {"labels": {"kubevirt.io/domain": "ws"}},
                "spec": {
                    "terminationGracePeriodSeconds": 60,
                    # httpGet, not tcpSocket: QEMU's user-mode network accepts a connection to a forwarded port on
                    # the host's side whether or not the guest listens
                    "readinessProbe": {"httpGet": {"path": "/uname", "port": 8888}, "periodSeconds": 1},
                    "domain": {
                        "cpu": {"cores": 2},
                        "memory": {"guest": "1Gi"},
                        "devices": {
                            "disks": [{"name": "root", "disk": {"bus": "virtio"}}, {"name": "cloudinit", "disk": {"bus": "virtio"}}],
                            "interfaces": [{"name": "default", "masquerade": {}, "ports": [{"name": "http", "port": 8888}]}],
                        },
                    },
                    "networks": [{"name": "default", "pod": {}}],
                    "volumes": [
                        {"name": "root", "dataVolume": {"name": "root-ws"}},
                        {"name": "cloudinit", "cloudInitNoCloud": {"secretRef": {"name": "ws-cloudinit"}}},
                    ],
                },
            },
        },
    }


def _status(cluster, what: tuple, name: str) -> dict:
    return (get_object(cluster, what, name) or {}).get("status") or {}


def _ready(cluster) -> bool:
    vmi = _status(cluster, VMIS, "ws")
    return vmi.get("phase") == "Failed" or any(c["type"] == "Ready" and c["status"] == "True" for c in vmi.get("conditions") or [])


async def _start(cluster, *, asked: bool = False) -> dict:
    """runStrategy Always through the start subresource (unless ``asked`` already); the VMI once its guest serves."""
    if not asked:
        vm_action(cluster.store, NS, "ws", "start", {})
    await wait_for(lambda: _ready(cluster), 900, interval=0.5)
    vmi = get_object(cluster, VMIS, "ws")
    assert vmi["status"]["phase"] == "Running", (vmi["status"], _console(cluster, vmi))
    return vmi


def _console(cluster, vmi: dict) -> str:
    folder = cluster.state_dir / "vmis" / vmi["metadata"]["uid"]
    return "".join(p.read_text(errors="replace")[-3000:] for p in (folder / "console.log", folder / "serial.log") if p.exists())


async def _stop(cluster) -> None:
    vm_action(cluster.store, NS, "ws", "stop", {})
    await wait_for(lambda: _status(cluster, VMS, "ws").get("printableStatus") == "Stopped" and get_object(cluster, VMIS, "ws") is None,
                   300, interval=0.5)  # fmt: skip


async def _served(base: str, timeout: float = 300) -> dict[str, str | None]:
    """The files the guest serves, once the first boot's runcmd wrote the package's state."""
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(_get, f"{base}/package"):
        assert time.monotonic() < deadline, f"{base}/package not served within {timeout} s"
        await asyncio.sleep(1)
    return {name: await asyncio.to_thread(_get, f"{base}/{name}") for name in ("uname", "package")}


@pytest.mark.skipif(real_guest_skip_reason() is not None, reason=real_guest_skip_reason() or "")
async def test_a_vm_cloned_from_the_golden_image_boots_under_qemu_and_a_killed_qemu_fails_the_vmi(tmp_path, record_property):
    """The local cluster's real guest, one boot: a VM whose root disk CDI cloned (and grew, its holes kept) from the
    golden image's DataSource boots Debian under QEMU, its own kernel, and its cloud-init installs a package from a
    local .deb; its serial console is its launcher Pod's guest-console-log log; QEMU killed behind virt-handler's back fails the VMI, and a stop leaves no QEMU process and keeps the
    disks. What a user installs surviving stops and starts is the product's test, through the hub:
    tests/hub/test_real_guest_hub.py (one boot here and three there were nine minutes of CI)."""
    image = newest_guest_image()
    assert image is not None
    report: dict = {}
    controllers = ("storage", "cdi", "scheduler", "virt", "nodeagent")
    async with LocalCluster(state_dir=tmp_path / "cluster", controllers=controllers) as cluster:
        cluster.controllers["cdi"].clone_seconds = 0
        started = time.monotonic()
        await make_golden_image(cluster, "golden-images", "debian-12", {}, size="3Gi", disk_image=image.disk)
        report["golden image DataSource (s)"] = round(time.monotonic() - started, 1)
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ws-cloudinit"},
                  "stringData": {"userdata": _user_data(tiny_deb(tmp_path))}}  # fmt: skip
        create_object(cluster, ("", "v1", "secrets"), secret)
        create_object(cluster, VMS, _virtual_machine())

        started = time.monotonic()
        create_object(cluster, DVS, _root_disk())
        vm_action(cluster.store, NS, "ws", "start", {})
        await wait_for(lambda: _status(cluster, DVS, "root-ws").get("phase") == "Succeeded", 300, interval=0.2)
        report["clone (s)"] = round(time.monotonic() - started, 1)
        device = claim_path(cluster, NS, "root-ws") / RAW_DEVICE
        assert device.stat().st_size == 4 << 30  # grown to the claim's size, as an RBD clone is
        assert device.stat().st_blocks * 512 < 2 << 30  # the image's data, not its holes
        vmi = await _start(cluster, asked=True)
        base = f"http://{vmi['status']['interfaces'][0]['ipAddress']}:8888"
        first = await _served(base)
        report["first start to the guest serving (s)"] = round(time.monotonic() - started, 1)
        guest_kernel = image.kernel_release()
        assert first["uname"] == f"{guest_kernel}\n" and first["uname"].strip() != os.uname().release
        assert first["package"] == "install ok installed 1.0"
        assert vmi["status"]["guestOSInfo"]["id"] == "debian"
        assert qemu_processes(f"{NS}_ws")
        # the guest's serial console is the log of its launcher Pod's guest-console-log container (kubectl logs)
        [launcher] = [p for p in cluster.store.objects(cluster.store.kind("", "v1", "pods")) if is_launcher(p)]
        console = PodLog(cluster, launcher, LogOptions.parse({"container": "guest-console-log"}.get)).first()
        assert f"Linux version {guest_kernel}" in console and "Cloud-init v." in console and "\r" not in console

        # QEMU killed behind virt-handler's back: the VMI fails, and a stop leaves the disks
        for pid in qemu_processes(f"{NS}_ws"):
            os.kill(pid, signal.SIGKILL)
        crashed = await wait_for(lambda: [e for e in events_for(cluster, "ws", "SyncFailed") if "QEMU" in e["message"]], 60)
        assert "the guest's QEMU process exited" in crashed[0]["message"]
        await _stop(cluster)  # before runStrategy Always restarts the failed VMI
        assert qemu_processes(f"{NS}_ws") == []
        assert get_object(cluster, VMS, "ws") and get_object(cluster, DVS, "root-ws") and get_object(cluster, PVCS, "root-ws")
        assert device.is_file()
    for key, value in report.items():
        record_property(key, value)
    print(report)


# -- what a VMI asks of its QEMU guest, and what the bootloader reads -----------------------------------------


def _domain_vmi(domain: dict, **spec) -> dict:
    return {"metadata": {"name": "ws", "namespace": NS}, "spec": {"domain": domain, **spec}}


@pytest.mark.parametrize(
    ("domain", "size"),
    [
        ({"cpu": {"sockets": 2, "cores": 2, "threads": 1}, "memory": {"guest": "2Gi"}}, (4, 2048)),
        ({"resources": {"requests": {"cpu": "1500m", "memory": "512Mi"}}}, (2, 512)),
        ({"resources": {"limits": {"memory": "3Gi"}}}, (1, 3072)),
        ({}, (1, 1024)),
    ],
)
def test_the_guest_is_sized_as_kubevirt_sizes_the_domain(domain, size):
    assert guest_size(_domain_vmi(domain)) == size


def test_a_guest_gets_at_most_this_machines_cpus_and_half_its_memory_and_says_what_was_cut():
    """The local cluster's GPU nodes advertise 8 CPUs and 64 GiB: a GPU VM of 8 CPUs and 32 GiB boots on a 2-core
    machine of 23 GiB with what the machine has; the cuts are named (the console log says them)."""
    big = _domain_vmi({"resources": {"requests": {"cpu": "8", "memory": "32Gi"}}})
    assert fitted_size(big, (2, 11776)) == ((2, 11776), [
        "2 of the 8 CPUs asked (this machine has 2)", "11776 MiB of the 32768 MiB of memory asked (half of this machine's)"])
    small = _domain_vmi({"resources": {"requests": {"cpu": "2", "memory": "4Gi"}}})
    assert fitted_size(small, (2, 11776)) == ((2, 4096), [])
    cpus, mib = machine_size()
    assert cpus == os.cpu_count() and 0 < mib * 2 * (1 << 20) <= os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def test_the_vmis_declared_ports_and_its_probes_are_forwarded_and_the_rest_is_named():
    interfaces = [{"name": "default", "ports": [{"name": "http", "port": 8888}, {"port": 22}]}]
    disks = [{"name": "root"}, {"name": "cloudinit"}, {"name": "home"}, {"name": "scratch", "serial": "scratch"}]
    vmi = _domain_vmi(
        {"devices": {"interfaces": interfaces, "disks": disks, "filesystems": [{"name": "team", "virtiofs": {}}]}},
        readinessProbe={"httpGet": {"path": "/", "port": 9000}},
        volumes=[{"name": "cloudinit", "cloudInitNoCloud": {}}, {"name": "home", "persistentVolumeClaim": {"claimName": "h"}},
                 {"name": "scratch", "emptyDisk": {"capacity": "2Gi"}}],
    )
    assert forwarded_ports(vmi) == [22, 8888, 9000]
    assert not_given(vmi, virtiofsd=False) == ["disk home", "filesystem team"]
    assert not_given(vmi) == ["disk home"]  # virtiofsd shares the filesystem; the home disk has no image
    assert not_given(vmi, claim_images={"home": Path("/v/h/disk.img")}) == []
    with_gpu = copy.deepcopy(vmi)
    with_gpu["spec"]["domain"]["devices"]["hostDevices"] = [{"name": "gpu0", "deviceName": "nvidia.com/A100"}]
    assert not_given(with_gpu, claim_images={"home": Path("/v/h/disk.img")}) == ["host device gpu0 (nvidia.com/A100)"]
    assert claim_disks(vmi) == ["home"]
    assert empty_disks(vmi) == [("scratch", 2 << 30, "scratch")]  # a sparse file of its capacity
    assert shared_folders(vmi, {"team": Path("/v/team"), "home": Path("/v/home")}) == {"team": Path("/v/team")}


def test_a_disk_on_a_claim_is_its_disk_image_made_sparse_at_the_claims_size_when_it_has_none(tmp_path):
    """vm_home_via = "disk": KubeVirt makes disk.img on an empty Filesystem-mode PVC; an emulated guest's disk (a
    folder of files) is not given; the disks follow the VMI's order, each with its serial."""
    fresh = tmp_path / "fresh" / "disk.img"
    fresh.mkdir(parents=True)  # what the node agent makes first, not knowing the guest is real
    assert claim_disk_image(fresh, 3 << 30) == fresh and fresh.stat().st_size == 3 << 30 and fresh.stat().st_blocks == 0
    fresh.write_bytes(b"formatted by the guest")
    assert claim_disk_image(fresh, 3 << 30) == fresh and fresh.read_bytes() == b"formatted by the guest"  # kept
    emulated = tmp_path / "emulated" / "disk.img"
    (emulated / "etc").mkdir(parents=True)
    assert claim_disk_image(emulated, 1 << 30) is None and (emulated / "etc").is_dir()

    disks = [{"name": "root"}, {"name": "cloudinit"}, {"name": "home", "serial": "home"}, {"name": "scratch", "serial": "scratch"}]
    vmi = _domain_vmi({"devices": {"disks": disks}}, volumes=[
        {"name": "cloudinit", "cloudInitNoCloud": {}}, {"name": "home", "persistentVolumeClaim": {"claimName": "h"}},
        {"name": "scratch", "emptyDisk": {"capacity": "1Gi"}}])
    assert further_disks(vmi, tmp_path / "disks", {"home": fresh}) == [(fresh, "home"), (tmp_path / "disks" / "scratch.img", "scratch")]


def test_an_empty_disk_is_a_virtio_disk_with_its_serial_between_the_root_disk_and_the_seed(tmp_path):
    command = qemu_command(_spec(tmp_path, disks=((tmp_path / "scratch.img", "scratch"), (tmp_path / "b.img", None))))
    drives = _option(command, "-drive")
    assert drives[1:] == [
        f"file={tmp_path / 'scratch.img'},format=raw,if=none,id=disk1,cache=writeback,discard=unmap",
        f"file={tmp_path / 'b.img'},format=raw,if=none,id=disk2,cache=writeback,discard=unmap",
        f"file={tmp_path / 'seed.img'},format=raw,if=none,id=disk3,readonly=on",
    ]
    # in slot order, so the guest names them in the VMI's order (a scratch disk once took /dev/vda from the root disk)
    assert [d for d in _option(command, "-device") if d.startswith("virtio-blk-pci")] == [
        "virtio-blk-pci,drive=disk0,bus=pcie.0,addr=0x10",
        "virtio-blk-pci,drive=disk1,bus=pcie.0,addr=0x11,serial=scratch",
        "virtio-blk-pci,drive=disk2,bus=pcie.0,addr=0x12",
        "virtio-blk-pci,drive=disk3,bus=pcie.0,addr=0x13",
    ]


def _ext4(tmp_path: Path, files: dict[str, str], links: dict[str, str]) -> Path:
    tree = tmp_path / "tree"
    for name, text in files.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(text)
    for name, target in links.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).symlink_to(target)
    image = tmp_path / "disk.img"
    subprocess.run(["mkfs.ext4", "-q", "-F", "-d", str(tree), str(image), "8M"], check=True, capture_output=True)
    return image


@pytest.mark.skipif(shutil.which("debugfs") is None or shutil.which("mkfs.ext4") is None, reason="e2fsprogs is needed")
async def test_the_bootloader_boots_what_the_disks_links_name_and_says_what_is_missing(tmp_path):
    files = {"boot/vmlinuz-6.1.0-9": "kernel 9", "boot/initrd.img-6.1.0-9": "initrd 9", "usr/lib/os-release": "ID=debian\n"}
    links = {"vmlinuz": "boot/vmlinuz-6.1.0-9", "initrd.img": "boot/initrd.img-6.1.0-9", "etc/os-release": "../usr/lib/os-release"}
    disk = _ext4(tmp_path, files, links)
    out = tmp_path / "out"
    out.mkdir()
    kernel, initrd = await boot_files(disk, out)
    assert (kernel.read_text(), initrd.read_text()) == ("kernel 9", "initrd 9")
    assert await read_file(disk, "/etc/os-release") == b"ID=debian\n"
    assert await read_file(disk, "/etc/missing") is None

    bare = _ext4(tmp_path / "bare", {"etc/hostname": "ws\n"}, {})
    with pytest.raises(BootError, match="has no /vmlinuz: no kernel is installed"):
        await boot_files(bare, out)
    zeros = tmp_path / "zeros.img"  # a disk with no filesystem at all
    zeros.write_bytes(bytes(1 << 20))
    with pytest.raises(BootError, match="is not an ext4 filesystem"):
        await boot_files(zeros, out)


async def test_virt_tail_hands_on_whole_lines_without_their_ends_and_holds_a_line_being_written(tmp_path):
    """The launcher's guest-console-log container (KubeVirt's virt-tail, ``CompleteLines``): a login prompt with no
    line end yet is not passed on until its line is."""
    console, lines = tmp_path / "serial.log", []
    tail = asyncio.ensure_future(virt_tail(console, lines.append, interval=0.01))
    await asyncio.sleep(0.05)  # QEMU has not made the file yet
    console.write_bytes(b"Welcome to \x1b[1mDebian\x1b[0m!\r\r\nws login: ")
    await wait_for(lambda: lines, 5, interval=0.01)
    await asyncio.sleep(0.05)
    assert lines == ["Welcome to \x1b[1mDebian\x1b[0m!"]
    with console.open("ab") as f:
        f.write(b"[ 41.0] cloud-init[445]: Cloud-init v. 22.4.2 running 'modules:final'\r\n")
    tail.cancel()
    await asyncio.wait([tail])  # a last read as it ends
    assert lines[1:] == ["ws login: [ 41.0] cloud-init[445]: Cloud-init v. 22.4.2 running 'modules:final'"]
