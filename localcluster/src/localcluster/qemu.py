"""A Linux guest as a QEMU process: its command line, the accelerator probe, start, wait and stop.

:func:`qemu_command` is pure: it turns a :class:`GuestSpec` (CPUs, memory,
root disk image, the image's kernel and initrd, the NoCloud ``cidata`` seed,
forwarded ports, accelerator) into ``qemu-system-x86_64``'s arguments. The
guest boots the kernel directly (``-kernel``/``-initrd``, ``root=/dev/vda``:
the golden image of tools/golden-image is a bare ext4 filesystem) or, with no
kernel given, through the firmware (SeaBIOS boots the root disk, as on a
KubeVirt node; with ``bios_serial`` it writes to the serial console, as
libvirt's ``useserial``, ``-machine graphics=off``, makes it), its disks
are virtio (the root disk first, ``/dev/vda``; the seed read-only after it),
its network is QEMU's user-mode network with each forwarded port listening
on a loopback address of the host only, its serial console goes to a file,
and QEMU's monitor protocol (QMP) listens on a unix socket.

:class:`QemuGuest` runs one such process: :meth:`~QemuGuest.start`,
:meth:`~QemuGuest.wait_for` (a condition polled until it holds, the process
dying first is an error), :meth:`~QemuGuest.stop` (ACPI power button through
QMP's ``system_powerdown``, then SIGKILL once the grace period is over, as
KubeVirt's virt-launcher does with a domain).

:func:`accelerator` says whether KVM can run a guest here: ``/dev/kvm``
may open and still fail with "KVM internal error" once a kernel runs (nested
virtualisation without the features a kernel needs), so it boots ``kernel``
once under KVM, without a root filesystem and with ``panic=-1``, and takes
KVM only if that kernel got as far as its panic and QEMU exited. The answer
is kept for the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

#: The QEMU system emulator the guests run under.
QEMU = "qemu-system-x86_64"
#: The accelerators :func:`qemu_command` knows: KVM (hardware) and TCG (software emulation).
ACCELERATORS = ("kvm", "tcg")
#: Kernel command line of every guest: root is the first virtio disk, the console the first serial port.
KERNEL_APPEND = ("root=/dev/vda", "rw", "console=ttyS0", "panic=-1")


@dataclass(frozen=True)
class GuestSpec:
    """What one guest is: sizes, disks, kernel, seed, ports and accelerator.

    ``memory_mib`` is the guest's memory in MiB; ``forwards`` maps a host
    loopback port to a guest TCP port (``{41234: 8888}``); ``disk_format``
    is QEMU's name for the root disk's format (``raw`` for the golden image
    and a DataVolume's disk image, ``qcow2`` for an overlay over one);
    ``seed`` is a NoCloud ``cidata`` disk (see :mod:`.cidata`) or None;
    ``console`` is the file the serial console is written to and ``qmp`` the
    unix socket QMP listens on; ``extra_append`` adds kernel arguments;
    ``kernel`` None boots the root disk through the firmware, which writes to
    the serial console with ``bios_serial`` (a VMI's
    ``firmware.bootloader.bios.useSerial``).
    """

    name: str
    cpus: int
    memory_mib: int
    disk: Path
    kernel: Path | None
    initrd: Path | None
    console: Path
    qmp: Path
    seed: Path | None = None
    forwards: dict[int, int] = field(default_factory=dict)
    accel: str = "tcg"
    disk_format: str = "raw"
    host_address: str = "127.0.0.1"
    extra_append: tuple[str, ...] = ()
    #: virtio-fs shares: ``(tag, virtiofsd's vhost-user socket)``; the guest's memory is then shared memory
    filesystems: tuple[tuple[str, Path], ...] = ()
    #: disks after the root disk, before the seed: ``(raw image file, virtio serial or None)``
    disks: tuple[tuple[Path, str | None], ...] = ()
    bios_serial: bool = False


#: The PCI slot of a guest's first disk on q35's root bus; the next disks take the next slots.
DISK_SLOT = 0x10
#: Where a guest on QEMU's user network reaches the host's loopback (its gateway, which QEMU connects to 127.0.0.1
#: with the same port): a hub listening on the host's 127.0.0.1 is ``http://10.0.2.2:<port>`` to a real guest, what a
#: VM profile gives as its spawner's ``hub_connect_url``.
HOST_LOOPBACK_IN_GUEST = "10.0.2.2"


def qemu_command(spec: GuestSpec, *, qemu: str = QEMU) -> list[str]:
    """``qemu-system-x86_64``'s argument list for ``spec``; ValueError for an unknown accelerator or a size below 1."""
    if spec.accel not in ACCELERATORS:
        raise ValueError(f"accelerator {spec.accel!r} is not one of {', '.join(ACCELERATORS)}")
    if spec.cpus < 1 or spec.memory_mib < 1:
        raise ValueError(f"guest {spec.name} needs at least 1 CPU and 1 MiB of memory, not {spec.cpus} and {spec.memory_mib}")
    # KVM passes the host's CPU through; TCG emulates every feature it can.
    cpu = "host" if spec.accel == "kvm" else "max"
    netdev = "user,id=net0" + "".join(
        f",hostfwd=tcp:{spec.host_address}:{host}-:{guest}" for host, guest in sorted(spec.forwards.items())
    )
    # vhost-user devices (virtiofsd) read and write the guest's memory: it must be shared memory
    memory = ",memory-backend=mem" if spec.filesystems else ""
    graphics = ",graphics=off" if spec.bios_serial else ""
    command = [
        qemu,
        "-name", f"guest={spec.name}",
        "-machine", f"q35,accel={spec.accel}{memory}{graphics}",
        "-cpu", cpu,
        "-smp", str(spec.cpus),
        "-m", str(spec.memory_mib),
        "-nodefaults",
        "-no-user-config",
        "-display", "none",
    ]  # fmt: skip
    if spec.kernel is not None:
        command += ["-kernel", str(spec.kernel), "-initrd", str(spec.initrd),
                    "-append", " ".join((*KERNEL_APPEND, *spec.extra_append))]
    # The disks in the VMI's order (root, the others, the seed) at fixed PCI slots in that order, so the guest's kernel
    # names them /dev/vda, /dev/vdb, ... in that order: slots QEMU picks by itself may put another disk first.
    drives = [(spec.disk, spec.disk_format, None, "cache=writeback,discard=unmap"),
              *((image, "raw", serial, "cache=writeback,discard=unmap") for image, serial in spec.disks)]
    if spec.seed is not None:
        drives.append((spec.seed, "raw", None, "readonly=on"))
    for index, (image, image_format, serial, options) in enumerate(drives):
        device = f"virtio-blk-pci,drive=disk{index},bus=pcie.0,addr={DISK_SLOT + index:#x}"
        command += ["-drive", f"file={image},format={image_format},if=none,id=disk{index},{options}",
                    "-device", device + (f",serial={serial}" if serial else "")]
    if spec.filesystems:
        command += ["-object", f"memory-backend-memfd,id=mem,size={spec.memory_mib}M,share=on"]
    for index, (tag, socket) in enumerate(spec.filesystems):
        command += ["-chardev", f"socket,id=fs{index},path={socket}",
                    "-device", f"vhost-user-fs-pci,queue-size=1024,chardev=fs{index},tag={tag}"]
    command += [
        "-netdev", netdev,
        "-device", "virtio-net-pci,netdev=net0",
        "-device", "virtio-rng-pci",
        "-serial", f"file:{spec.console}",
        "-qmp", f"unix:{spec.qmp},server=on,wait=off",
    ]  # fmt: skip
    return command


class GuestError(RuntimeError):
    """The guest's QEMU process could not start, died, or a condition did not hold in time."""


class QemuGuest:
    """One guest's QEMU process: start it, wait for a condition, stop it (ACPI, then kill)."""

    def __init__(self, spec: GuestSpec, *, qemu: str = QEMU):
        self.spec = spec
        self.command = qemu_command(spec, qemu=qemu)
        self.process: asyncio.subprocess.Process | None = None
        self._stderr_task: asyncio.Task | None = None
        self.stderr = b""

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    def console_text(self) -> str:
        """What the guest has written to its serial console so far."""
        try:
            return self.spec.console.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    async def start(self) -> None:
        """Start QEMU (in its own process group) and wait for its QMP socket; GuestError when QEMU exits first."""
        if self.process is not None:
            raise GuestError(f"guest {self.spec.name} was started already")
        for stale in (self.spec.qmp, self.spec.console):
            stale.unlink(missing_ok=True)
        self.process = await asyncio.create_subprocess_exec(
            *self.command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        self._stderr_task = asyncio.create_task(self._read_stderr())
        # QEMU creates the QMP socket once its options are parsed and its devices exist.
        await self.wait_for(lambda: self.spec.qmp.exists(), timeout=30, interval=0.05, what="QEMU's QMP socket")

    async def _read_stderr(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        while chunk := await self.process.stderr.read(4096):
            self.stderr = (self.stderr + chunk)[-16384:]

    async def wait_for(
        self,
        condition: Callable[[], bool | Awaitable[bool]],
        *,
        timeout: float,
        interval: float = 1.0,
        what: str = "the condition",
    ) -> None:
        """Poll ``condition`` (sync or async) every ``interval`` s until true; GuestError on timeout or QEMU's exit."""
        deadline = time.monotonic() + timeout
        while True:
            result = condition()
            if isinstance(result, Awaitable):
                result = await result
            if result:
                return
            if not self.running:
                raise GuestError(f"guest {self.spec.name} exited (code {self.returncode}) before {what}: {self.stderr_text()}")
            if time.monotonic() > deadline:
                raise GuestError(f"guest {self.spec.name}: {what} not reached after {timeout:.0f}s")
            await asyncio.sleep(interval)

    @property
    def returncode(self) -> int | None:
        return None if self.process is None else self.process.returncode

    def stderr_text(self) -> str:
        return self.stderr.decode(errors="replace").strip()

    async def qmp(self, command: str, arguments: dict | None = None) -> dict:
        """Run one QMP ``command`` on a fresh connection; its ``return`` value, GuestError for its ``error``."""
        reader, writer = await asyncio.open_unix_connection(str(self.spec.qmp))
        try:
            await reader.readline()  # the greeting
            for message in ({"execute": "qmp_capabilities"}, {"execute": command, **({"arguments": arguments} if arguments else {})}):
                writer.write(json.dumps(message).encode() + b"\n")
                await writer.drain()
                while True:
                    reply = json.loads(await reader.readline() or b'{"error": {"desc": "QMP closed"}}')
                    if "event" not in reply:
                        break
                if "error" in reply:
                    raise GuestError(f"QMP {message['execute']}: {reply['error'].get('desc')}")
            return reply.get("return", {})
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def stop(self, grace: float = 30.0) -> bool:
        """Press the ACPI power button and wait ``grace`` seconds for the guest to power off, then kill QEMU.

        Returns True when QEMU exited within ``grace`` (the guest powered
        off), False when it had to be killed.
        """
        if self.process is None:
            return True
        clean = False
        if self.running:
            with contextlib.suppress(OSError, GuestError, json.JSONDecodeError):
                await self.qmp("system_powerdown")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.process.wait(), timeout=grace)
                clean = True
        if self.running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            await self.process.wait()
        if self._stderr_task is not None:
            await self._stderr_task
        self.spec.qmp.unlink(missing_ok=True)
        return clean


# -- the accelerator ----------------------------------------------------------------------------------

_accelerators: dict[str, str] = {}


async def accelerator(kernel: Path | None, *, qemu: str = QEMU, timeout: float = 20.0, kvm_device: str = "/dev/kvm") -> str:
    """``"kvm"`` when KVM runs ``kernel`` to its panic here, else ``"tcg"``; probed once per process and QEMU. With no
    kernel to probe (a firmware boot), the answer of an earlier probe, else ``"tcg"``."""
    if kernel is None:
        return _accelerators.get(qemu, "tcg")
    if qemu not in _accelerators:
        _accelerators[qemu] = "kvm" if await kvm_runs_kernel(kernel, qemu=qemu, timeout=timeout, kvm_device=kvm_device) else "tcg"
    return _accelerators[qemu]


async def kvm_runs_kernel(kernel: Path, *, qemu: str = QEMU, timeout: float = 20.0, kvm_device: str = "/dev/kvm") -> bool:
    """Boot ``kernel`` under KVM with no root filesystem: True when it panics and QEMU exits by itself in ``timeout`` s.

    ``panic=-1`` reboots at once and ``-no-reboot`` turns that into QEMU's
    exit, so a working KVM ends in a second or two. A broken one stops the
    guest with "KVM internal error" (QEMU keeps running) and is killed.
    """
    if shutil.which(qemu) is None or not os.access(kvm_device, os.R_OK | os.W_OK):
        return False
    command = [
        qemu, "-machine", "q35,accel=kvm", "-cpu", "host", "-m", "256", "-nodefaults", "-no-user-config",
        "-display", "none", "-no-reboot", "-serial", "stdio",
        "-kernel", str(kernel), "-append", "console=ttyS0 panic=-1 root=/dev/nonexistent",
    ]  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        *command, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, start_new_session=True
    )
    assert process.stdout is not None
    output = b""
    deadline = time.monotonic() + timeout
    try:
        # Read until QEMU exits (EOF), KVM reports its failure (QEMU then waits, paused), or time is up.
        while b"KVM internal error" not in output:
            chunk = await asyncio.wait_for(process.stdout.read(4096), timeout=max(0.0, deadline - time.monotonic()))
            if not chunk:
                break
            output += chunk
    except TimeoutError:
        pass
    failed = b"KVM internal error" in output
    if not failed:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(process.wait(), timeout=1.0)
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()
        return False
    return not failed and process.returncode == 0 and b"Kernel panic" in output


def forget_accelerator() -> None:
    """Forget the probed accelerators (for tests)."""
    _accelerators.clear()
