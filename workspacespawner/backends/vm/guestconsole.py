"""What a VM's serial console tells of its boot: how far the guest got, and what its image lacks.

KubeVirt (v1.1 and later) streams a guest's first serial port to the log of
the ``guest-console-log`` container of the VMI's virt-launcher Pod, unless
an operator turned that off (``virtualMachineOptions.disableSerialConsoleLog``
in the KubeVirt resource) or the VMI did (``logSerialConsole: false``). A
Linux guest with ``console=ttyS0`` on its kernel command line, as cloud
images have, writes its boot there: the kernel's first line, systemd's
welcome, cloud-init's stages (its units write to ``journal+console``),
systemd's ``Started`` and ``Reached target`` lines and, once the boot is
done, a ``login:`` prompt. KubeVirt's ``virt-tail`` passes on whole lines
only, so the prompt (no line end) shows only once something follows it.

:class:`ConsoleReader` reads those lines as they come and keeps a
:class:`Boot`: the :class:`Stage` reached and the facts that end a start
early. Read here, never shown: what a user reads is our own sentences
(:func:`progress_message`, :func:`image_failure`, :func:`timeout_detail`),
with at most the kernel release and the OS name the console gave (text made
of a restricted alphabet, see :data:`_SAFE`).

These facts end a start before its timeout, as waiting cannot help:

* the boot done (systemd reached ``multi-user.target``, started the serial
  getty, or a ``login:`` prompt) with no line of cloud-init before it: the
  image has no cloud-init (or it is turned off), so nothing sets up the
  user or the server. cloud-init's ``init-local`` and ``init`` stages come
  before those (their units are ordered before ``network-online.target``
  and ``systemd-user-sessions.service``), and each writes a
  ``Cloud-init v. ...`` line;
* the line :data:`IDE_MISSING` that ``workspace-ide.service`` writes to the
  console when the IDE command is not in the image
  (:func:`~.manifests.ide_unit`);
* a kernel panic (the image's kernel cannot mount its root, or crashed);
* the boot done without cloud-init where the console also said ``No space
  left on device`` (systemd, journald or cloud-init could not write): the
  system disk is full, and cloud-init died before its first line. That is
  the user's disk, not the image: the sentence says so. A full disk met
  later (cloud-init ran) leaves the start to its timeout, whose sentence
  names it (:func:`timeout_detail`);
* the firmware found nothing to boot: SeaBIOS's ``No bootable device.``
  (it writes to the serial console as the VM asks,
  ``firmware.bootloader.bios.useSerial``) or OVMF's ``No bootable option or
  device was found``: the image's disk has no boot loader, or no kernel for it.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, replace

#: The virt-launcher Pod's container whose log is the guest's serial console (KubeVirt's ``guest-console-log``).
CONTAINER = "guest-console-log"
#: The line ``workspace-ide.service`` writes to the console when the IDE command is not in the image.
IDE_MISSING = "workspacespawner: the IDE command is not in this image"

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_KERNEL = re.compile(r"\bLinux version (\S+)")
_WELCOME = re.compile(r"\bWelcome to (.+?)!")
_CLOUD_INIT = re.compile(r"\bCloud-init v\. \S+ (running|finished)")
_IDE_STARTED = re.compile(r"\bStarted workspace-ide\.serv")
_BOOT_DONE = re.compile(r"Reached target .*\b(multi-user|graphical)\.target|Started .*Serial Getty on|\S login: ")
_PANIC = re.compile(r"\bKernel panic - not syncing: ?(.*)")
_NO_SPACE = re.compile(r"\bNo space left on device\b")
_NO_BOOT = re.compile(r"\bNo bootable device\b|\bNo bootable option or device was found")
#: What a value read from the console may hold to appear in a sentence (else it is left out).
_SAFE = re.compile(r"[A-Za-z0-9 ._+:/()-]{1,80}")


class Stage(enum.IntEnum):
    """How far a guest's boot got, in the order a boot goes."""

    POWERED_ON = 0  # nothing on the console yet: firmware, boot loader
    KERNEL = 1  # the kernel started
    SYSTEM = 2  # the init system (systemd) started
    CLOUD_INIT = 3  # cloud-init sets up the user, disks and server
    IDE = 4  # workspace-ide.service started; the server has yet to answer


@dataclass(frozen=True)
class Boot:
    """What a guest's console showed so far: the :class:`Stage`, the kernel release and OS name it gave (each None
    until seen, or when not fit to show), whether cloud-init ran, the boot done, the IDE missing, a kernel panic, the
    firmware finding nothing to boot, a write that found the disk full."""

    stage: Stage = Stage.POWERED_ON
    kernel: str | None = None
    system: str | None = None
    cloud_init: bool = False
    boot_done: bool = False
    ide_missing: bool = False
    panic: bool = False
    unbootable: bool = False
    disk_full: bool = False


def _safe(text: str) -> str | None:
    text = text.strip()
    return text if _SAFE.fullmatch(text) else None


class ConsoleReader:
    """Reads a guest's console line by line (:meth:`feed`) into :attr:`boot`; a restarted guest's first kernel line
    starts a new :class:`Boot`."""

    def __init__(self) -> None:
        self.boot = Boot()

    def feed(self, line: str) -> Boot:
        line = _ANSI.sub("", line)
        boot = self.boot
        if match := _KERNEL.search(line):
            boot = Boot(Stage.KERNEL, kernel=_safe(match.group(1)))
        elif match := _WELCOME.search(line):
            boot = replace(boot, stage=max(boot.stage, Stage.SYSTEM), system=boot.system or _safe(match.group(1)))
        elif _CLOUD_INIT.search(line):
            boot = replace(boot, stage=max(boot.stage, Stage.CLOUD_INIT), cloud_init=True)
        elif _IDE_STARTED.search(line):
            boot = replace(boot, stage=Stage.IDE)
        elif IDE_MISSING in line:
            boot = replace(boot, ide_missing=True)
        elif _PANIC.search(line):
            boot = replace(boot, panic=True)
        elif _NO_BOOT.search(line) and boot.stage == Stage.POWERED_ON:
            boot = replace(boot, unbootable=True)
        elif _NO_SPACE.search(line):
            boot = replace(boot, disk_full=True)
        if _BOOT_DONE.search(line):  # a login prompt may share its line with cloud-init's next stage
            boot = replace(boot, boot_done=True)
        self.boot = boot
        return boot


#: Where each stage puts the spawn page's bar on the way from "the guest is booting" to "the server answers".
STAGE_PART = {Stage.POWERED_ON: 0.0, Stage.KERNEL: 0.2, Stage.SYSTEM: 0.4, Stage.CLOUD_INIT: 0.6, Stage.IDE: 0.8}


def progress_message(boot: Boot, node: str | None) -> str:
    """The spawn page's line for a guest at ``boot`` (on ``node``)."""
    where = f" on {node}" if node else ""
    if boot.stage == Stage.POWERED_ON:
        return f"Your virtual machine is powering on{where}"
    if boot.stage == Stage.KERNEL:
        release = f" (Linux {boot.kernel})" if boot.kernel else ""
        return f"Your virtual machine's kernel is booting{release}{where}"
    if boot.stage == Stage.SYSTEM:
        return f"{boot.system or 'Its operating system'} is starting its services{where}"
    if boot.stage == Stage.CLOUD_INIT:
        return "cloud-init is setting up your user, your disks and your server"
    return "Your server has started in the virtual machine; waiting for it to answer"


def image_failure(boot: Boot, image: str, command: str) -> tuple[str, str] | None:
    """``(reason word, sentence)`` when the console shows that ``image`` (the golden image, as a sentence names it)
    cannot run this workspace's IDE ``command``; None while waiting may still help. Reason words: ``no-boot``,
    ``no-cloud-init``, ``no-ide``, ``kernel-panic``, ``disk-full``."""
    kept = "Your virtual machine was stopped and your disks are kept; please ask an administrator to fix the image."
    if boot.unbootable:
        return ("no-boot", f"The virtual machine's firmware found nothing to boot on the disk of the {image}: it has no "
                f"boot loader, or no kernel for it, so your virtual machine cannot start. {kept}")
    if boot.panic:
        return ("kernel-panic", f"The kernel of the {image} stopped with a panic while it booted, "
                f"so your virtual machine cannot start. {kept}")
    if boot.ide_missing:
        return ("no-ide", f"The {image} has no {command}, the server this profile starts, "
                f"so your virtual machine cannot serve you. {kept}")
    if boot.boot_done and not boot.cloud_init and boot.disk_full:
        return ("disk-full", "Your virtual machine's system disk is full, so cloud-init could not set up your user "
                "and your server. Your virtual machine was stopped and your disks are kept; on the Workspaces page "
                "you can restore a snapshot of the system disk or rebuild it from a golden image, or ask an "
                "administrator for help.")
    if boot.boot_done and not boot.cloud_init:
        return ("no-cloud-init", f"The {image} booted without running cloud-init, which sets up your user and "
                f"your server: the image has no cloud-init, or it is turned off. {kept}")
    return None


def timeout_detail(boot: Boot | None) -> str:
    """How far the guest got, for the sentence of a start that timed out (``boot`` None: no console line was read,
    which says nothing: the console may be off, or out of the hub's reach)."""
    if boot is None:
        return ""
    if boot.disk_full:
        return "Its system disk is full: the guest could not write to it (its console says so)."
    if boot.stage == Stage.POWERED_ON:
        return ("Its kernel never started: its console shows only what came before it "
                "(is the image's boot loader or kernel broken?).")
    if boot.stage in (Stage.KERNEL, Stage.SYSTEM):
        return "Its operating system was still booting (under software emulation a boot takes minutes)."
    if boot.stage == Stage.CLOUD_INIT:
        return "cloud-init was still setting it up, and the server never started."
    return "Its server started but never answered."
