"""A VM's serial console read for its boot (workspacespawner.backends.vm.guestconsole and .consolelog).

The console lines are a real Debian 12 guest's (the golden image tools/golden-image builds, booted under QEMU by the
local cluster), trimmed to the lines that matter and kept with their colour codes and carriage returns.
"""

from __future__ import annotations

import asyncio

import pytest
from kubernetes_asyncio.client.rest import ApiException

from workspacespawner.backends.vm import guestconsole
from workspacespawner.backends.vm.consolelog import ConsoleFollower
from workspacespawner.backends.vm.guestconsole import IDE_MISSING, ConsoleReader, Stage

KERNEL = "[    0.000000] Linux version 6.1.0-50-cloud-amd64 (debian-kernel@lists.debian.org) (gcc-12 (Debian 12.2.0-14)"
WELCOME = "Welcome to \x1b[1mDebian GNU/Linux 12 (bookworm)\x1b[0m!\r"
CLOUD_INIT = "[   18.402432] cloud-init[328]: Cloud-init v. 22.4.2 running 'init-local' at Mon, 07 Dec 2026 00:24:53 +0000.\r"
IDE_STARTED = "[\x1b[0;32m  OK  \x1b[0m] Started \x1b[0;1;39mworkspace-ide.serv…ver (managed by workspacespawner).\r\r"
MULTI_USER = "[\x1b[0;32m  OK  \x1b[0m] Reached target \x1b[0;1;39mmulti-user.target\x1b[0m - Multi-User System.\r\r"
GETTY = "[\x1b[0;32m  OK  \x1b[0m] Started \x1b[0;1;39mserial-getty@ttyS0…rvice\x1b[0m - Serial Getty on ttyS0.\r\r"
LOGIN = "ws-student login: [   41.098744] cloud-init[445]: Cloud-init v. 22.4.2 running 'modules:final' at Mon.\r"
IMAGE = "VM golden image golden-images/debian-12"


def read(*lines: str) -> guestconsole.Boot:
    reader = ConsoleReader()
    for line in lines:
        reader.feed(line)
    return reader.boot


def test_a_boot_goes_through_its_stages_and_the_page_says_each():
    stages = [read(*[KERNEL, WELCOME, CLOUD_INIT, IDE_STARTED][:n]).stage for n in range(5)]
    assert stages == [Stage.POWERED_ON, Stage.KERNEL, Stage.SYSTEM, Stage.CLOUD_INIT, Stage.IDE]
    boot = read(KERNEL, WELCOME)
    assert guestconsole.progress_message(boot, "node-1") == "Debian GNU/Linux 12 (bookworm) is starting its services on node-1"
    assert "(Linux 6.1.0-50-cloud-amd64)" in guestconsole.progress_message(read(KERNEL), None)
    parts = [guestconsole.STAGE_PART[stage] for stage in Stage]
    assert parts == sorted(parts) and parts[-1] < 1


def test_a_good_boot_is_never_a_failure():
    boot = read(KERNEL, WELCOME, CLOUD_INIT, IDE_STARTED, MULTI_USER, GETTY, LOGIN)
    assert boot.boot_done and boot.cloud_init
    assert guestconsole.image_failure(boot, IMAGE, "jupyterhub-singleuser") is None


@pytest.mark.parametrize("done", [MULTI_USER, GETTY, "ws-student login: \r"])
def test_a_boot_done_without_cloud_init_names_what_the_image_lacks(done):
    assert guestconsole.image_failure(read(KERNEL, WELCOME), IMAGE, "x") is None  # still booting: wait
    reason, sentence = guestconsole.image_failure(read(KERNEL, WELCOME, done), IMAGE, "x")
    assert reason == "no-cloud-init"
    assert sentence.startswith(f"The {IMAGE} booted without running cloud-init")
    assert "disks are kept" in sentence


def test_the_ide_missing_and_a_kernel_panic_are_failures_in_our_words():
    reason, sentence = guestconsole.image_failure(
        read(KERNEL, CLOUD_INIT, f"{IDE_MISSING}: code-server\r"), IMAGE, "jupyterhub-singleuser")
    assert reason == "no-ide" and f"The {IMAGE} has no jupyterhub-singleuser" in sentence
    panic = read(KERNEL, "[    2.1] Kernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(0,0)")
    reason, sentence = guestconsole.image_failure(panic, IMAGE, "x")
    assert reason == "kernel-panic" and "unknown-block" not in sentence


#: A Debian 12 guest whose system disk has no block left, as a real boot of one wrote them (tests/hub/
#: test_real_guest_images_hub.py's ``full-disk`` image): systemd, journald and cloud-init meet ENOSPC, cloud-init
#: dies before its first "running" line, and the boot still reaches a login prompt.
FULL_DISK = (
    "[   24.626143] systemd[1]: Failed to write /etc/machine-id: No space left on device\r",
    "[   44.754419] systemd-journald[193]: Failed to open system journal: No space left on device\r",
    "[   84.465123] cloud-init[201]: OSError: [Errno 28] No space left on device: '/var/lib/cloud'\r",
    "[\x1b[0;1;31mFAILED\x1b[0m] Failed to start \x1b[0;1;39mcloud-init\u2026l cloud-init job (pre-networking).\r",
)


def test_a_full_system_disk_is_named_not_blamed_on_the_image():
    reason, sentence = guestconsole.image_failure(read(KERNEL, WELCOME, *FULL_DISK, GETTY), IMAGE, "x")
    assert reason == "disk-full"
    assert sentence.startswith("Your virtual machine's system disk is full") and IMAGE not in sentence
    assert "disks are kept" in sentence and "/var/lib/cloud" not in sentence
    # a start that times out on one says so too; a new boot (the disk grown, or rebuilt) starts afresh
    assert "system disk is full" in guestconsole.timeout_detail(read(KERNEL, WELCOME, FULL_DISK[0]))
    assert not read(KERNEL, *FULL_DISK, KERNEL).disk_full


#: SeaBIOS on the serial console (QEMU 7.2's, ``-machine graphics=off``) with a disk it cannot boot, as a real run
#: of it wrote them (an ext4 disk with no boot loader): the hard disk, then iPXE's network boot, then the end.
SEABIOS_NOTHING_TO_BOOT = (
    "\x1bc\x1b[?7l\x1b[2J\x1b[0mSeaBIOS (version 1.16.2-debian-1.16.2-1)\r",
    "Booting from Hard Disk...\r",
    "Boot failed: not a bootable disk\r",
    "Nothing to boot: No such file or directory (http://ipxe.org/2d03e13b)\r",
    "No bootable device.\r",
)


@pytest.mark.parametrize("end", [SEABIOS_NOTHING_TO_BOOT[-1], "BdsDxe: No bootable option or device was found.\r"])
def test_firmware_that_finds_nothing_to_boot_fails_the_start_in_our_words(end):
    assert guestconsole.image_failure(read(*SEABIOS_NOTHING_TO_BOOT[:-1]), IMAGE, "x") is None  # it tries the network
    reason, sentence = guestconsole.image_failure(read(*SEABIOS_NOTHING_TO_BOOT[:-1], end), IMAGE, "x")
    assert reason == "no-boot" and sentence.startswith(f"The virtual machine's firmware found nothing to boot on the disk of the {IMAGE}")
    assert "Bds" not in sentence and "ipxe" not in sentence
    # once a kernel runs, the words are the guest's own text, not the firmware's verdict
    assert not read(KERNEL, "echo No bootable device.").unbootable


def test_a_guest_booting_again_starts_a_new_boot():
    assert read(KERNEL, WELCOME, CLOUD_INIT, KERNEL) == guestconsole.Boot(Stage.KERNEL, kernel="6.1.0-50-cloud-amd64")


def test_what_the_console_says_is_shown_only_when_it_is_plain():
    boot = read("Linux version <script>alert(1)</script>", "Welcome to \x1b[1m<b>x</b>\x1b[0m!")
    assert boot.kernel is None and boot.system is None
    assert "<" not in guestconsole.progress_message(boot, None)


@pytest.mark.parametrize(("lines", "says"), [
    (("SeaBIOS (version 1.16.2-debian-1.16.2-1)", "Booting from Hard Disk..."), "Its kernel never started"),
    ((KERNEL, WELCOME), "still booting"),
    ((KERNEL, CLOUD_INIT), "cloud-init was still setting it up"),
    ((KERNEL, CLOUD_INIT, IDE_STARTED), "Its server started but never answered"),
])
def test_a_timeout_says_how_far_the_boot_got(lines, says):
    assert says in guestconsole.timeout_detail(read(*lines))
    assert guestconsole.timeout_detail(None) == ""


# -- following the launcher Pod's console container -------------------------------------------------------------


def launcher(uid: str = "pod-1", *, container: bool = True, started: bool = True) -> dict:
    containers = [{"name": "compute"}] + ([{"name": "guest-console-log"}] if container else [])
    state = {"running": {}} if started else {"waiting": {"reason": "ContainerCreating"}}
    return {"metadata": {"name": "virt-launcher-ws-abcde", "namespace": "jhub", "uid": uid},
            "spec": {"containers": containers},
            "status": {"containerStatuses": [{"name": c["name"], "state": state} for c in containers]}}


class Lines:
    """An aiohttp response's ``content``: the lines, then the stream ends."""

    def __init__(self, lines):
        self.lines = [line.encode() + b"\n" for line in lines]
        self.released = False

    @property
    def content(self):
        return self

    def __aiter__(self):
        return self

    async def __anext__(self):
        if not self.lines:
            raise StopAsyncIteration
        return self.lines.pop(0)

    def release(self):
        self.released = True


class FakeCore:
    """``pods/log`` answering ``answers`` in turn, then empty answers (a kubelet with nothing to say yet)."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.calls = []

    async def read_namespaced_pod_log(self, name, namespace, **kwargs):
        self.calls.append((name, namespace, kwargs["container"], kwargs["follow"]))
        answer = self.answers.pop(0) if self.answers else Lines([])
        if isinstance(answer, Exception):
            raise answer
        return answer


async def run_briefly(follower: ConsoleFollower, seconds: float = 0.5) -> None:
    task = asyncio.ensure_future(follower.run())
    await asyncio.sleep(seconds)
    task.cancel()
    await asyncio.wait([task])


async def test_the_follower_reads_the_console_once_its_container_runs(monkeypatch):
    monkeypatch.setattr("workspacespawner.backends.vm.consolelog.RETRY_SECONDS", 0.01)
    stream = Lines([KERNEL, WELCOME, CLOUD_INIT])
    core = FakeCore(ApiException(status=400, reason="Bad Request"), stream)
    pods = [launcher(started=False)]
    follower = ConsoleFollower(core, lambda: pods[-1])
    task = asyncio.ensure_future(follower.run())
    await asyncio.sleep(0.3)
    assert core.calls == [] and follower.boot is None  # not before the container started
    pods.append(launcher())
    await asyncio.sleep(0.5)
    task.cancel()
    await asyncio.wait([task])
    assert core.calls[:2] == [("virt-launcher-ws-abcde", "jhub", "guest-console-log", True)] * 2
    assert follower.boot.stage is Stage.CLOUD_INIT and stream.released  # an empty answer after it changes nothing


async def test_a_stream_that_ends_while_its_container_runs_is_opened_again_and_read_afresh(monkeypatch):
    """As on the real plane: the launcher Pod runs before QEMU writes a line, so the first answers may be empty."""
    monkeypatch.setattr("workspacespawner.backends.vm.consolelog.RETRY_SECONDS", 0.01)
    monkeypatch.setattr("workspacespawner.backends.vm.consolelog.INTERVAL", 0.01)
    core = FakeCore(Lines([]), Lines([]), Lines([KERNEL]), Lines([KERNEL, WELCOME]))
    pods = [launcher()]
    follower = ConsoleFollower(core, lambda: pods[-1])
    task = asyncio.ensure_future(follower.run())
    for _ in range(500):
        if follower.boot is not None and follower.boot.stage is Stage.SYSTEM:
            break
        await asyncio.sleep(0.01)
    # the fourth answer holds the whole log again, read afresh: the same boot, further on (not a second boot)
    assert follower.boot == guestconsole.Boot(Stage.SYSTEM, kernel="6.1.0-50-cloud-amd64", system="Debian GNU/Linux 12 (bookworm)")
    pods.append({**launcher(), "status": {"containerStatuses": [{"name": "guest-console-log", "state": {"terminated": {"exitCode": 0}}}]}})
    await asyncio.sleep(0.3)
    calls = len(core.calls)
    await asyncio.sleep(0.3)
    task.cancel()
    await asyncio.wait([task])
    assert len(core.calls) == calls  # a container that ended is not asked again


async def test_the_follower_follows_a_new_launcher_and_gives_up_on_a_console_out_of_reach():
    pods = [launcher("pod-1")]
    core = FakeCore(Lines([KERNEL, WELCOME]), Lines([KERNEL]), ApiException(status=403, reason="Forbidden"))
    follower = ConsoleFollower(core, lambda: pods[-1])
    task = asyncio.ensure_future(follower.run())
    await asyncio.sleep(0.3)
    assert follower.boot.stage is Stage.SYSTEM and len(core.calls) == 1  # opened again only after RETRY_SECONDS
    pods.append(launcher("pod-2"))  # KubeVirt booted the VM again
    await asyncio.sleep(0.3)
    assert follower.boot.stage is Stage.KERNEL
    pods.append(launcher("pod-3"))
    await asyncio.sleep(0.3)
    assert task.done() and task.exception() is None  # 403: the start goes on without the console


async def test_no_console_container_means_no_console_read():
    core = FakeCore()
    follower = ConsoleFollower(core, lambda: launcher(container=False))
    await run_briefly(follower, 0.2)
    assert core.calls == [] and follower.boot is None
