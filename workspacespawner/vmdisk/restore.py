"""Restore one of a user's VolumeSnapshots: a home's swaps the home, a VM system disk's the VM's root disk.

The one entry the Workspaces dashboard and ``workspacespawner disk restore``
share: :func:`restore` reads what the snapshot was taken of
(:func:`~.rebuild.snapshot_root_slot`) and hands it to
:meth:`~workspacespawner.lifecycle.disks.DiskOps.restore` (a home) or
:func:`~.rebuild.restore_root_from` (a system disk), reading the snapshot once. Either keeps the disk it
replaces (Retained) and refuses while the workspace runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from workspacespawner.lifecycle.disks import DiskOps
from workspacespawner.vmdisk.rebuild import Rebuilt, restore_root_from, snapshot_root_slot


@dataclass(frozen=True)
class Restored:
    """What :func:`restore` made: ``disk``, the new home PVC, or (``system``) the VM's new root DataVolume, with the
    rebuild's record in ``rebuilt``."""

    disk: str
    system: bool = False
    rebuilt: Rebuilt | None = None


async def restore(ops: DiskOps, user: str, snapshot_name: str, *, limit: int | None = None,
                  now: datetime | None = None) -> Restored:
    """Restore ``user``'s VolumeSnapshot ``snapshot_name`` where it was taken: a home into a new home PVC, a VM's system
    disk into a new root DataVolume the VM boots from (within the disk ``limit`` in bytes, None: none). Raises
    :class:`~workspacespawner.lifecycle.disks.DiskOpError` as either does."""
    snap = await ops.owned_snapshot(user, snapshot_name)
    slot = await snapshot_root_slot(ops.kube, ops.namespace, user, snap)
    if slot[0] is not None:
        done = await restore_root_from(ops, user, snap, slot, limit=limit, now=now)
        return Restored(done.new, system=True, rebuilt=done)
    made = await ops.restore(user, snapshot_name, now=now)
    return Restored(made["metadata"]["name"])
