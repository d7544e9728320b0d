"""A VMI's domain as a real guest: QEMU boots the VMI's root disk image (virt-launcher's part, for a real disk).

:class:`~.virthandler.GuestRuntime` boots a VMI this way when its first disk is a disk image *file* holding a raw
ext4 image (a Block-mode claim's ``block.img``, or a Filesystem-mode claim's ``disk.img``, as CDI keeps an imported
golden image: :func:`~..volumes.disk_image_path`) and QEMU is installed (:func:`qemu_installed`); a disk that is a
directory of files keeps the emulated guest (:mod:`.guest`).

What the VMI asks for, given as KubeVirt gives it to its domain:

* CPUs: ``domain.cpu`` sockets × cores × threads, else the CPU request rounded up, else 1; memory:
  ``domain.memory.guest``, else the memory request, else 1 GiB (:func:`guest_size`); at most this machine's CPUs
  and half its memory (:func:`fitted_size`: the local cluster's nodes advertise more than the machine has), each cut
  named in the console log;
* the root disk, booted with the kernel and initrd the disk itself names (:mod:`..bootloader`); an ext4 disk that
  names no kernel (no ``/vmlinuz``) through the firmware, as a KubeVirt node boots every disk: SeaBIOS, writing to
  the serial console where the VMI asks (``firmware.bootloader.bios.useSerial``), says ``No bootable device.``. A
  disk debugfs cannot read at all fails the VMI (KubeVirt boots it again), as before;
* the ``cloudInitNoCloud`` volume's user data and network data on a ``cidata`` seed disk (:mod:`..cidata`), its
  instance id the firmware UUID (KubeVirt's ``cloudInitUUIDFromVMI``), so per-instance modules run on the first boot
  only;
* each ``emptyDisk`` as a sparse raw file of its capacity in the VMI's folder (gone with the VMI, as KubeVirt's),
  with the disk's virtio serial;
* each further disk on a claim (a PVC or DataVolume: the home with ``vm_home_via = "disk"``) as the claim's disk
  image, with its serial; on a Filesystem-mode claim that has none yet, ``disk.img`` made sparse at the claim's
  size, as KubeVirt makes it on an empty PVC (:func:`claim_disk_image`);
* each ``virtiofs`` filesystem's claim folder through its own virtiofsd (:mod:`..virtiofs`), its tag the
  filesystem's name, as KubeVirt shares a PVC;
* QEMU's user-mode network, each port the VMI's interfaces declare and its readiness probe's port forwarded from the
  VMI's own address, so Services and the hub's proxy reach the guest as they reach a Pod;
* KVM where KVM runs a guest, TCG (software emulation, about a minute to boot Debian) otherwise
  (:func:`..qemu.accelerator`, probed once per process).

Not given to a QEMU guest, each named in the console log and a Warning Event: a disk on a claim whose disk image is
a folder of files (an emulated guest's), and virtiofs filesystems where virtiofsd is not installed. QEMU's serial console is ``serial.log`` in the VMI's folder, each
virtiofsd's log ``virtiofsd-<tag>.log`` beside it.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import uuid
from pathlib import Path

from ..bootloader import NoKernel, boot_files, read_file
from ..cidata import make_seed, meta_data
from ..qemu import QEMU, GuestSpec, QemuGuest, accelerator
from ..validation import parse_quantity
from ..virtiofs import Virtiofsd, find_virtiofsd
from .guest import guest_os_info
from .refs import volume_claim

MIB = 1024 * 1024
#: The cloud-init volumes KubeVirt gives as a seed disk.
SEEDS = ("cloudInitNoCloud", "cloudInitConfigDrive")
DEFAULT_MEMORY_MIB = 1024


def qemu_installed() -> bool:
    """Whether this machine can run a real guest (Debian's qemu-system-x86)."""
    return shutil.which(QEMU) is not None


def guest_size(vmi: dict) -> tuple[int, int]:
    """``(CPUs, memory in MiB)`` of the VMI's domain, as KubeVirt sizes it (see the module docstring)."""
    domain = vmi["spec"]["domain"]
    resources = domain.get("resources") or {}
    requests = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    cpu = domain.get("cpu") or {}
    if any(key in cpu for key in ("sockets", "cores", "threads")):
        cpus = int(cpu.get("sockets", 1)) * int(cpu.get("cores", 1)) * int(cpu.get("threads", 1))
    elif "cpu" in requests:
        cpus = max(1, math.ceil(parse_quantity(requests["cpu"])))
    else:
        cpus = 1
    memory = (domain.get("memory") or {}).get("guest") or requests.get("memory")
    mib = max(1, int(parse_quantity(memory) // MIB)) if memory else DEFAULT_MEMORY_MIB
    return cpus, mib


def machine_size() -> tuple[int, int]:
    """``(CPUs, memory in MiB)`` the local cluster gives one guest at most: this machine's CPUs and half its memory.
    The local cluster's nodes advertise more than the machine has (a GPU node's 8 CPUs and 64 GiB), and QEMU cannot
    reserve more memory than the machine has."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return os.cpu_count() or 1, max(1, memory // MIB // 2)


def fitted_size(vmi: dict, machine: tuple[int, int] | None = None) -> tuple[tuple[int, int], list[str]]:
    """The VMI's :func:`guest_size` within ``machine`` (default :func:`machine_size`), and a sentence for each part
    cut down (the scheduler still counts what the VMI asks)."""
    (cpus, mib), (most_cpus, most_mib) = guest_size(vmi), machine or machine_size()
    cut = []
    if cpus > most_cpus:
        cut.append(f"{most_cpus} of the {cpus} CPUs asked (this machine has {most_cpus})")
    if mib > most_mib:
        cut.append(f"{most_mib} MiB of the {mib} MiB of memory asked (half of this machine's)")
    return (min(cpus, most_cpus), min(mib, most_mib)), cut


def forwarded_ports(vmi: dict) -> list[int]:
    """The guest ports reachable at the VMI's address: its interfaces' ports and its readiness probe's."""
    interfaces = vmi["spec"]["domain"].get("devices", {}).get("interfaces") or []
    ports = {int(p["port"]) for i in interfaces for p in i.get("ports") or [] if p.get("port")}
    probe = vmi["spec"].get("readinessProbe") or {}
    check = probe.get("httpGet") or probe.get("tcpSocket") or {}
    if isinstance(check.get("port"), int):
        ports.add(check["port"])
    return sorted(ports)


def not_given(vmi: dict, *, virtiofsd: bool = True, claim_images: dict[str, Path | None] | None = None) -> list[str]:
    """What the VMI asks for that a QEMU guest does not get: disks after the first on a claim without a disk image
    in ``claim_images`` (by disk name: :func:`claim_disk_image`'s answers), volumes of other kinds (the cloud-init
    seed and ``emptyDisk`` volumes are given), without ``virtiofsd`` its virtiofs filesystems, and its host devices
    and GPUs (no device of this machine is passed through), each as ``disk NAME``, ``filesystem NAME`` or ``host
    device NAME (deviceName)``."""
    volumes = {v["name"]: v for v in vmi["spec"].get("volumes") or []}
    devices = vmi["spec"]["domain"].get("devices") or {}
    given = (*SEEDS, "emptyDisk")
    images = claim_images or {}
    disks = [d["name"] for d in (devices.get("disks") or [])[1:]
             if not any(s in volumes.get(d["name"], {}) for s in given) and images.get(d["name"]) is None]
    filesystems = [] if virtiofsd else [f"filesystem {f['name']}" for f in devices.get("filesystems") or []]
    passed = [f"host device {d['name']} ({d.get('deviceName', '')})"
              for d in (devices.get("hostDevices") or []) + (devices.get("gpus") or [])]
    return [f"disk {name}" for name in disks] + filesystems + passed


def claim_disks(vmi: dict) -> list[str]:
    """The names of the VMI's disks after the first whose volume is a PVC or a DataVolume, in its domain's order."""
    volumes = {v["name"]: v for v in vmi["spec"].get("volumes") or []}
    disks = (vmi["spec"]["domain"].get("devices") or {}).get("disks") or []
    return [d["name"] for d in disks[1:] if volume_claim(volumes.get(d["name"], {}))]


def claim_disk_image(path: Path, size: int) -> Path | None:
    """The raw disk image a QEMU guest gets for a disk on a claim, whose image path (``disk.img``, or a Block-mode
    claim's ``block.img``) is ``path``: the file; an empty folder there (the node agent makes one for an emulated
    guest) becomes a sparse file of ``size`` bytes, as KubeVirt makes ``disk.img`` on an empty Filesystem-mode
    PVC; None for a folder of files (an emulated guest's disk)."""
    if path.is_file():
        return path
    if path.is_dir():
        if any(path.iterdir()):
            return None
        path.rmdir()
    return _make_sparse(path, size)


def shared_folders(vmi: dict, folders: dict[str, Path]) -> dict[str, Path]:
    """``{tag: host folder}`` of the VMI's virtiofs filesystems, from ``folders`` (the node agent's, by filesystem name)."""
    filesystems = (vmi["spec"]["domain"].get("devices") or {}).get("filesystems") or []
    return {f["name"]: folders[f["name"]] for f in filesystems if "virtiofs" in f and f["name"] in folders}


def empty_disks(vmi: dict) -> list[tuple[str, int, str | None]]:
    """The VMI's ``emptyDisk`` disks in its domain's order: ``(name, capacity in bytes, virtio serial or None)``."""
    volumes = {v["name"]: v for v in vmi["spec"].get("volumes") or []}
    found = []
    for disk in (vmi["spec"]["domain"].get("devices") or {}).get("disks") or []:
        empty = volumes.get(disk["name"], {}).get("emptyDisk")
        if empty is not None:
            found.append((disk["name"], int(parse_quantity(empty.get("capacity") or "0")), disk.get("serial")))
    return found


def further_disks(vmi: dict, folder: Path, claim_images: dict[str, Path]) -> list[tuple[Path, str | None]]:
    """``(raw image, virtio serial)`` of each disk after the root disk that a QEMU guest gets, in the VMI's order:
    an ``emptyDisk`` as a sparse file of its capacity in ``folder``, a disk on a claim as its image in
    ``claim_images`` (by disk name)."""
    empty = {name: size for name, size, _serial in empty_disks(vmi)}
    found = []
    for disk in ((vmi["spec"]["domain"].get("devices") or {}).get("disks") or [])[1:]:
        name, serial = disk["name"], disk.get("serial")
        if name in empty:
            found.append((_make_sparse(folder / f"{name}.img", empty[name]), serial))
        elif claim_images.get(name) is not None:
            found.append((claim_images[name], serial))
    return found


def _make_sparse(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as image:
        image.truncate(size)
    return path


def virtiofsd_installed() -> bool:
    """Whether a QEMU guest gets its virtiofs filesystems (:func:`..virtiofs.find_virtiofsd`)."""
    return find_virtiofsd() is not None


class QemuDomain:
    """One VMI's QEMU process: prepared from the VMI and its root disk, started, stopped (ACPI, then kill)."""

    def __init__(self, vmi: dict, folder: Path, address: str):
        self.vmi = vmi
        self.folder = Path(folder)
        self.address = address
        self.guest: QemuGuest | None = None
        self.shares: list[Virtiofsd] = []
        self.os_info: dict[str, str] = {}
        # a unix socket's path is limited to 107 bytes; a VMI's folder may be deeper than that
        self._sockets = Path(tempfile.mkdtemp(prefix="localcluster-qmp-"))

    @property
    def console(self) -> Path:
        return self.folder / "serial.log"

    @property
    def running(self) -> bool:
        return self.guest is not None and self.guest.running

    async def start(self, root: Path, user_data: str, network_data: str | None, shares: dict[str, Path] | None = None,
                    claim_images: dict[str, Path] | None = None) -> None:
        """Read the boot files and OS of ``root``, write the seed, share each of ``shares`` (tag: host folder) through
        virtiofsd, give each disk of ``claim_images`` (by disk name: its raw image), start QEMU; BootError,
        VirtiofsdError or GuestError if it cannot."""
        self.folder.mkdir(parents=True, exist_ok=True)
        try:
            kernel, initrd = await boot_files(root, self.folder)
            self.os_info = await self._os_info(root)
        except NoKernel:  # a filesystem that names no kernel: the firmware boots what the disk holds, as on a node
            kernel = initrd = None
            self.os_info = {}
        firmware = self.vmi["spec"]["domain"].get("firmware") or {}
        seed = await make_seed(
            self.folder / "cidata.img",
            user_data=user_data,
            meta_data=meta_data(firmware.get("uuid") or str(uuid.uuid4()), self.vmi["metadata"]["name"]),
            network_config=network_data,
        )
        filesystems = []
        for tag, folder in (shares or {}).items():
            daemon = Virtiofsd(folder, self._sockets / f"fs-{len(self.shares)}.sock", self.folder / f"virtiofsd-{tag}.log")
            self.shares.append(daemon)
            await daemon.start()
            filesystems.append((tag, daemon.socket))
        disks = tuple(further_disks(self.vmi, self.folder / "disks", claim_images or {}))
        (cpus, memory_mib), _cut = fitted_size(self.vmi)
        spec = GuestSpec(
            name=f"{self.vmi['metadata']['namespace']}_{self.vmi['metadata']['name']}",
            cpus=cpus,
            memory_mib=memory_mib,
            disk=root,
            kernel=kernel,
            initrd=initrd,
            console=self.console,
            qmp=self._sockets / "qmp.sock",
            seed=seed,
            forwards={port: port for port in forwarded_ports(self.vmi)},
            accel=await accelerator(kernel),
            host_address=self.address,
            filesystems=tuple(filesystems),
            disks=disks,
            bios_serial=bool(((firmware.get("bootloader") or {}).get("bios") or {}).get("useSerial")),
        )
        self.guest = QemuGuest(spec)
        await self.guest.start()

    async def _os_info(self, root: Path) -> dict[str, str]:
        text = await read_file(root, "/etc/os-release")
        return guest_os_info(text.decode(errors="replace")) if text is not None else {}

    async def wait(self) -> int:
        """Until QEMU exits: its exit code."""
        assert self.guest is not None and self.guest.process is not None
        return await self.guest.process.wait()

    def failure(self) -> str:
        """Why QEMU exited: its last error line, else its exit code."""
        if self.guest is None:
            return "QEMU did not start"
        lines = self.guest.stderr_text().splitlines()
        return lines[-1] if lines else f"QEMU exited with code {self.guest.returncode}"

    async def stop(self, grace: float) -> bool:
        """ACPI power button, SIGKILL after ``grace`` seconds; whether the guest powered off by itself."""
        try:
            if self.guest is None or not self.guest.running:
                return True
            return await self.guest.stop(grace)
        finally:
            for daemon in self.shares:
                await daemon.stop()
            shutil.rmtree(self._sockets, ignore_errors=True)
