"""virtiofsd: a host folder shared with a QEMU guest through virtio-fs (what KubeVirt's virtiofs filesystems use).

One :class:`Virtiofsd` per shared folder: the daemon serves the folder on a
vhost-user socket, QEMU connects to it (``vhost-user-fs-pci`` with the
filesystem's tag, the guest's memory shared: :mod:`.qemu`), and the guest mounts
it with ``mount -t virtiofs <tag> <path>``. The daemon exits when QEMU
disconnects; :meth:`Virtiofsd.stop` ends it too.

Owners: the local cluster's Pods run as the user that runs the cluster (root on
CI), which stands in for the container's user (uid 1000, ``jovyan``); on a
cluster ``runAsUser``/``fsGroup`` make a home's files that user's. virtiofsd maps
the guest's uid and gid 1000 to that host user both ways
(``--translate-uid map:1000:<uid>:1``), so the guest's ``jovyan`` owns the files a
container workspace wrote and a container workspace owns the files the VM wrote.

The program: ``$WORKSPACESPAWNER_VIRTIOFSD``, else ``virtiofsd`` on PATH, else
the newest build of tools/virtiofsd/install.sh in the cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import time
from pathlib import Path

from .toolcache import newest_bin

#: The guest user (and group) the host's user is mapped to: the workspace user of the images and golden images.
GUEST_ID = 1000
PROGRAM = "virtiofsd"


def find_virtiofsd() -> Path | None:
    """The virtiofsd program (see the module docstring), or None when there is none."""
    named = os.environ.get("WORKSPACESPAWNER_VIRTIOFSD")
    if named:
        return Path(named)
    on_path = shutil.which(PROGRAM)
    if on_path:
        return Path(on_path)
    built = newest_bin("virtiofsd", ".installed", PROGRAM)
    return built / PROGRAM if built else None


def virtiofsd_command(program: Path, shared_dir: Path, socket: Path, *, uid: int, gid: int) -> list[str]:
    """virtiofsd's argument list: ``shared_dir`` on ``socket``, the guest's 1000 mapped to host ``uid``/``gid``."""
    return [
        str(program),
        f"--socket-path={socket}",
        f"--shared-dir={shared_dir}",
        # the node agent is the sandbox here, as virt-launcher's container is on a cluster
        "--sandbox=none",
        "--cache=auto",
        f"--translate-uid=map:{GUEST_ID}:{uid}:1",
        f"--translate-gid=map:{GUEST_ID}:{gid}:1",
    ]


class VirtiofsdError(RuntimeError):
    """virtiofsd is not installed, or exited before its socket was there."""


class Virtiofsd:
    """One shared folder's daemon: :meth:`start` (until its socket listens), :meth:`stop`."""

    def __init__(self, shared_dir: Path, socket: Path, log: Path):
        self.shared_dir = Path(shared_dir)
        self.socket = Path(socket)
        self.log = Path(log)
        self.process: asyncio.subprocess.Process | None = None

    async def start(self, timeout: float = 20) -> None:
        program = find_virtiofsd()
        if program is None:
            raise VirtiofsdError("virtiofsd is not installed (bash tools/virtiofsd/install.sh)")
        self.socket.unlink(missing_ok=True)
        command = virtiofsd_command(program, self.shared_dir, self.socket, uid=os.getuid(), gid=os.getgid())
        with open(self.log, "ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                *command, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + timeout
        while not self.socket.exists():
            if self.process.returncode is not None or time.monotonic() > deadline:
                await self.stop()
                tail = self.log.read_text(errors="replace").strip().splitlines()[-1:] if self.log.exists() else []
                raise VirtiofsdError(f"virtiofsd for {self.shared_dir.name} did not listen: {' '.join(tail) or 'no output'}")
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        if self.process is None or self.process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.process.terminate()
        try:
            await asyncio.wait_for(self.process.wait(), 5)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await self.process.wait()
