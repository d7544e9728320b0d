"""The Cluster view's GPU queues: each queue's GPUs in use, borrowed and its quota, its admitted and waiting
workspaces, from the ClusterQueues Kueue keeps (pure functions, no I/O).

Read from Kueue v0.15's ``kueue.x-k8s.io/v1beta2`` ClusterQueue
(``spec.resourceGroups[].flavors[].resources[].nominalQuota``;
``status.flavorsUsage[].resources[].{total, borrowed}``,
``status.admittedWorkloads``, ``status.pendingWorkloads``, the ``Active``
condition) of each queue of ``c.GPUQueues.queues``
(:func:`~workspacespawner.queue.kueueobjects.cluster_queue_name`); a flavor
is shown as its GPU product (:func:`~workspacespawner.queue.kueueobjects.flavor_name`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass

from workspacespawner.core.quantities import parse_quantity
from workspacespawner.k8s.objects import condition
from workspacespawner.queue.config import ANY_PRODUCT, GPUQueue
from workspacespawner.queue.kueueobjects import cluster_queue_name, flavor_name


@dataclass(frozen=True)
class QueueGPUs:
    """One GPU resource of one product in a queue: ``nominal`` (its quota), ``used`` (by admitted workspaces, borrowed
    ones included) and ``borrowed`` (from its cohort), in units of ``resource``."""

    resource: str
    product: str
    nominal: int
    used: int
    borrowed: int


@dataclass(frozen=True)
class QueueView:
    """One queue as Kueue keeps it: ``found`` (False: its ClusterQueue is not in the cluster: ``workspacespawner
    queues`` was not applied), ``active`` (Kueue admits from it), ``admitted`` and ``waiting`` workspaces (and
    other work), and its ``gpus``."""

    name: str
    cohort: str | None
    found: bool
    active: bool
    admitted: int
    waiting: int
    gpus: tuple[QueueGPUs, ...]


def _units(value) -> int:
    return int(parse_quantity(str(value))) if value is not None else 0


def queue_view(queue: GPUQueue, found: dict | None, shown: Callable[[str], str] = str) -> QueueView:
    """``queue``'s view from its ClusterQueue ``found`` (None: not in the cluster); ``shown``: a GPU product's name for
    people (the GPU economy's)."""
    spec, status = (found or {}).get("spec") or {}, (found or {}).get("status") or {}
    products = {flavor_name(product): product for _resource, product in queue.gpus}
    nominal = {(resource["name"], flavor["name"]): _units(resource.get("nominalQuota"))
               for group in spec.get("resourceGroups") or () for flavor in group.get("flavors") or ()
               for resource in flavor.get("resources") or ()}
    usage = {(resource["name"], flavor["name"]): resource
             for flavor in status.get("flavorsUsage") or () for resource in flavor.get("resources") or ()}
    gpus = []
    for (resource, flavor), quota in nominal.items():
        used = usage.get((resource, flavor)) or {}
        product = products.get(flavor, flavor)
        gpus.append(QueueGPUs(resource, "any GPU type" if product == ANY_PRODUCT else shown(product), quota,
                              _units(used.get("total")), _units(used.get("borrowed"))))
    active = (condition(found, "Active") or {}).get("status") == "True"
    return QueueView(queue.name, spec.get("cohortName") or queue.cohort, found is not None, active,
                     int(status.get("admittedWorkloads") or 0), int(status.get("pendingWorkloads") or 0), tuple(gpus))


def queue_views(queues: Mapping[str, GPUQueue], cluster_queues: list[dict],
                shown: Callable[[str], str] = str) -> list[QueueView]:
    """Every configured queue, in the configured order, from the ClusterQueues read (:func:`queue_view`)."""
    by_name = {obj["metadata"]["name"]: obj for obj in cluster_queues}
    return [queue_view(queue, by_name.get(cluster_queue_name(name)), shown) for name, queue in queues.items()]


def queue_json(view: QueueView) -> dict:
    """``{name, cohort, found, active, admitted, waiting, gpus: [{resource, product, nominal, used, borrowed}]}``."""
    return {**asdict(view), "gpus": [asdict(g) for g in view.gpus]}
