"""Which DataVolume is a VM workspace's root disk, read from the shared watch caches (pure).

A workspace's root disk is named ``<vm>-root`` when a start clones it, but a
pool disk (:mod:`.pool`) and a rebuilt disk have names of their own. So the
root disk is found, never assumed from a name: the VirtualMachine's
``rootdisk`` volume names it (:func:`~workspacespawner.vmdisk.rootdisk.root_disk_of`) once the VM
exists; before that (a start that claimed a pool disk and did not get as far
as the VM), the user's own root DataVolume whose slot annotation
(:data:`~workspacespawner.core.names.ROOT_SLOT_ANNOTATION`) is the VM's name,
and not parked (``Retained``/``DeletingDisk``); else the name a clone gets.
"""

from __future__ import annotations

from collections.abc import Iterable

from workspacespawner.backends.vm.manifests import VMIdentity
from workspacespawner.core import names
from workspacespawner.lifecycle.disks import PARKED, phase_of
from workspacespawner.vmdisk.rootdisk import root_disk_of


def _meta(obj: dict) -> dict:
    return obj.get("metadata") or {}


def slot_disks(ident: VMIdentity, datavolumes: Iterable[dict]) -> list[dict]:
    """The DataVolumes of ``ident``'s user whose root slot is ``ident.vm`` and that no retention parked, oldest first."""
    found = [
        dv for dv in datavolumes
        if names.owned_by(_meta(dv), ident.user_name)
        and (_meta(dv).get("annotations") or {}).get(names.ROOT_SLOT_ANNOTATION) == ident.vm
        and phase_of(dv) not in PARKED
        and not _meta(dv).get("deletionTimestamp")
    ]
    return sorted(found, key=lambda dv: (_meta(dv).get("creationTimestamp") or "", _meta(dv)["name"]))


def current_root_disk(ident: VMIdentity, vm: dict | None, datavolumes: Iterable[dict]) -> str:
    """The name of ``ident``'s root DataVolume: the one its VM (``vm``, if ``ident.user_name``'s) boots from, else the
    oldest of its slot (:func:`slot_disks`), else ``ident.root_disk`` (the name a clone gets)."""
    if vm is not None and names.owned_by(_meta(vm), ident.user_name):
        named = root_disk_of(vm)
        if named:
            return named
    found = slot_disks(ident, datavolumes)
    return _meta(found[0])["name"] if found else ident.root_disk
