"""The golden guest image tools/golden-image/build.sh leaves in the cache: a raw ext4 disk, its kernel and initrd.

The build writes ``<cache>/golden-image/<suite>-<key>/`` (see
:func:`~.toolcache.cache_root`) with ``disk.img``, ``vmlinuz`` and
``initrd.img``, and its marker ``.built`` last, so a folder with its marker
is a finished image.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .toolcache import cache_root

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
