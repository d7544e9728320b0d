"""My workspaces, as data (pure): a user's servers with what each holds, their disks, snapshots and card-hours.

Inputs are plain dicts: the hub's user model (``servers``: name -> server
model with ``ready``, ``pending``, ``started``, ``user_options``), the
watch caches' objects (Pods, VirtualMachineInstances, PersistentVolumeClaims,
DataVolumes, VolumeSnapshots, Nodes; ``kind`` set), the user's
:class:`~workspacespawner.quota.service.MonthBalance` and, when Prometheus
is there, used bytes per PersistentVolumeClaim name (the seam of
:mod:`workspacespawner.core.prometheus`: ``kubelet_volume_stats_used_bytes``).
A server's compute is found by our owner labels and kubespawner's
user/server annotations (:func:`~workspacespawner.core.names.server_of`),
never by name; a VM server's golden image, from its root DataVolume
(the ``workspacespawner.io/golden-image`` annotation, else its ``spec.sourceRef``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime

from workspacespawner.config.goldenimages import cloned_from, image_name, version_label
from workspacespawner.core import names
from workspacespawner.core.gpuresources import GPU_PRODUCT_LABEL
from workspacespawner.core.quantities import gib, parse_quantity
from workspacespawner.dashboard.cluster import requested
from workspacespawner.gpu.capacity import gpus_held
from workspacespawner.homepage.model import RetainedDisk, retained_disks, server_phase
from workspacespawner.k8s.kinds import DATA_VOLUME, POD, PVC, VMI, VOLUME_SNAPSHOT
from workspacespawner.k8s.objects import counted_once, node_of, uses_claim
from workspacespawner.lifecycle.disks import phase_of, requested_bytes
from workspacespawner.lifecycle.phases import Phase, Status, rfc3339
from workspacespawner.quota.policy import number, when
from workspacespawner.quota.service import MonthBalance


@dataclass(frozen=True)
class DiskRow:
    """A disk a server uses: ``name`` (PersistentVolumeClaim), ``role`` (home, root, scratch...), ``size``
    (``"10 GiB"``), ``size_bytes``, ``used_bytes`` and ``used_share`` (0-1; None without Prometheus), ``phase``,
    ``title`` (what it is, by role and server: :func:`~workspacespawner.core.names.disk_title`)."""

    name: str
    role: str
    size: str
    size_bytes: int
    used_bytes: int | None
    used_share: float | None
    phase: str
    title: str = ""


@dataclass(frozen=True)
class WorkspaceRow:
    """One server of the user: ``server`` (``""``: default), ``kind`` (container, vm), ``phase`` and ``reason``,
    ``profile`` (its slug), ``node``, ``cpu`` (cores), ``memory`` (bytes), ``gpus`` and ``gpu_type`` it holds now,
    its ``disks``, ``running_since`` (RFC 3339, ``""`` when stopped), ``card_hours`` this month (None: quotas off);
    for a VM, ``system_image``: the golden image (DataSource name) its root disk was cloned from, and
    ``system_image_version`` its version (``2026-11``, or ``no version in its name``; both ``""`` when unknown)."""

    server: str
    kind: str
    phase: str
    reason: str
    profile: str
    node: str
    cpu: float
    memory: int
    gpus: int
    gpu_type: str
    disks: list[DiskRow] = field(default_factory=list)
    running_since: str = ""
    card_hours: float | None = None
    system_image: str = ""
    system_image_version: str = ""


@dataclass(frozen=True)
class SnapshotRow:
    """A VolumeSnapshot of the user's: ``name``, ``source`` (its PersistentVolumeClaim), ``home`` (a home disk's:
    restorable), ``ready`` (readyToUse), ``size`` (``"10 GiB"`` or ``""``), ``created`` (RFC 3339), ``system`` (a
    VM system disk's: restorable into that VM)."""

    name: str
    source: str
    home: bool
    ready: bool
    size: str
    created: str
    system: bool = False


@dataclass(frozen=True)
class Balance:
    """The user's card-hours this month: ``used``, ``limit`` and ``left`` (card-hours), ``reset`` (when they reset,
    ``"2026-01-01 00:00 (Europe/Berlin)"``), ``reset_at`` (RFC 3339)."""

    used: float
    limit: float
    left: float
    reset: str
    reset_at: str


def _meta(obj: dict) -> dict:
    return obj.get("metadata") or {}


def _held_cpu_memory(obj: dict) -> tuple[float, int]:
    """Cores and bytes a Pod or VMI asks for, counted as the Cluster view counts them (:func:`.cluster.requested`)."""
    cpu, memory = requested(obj)
    return float(cpu), int(memory)


def compute_of(objects: list[dict], user: str) -> dict[str, dict]:
    """``user``'s Pods and VirtualMachineInstances (``kind`` set) by server name, found by owner labels and the
    user/server annotations; a finished or deleted one loses to a live one; a VMI's virt-launcher Pod (which carries
    the VMI's labels and annotations) counts as its VMI (:func:`~workspacespawner.k8s.objects.counted_once`)."""
    found: dict[str, dict] = {}
    for obj in counted_once([o for o in objects if o.get("kind") in (POD.kind, VMI.kind)]):
        meta = _meta(obj)
        owner = names.server_of(meta)
        if owner is None or owner[0] != user or not names.labelled_for(meta, user):
            continue
        server = owner[1]
        if server not in found or (not meta.get("deletionTimestamp") and _meta(found[server]).get("deletionTimestamp")):
            found[server] = obj
    return found


def _running_since(obj: dict) -> str:
    status = obj.get("status") or {}
    if obj.get("kind") == POD.kind:
        return status.get("startTime") or ""
    for transition in status.get("phaseTransitionTimestamps") or []:
        if transition.get("phase") == "Running":
            return transition.get("phaseTransitionTimestamp") or ""
    return _meta(obj).get("creationTimestamp") or ""


def disk_row(obj: dict, used: dict[str, int] | None, server: str = "") -> DiskRow:
    """A :class:`DiskRow` of a PersistentVolumeClaim or DataVolume of ``server``; ``used``: PVC name -> used bytes
    (None: unknown)."""
    name = _meta(obj)["name"]
    size = requested_bytes(obj)
    used_bytes = (used or {}).get(name)
    role = (_meta(obj).get("labels") or {}).get(names.DISK_LABEL, "")
    return DiskRow(
        name=name,
        title=names.disk_title(role, server),
        role=role,
        size=gib(size),
        size_bytes=size,
        used_bytes=used_bytes,
        used_share=round(used_bytes / size, 4) if used_bytes is not None and size else None,
        phase=phase_of(obj) or "",
    )


def _disks_of_server(server: str, compute: dict | None, disks: list[dict]) -> list[dict]:
    if compute is not None:
        mine = [d for d in disks if uses_claim(compute, _meta(d)["name"])]
    else:
        mine = [d for d in disks if phase_of(d) not in (str(Phase.RETAINED), str(Phase.DELETING_DISK))
                and (Status.from_object(d).server if Status.from_object(d) else "") == server]
    return sorted(mine, key=lambda d: _meta(d)["name"])


def system_image(server_disks: list[dict], objects: list[dict]) -> tuple[str, str]:
    """``(image, version)``: the golden image (DataSource name) a server's root disk was cloned from
    (:func:`~workspacespawner.config.goldenimages.cloned_from` of its DataVolume in ``objects``) and its version
    (:func:`~workspacespawner.config.goldenimages.version_label`); ``("", "")`` without a root disk that says one."""
    roots = {_meta(d)["name"] for d in server_disks if (_meta(d).get("labels") or {}).get(names.DISK_LABEL) == names.ROOT_DISK}
    for obj in objects:
        if obj.get("kind") == DATA_VOLUME.kind and _meta(obj).get("name") in roots:
            found = cloned_from(obj)
            if found:
                return image_name(found), version_label(image_name(found))
    return "", ""


def workspace_rows(user: str, hub_user: dict, objects: list[dict], month: MonthBalance | None,
                   used: dict[str, int] | None = None, shown: Callable[[str], str] = str) -> list[WorkspaceRow]:
    """One :class:`WorkspaceRow` per server of ``hub_user`` (the hub's model, stopped servers included), default
    first. ``objects``: the caches' objects; ``used``: PVC name -> used bytes, or None without Prometheus;
    ``shown``: a GPU type's name for people from its product label
    (:meth:`~workspacespawner.config.gpueconomy.GPUEconomy.display_name`)."""
    compute = compute_of(objects, user)
    nodes = {_meta(o)["name"]: o for o in objects if o.get("kind") == "Node"}
    disks = _owned_disks(objects, user)
    rows = []
    for server, model in sorted((hub_user.get("servers") or {}).items()):
        obj = compute.get(server)
        phase = server_phase(not model.get("stopped", False), bool(model.get("ready")), model.get("pending"))
        live = obj is not None and phase != str(Phase.STOPPED)
        cpu, memory = _held_cpu_memory(obj) if live else (0.0, 0)
        node = (node_of(obj) or "") if live else ""
        gpus = gpus_held(obj) if live else 0
        labels = _meta(nodes.get(node) or {}).get("labels") or {}
        options = model.get("user_options") or {}
        mine = _disks_of_server(server, obj if live else None, disks)
        image, version = system_image(mine, objects)
        rows.append(WorkspaceRow(
            server=server,
            kind="vm" if (obj or {}).get("kind") == VMI.kind or options.get("kind") == "vm" or image else "container",
            phase=phase,
            reason=_reason(obj) if live else "",
            profile=str(options.get("profile") or ""),
            node=node,
            cpu=cpu,
            memory=memory,
            gpus=gpus,
            gpu_type=shown(labels.get(GPU_PRODUCT_LABEL, "")) if gpus else "",
            disks=[disk_row(d, used, server) for d in mine],
            system_image=image,
            system_image_version=version,
            running_since=_running_since(obj) if live else "",
            card_hours=round(month.card_hours_of(server), 4) if month is not None else None,
        ))
    return rows


def _reason(obj: dict) -> str:
    status = obj.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("status") == "False" and condition.get("reason"):
            return f"{condition['reason']}: {condition.get('message', '')}".rstrip(": ")
    return status.get("reason") or ""


def _owned_disks(objects: list[dict], user: str) -> list[dict]:
    seen, found = set(), []
    for obj in objects:
        if obj.get("kind") in (PVC.kind, DATA_VOLUME.kind) and names.owned_by(_meta(obj), user):
            if _meta(obj)["name"] not in seen:
                seen.add(_meta(obj)["name"])
                found.append(obj)
    return found


def snapshot_rows(objects: list[dict], user: str) -> list[SnapshotRow]:
    """``user``'s VolumeSnapshots (owner labels and name annotation), newest first. A snapshot is of a system disk when it
    names the VM (:data:`~workspacespawner.core.names.ROOT_SLOT_ANNOTATION`) or, taken before it did, when its PVC's
    DataVolume among ``objects`` does."""
    root_disks = {_meta(o)["name"] for o in objects if o.get("kind") == DATA_VOLUME.kind and names.owned_by(_meta(o), user)
                  and (_meta(o).get("annotations") or {}).get(names.ROOT_SLOT_ANNOTATION)}
    rows = []
    for obj in objects:
        meta = _meta(obj)
        if obj.get("kind") != VOLUME_SNAPSHOT.kind or not names.owned_by(meta, user):
            continue
        status = obj.get("status") or {}
        annotations = meta.get("annotations") or {}
        size = status.get("restoreSize")
        source = ((obj.get("spec") or {}).get("source") or {}).get("persistentVolumeClaimName", "")
        home = bool(annotations.get(names.HOME_SLOT_ANNOTATION))
        rows.append(SnapshotRow(
            name=meta["name"],
            source=source,
            home=home,
            ready=bool(status.get("readyToUse")),
            size=gib(parse_quantity(size)) if size else "",
            created=meta.get("creationTimestamp") or "",
            system=not home and bool(annotations.get(names.ROOT_SLOT_ANNOTATION) or source in root_disks),
        ))
    return sorted(rows, key=lambda r: (r.created, r.name), reverse=True)


def balance(month: MonthBalance | None) -> Balance | None:
    """The card-hours header from the user's month (None: quotas off or the ledger unreadable)."""
    if month is None:
        return None
    limit = float(month.limits.card_hours_per_month)
    used = round(month.usage.card_hours, 4)
    return Balance(used=used, limit=limit, left=round(max(0.0, limit - used), 4), reset=when(month.usage.period_end),
                   reset_at=rfc3339(month.usage.period_end))


def balance_line(b: Balance | None) -> str:
    """``12.5 of 50 card-hours used; 37.5 left until 2026-01-01 00:00 (Europe/Berlin).`` (``""`` without quotas)."""
    if b is None:
        return ""
    return f"{number(b.used)} of {number(b.limit)} card-hours used; {number(b.left)} left until {b.reset}."


def my_workspaces(user: str, hub_user: dict, objects: list[dict], month: MonthBalance | None,
                  used: dict[str, int] | None = None, now: datetime | None = None, shown: Callable[[str], str] = str) -> dict:
    """The My workspaces JSON: ``{"user", "balance", "servers", "retained", "snapshots"}``; ``retained``: the
    home page's :class:`~workspacespawner.homepage.model.RetainedDisk` rows (retain-until); ``shown``: see
    :func:`workspace_rows`."""
    retained: list[RetainedDisk] = retained_disks(_owned_disks(objects, user))
    b = balance(month)
    return {
        "user": user,
        "balance": asdict(b) if b else None,
        "balance_line": balance_line(b),
        "servers": [asdict(r) for r in workspace_rows(user, hub_user, objects, month, used, shown)],
        "retained": [asdict(r) for r in retained],
        "snapshots": [asdict(s) for s in snapshot_rows(objects, user)],
    }
