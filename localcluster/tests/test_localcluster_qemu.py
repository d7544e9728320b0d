"""The QEMU guest: its command line, the NoCloud seed, the accelerator probe, and real boots of the golden image.

The boots (:func:`test_golden_image_boots_serves_and_keeps_what_was_installed`)
need ``qemu-system-x86_64``, dosfstools, mtools, ``dpkg-deb`` and the image
tools/golden-image/build.sh builds; each missing piece skips them with the
reason (under ``$CI`` too, for now). Each software-emulated (TCG) boot takes
about a minute on two cores.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from localcluster.cidata import make_seed, meta_data, missing_tools
from localcluster.guestimage import MARKER, newest_guest_image
from localcluster.prometheus import free_port
from localcluster.qemu import GuestSpec, QemuGuest, accelerator, qemu_command

from localcluster import qemu


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
    # The root disk first (/dev/vda), the seed read-only after it.
    assert _option(command, "-drive") == [
        f"file={tmp_path / 'root.img'},format=raw,if=virtio,cache=writeback,discard=unmap",
        f"file={tmp_path / 'seed.img'},format=raw,if=virtio,readonly=on",
    ]
    assert _option(command, "-netdev") == ["user,id=net0,hostfwd=tcp:127.0.0.1:41001-:8888,hostfwd=tcp:127.0.0.1:41002-:8080"]
    assert _option(command, "-serial") == [f"file:{tmp_path / 'console.log'}"]
    assert _option(command, "-qmp") == [f"unix:{tmp_path / 'qmp.sock'},server=on,wait=off"]


def test_command_line_kvm_passes_the_host_cpu_and_no_seed_means_one_disk(tmp_path):
    command = qemu_command(_spec(tmp_path, accel="kvm", seed=None, disk_format="qcow2", forwards={}))
    assert _option(command, "-machine") == ["q35,accel=kvm"]
    assert _option(command, "-cpu") == ["host"]
    assert _option(command, "-drive") == [f"file={tmp_path / 'root.img'},format=qcow2,if=virtio,cache=writeback,discard=unmap"]
    assert _option(command, "-netdev") == ["user,id=net0"]


@pytest.mark.parametrize(("changes", "message"), [({"accel": "hvf"}, "accelerator 'hvf'"), ({"cpus": 0}, "at least 1 CPU")])
def test_command_line_refuses_what_qemu_cannot_run(tmp_path, changes, message):
    with pytest.raises(ValueError, match=message):
        qemu_command(_spec(tmp_path, **changes))


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
    assert _qemu_processes(guest.spec.name) == []
    assert not guest.spec.qmp.exists()


# -- real boots -----------------------------------------------------------------------------------------------


def _boot_skip_reason() -> str | None:
    if shutil.which(qemu.QEMU) is None:
        return "qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)"
    if missing := missing_tools():
        return f"the cloud-init seed needs {', '.join(missing)} (apt-get install)"
    if shutil.which("dpkg-deb") is None or shutil.which("qemu-img") is None:
        return "dpkg-deb and qemu-img are needed (apt-get install dpkg qemu-utils)"
    if newest_guest_image() is None:
        return "no golden image in the cache: run tools/golden-image/build.sh (as root)"
    return None


def _tiny_deb(tmp_path: Path) -> bytes:
    """A package ``wstiny`` 1.0 with one file, built here with dpkg-deb."""
    root = tmp_path / "wstiny"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "usr/share/wstiny").mkdir(parents=True)
    (root / "usr/share/wstiny/hello").write_text("hello from wstiny\n")
    (root / "DEBIAN/control").write_text(
        "Package: wstiny\nVersion: 1.0\nArchitecture: all\nMaintainer: workspacespawner tests <tests@example.org>\n"
        "Description: a file, to see that what a user installs stays\n"
    )
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(root), str(tmp_path / "wstiny.deb")], check=True, capture_output=True)
    return (tmp_path / "wstiny.deb").read_bytes()


# Every boot: what the host reads back through the forwarded port, served from /srv/www by a transient unit.
_SERVE = [
    "rm -rf /srv/www && mkdir -p /srv/www",
    "uname -r > /srv/www/uname",
    "cat /opt/persist/marker > /srv/www/marker || true",
    "dpkg-query -W -f '${Status} ${Version}' wstiny > /srv/www/package || true",
    "cat /usr/share/wstiny/hello > /srv/www/hello || true",
    "systemd-run --unit=probe-http python3 -m http.server 8888 --bind 0.0.0.0 --directory /srv/www",
]


def _first_boot_user_data(deb: bytes) -> str:
    config = {
        "write_files": [
            {"path": "/opt/persist/marker", "content": "written in the first boot\n"},
            {"path": "/var/tmp/wstiny.deb", "encoding": "b64", "content": base64.b64encode(deb).decode()},
        ],
        "runcmd": ["dpkg -i /var/tmp/wstiny.deb", *_SERVE],
    }
    return "#cloud-config\n" + json.dumps(config) + "\n"


def _later_boot_user_data() -> str:
    return "#cloud-config\n" + json.dumps({"runcmd": _SERVE}) + "\n"


def _get(port: int, name: str) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/{name}", timeout=5) as response:
            return response.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return None


def _qemu_processes(name: str) -> list[int]:
    """Processes whose command line names guest ``name``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if f"guest={name}".encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


async def _boot(tmp_path: Path, image, disk: Path, user_data: str, instance: str, accel: str, report: dict) -> dict[str, str | None]:
    """Boot ``disk`` with ``user_data``, read the served files, shut the guest down; what was served."""
    name = f"wsguest-{uuid.uuid4().hex[:8]}"
    port = free_port()
    seed = await make_seed(tmp_path / f"{instance}.seed", user_data=user_data, meta_data=meta_data(instance, "wsguest"))
    spec = GuestSpec(
        name=name, cpus=2, memory_mib=1024, disk=disk, disk_format="qcow2", kernel=image.kernel, initrd=image.initrd,
        console=tmp_path / f"{instance}.console", qmp=tmp_path / f"{instance}.qmp", seed=seed, forwards={port: 8888}, accel=accel,
    )  # fmt: skip
    guest = QemuGuest(spec)
    started = time.monotonic()
    await guest.start()
    try:
        await guest.wait_for(lambda: "finished at" in guest.console_text(), timeout=600, what="cloud-init finished")
        report[f"{instance} cloud-init finished (s)"] = round(time.monotonic() - started, 1)
        await guest.wait_for(lambda: asyncio.to_thread(_get, port, "uname"), timeout=60, what="the guest's HTTP server")
        served = {file: await asyncio.to_thread(_get, port, file) for file in ("uname", "marker", "package", "hello")}
    finally:
        stopping = time.monotonic()
        clean = await guest.stop(grace=120)
        report[f"{instance} ACPI shutdown (s)"] = round(time.monotonic() - stopping, 1)
    assert clean, f"the guest did not power off on the ACPI button; console ends:\n{guest.console_text()[-2000:]}"
    assert guest.returncode is not None
    assert _qemu_processes(name) == []
    return served


@pytest.mark.skipif(_boot_skip_reason() is not None, reason=_boot_skip_reason() or "")
async def test_golden_image_boots_serves_and_keeps_what_was_installed(tmp_path, record_property):
    image = newest_guest_image()
    assert image is not None
    # One disk for both boots: a qcow2 overlay over the golden image (the image itself stays as built).
    disk = tmp_path / "root.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", str(image.disk), str(disk)], check=True)
    accel = await accelerator(image.kernel)
    report: dict = {"accelerator": accel}

    first = await _boot(tmp_path, image, disk, _first_boot_user_data(_tiny_deb(tmp_path)), "boot-1", accel, report)
    guest_kernel = (image.folder / MARKER).read_text().split("kernel=")[1].splitlines()[0]
    assert first["uname"] == f"{guest_kernel}\n"
    assert first["uname"].strip() != os.uname().release
    assert first["package"] == "install ok installed 1.0"

    second = await _boot(tmp_path, image, disk, _later_boot_user_data(), "boot-2", accel, report)
    assert second["marker"] == "written in the first boot\n"
    assert second["package"] == "install ok installed 1.0"
    assert second["hello"] == "hello from wstiny\n"
    for key, value in report.items():
        record_property(key, value)
    print(report)
