"""Where the local cluster keeps volume data: one directory per PersistentVolume.

On a real cluster a ceph-csi RBD image backs each PersistentVolume; here a
directory ``<state_dir>/volumes/<pv name>`` does. The PVC binder creates it,
CDI and the snapshot controller copy into and out of it, and the node agent
mounts it (by path) into the processes it runs. A disk image kept in a
claim (a VM's disk, what CDI writes) is the claim's whole directory on a
``Block``-mode claim (the raw device) and its ``disk.img`` on a
``Filesystem``-mode one, as KubeVirt and CDI keep it: a directory of the
guest's files for the emulated guest, or a real raw disk image, a file,
that QEMU boots (``block.img`` in a ``Block``-mode claim's directory; see
:func:`disk_image_path`). Snapshot contents live in
``<state_dir>/snapshots/<namespace>/<snapshot uid>``; a node's own files (what
``hostPath`` volumes reach) under ``<state_dir>/nodes/<node>/hostpath/``.

Copies run in a worker thread so the cluster's event loop never blocks on disk, and keep a file's holes (a 3 GiB
golden image holds 860 MB of data): only the data is copied, with ``copy_file_range`` (which shares the blocks where
the filesystem can).
"""

from __future__ import annotations

import asyncio
import errno
import os
import posixpath
import shutil
import stat
from pathlib import Path

from .attacher import Consumer
from .errors import ApiError


def volume_path(cluster, pv_name: str) -> Path:
    """The directory holding the data of PersistentVolume ``pv_name``."""
    return Path(cluster.state_dir) / "volumes" / pv_name


def host_path_dir(cluster, node: str, path: str) -> Path:
    """The host directory behind ``path`` on node ``node`` (a ``hostPath`` volume): it outlives every Pod."""
    return Path(cluster.state_dir) / "nodes" / node / "hostpath" / posixpath.normpath("/" + path).lstrip("/")


def snapshot_path(cluster, namespace: str, uid: str) -> Path:
    """The directory holding the content of the VolumeSnapshot with ``uid`` in ``namespace``."""
    return Path(cluster.state_dir) / "snapshots" / namespace / uid


def claim_path(cluster, namespace: str, name: str, client=None) -> Path | None:
    """The data directory of PVC ``namespace/name``, or None while it is missing or unbound.

    The claim is read through ``client`` (default ``cluster.client``; see :mod:`.client`).
    """
    store = client or cluster.client
    try:
        pvc = store.get(store.kind("", "v1", "persistentvolumeclaims"), namespace, name)
    except ApiError:
        return None
    pv_name = (pvc.get("spec") or {}).get("volumeName")
    if not pv_name or (pvc.get("status") or {}).get("phase") != "Bound":
        return None
    return volume_path(cluster, pv_name)


#: The file KubeVirt and CDI keep a disk in on a Filesystem-mode PVC (a directory of that name for an emulated disk).
DISK_IMAGE = "disk.img"
#: The file a Block-mode claim keeps its raw device's bytes in when it holds a real disk image.
RAW_DEVICE = "block.img"


def claim_volume_mode(client, namespace: str, name: str) -> str:
    """The ``spec.volumeMode`` of PVC ``namespace/name``, read through ``client`` (``Filesystem`` when unset or missing)."""
    try:
        pvc = client.get(client.kind("", "v1", "persistentvolumeclaims"), namespace, name)
    except ApiError:
        return "Filesystem"
    return (pvc.get("spec") or {}).get("volumeMode") or "Filesystem"


def disk_image_path(claim_dir: Path, volume_mode: str) -> Path:
    """Where a disk image lives in the directory ``claim_dir`` of a claim with ``volume_mode``.

    ``Block``: the directory itself (the raw device holds the image), or
    its :data:`RAW_DEVICE` file when it holds a real disk image.
    ``Filesystem``: its :data:`DISK_IMAGE` (KubeVirt's and CDI's
    ``disk.img``), so what a Pod mounting the claim sees is the image file,
    not the files inside the image, and the other way round.
    """
    if volume_mode == "Block":
        raw = Path(claim_dir) / RAW_DEVICE
        return raw if raw.is_file() else Path(claim_dir)
    return Path(claim_dir) / DISK_IMAGE


def raw_image_path(claim_dir: Path, volume_mode: str) -> Path:
    """Where a real (raw) disk image goes in the directory ``claim_dir`` of a claim with ``volume_mode``."""
    return Path(claim_dir) / (RAW_DEVICE if volume_mode == "Block" else DISK_IMAGE)


def grow_raw_image(image: Path, size: int) -> None:
    """Grow a real disk image (a file; a directory is left alone) to ``size`` bytes, sparsely, as an RBD clone is
    resized to the size its claim asks (cloud-init's growpart and resizefs grow the guest's filesystem into it)."""
    if image.is_file() and image.stat().st_size < size:
        os.truncate(image, size)


def clone_paths(src_dir: Path, src_mode: str, dst_dir: Path, dst_mode: str) -> tuple[Path, Path]:
    """What a CDI clone from a claim of ``src_mode`` to one of ``dst_mode`` copies: ``(from, to)`` directories.

    The same mode: the whole claim (CDI copies the filesystem, or the
    device). Different modes: the disk image of one into the disk image
    of the other (:func:`disk_image_path`), as CDI converts a ``disk.img``
    to a raw device and back; a real disk image (a file) to where the
    target keeps one (:func:`raw_image_path`).
    """
    if src_mode == dst_mode:
        return Path(src_dir), Path(dst_dir)
    source = disk_image_path(src_dir, src_mode)
    if source.is_file():
        return source, raw_image_path(dst_dir, dst_mode)
    return source, disk_image_path(dst_dir, dst_mode)


def attach_claim(cluster, namespace: str, name: str, consumer: Consumer, client=None) -> Path | None:
    """:func:`claim_path`, once the cluster's attacher has attached the claim's volume for ``consumer``.

    None while the claim is missing or unbound (nothing attached then);
    :class:`~.attacher.MultiAttachError` when its access modes keep it
    where it is (see :mod:`.attacher`).
    """
    client = client or cluster.client
    path = claim_path(cluster, namespace, name, client)
    if path is None:
        return None
    pvc = client.get(client.kind("", "v1", "persistentvolumeclaims"), namespace, name)
    modes = (pvc.get("status") or {}).get("accessModes") or pvc["spec"].get("accessModes") or []
    cluster.attacher.attach((namespace, name), pvc["spec"]["volumeName"], modes, consumer)
    return path


def copy_sparse(src: str | Path, dst: str | Path) -> None:
    """Copy the file ``src`` to ``dst`` (replaced) with its holes kept and its metadata, as ``cp --sparse=auto -p``."""
    with open(src, "rb") as source, open(dst, "wb") as target:
        size = os.fstat(source.fileno()).st_size
        target.truncate(size)
        offset = 0
        while offset < size:
            try:
                data = os.lseek(source.fileno(), offset, os.SEEK_DATA)
            except OSError as e:  # ENXIO: only a hole is left
                if e.errno == errno.ENXIO:
                    break
                raise
            end = os.lseek(source.fileno(), data, os.SEEK_HOLE)
            _copy_range(source.fileno(), target.fileno(), data, end)
            offset = end
    shutil.copystat(src, dst)


def _copy_range(source: int, target: int, start: int, end: int) -> None:
    position = start
    while position < end:
        try:
            copied = os.copy_file_range(source, target, end - position, position, position)
        except OSError as e:  # a kernel or filesystem without it
            if e.errno not in (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL):
                raise
            copied = os.pwrite(target, os.pread(source, min(end - position, 1 << 20), position), position)
        if copied == 0:
            return
        position += copied


def _copy_entry(src: str, dst: str) -> None:
    """Copy one file; a device node (an overlay's whiteout: the guest deleted that file of its golden image) is made anew."""
    st = os.lstat(src)
    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        os.mknod(dst, st.st_mode, st.st_rdev)
        shutil.copystat(src, dst, follow_symlinks=False)
    else:
        copy_sparse(src, dst)


def _replace_tree(src: Path, dst: Path) -> None:
    if dst.is_dir() and not dst.is_symlink():
        shutil.rmtree(dst)
    else:
        dst.unlink(missing_ok=True)
    if src.is_file():
        copy_sparse(src, dst)
    elif src.exists():
        shutil.copytree(src, dst, symlinks=True, copy_function=_copy_entry)
    else:
        dst.mkdir(parents=True)


async def copy_tree(src: Path, dst: Path) -> None:
    """Make ``dst`` an exact copy of ``src`` (a file, or a directory: an empty one if ``src`` is missing), off the loop."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    await asyncio.to_thread(_replace_tree, Path(src), Path(dst))


async def remove_tree(path: Path) -> None:
    """Delete ``path`` and everything under it, if present, off the loop."""
    await asyncio.to_thread(shutil.rmtree, Path(path), True)
