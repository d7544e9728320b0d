"""A cloud-init NoCloud seed: a small disk whose filesystem is labelled ``cidata``, built without root.

KubeVirt hands a VMI's ``cloudInitNoCloud`` volume to the guest as such a
disk holding ``user-data``, ``meta-data`` (the instance id and host name)
and, when the volume has network data, ``network-config``; cloud-init's
NoCloud datasource finds it by its label. KubeVirt writes an ISO 9660
image; NoCloud reads a VFAT one the same way, and that is what is built
here, from Debian's dosfstools (``mkfs.vfat -C``: a filesystem in a new
file) and mtools (``mcopy``: files into it without mounting).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from pathlib import Path

#: The filesystem label NoCloud looks for.
LABEL = "CIDATA"
#: The seed's size in KiB (user data is at most a few hundred KiB; KubeVirt caps a Secret at 1 MiB).
SIZE_KIB = 2048
#: The Debian packages and commands the seed is built with.
TOOLS = {"mkfs.vfat": "dosfstools", "mcopy": "mtools"}


def missing_tools() -> list[str]:
    """The Debian packages to install before :func:`make_seed` works (empty when all is there)."""
    return sorted({package for command, package in TOOLS.items() if shutil.which(command) is None})


def meta_data(instance_id: str, hostname: str) -> str:
    """NoCloud's ``meta-data``: the instance id (per-instance modules run once per id) and the host name."""
    # JSON is YAML: no value is pasted into YAML text.
    return json.dumps({"instance-id": instance_id, "local-hostname": hostname}) + "\n"


async def _run(*command: str) -> None:
    process = await asyncio.create_subprocess_exec(*command, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    _, stderr = await process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"{command[0]} failed ({process.returncode}): {stderr.decode(errors='replace').strip()}")


async def make_seed(path: Path, *, user_data: str, meta_data: str, network_config: str | None = None) -> Path:
    """Write a NoCloud seed disk image to ``path`` (replaced if there) and return it.

    ``user_data`` is the VMI's user data as given (``#cloud-config`` or a
    script), ``meta_data`` see :func:`meta_data`, ``network_config`` the
    volume's network data (cloud-init's network config v1 or v2) or None.
    """
    if missing := missing_tools():
        raise RuntimeError(f"building a cloud-init seed needs the Debian packages {', '.join(missing)}")
    path.unlink(missing_ok=True)
    files = {"user-data": user_data, "meta-data": meta_data}
    if network_config is not None:
        files["network-config"] = network_config
    await _run("mkfs.vfat", "-n", LABEL, "-C", str(path), str(SIZE_KIB))
    with tempfile.TemporaryDirectory(prefix="cidata-") as staging:
        sources = []
        for name, text in files.items():
            source = Path(staging) / name
            source.write_text(text)
            sources.append(str(source))
        # -i: the image; -o: overwrite; ::/ the image's root folder.
        await _run("mcopy", "-o", "-i", str(path), *sources, "::/")
    return path
