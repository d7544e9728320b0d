"""The golden guest image tools/golden-image/build.sh leaves in the cache: a raw ext4 disk, its kernel and initrd.

The build writes ``<cache>/golden-image/<suite>-<key>/`` (see
:func:`~.toolcache.cache_root`) with ``disk.img``, ``vmlinuz`` and
``initrd.img``, and its marker ``.built`` last, so a folder with its marker
is a finished image.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from .bootloader import DEBUGFS
from .cidata import missing_tools
from .qemu import QEMU
from .toolcache import cache_root
from .virtiofs import find_virtiofsd

#: The marker build.sh writes last.
MARKER = ".built"


@dataclass(frozen=True)
class GuestImage:
    """A finished golden image: the folder and its three files."""

    folder: Path

    @property
    def disk(self) -> Path:
        return self.folder / "disk.img"

    @property
    def kernel(self) -> Path:
        return self.folder / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.folder / "initrd.img"

    @property
    def claim_size(self) -> str:
        """The smallest whole-GiB PVC request that holds the disk (a Kubernetes quantity, e.g. ``3Gi``)."""
        return f"{-(-self.disk.stat().st_size // 2**30)}Gi"

    def marker(self, key: str) -> str:
        """A value of the build's marker (``suite``, ``kernel``, ``built``, ``seconds``, ``stamp``); "" when it has none."""
        for line in (self.folder / MARKER).read_text().splitlines():
            if line.startswith(f"{key}="):
                return line.removeprefix(f"{key}=")
        return ""

    def built(self) -> str:
        """When the build finished, as its marker says (``2026-12-05T10:00:00Z``); "" when it does not say."""
        return self.marker("built")

    def kernel_release(self) -> str:
        """The release of the kernel the image boots (``6.1.0-50-cloud-amd64``), as its marker says."""
        return self.marker("kernel")

    def complete(self) -> bool:
        return all(path.is_file() for path in (self.folder / MARKER, self.disk, self.kernel, self.initrd))


def newest_guest_image(root: Path | None = None) -> GuestImage | None:
    """The most recently built complete golden image under ``root`` (default: the cache's ``golden-image``), or None."""
    root = root if root is not None else cache_root() / "golden-image"
    images = [GuestImage(marker.parent) for marker in root.glob(f"*/{MARKER}")]
    images = [image for image in images if image.complete()]
    if not images:
        return None
    return max(images, key=lambda image: (image.folder / MARKER).stat().st_mtime)


def why_no_real_guest() -> str | None:
    """Why this machine cannot boot a real guest, with what to install or build; None when it can (QEMU, the
    cloud-init seed's tools, debugfs, virtiofsd and a built golden image are there)."""
    if shutil.which(QEMU) is None:
        return "qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)"
    if missing := missing_tools():
        return f"the cloud-init seed needs {', '.join(missing)} (apt-get install)"
    if shutil.which(DEBUGFS) is None:
        return "debugfs, which reads the guest's kernel from its disk, is not installed (apt-get install e2fsprogs)"
    if find_virtiofsd() is None:
        return "virtiofsd, which shares the home with the guest, is not built (bash tools/virtiofsd/install.sh)"
    if newest_guest_image() is None:
        return "no golden image is built (sudo bash tools/golden-image/build.sh)"
    return None
