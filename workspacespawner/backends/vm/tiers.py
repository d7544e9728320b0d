"""The storage tiers of a VM workspace, as far as KubeVirt allows: virtiofs filesystems and an empty disk.

Pure functions over plain dicts, like :mod:`.vmmanifests`. What a VM gets of
each tier (``kubevirt.io/v1`` ``VirtualMachineInstanceSpec``):

team folders
    each claim as ``domain.devices.filesystems[]`` (``virtiofs``) backed by
    ``volumes[].persistentVolumeClaim`` (``readOnly`` for read-only teams,
    so the host side enforces it: the guest's root cannot remount it
    writable). The guest mounts it by its virtiofs tag, which is the
    filesystem's name. A team folder with a ``sub_path`` is left out:
    KubeVirt shares whole volumes, and the guest's root would see the
    other teams' folders.
scratch
    an ``emptyDisk`` of the scratch size (a sparse file in the
    virt-launcher Pod's node-local storage, new and blank on every start,
    gone when the VM stops), found by its virtio serial ``scratch``,
    formatted and mounted on every boot by ``bootcmd``.
model cache
    a claim as a read-only virtiofs filesystem; a ``hostPath`` cache is
    left out (KubeVirt has no directory volume from a node path).

The guest side is cloud-init: ``mounts`` entries (fstab lines) for every
tier, with the ``mounts`` module run on every boot so joining or leaving a
team applies at the next start; ``bootcmd`` for scratch;
``write_files`` for the scratch notice. :func:`add_tiers_to_vm` and
:func:`add_tiers_to_cloud_config` put a :class:`VMTiers` into the
VirtualMachine and the ``#cloud-config`` document built by
:mod:`.vmmanifests`. KubeVirt needs its virtiofs feature gate for PVCs
(``EnableVirtioFsPVC``; ``ExperimentalVirtiofsSupport`` before v1.2).
"""

from __future__ import annotations

import copy
import posixpath
import shlex
from collections.abc import Iterable
from dataclasses import dataclass

from workspacespawner.storage.tiers import (
    MODELS_VOLUME,
    SCRATCH_VOLUME,
    Scratch,
    StorageSettings,
    scratch_notice,
    teams_for_user,
)

#: virtio serial of the scratch disk; the guest finds it as ``/dev/disk/by-id/virtio-scratch``.
SCRATCH_SERIAL = "scratch"
SCRATCH_DEVICE = f"/dev/disk/by-id/virtio-{SCRATCH_SERIAL}"
#: fstab options of the tiers' mounts: a missing device never stops a boot.
MOUNT_OPTIONS = "defaults,nofail"


@dataclass(frozen=True)
class VMTiers:
    """What the tiers add to a VM: domain ``disks`` and ``filesystems``, ``volumes``, and cloud-init additions.

    ``mounts``: cloud-init ``mounts`` entries; ``bootcmd``: commands run on
    every boot; ``write_files``: files written on every boot. ``left_out``:
    plain-words reasons for tiers a VM cannot get, to show on the spawn page.
    """

    disks: tuple[dict, ...] = ()
    filesystems: tuple[dict, ...] = ()
    volumes: tuple[dict, ...] = ()
    mounts: tuple[tuple[str, ...], ...] = ()
    bootcmd: tuple[tuple[str, ...], ...] = ()
    write_files: tuple[dict, ...] = ()
    left_out: tuple[str, ...] = ()


def virtiofs_mount(tag: str, mount_path: str, options: str = MOUNT_OPTIONS) -> tuple[str, ...]:
    """The guest's fstab entry (a cloud-init ``mounts`` entry) of virtiofs ``tag``, fsck pass 0: a tag is no device
    to check (cloud-init's default pass, 2, has systemd-fstab-generator say so at every boot of a real guest)."""
    return (tag, mount_path, "virtiofs", options, "0", "0")


def _virtiofs(name: str, claim: str, mount_path: str, read_only: bool) -> tuple[dict, dict, tuple[str, ...]]:
    """A virtiofs filesystem of ``claim`` tagged ``name``, its volume, and the guest's fstab entry."""
    options = f"{MOUNT_OPTIONS},ro" if read_only else MOUNT_OPTIONS
    return (
        {"name": name, "virtiofs": {}},
        {"name": name, "persistentVolumeClaim": {"claimName": claim, "readOnly": read_only}},
        virtiofs_mount(name, mount_path, options),
    )


def scratch_boot_command(scratch: Scratch) -> tuple[str, ...]:
    """The ``bootcmd`` entry that formats the blank scratch disk and mounts it (mode 1777) at every boot."""
    script = "; ".join(
        [
            f"d={SCRATCH_DEVICE} m={shlex.quote(scratch.mount_path)}",
            '[ -b "$d" ] || exit 0',
            'blkid "$d" >/dev/null 2>&1 || mkfs.ext4 -q -L scratch "$d"',
            'mkdir -p "$m"',
            'mountpoint -q "$m" || mount "$d" "$m"',
            'chmod 1777 "$m"',
        ]
    )
    return ("sh", "-c", script)


def vm_tiers(*, settings: StorageSettings, groups_of_user: Iterable[str], unavailable: Iterable[str] = ()) -> VMTiers:
    """Every tier a VM workspace of a user in ``groups_of_user`` can get (see the module docstring).

    Claims in ``unavailable`` (see :func:`.tiers.team_volumes`) are left out.
    """
    skip = set(unavailable)
    scratch, model_cache = settings.scratch, settings.model_cache
    disks, filesystems, volumes, mounts, bootcmd, files, left_out = [], [], [], [], [], [], []
    for team in teams_for_user(groups_of_user, settings.team_folders):
        if team.claim in skip:
            continue
        if team.sub_path:
            left_out.append(
                f"Team folder {team.mount_path} is not available in a virtual machine: it is a sub-folder "
                "of a shared volume. Use a container profile to reach it."
            )
            continue
        fs, volume, mount = _virtiofs(team.volume_name, team.claim, team.mount_path, team.read_only)
        filesystems.append(fs)
        volumes.append(volume)
        mounts.append(mount)
    if scratch is not None:
        disks.append({"name": SCRATCH_VOLUME, "disk": {"bus": "virtio"}, "serial": SCRATCH_SERIAL})
        volumes.append({"name": SCRATCH_VOLUME, "emptyDisk": {"capacity": scratch.size}})
        mounts.append((SCRATCH_DEVICE, scratch.mount_path, "ext4", MOUNT_OPTIONS))
        bootcmd.append(scratch_boot_command(scratch))
        files.append({"path": scratch.notice_path, "content": scratch_notice(scratch) + "\n", "permissions": "0644"})
    if model_cache is not None:
        if model_cache.claim is None or model_cache.sub_path:
            left_out.append(
                f"The model cache {model_cache.mount_path} is not available in a virtual machine "
                "(it is a node directory or a sub-folder of a volume)."
            )
        else:
            fs, volume, mount = _virtiofs(MODELS_VOLUME, model_cache.claim, model_cache.mount_path, True)
            filesystems.append(fs)
            volumes.append(volume)
            mounts.append(mount)
    return VMTiers(
        disks=tuple(disks),
        filesystems=tuple(filesystems),
        volumes=tuple(volumes),
        mounts=tuple(mounts),
        bootcmd=tuple(bootcmd),
        write_files=tuple(files),
        left_out=tuple(left_out),
    )


def add_tiers_to_vm(vm: dict, tiers: VMTiers) -> dict:
    """A copy of VirtualMachine ``vm`` (from :func:`.vmmanifests.make_virtual_machine`) with ``tiers`` added.

    Disks and volumes go after the existing ones (the root disk stays
    first: the guest boots from it); ``filesystems`` is set only when there
    are some, so a VM without team folders keeps its template unchanged.
    """
    out = copy.deepcopy(vm)
    spec = out["spec"]["template"]["spec"]
    devices = spec["domain"].setdefault("devices", {})
    if tiers.disks:
        devices["disks"] = [*devices.get("disks", []), *copy.deepcopy(tiers.disks)]
    if tiers.filesystems:
        devices["filesystems"] = [*devices.get("filesystems", []), *copy.deepcopy(tiers.filesystems)]
    if tiers.volumes:
        spec["volumes"] = [*spec.get("volumes", []), *copy.deepcopy(tiers.volumes)]
    return out


def _always(modules: list, name: str) -> list:
    """``modules`` (a ``cloud_init_modules`` list) with ``name`` set to run on every boot."""
    out = [[name, "always"] if (m[0] if isinstance(m, list) else m) == name else m for m in modules]
    return out if [name, "always"] in out else [*out, [name, "always"]]


def add_tiers_to_cloud_config(config: dict, tiers: VMTiers) -> dict:
    """A copy of a ``#cloud-config`` dict (from :func:`.vmmanifests.cloud_config`) with ``tiers`` added.

    ``mounts`` entries are appended after the home's, ``bootcmd`` and
    ``write_files`` likewise, and the ``mounts`` module runs on every boot
    (in ``cloud_init_modules``, as :mod:`.vmmanifests` lists them), so the
    fstab lines follow the teams of this start. cloud-init's ``mounts``
    creates the mount points.
    """
    out = copy.deepcopy(config)
    if out.get("cloud_init_modules"):  # absent: the image's own list, which user data must not shrink to one module
        out["cloud_init_modules"] = _always(list(out["cloud_init_modules"]), "mounts")
    if tiers.mounts:
        out["mounts"] = [*out.get("mounts", []), *(list(m) for m in tiers.mounts)]
    if tiers.bootcmd:
        out["bootcmd"] = [*out.get("bootcmd", []), *(list(c) for c in tiers.bootcmd)]
    if tiers.write_files:
        out["write_files"] = [*out.get("write_files", []), *copy.deepcopy(tiers.write_files)]
    return out


def mount_points(tiers: VMTiers) -> dict[str, str]:
    """``{mount path: device or virtiofs tag}`` of the guest's tier mounts (for tests and the spawn page)."""
    return {posixpath.normpath(m[1]): m[0] for m in tiers.mounts}
