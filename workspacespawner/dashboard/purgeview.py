"""Retained disks, and what the next purge would delete: a read-only view for the Reports page and "My workspaces".

The decision is the purge's own, :func:`workspacespawner.lifecycle.retention.select_purgeable`,
run on plain objects the page already holds (the watch caches'
PersistentVolumeClaims, DataVolumes, Pods, VirtualMachineInstances,
VirtualMachines, Services and Secrets); nothing here deletes or changes
anything. A disk is listed when it carries the phase label ``Retained`` or
``DeletingDisk`` (an interrupted purge); ``purge_next`` says whether a purge
run at ``now`` would delete it, ``kept_because`` why not.

Sizes in GiB (2**30 bytes, what the disk asks for), times aware UTC.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from workspacespawner.core import names
from workspacespawner.lifecycle import phases
from workspacespawner.lifecycle.disks import requested_bytes
from workspacespawner.lifecycle.phases import Status
from workspacespawner.lifecycle.retention import select_purgeable

GIB = 2**30


@dataclass(frozen=True)
class RetainedDisk:
    """One retained disk.

    ``owner``: the user whose owner labels it carries (``""`` when they are
    missing or disagree: the purge keeps it); ``name``; ``kind``
    (``PersistentVolumeClaim`` or ``DataVolume``); ``server``: the
    JupyterHub server it served (``""``: the default server); ``size_gib``;
    ``phase`` (``Retained`` or ``DeletingDisk``); ``retain_until`` (None if
    not recorded); ``purge_next``: the next purge deletes it;
    ``kept_because``: why the purge keeps it (``""`` when it goes);
    ``goes_with``: ``"Kind/name"`` of the objects deleted with it (a root
    disk's VirtualMachine, its Service and cloud-init Secret).
    """

    owner: str
    name: str
    kind: str
    server: str
    size_gib: float
    phase: str
    retain_until: datetime | None
    purge_next: bool
    kept_because: str = ""
    goes_with: tuple[str, ...] = ()

    def to_json(self) -> dict:
        """A JSON-safe dict (``retain_until`` in RFC 3339 UTC, or None)."""
        return {
            "owner": self.owner,
            "name": self.name,
            "kind": self.kind,
            "server": self.server,
            "size_gib": self.size_gib,
            "phase": self.phase,
            "retain_until": phases.rfc3339(self.retain_until) if self.retain_until else None,
            "purge_next": self.purge_next,
            "kept_because": self.kept_because,
            "goes_with": list(self.goes_with),
        }


@dataclass(frozen=True)
class PurgePreview:
    """Every retained disk at ``now`` (``disks``: soonest retain-until first, then owner and name)."""

    now: datetime
    disks: list[RetainedDisk]

    @property
    def to_purge(self) -> list[RetainedDisk]:
        """The disks the next purge deletes."""
        return [disk for disk in self.disks if disk.purge_next]

    @property
    def purge_gib(self) -> float:
        """GiB the next purge frees (rounded to two decimals)."""
        return round(sum(disk.size_gib for disk in self.to_purge), 2)

    def of_owner(self, user: str) -> list[RetainedDisk]:
        """The retained disks of ``user`` (exact name; what "My workspaces" lists)."""
        return [disk for disk in self.disks if disk.owner == user]

    def to_json(self) -> dict:
        return {
            "now": phases.rfc3339(self.now),
            "disks": [disk.to_json() for disk in self.disks],
            "purge_gib": self.purge_gib,
        }


def _row(disk: dict, *, purge: bool, why: str = "", goes_with=()) -> RetainedDisk:
    meta = disk.get("metadata") or {}
    status = Status.from_object(disk)
    return RetainedDisk(
        owner=names.owner_name(meta) or "",
        name=meta.get("name", ""),
        kind=disk.get("kind", ""),
        server=status.server if status else "",
        size_gib=round(requested_bytes(disk) / GIB, 2),
        phase=(meta.get("labels") or {}).get(names.PHASE_LABEL, ""),
        retain_until=status.retain_until if status else None,
        purge_next=purge,
        kept_because=why,
        goes_with=tuple(f"{obj['kind']}/{obj['metadata']['name']}" for obj in goes_with),
    )


def preview(objects, now: datetime) -> PurgePreview:
    """The :class:`PurgePreview` of ``objects`` at ``now`` (pure; see the module docstring for ``objects``)."""
    plan = select_purgeable(list(objects), now)
    disks = [_row(item.disk, purge=True, goes_with=item.goes_with) for item in plan.purge]
    disks += [_row(disk, purge=False, why=why) for disk, why in plan.kept]
    far = datetime.max.replace(tzinfo=UTC)
    disks.sort(key=lambda d: (d.retain_until or far, d.owner, d.name))
    return PurgePreview(now=now, disks=disks)
