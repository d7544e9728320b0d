"""Server-side printing: objects as ``meta.k8s.io/v1`` ``Table`` documents.

``kubectl get`` asks with ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io``
and prints the cells the server computed. The columns here follow what the
Kubernetes printers (``pkg/printers/internalversion``) and the KubeVirt/CDI
CRDs' ``additionalPrinterColumns`` show; priority 1 columns appear with
``-o wide``. Every kind gets at least Name and Age.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass

Cell = Callable[[dict, datetime.datetime], object]


@dataclass(frozen=True)
class Column:
    """One ``TableColumnDefinition`` plus how to compute its cell from an object and the time now."""

    name: str
    cell: Cell
    type: str = "string"
    format: str = ""
    priority: int = 0
    description: str = ""

    def definition(self) -> dict:
        return {
            "name": self.name,
            "type": self.type,
            "format": self.format,
            "description": self.description or self.name,
            "priority": self.priority,
        }


# -- cell helpers ------------------------------------------------------------


def field(path: str, default: object = "") -> Cell:
    """A cell reading a dotted path (``status.phase``); list indexes are numbers (``status.interfaces.0.ipAddress``)."""

    def read(obj: dict, now) -> object:
        value: object = obj
        for part in path.split("."):
            if isinstance(value, list) and part.isdigit() and int(part) < len(value):
                value = value[int(part)]
            elif isinstance(value, dict) and part in value:
                value = value[part]
            else:
                return default
        return value

    return read


def condition(kind: str) -> Cell:
    """A cell with the status (``True``/``False``) of the condition of type ``kind``, like ``.status.conditions[?(@.type=='Ready')].status``."""

    def read(obj: dict, now) -> object:
        for cond in (obj.get("status") or {}).get("conditions") or []:
            if cond.get("type") == kind:
                return cond.get("status", "")
        return ""

    return read


def _parse_time(text: str | None) -> datetime.datetime | None:
    if not text:
        return None
    try:
        return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    except ValueError:
        return None


def human_duration(seconds: float) -> str:
    """Kubernetes' ``duration.HumanDuration``: ``45s``, ``3m20s``, ``25m``, ``5h10m``, ``3d4h``, ``400d``, ``2y30d``."""
    if seconds < -1:
        return "<invalid>"
    s = max(int(seconds), 0)
    minutes, hours, days = s // 60, s // 3600, s // 86400
    if s < 120:
        return f"{s}s"
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if hours < 24 * 365 * 2:
        return f"{days}d"
    if hours < 24 * 365 * 8:
        return f"{days // 365}y{days % 365}d" if days % 365 else f"{days // 365}y"
    return f"{days // 365}y"


def since(path: str) -> Cell:
    """A cell with the age of the timestamp at ``path`` (``<unknown>`` when unset)."""
    read = field(path, None)

    def age(obj: dict, now: datetime.datetime) -> str:
        when = _parse_time(read(obj, now))
        return human_duration((now - when).total_seconds()) if when else "<unknown>"

    return age


def joined(path: str, empty: str = "<none>") -> Cell:
    """A cell joining the list at ``path`` with commas."""
    read = field(path, None)
    return lambda obj, now: ",".join(str(v) for v in read(obj, now) or []) or empty


# -- kind-specific cells -----------------------------------------------------


def _container_statuses(obj: dict) -> list[dict]:
    return (obj.get("status") or {}).get("containerStatuses") or []


def pod_ready(obj: dict, now) -> str:
    """``ready/total`` containers."""
    total = len((obj.get("spec") or {}).get("containers") or [])
    ready = sum(1 for c in _container_statuses(obj) if c.get("ready"))
    return f"{ready}/{total}"


def pod_restarts(obj: dict, now) -> int:
    return sum(int(c.get("restartCount", 0)) for c in _container_statuses(obj))


def _container_reason(status: dict) -> str | None:
    state = status.get("state") or {}
    waiting, terminated = state.get("waiting") or {}, state.get("terminated") or {}
    if waiting.get("reason"):
        return waiting["reason"]
    if terminated:
        if terminated.get("reason"):
            return terminated["reason"]
        if terminated.get("signal"):
            return f"Signal:{terminated['signal']}"
        return f"ExitCode:{terminated.get('exitCode', 0)}"
    return None


def pod_status(obj: dict, now) -> str:
    """The STATUS kubectl prints: phase, overridden by a pod reason, a container's waiting/terminated reason, or Terminating."""
    status = obj.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Unknown"
    for container in _container_statuses(obj):
        reason = _container_reason(container) or reason
    if obj["metadata"].get("deletionTimestamp") and status.get("reason") != "NodeLost":
        return "Terminating"
    return reason


def volume_status(obj: dict, now) -> str:
    """A PVC's or PV's STATUS: its phase, or Terminating once it is marked for deletion (held by its protection finalizer)."""
    if obj["metadata"].get("deletionTimestamp"):
        return "Terminating"
    return (obj.get("status") or {}).get("phase", "")


def node_status(obj: dict, now) -> str:
    ready = condition("Ready")(obj, now)
    text = "Ready" if ready == "True" else "NotReady" if ready else "Unknown"
    if (obj.get("spec") or {}).get("unschedulable"):
        text += ",SchedulingDisabled"
    return text


def node_roles(obj: dict, now) -> str:
    prefix = "node-role.kubernetes.io/"
    labels = obj["metadata"].get("labels") or {}
    roles = sorted(k[len(prefix):] for k in labels if k.startswith(prefix) and k[len(prefix):])
    return ",".join(roles) or "<none>"


def node_address(kind: str) -> Cell:
    def read(obj: dict, now) -> str:
        for address in (obj.get("status") or {}).get("addresses") or []:
            if address.get("type") == kind:
                return address.get("address", "")
        return "<none>"

    return read


def event_object(obj: dict, now) -> str:
    involved = obj.get("involvedObject") or {}
    return f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}"


def event_last_seen(obj: dict, now) -> str:
    for path in ("lastTimestamp", "eventTime", "firstTimestamp", "metadata.creationTimestamp"):
        if field(path, None)(obj, now):
            return since(path)(obj, now)
    return "<unknown>"


def selector(path: str) -> Cell:
    """A cell printing the label map at ``path`` as ``k=v,k2=v2``."""
    read = field(path, None)
    return lambda obj, now: ",".join(f"{k}={v}" for k, v in (read(obj, now) or {}).items()) or "<none>"


def service_ports(obj: dict, now) -> str:
    ports = (obj.get("spec") or {}).get("ports") or []
    return ",".join(f"{p.get('port')}/{p.get('protocol', 'TCP')}" for p in ports) or "<none>"


def data_count(obj: dict, now) -> int:
    return len(obj.get("data") or {}) + len(obj.get("binaryData") or {})


def secret_count(obj: dict, now) -> int:
    """A ServiceAccount's SECRETS column: how many Secrets it lists."""
    return len(obj.get("secrets") or [])


def pvc_claim(obj: dict, now) -> str:
    ref = (obj.get("spec") or {}).get("claimRef") or {}
    return f"{ref['namespace']}/{ref['name']}" if ref.get("name") else ""


def access_modes(path: str) -> Cell:
    short = {"ReadWriteOnce": "RWO", "ReadOnlyMany": "ROX", "ReadWriteMany": "RWX", "ReadWriteOncePod": "RWOP"}
    read = field(path, None)
    return lambda obj, now: ",".join(short.get(m, m) for m in read(obj, now) or [])


# -- the table of columns ----------------------------------------------------

NAME = Column("Name", field("metadata.name"), format="name", description="Name must be unique within a namespace.")
AGE = Column("Age", since("metadata.creationTimestamp"), type="date", description="CreationTimestamp is a timestamp representing the server time when this object was created.")

#: kind -> its columns after Name (Age placed where the Kubernetes printer places it).
COLUMNS: dict[str, tuple[Column, ...]] = {
    "Pod": (
        Column("Ready", pod_ready),
        Column("Status", pod_status),
        Column("Restarts", pod_restarts, type="integer"),
        AGE,
        Column("IP", field("status.podIP", "<none>"), priority=1),
        Column("Node", field("spec.nodeName", "<none>"), priority=1),
    ),
    "PersistentVolumeClaim": (
        Column("Status", volume_status),
        Column("Volume", field("spec.volumeName")),
        Column("Capacity", field("status.capacity.storage")),
        Column("Access Modes", access_modes("status.accessModes")),
        Column("StorageClass", field("spec.storageClassName", "<unset>")),
        AGE,
        Column("VolumeMode", field("spec.volumeMode"), priority=1),
    ),
    "PersistentVolume": (
        Column("Capacity", field("spec.capacity.storage")),
        Column("Access Modes", access_modes("spec.accessModes")),
        Column("Reclaim Policy", field("spec.persistentVolumeReclaimPolicy")),
        Column("Status", volume_status),
        Column("Claim", pvc_claim),
        Column("StorageClass", field("spec.storageClassName")),
        AGE,
    ),
    "Service": (
        Column("Type", field("spec.type")),
        Column("Cluster-IP", field("spec.clusterIP", "<none>")),
        Column("External-IP", joined("spec.externalIPs")),
        Column("Port(s)", service_ports),
        AGE,
        Column("Selector", selector("spec.selector"), priority=1),
    ),
    "Secret": (Column("Type", field("type")), Column("Data", data_count, type="integer"), AGE),
    "ConfigMap": (Column("Data", data_count, type="integer"), AGE),
    "ServiceAccount": (Column("Secrets", secret_count, type="integer"), AGE),
    "Namespace": (Column("Status", field("status.phase")), AGE),
    "Node": (
        Column("Status", node_status),
        Column("Roles", node_roles),
        AGE,
        Column("Version", field("status.nodeInfo.kubeletVersion")),
        Column("Internal-IP", node_address("InternalIP"), priority=1),
        Column("External-IP", node_address("ExternalIP"), priority=1),
        Column("OS-Image", field("status.nodeInfo.osImage"), priority=1),
        Column("Kernel-Version", field("status.nodeInfo.kernelVersion"), priority=1),
        Column("Container-Runtime", field("status.nodeInfo.containerRuntimeVersion"), priority=1),
    ),
    "StorageClass": (
        Column("Provisioner", field("provisioner")),
        Column("ReclaimPolicy", field("reclaimPolicy", "Delete")),
        Column("VolumeBindingMode", field("volumeBindingMode", "Immediate")),
        Column("AllowVolumeExpansion", field("allowVolumeExpansion", False)),
        AGE,
    ),
    "VolumeSnapshot": (
        Column("ReadyToUse", field("status.readyToUse")),
        Column("SourcePVC", field("spec.source.persistentVolumeClaimName")),
        Column("RestoreSize", field("status.restoreSize")),
        Column("SnapshotClass", field("spec.volumeSnapshotClassName")),
        Column("CreationTime", since("status.creationTime")),
        AGE,
    ),
    "VirtualMachine": (
        AGE,
        Column("Status", field("status.printableStatus")),
        Column("Ready", condition("Ready")),
    ),
    "VirtualMachineInstance": (
        AGE,
        Column("Phase", field("status.phase")),
        Column("IP", field("status.interfaces.0.ipAddress")),
        Column("NodeName", field("status.nodeName")),
        Column("Ready", condition("Ready")),
        Column("Live-Migratable", condition("LiveMigratable"), priority=1),
        Column("Paused", condition("Paused"), priority=1),
    ),
    "DataVolume": (
        Column("Phase", field("status.phase")),
        Column("Progress", field("status.progress")),
        Column("Restarts", field("status.restartCount", 0), type="integer"),
        AGE,
    ),
    "DataSource": (AGE,),
}

#: Events lead with when and why, not the (generated) name, as ``kubectl get events`` shows them.
EVENT_COLUMNS: tuple[Column, ...] = (
    Column("Last Seen", event_last_seen),
    Column("Type", field("type")),
    Column("Reason", field("reason")),
    Column("Object", event_object),
    Column("Source", field("source.component"), priority=1),
    Column("Message", field("message")),
    Column("First Seen", since("firstTimestamp"), priority=1),
    Column("Count", field("count", 1), type="integer", priority=1),
    Column("Name", field("metadata.name"), format="name", priority=1),
)


def columns(kind: str) -> tuple[Column, ...]:
    """Every column of ``kind``'s table, Name first (Events: Last Seen first); unknown kinds get Name and Age."""
    if kind == "Event":
        return EVENT_COLUMNS
    return (NAME, *COLUMNS.get(kind, (AGE,)))


def _row_object(obj: dict, include_object: str) -> dict | None:
    if include_object == "None":
        return None
    if include_object == "Object":
        return obj
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}


def table(
    kind: str,
    objects: list[dict],
    now: datetime.datetime,
    *,
    resource_version: str = "",
    include_object: str = "Metadata",
    api_version: str = "meta.k8s.io/v1",
    headers: bool = True,
) -> dict:
    """A ``Table`` of ``objects`` (all of ``kind``).

    ``include_object`` is the ``includeObject`` query parameter: ``None``,
    ``Metadata`` (the default: a ``PartialObjectMetadata`` per row) or
    ``Object``. ``headers`` False leaves out the column definitions, as the
    API server does for every watch event after the first.
    """
    cols = columns(kind)
    rows = []
    for obj in objects:
        row = {"cells": [col.cell(obj, now) for col in cols]}
        row_object = _row_object(obj, include_object)
        if row_object is not None:
            row["object"] = row_object
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": api_version,
        "metadata": {"resourceVersion": resource_version} if resource_version else {},
        "columnDefinitions": [col.definition() for col in cols] if headers else [],
        "rows": rows,
    }
