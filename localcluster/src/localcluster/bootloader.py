"""What a bootloader reads from a guest's root disk, read with e2fsprogs' ``debugfs`` without mounting or booting it.

The golden image of tools/golden-image is a bare ext4 filesystem (no partition table, no bootloader), so QEMU boots
its kernel directly (:mod:`.qemu`). As GRUB does on a Debian system, the node agent boots the kernel the disk's
``/vmlinuz`` link names, with the initrd ``/initrd.img`` names (Debian's kernel packages keep both links on the newest
installed kernel): a kernel the user installs inside the guest is the one the next start boots. ``/etc/os-release``
gives the VMI's ``guestOSInfo``, as KubeVirt's guest agent reports it.
"""

from __future__ import annotations

import asyncio
import posixpath
import re
from pathlib import Path

#: e2fsprogs' filesystem debugger (Debian's e2fsprogs package, installed everywhere).
DEBUGFS = "debugfs"
#: Symbolic links followed before giving up, as the kernel's own limit on nested links is small too.
MAX_LINKS = 8
_FAST_LINK = re.compile(r'Fast link dest: "(.*)"')


class BootError(RuntimeError):
    """The disk cannot be booted: not an ext4 filesystem, or no kernel or initrd on it; the message says which."""


class NoKernel(BootError):
    """The disk is an ext4 filesystem that names no kernel (no ``/vmlinuz`` or ``/initrd.img``): only a boot loader on it
    could boot it."""


async def _debugfs(disk: Path, request: str) -> tuple[bytes, str]:
    """``debugfs -c -R request disk`` (read-only): its output and its diagnostics (it exits 0 on most failures).

    ``-c`` reads files without the allocation bitmaps, as a boot loader does: a guest killed mid-write (QEMU's
    SIGKILL) leaves bitmaps whose checksums its journal has yet to fix, and debugfs would not open the disk."""
    process = await asyncio.create_subprocess_exec(
        DEBUGFS, "-c", "-R", request, str(disk), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await process.communicate()
    diagnostics = err.decode(errors="replace")
    if process.returncode != 0 or "Bad magic number" in diagnostics or "Filesystem not open" in diagnostics:
        raise BootError(f"the root disk {disk.name} is not an ext4 filesystem")
    return out, diagnostics


async def resolve(disk: Path, path: str) -> str | None:
    """``path`` inside the disk's filesystem with symbolic links followed, the last one's too; None where nothing is."""
    current = posixpath.normpath("/" + path.lstrip("/"))
    for _ in range(MAX_LINKS):
        out, diagnostics = await _debugfs(disk, f'stat "{current}"')
        text = out.decode(errors="replace")
        if "not found" in diagnostics or "Inode:" not in text:
            return None
        if "Type: symlink" not in text:
            return current
        fast = _FAST_LINK.search(text)
        target = fast.group(1) if fast else (await _debugfs(disk, f'cat "{current}"'))[0].decode(errors="replace")
        current = posixpath.normpath(posixpath.join(posixpath.dirname(current), target))
    raise BootError(f"{path} on the root disk: too many levels of symbolic links")


async def read_file(disk: Path, path: str) -> bytes | None:
    """The contents of the file at ``path`` on the disk (links followed), or None where there is none."""
    real = await resolve(disk, path)
    if real is None:
        return None
    return (await _debugfs(disk, f'cat "{real}"'))[0]


async def boot_files(disk: Path, folder: Path) -> tuple[Path, Path]:
    """The kernel and initrd the disk boots, copied into ``folder`` as ``vmlinuz`` and ``initrd.img``."""
    copied = []
    for link in ("/vmlinuz", "/initrd.img"):
        real = await resolve(disk, link)
        if real is None:
            raise NoKernel(f"the root disk {disk.name} has no {link}: no kernel is installed in the image")
        target = folder / link.lstrip("/")
        target.unlink(missing_ok=True)
        await _debugfs(disk, f'dump "{real}" "{target}"')
        if not target.is_file() or target.stat().st_size == 0:
            raise BootError(f"the root disk {disk.name}: {link} ({real}) could not be read")
        copied.append(target)
    return copied[0], copied[1]
