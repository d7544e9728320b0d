"""virt-handler's part of the node agent, and the guest itself: one VMI as QEMU, or as local processes.

A VMI whose root disk is a real disk image (a file: see
:func:`~..volumes.disk_image_path`) boots as a real guest under QEMU
(:mod:`.qemudomain`): its status follows QEMU (Running once it started,
Ready when its readiness probe passes, Succeeded when the guest powers
itself off, Failed when QEMU exits with an error), and its deletion presses
the ACPI power button and kills QEMU after the VMI's whole
``terminationGracePeriodSeconds`` (not capped by ``max_grace_seconds``: cut
short, a shutdown pulls a disk's power). Every other VMI gets the emulated
guest described below.

:class:`GuestRuntime` boots a scheduled VirtualMachineInstance: its root
disk's PVC directory is the guest's root filesystem, its cloud-init NoCloud
user data is applied by :class:`~.guest.GuestBoot`, and each systemd unit
the boot starts runs as a local process under a
:class:`~.runtime.Supervisor` (``Restart=``/``RestartSec=`` honoured, with
systemd's start limit of 5). The VMI's status follows: ``Running`` with the
guest's address in ``status.interfaces`` and ``Ready`` while every started
unit runs or has finished successfully (and the VMI's own ``readinessProbe``
passes, if it has one). A unit that keeps failing leaves the VMI Running but
not Ready, as a failed service leaves a real VM up; a guest that fails to
boot (the ``fail_guest`` knob) makes the VMI ``Failed``.

Disks and filesystems: a disk on a PVC or DataVolume volume is the disk
image in its claim (:func:`~..volumes.disk_image_path`): the claim's
directory on a ``Block``-mode claim, its ``disk.img`` (created empty at the
first boot, as KubeVirt creates a missing one) on a ``Filesystem``-mode
claim, so the guest does not see the files a Pod sees in that claim. An
``emptyDisk`` is a directory ``state_dir/vmis/<uid>/disks/<volume>``,
removed when the VMI goes. Each disk is ``/dev/vdX`` by order and, with a
``serial``, ``/dev/disk/by-id/virtio-<serial>``; each
``domain.devices.filesystems[]`` entry with ``virtiofs`` is reachable by its
tag (the filesystem's name) and shares the claim's directory itself (the
files Pods see), for the guest's ``virtiofs`` fstab lines.

Where the agent can sandbox (see :mod:`.isolation`), the guest is one
sandbox, started after cloud-init has run on its disk: its ``/`` is an
overlay whose upper layer is the root disk (the first disk's image
directory, a clone of the golden image's files) and whose lower layer is
the host's root filesystem, read-only, standing in for the golden image's
operating system (so the host's Python and JupyterLab are there). Whatever
the guest writes outside its mounts (``/etc``, ``/opt``, ``/usr/local``,
packages) lands on the root disk, survives stops and starts, goes with a
rebuilt or restored disk and is seen by no other workspace. Its fstab
mounts are bind-mounted at their mount points (read-only for a
``persistentVolumeClaim.readOnly`` volume), and every unit runs inside it
(:func:`~.isolation.joined`). Elsewhere, paths are mapped as for Pods (see
:mod:`.nodeagent`): mount points on the disk are symlinks and ``readOnly``
is not enforced.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import logging
from collections.abc import Callable
from pathlib import Path

from ..attacher import Consumer, MultiAttachError
from ..conditions import set_condition
from ..defaults import storage_request
from ..store import rfc3339
from ..validation import parse_quantity
from ..volumes import attach_claim, claim_volume_mode, disk_image_path, remove_tree
from .guest import (
    GuestBoot,
    Unit,
    expand_exec_argv,
    find_unit,
    guest_os_info,
    home_of,
    parse_environment_file,
    parse_unit,
)
from .isolation import Bind, Layers, joined, sandboxed
from .qemudomain import (
    QemuDomain,
    claim_disk_image,
    claim_disks,
    fitted_size,
    not_given,
    qemu_installed,
    shared_folders,
    virtiofsd_installed,
)
from .refs import PVCS, get_or_none, volume_claim
from .runtime import (
    Filesystem,
    Launch,
    LaunchError,
    LocalProcess,
    LogTail,
    Readiness,
    Supervisor,
    find_inside,
    resolve_command,
    translate,
)
from .sandbox import READY
from .workload import Workload

log = logging.getLogger("localcluster")

#: The finalizer virt-controller puts on the VMIs it creates; virt-handler lifts it once the guest is down.
VMI_FINALIZER = "foregroundDeleteVirtualMachine"
#: systemd's default start limit: a unit failing this many times in a row stays failed.
START_LIMIT = 5


#: Lines of a guest's serial console kept (a Debian boot writes about 700; a kubelet keeps 10 MiB of a log).
SERIAL_LINES = 5000


async def virt_tail(path: Path, write: Callable[[str], None], interval: float = 0.2) -> None:
    """virt-tail's part (KubeVirt's ``cmd/virt-tail``): follow the file ``path`` (QEMU's serial console) and hand
    each whole line to ``write``, without its line end; a line still being written waits for its end. Until
    cancelled, after one last read."""
    offset, partial = 0, b""
    try:
        while True:
            offset, partial = _read_lines(path, offset, partial, write)
            await asyncio.sleep(interval)
    finally:
        _read_lines(path, offset, partial, write)


def _read_lines(path: Path, offset: int, partial: bytes, write: Callable[[str], None]) -> tuple[int, bytes]:
    try:
        with path.open("rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return offset, partial
    *lines, partial = (partial + data).split(b"\n")
    for line in lines:
        write(line.decode("utf-8", errors="replace").rstrip("\r"))
    return offset + len(data), partial


def vmi_ports(vmi: dict) -> dict[str, int]:
    """The named ports of a VMI's interfaces: {name: port}, for probes and Services."""
    interfaces = vmi["spec"]["domain"].get("devices", {}).get("interfaces") or []
    return {p["name"]: p["port"] for i in interfaces for p in i.get("ports") or [] if p.get("name")}


class GuestRuntime(Workload):
    """One VMI on this node: its disks, boot, units and the status that follows them."""

    component = "virt-handler"

    def __init__(self, agent, vmi: dict):
        super().__init__(agent, vmi, agent.vmis_dir)
        self.console = LogTail(self.dir / "console.log")
        #: the guest's serial console, whole lines, as the launcher Pod's guest-console-log container logs it
        self.serial = LogTail(self.dir / "serial-console.log", keep=SERIAL_LINES)
        self.fs = None
        self.guest: LocalProcess | None = None
        self.domain: QemuDomain | None = None
        self.units: list[Supervisor] = []
        self.readiness: Readiness | None = None
        self.os_info: dict = {}
        self.phase = vmi["status"].get("phase", "Scheduled")
        self.reason = ""

    @staticmethod
    def node_of(vmi: dict) -> str | None:
        return (vmi.get("status") or {}).get("nodeName")

    @staticmethod
    def startable(vmi: dict) -> bool:
        return vmi["status"].get("phase") == "Scheduled"

    @staticmethod
    async def finish(agent, vmi: dict) -> None:
        """Lift virt-handler's finalizer so the deleted VMI goes."""

        def lift(current: dict) -> None:
            current["metadata"]["finalizers"] = [f for f in current["metadata"].get("finalizers") or [] if f != VMI_FINALIZER]

        await agent.update(vmi, lift)

    # -- boot ------------------------------------------------------------------------

    async def run(self) -> None:
        """Boot the guest and keep its units running (until cancelled); its serial console is followed meanwhile."""
        self.serial.begin()
        try:
            await self._run()
        finally:
            self.serial.end()

    async def _run(self) -> None:
        if self.name in self.agent.fail_guest:
            self._fail("GuestFailedToBoot", "guest failed to boot")
            return
        rootfs, devices, user_data = await self._wait_for_disks()
        self.ip = self.agent.addresses.allocate(self.uid)
        if rootfs.is_file():  # a real disk image: a real guest
            await self._run_domain(rootfs, user_data, devices)
            return
        firmware = self.obj["spec"]["domain"].get("firmware") or {}
        boot = GuestBoot(rootfs, user_data, firmware.get("uuid"), devices, self.console.write, link_mounts=not self.agent.isolation)
        boot = await asyncio.to_thread(boot.run)
        self.fs = boot.fs
        if self.agent.isolation and not await self._power_on(rootfs, boot.mounts):
            self._fail("GuestFailedToBoot", "guest sandbox did not start")
            return
        release = self.fs.map("/etc/os-release")
        self.units = [self._supervisor(parse_unit(name, find_unit(self.fs, name).read_text())) for name in boot.units]
        self._running(guest_os_info(release.read_text()) if release.is_file() else {})
        await asyncio.gather(*(sup.run() for sup in self.units))

    def _running(self, os_info: dict) -> None:
        """The guest is up: its OS, its readiness probe followed, phase Running."""
        self.os_info = os_info
        probe = self.obj["spec"].get("readinessProbe")
        if probe:
            self.readiness = Readiness(probe, self.ip, vmi_ports(self.obj), self.publish)
            self.readiness.start()
        self.phase = "Running"
        self.event("Started", "VirtualMachineInstance started.")
        self.publish()

    async def _wait_for_disks(self) -> tuple[Path, dict[str, Path], str]:
        reported = ""
        while True:
            try:
                return (*self._disks(), self._user_data())
            except LaunchError as e:
                self.agent.cluster.attacher.detach(self.uid)  # all or nothing: a waiting guest holds no volume
                if e.reason == "FailedAttachVolume" and e.message != reported:
                    self.event(e.reason, e.message, warning=True)
                if e.message != reported:
                    self.console.write(f"localcluster: waiting: {e.message}")
                    reported = e.message
            await asyncio.sleep(self.agent.backoff(1))

    def _volume_dir(self, volume: dict, *, disk: bool) -> Path | None:
        """The host directory of a PVC-backed volume or an emptyDisk; None for other volumes; LaunchError while unbound.

        With ``disk``, a claim's disk image in it (see the module docstring); else the claim's directory.
        """
        if "emptyDisk" in volume:
            path = self.dir / "disks" / volume["name"]
            path.mkdir(parents=True, exist_ok=True)
            return path
        claim = volume_claim(volume)
        if not claim:
            return None
        path = self._attach(claim)
        if disk:
            path = disk_image_path(path, claim_volume_mode(self.client, self.namespace, claim))
        if not path.is_file():  # a real disk image is a file (see .qemudomain)
            path.mkdir(parents=True, exist_ok=True)
        return path

    def _attach(self, claim: str) -> Path:
        """The directory of ``claim``, attached for this VMI; LaunchError while it cannot be."""
        consumer = Consumer("VirtualMachineInstance", self.namespace, self.name, self.uid, self.node)
        try:
            path = attach_claim(self.agent.cluster, self.namespace, claim, consumer, self.client)
        except MultiAttachError as e:
            raise LaunchError("FailedAttachVolume", e.message) from None
        if path is None:
            raise LaunchError("Pending", f'persistentvolumeclaim "{claim}" is not bound')
        return path

    def _disks(self) -> tuple[Path, dict[str, Path]]:
        """The root filesystem (the first disk's directory) and the device paths of every disk with one."""
        spec = self.obj["spec"]
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        disks = [d for d in spec["domain"].get("devices", {}).get("disks") or [] if "cdrom" not in d and "lun" not in d]
        devices: dict[str, Path] = {}
        rootfs = None
        for index, disk in enumerate(disks):
            path = self._volume_dir(volumes.get(disk["name"], {}), disk=True)
            if index == 0:
                rootfs = path  # made by _volume_dir (or a real disk image's file)
                if rootfs is None:
                    rootfs = self.dir / "rootfs"
                    rootfs.mkdir(parents=True, exist_ok=True)
            if path is None:
                continue
            devices[f"/dev/vd{chr(ord('a') + index)}"] = path
            if disk.get("serial"):
                devices[f"/dev/disk/by-id/virtio-{disk['serial'][:20]}"] = path
        for filesystem in spec["domain"].get("devices", {}).get("filesystems") or []:
            path = self._volume_dir(volumes.get(filesystem["name"], {}), disk=False)
            if path is not None and "virtiofs" in filesystem:
                devices[filesystem["name"]] = path  # the virtiofs tag is the filesystem's name
        return rootfs or self.dir / "rootfs", devices

    def _user_data(self) -> str:
        """The cloud-init user data, from the NoCloud (or ConfigDrive) volume."""
        return self._cloud_init("user", ("secretRef", "userDataSecretRef")) or ""

    def _network_data(self) -> str | None:
        """The cloud-init network data of the NoCloud (or ConfigDrive) volume, or None."""
        return self._cloud_init("network", ("networkDataSecretRef",))

    def _cloud_init(self, which: str, refs: tuple[str, ...]) -> str | None:
        """The ``which`` (user or network) data of the cloud-init volume, from its Secret or inline, as KubeVirt reads it."""
        for volume in self.obj["spec"].get("volumes") or []:
            source = volume.get("cloudInitNoCloud") or volume.get("cloudInitConfigDrive")
            if source is None:
                continue
            ref = next((source[key] for key in refs if source.get(key)), None)
            if ref:
                data = self.agent.object_data("Secret", self.namespace, ref["name"])
                if data is None:
                    raise LaunchError("Pending", f'secret "{ref["name"]}" not found')
                for key in (f"{which}data", f"{which}Data"):
                    if key in data:
                        return data[key].decode(errors="replace")
                raise LaunchError("Pending", f'secret "{ref["name"]}" has no {which}data or {which}Data key')
            if source.get(f"{which}Data"):
                return source[f"{which}Data"]
            if source.get(f"{which}DataBase64"):
                return base64.b64decode(source[f"{which}DataBase64"]).decode(errors="replace")
        return None

    async def _run_domain(self, root: Path, user_data: str, devices: dict[str, Path]) -> None:
        """Boot the real disk image ``root`` under QEMU (:mod:`.qemudomain`), with the virtiofs filesystems among
        ``devices`` (see :meth:`_disks`), and follow it until it exits."""
        if not qemu_installed():
            self._fail("GuestFailedToBoot", "the root disk is a disk image and QEMU is not installed on the node "
                       "(apt-get install qemu-system-x86)")
            return
        virtiofsd = virtiofsd_installed()
        shares = shared_folders(self.obj, devices) if virtiofsd else {}
        claim_images = self._claim_disk_images()
        for what in not_given(self.obj, virtiofsd=virtiofsd, claim_images=claim_images):
            self.console.write(f"localcluster: {what} is not given to a QEMU guest yet")
            self.event("DeviceNotGiven", f"{what} is not given to a QEMU guest yet", warning=True)
        for what in fitted_size(self.obj)[1]:
            self.console.write(f"localcluster: the QEMU guest gets {what}")
        self.domain = QemuDomain(self.obj, self.dir, self.ip)
        self.console.write(f"localcluster: booting {root.name} under QEMU (its serial console: serial.log)")
        try:
            await self.domain.start(root, user_data, self._network_data(), shares,
                                    {name: image for name, image in claim_images.items() if image is not None})
        except (LaunchError, RuntimeError) as e:  # the cloud-init Secret; BootError, GuestError, VirtiofsdError, the seed's tools
            await self.domain.stop(0)
            self._fail("GuestFailedToBoot", str(e))
            return
        self._running(self.domain.os_info)
        tail = asyncio.ensure_future(virt_tail(self.domain.console, self.serial.write))
        try:
            code = await self.domain.wait()
        finally:
            tail.cancel()
            await asyncio.wait([tail])
        if self.terminating:
            return
        # QEMU exited behind virt-handler's back: the guest powered itself off, or QEMU died
        if self.readiness is not None:
            await self.readiness.stop()
        if code == 0:
            self.phase = "Succeeded"
            self.event("Stopped", "The VirtualMachineInstance was shut down.")
            self.publish()
        else:
            self._fail("GuestCrashed", f"the guest's QEMU process exited: {self.domain.failure()}")

    def _claim_disk_images(self) -> dict[str, Path | None]:
        """The raw image of each disk after the first on a claim (:func:`.qemudomain.claim_disk_image`, a new
        ``disk.img`` of the claim's size), by disk name; None for one that is a folder of files."""
        volumes = {v["name"]: v for v in self.obj["spec"].get("volumes") or []}
        images = {}
        for name in claim_disks(self.obj):
            pvc = get_or_none(self.client, PVCS, self.namespace, volume_claim(volumes[name])) or {}
            size = (pvc.get("status") or {}).get("capacity", {}).get("storage") or storage_request(pvc) or "1Gi"
            images[name] = claim_disk_image(self._volume_dir(volumes[name], disk=True), int(parse_quantity(size)))
        return images

    def _fail(self, reason: str, message: str) -> None:
        self.console.write(f"localcluster: {message}")
        self.event("SyncFailed", f"server error. command SyncVMI failed: {message}", warning=True)
        self.phase, self.reason = "Failed", reason
        self.publish()

    async def _power_on(self, rootfs: Path, mounts: dict[str, Path]) -> bool:
        """Start the guest's sandbox: ``/`` the golden image under the root disk, the fstab's mounts bound in; whether it came up.

        The root disk (``rootfs``) is the overlay's upper layer: what the
        guest writes anywhere outside its mounts lands there. Its lower layer
        is the host's root filesystem, read-only, as the golden image's
        operating system (the golden image's own files are on the disk,
        cloned with it). Its output goes to the console log.
        """
        layers = Layers(self.dir / "root", Path("/"), rootfs, self.dir / "overlay-work")
        layers.prepare(fresh_upper=False)
        read_only = {
            self._volume_dir(volume, disk=False)
            for volume in self.obj["spec"].get("volumes") or []
            if (volume.get("persistentVolumeClaim") or {}).get("readOnly")
        }
        binds = [Bind(host, point, host in read_only) for point, host in mounts.items()]
        launch = sandboxed(Launch(None, {}, Path("/")), layers, binds, self.name, self.dir)
        self.console.write("localcluster: powering on (root disk over the golden image)")
        self.guest = await LocalProcess.spawn(launch, self.console)
        while self.guest.running and READY not in self.console.lines:
            await asyncio.sleep(0.02)
        return self.guest.running

    # -- units -----------------------------------------------------------------------

    def _supervisor(self, unit: Unit) -> Supervisor:
        return Supervisor(
            unit.name,
            functools.partial(self._launch, unit),
            LogTail(self.dir / f"{unit.name}.log"),
            policy=unit.restart,
            delay=lambda failures: unit.restart_sec,
            on_change=lambda sup, what: self.publish(),
            clock=self.client.clock,
            max_failures=START_LIMIT,
        )

    def _launch(self, unit: Unit) -> Launch:
        """The unit's process: ExecStart resolved in the guest first, environment and paths mapped."""
        if not unit.exec_start:
            raise FileNotFoundError(f"{unit.name} has no ExecStart=")
        declared = dict(unit.environment)
        for path, optional in unit.environment_files:
            host = self.fs.map(path)
            if host.is_file():
                declared.update(parse_environment_file(host.read_text()))
            elif not optional:
                raise FileNotFoundError(f"Failed to load environment files: {path}")
        home_path = declared.get("HOME") or home_of(self.fs, unit.user)
        if self.guest is not None:
            return self._joined(unit, declared, home_path)
        home = self.fs.map(home_path)
        home.mkdir(parents=True, exist_ok=True)
        env = {key: translate(value, self.fs, self.ip) for key, value in declared.items()}
        env.update(self.agent.host_env(env), HOME=str(home))
        cwd = self.fs.map(_working_directory(unit, home_path, lambda path: self.fs.map(path).is_dir()))
        argv = [translate(word, self.fs, self.ip) for word in expand_exec_argv(unit.exec_start, declared)]
        return Launch(resolve_command(argv, self.fs, env, cwd), env, cwd)

    def _joined(self, unit: Unit, declared: dict[str, str], home: str) -> Launch:
        """The unit's process inside the guest's sandbox: real paths, ExecStart found on the guest's PATH."""
        env = {key: translate(value, None, self.ip) for key, value in declared.items()}
        env.update(self.agent.host_env(env), HOME=home)
        cwd = _working_directory(unit, home, lambda path: self.fs.map(path).is_dir() or Path("/", path.lstrip("/")).is_dir())
        seen = Filesystem(self.fs.root, self.fs.mounts, lower=Path("/"))
        argv = find_inside([translate(word, None, self.ip) for word in expand_exec_argv(unit.exec_start, declared)], seen, env)
        return joined(self.guest.pid, Launch(argv, env, Path(cwd)), self.dir)

    async def stop(self, grace: float) -> None:
        """Shut the guest down: stop every unit (SIGTERM, SIGKILL after ``grace`` seconds), then power off its sandbox."""
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        if self.readiness is not None:
            await self.readiness.stop()
        await asyncio.gather(*(sup.stop(grace) for sup in self.units))
        if self.guest is not None:
            await self.guest.stop(grace)
            self.guest = None
        if self.domain is not None:
            await self.domain.stop(grace)

    async def retire(self, confirm: bool) -> None:
        """Shut down within the grace period, then mark the VMI Succeeded and lift the finalizer."""
        self.terminating = True
        if confirm and self.phase == "Running":
            self.event("ShuttingDown", "Signaled Graceful Shutdown")
        grace = self.obj["spec"].get("terminationGracePeriodSeconds", 30)
        # a real guest gets its whole grace period: cutting its shutdown short pulls its disk's power
        await self.stop(grace if self.domain is not None else self.agent.grace(grace))
        self.agent.forget(self)
        self.agent.cluster.attacher.detach(self.uid)
        await remove_tree(self.dir / "disks")  # emptyDisks live as long as the VMI
        if not confirm or not self.agent.node_ready(self.node):
            return
        if self.phase != "Failed":
            self.phase = "Succeeded"
            self.event("Stopped", "The VirtualMachineInstance was shut down.")
        self.publish()
        await self.flush()
        await self.finish(self.agent, self.obj)

    # -- status ----------------------------------------------------------------------

    def ready(self) -> tuple[bool, str]:
        if self.phase != "Running":
            return False, f"guest is {self.phase}"
        if self.domain is not None and not self.domain.running:
            return False, "the guest's QEMU process is not running"
        down = [sup.name for sup in self.units if not sup.ready and not (sup.final and sup.exit["exitCode"] == 0)]
        if down:
            return False, f"units not running: [{' '.join(down)}]"
        if self.readiness is not None and not self.readiness.ready:
            return False, "readiness probe has not passed"
        return True, ""

    def build_status(self, current: dict) -> dict:
        status = dict(current)
        now = rfc3339(self.client.clock())
        if status.get("phase") != self.phase:
            status["phase"] = self.phase
            status["phaseTransitionTimestamps"] = [
                *(status.get("phaseTransitionTimestamps") or []),
                {"phase": self.phase, "phaseTransitionTimestamp": now},
            ]
        if self.reason:
            status["reason"] = self.reason
        conditions = list(status.get("conditions") or [])
        ready, why = self.ready()
        if ready:
            set_condition(conditions, "Ready", "True", now=now)
        else:
            set_condition(conditions, "Ready", "False", "GuestNotRunning", why, now=now)
        status["conditions"] = conditions
        if self.ip and self.phase == "Running":
            interfaces = self.obj["spec"]["domain"].get("devices", {}).get("interfaces") or [{"name": "default"}]
            status["interfaces"] = [
                {
                    "name": interfaces[0]["name"],
                    "interfaceName": "eth0",
                    "ipAddress": self.ip,
                    "ipAddresses": [self.ip],
                    "mac": "02:" + ":".join(self.uid.replace("-", "")[i : i + 2] for i in range(0, 10, 2)),
                    "infoSource": "domain, guest-agent",
                }
            ]
            if self.os_info:
                status["guestOSInfo"] = self.os_info
        return status


def _working_directory(unit: Unit, home: str, is_dir: Callable[[str], bool]) -> str:
    """The guest path a unit runs in, as systemd's ``WorkingDirectory=`` says: ``/`` without one, ``~`` the user's ``home``.

    ``is_dir(path)``: whether the guest has that directory. A missing one
    raises FileNotFoundError, as systemd fails the unit; with a leading
    ``-`` it falls back to ``home``.
    """
    if not unit.working_directory:
        return "/"
    wanted = unit.working_directory.lstrip("-")
    if wanted == "~" or is_dir(wanted):
        return home if wanted == "~" else wanted
    if not unit.working_directory.startswith("-"):
        raise FileNotFoundError(f"Changing to the requested working directory failed: {wanted}")
    return home
