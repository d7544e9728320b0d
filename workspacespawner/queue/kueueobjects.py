"""The Kueue objects of the site's GPU queues (:mod:`.config`), for an operator to apply (``workspacespawner queues``).

Rendered for Kueue's ``kueue.x-k8s.io/v1beta2`` API (Kueue v0.15):

* a ``WorkloadPriorityClass`` for interactive workspaces (:data:`INTERACTIVE`,
  value 1000) and one for batch work (:data:`BATCH`, value 100);
* a ``ResourceFlavor`` per GPU product the queues name, whose node labels
  are the product's (``nvidia.com/gpu.product``; the product ``*`` is a
  flavor without labels), so an admitted workspace lands on that product;
* a ``ClusterQueue`` per queue, ``workspaces-<queue>``, admitting only the
  workspaces' namespace: one resource group covering every GPU resource of
  the queue, with a flavor per product and the queue's nominal quota (0
  where the queue has none of a resource on a product), in the queue's
  cohort with its borrowing limit. Preemption takes only lower-priority
  work (``LowerPriority`` within the queue and to reclaim a loan), so an
  interactive workspace, whose Workloads all have the same priority, is
  never preempted; batch work may be;
* a ``LocalQueue`` per queue in the workspaces' namespace, named as the
  queue: the name a workspace's Pod gives in ``kueue.x-k8s.io/queue-name``.

The queues hold GPUs only: Kueue must leave CPU, memory and the rest to
the scheduler, which its configuration says (:data:`KUEUE_CONFIG`, the
section an operator adds to Kueue's ``controller_manager_config.yaml``;
docs: how-to "GPU queues"). Without it Kueue counts a workspace's CPU and
memory too, which no queue covers, and admits none.
"""

from __future__ import annotations

from collections.abc import Mapping

from workspacespawner.core.gpuresources import GPU_PRODUCT_LABEL
from workspacespawner.core.names import MANAGED_BY, MANAGED_BY_LABEL, dns_label
from workspacespawner.queue.config import ANY_PRODUCT, GPUQueue

API_VERSION = "kueue.x-k8s.io/v1beta2"
#: The section of Kueue's own configuration the queues need: Kueue ignores every resource but the GPUs.
KUEUE_CONFIG = {"resources": {"excludeResourcePrefixes": [
    "cpu", "memory", "ephemeral-storage", "hugepages-", "pods",
    "devices.kubevirt.io/",  # a VM's virt-launcher Pod asks for /dev/kvm, tun and vhost-net as device resources
]}}
#: The label a Pod names its LocalQueue with.
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: The label a Pod names its WorkloadPriorityClass with.
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
#: The WorkloadPriorityClasses of interactive workspaces and of batch work, and their values.
INTERACTIVE, BATCH = "workspacespawner-interactive", "workspacespawner-batch"
PRIORITIES = {INTERACTIVE: 1000, BATCH: 100}
#: The prefix of a queue's ClusterQueue name.
CLUSTER_QUEUE_PREFIX = "workspaces-"


def flavor_name(product: str) -> str:
    """The ResourceFlavor of GPU ``product`` (a ``nvidia.com/gpu.product`` value, or ``*``): a DNS label of it."""
    return "any-gpu" if product == ANY_PRODUCT else dns_label(product.lower())


def cluster_queue_name(queue: str) -> str:
    """The ClusterQueue of queue ``queue``."""
    return f"{CLUSTER_QUEUE_PREFIX}{queue}"


def _meta(name: str, namespace: str | None = None) -> dict:
    meta = {"name": name, "labels": {MANAGED_BY_LABEL: MANAGED_BY}}
    return {**meta, "namespace": namespace} if namespace else meta


def flavor(product: str) -> dict:
    """The ResourceFlavor of ``product``."""
    labels = {} if product == ANY_PRODUCT else {GPU_PRODUCT_LABEL: product}
    return {"apiVersion": API_VERSION, "kind": "ResourceFlavor", "metadata": _meta(flavor_name(product)),
            "spec": {"nodeLabels": labels} if labels else {}}


def cluster_queue(queue: GPUQueue, namespace: str) -> dict:
    """The ClusterQueue of ``queue``, admitting Workloads of ``namespace`` only."""
    resources = queue.resources()
    products = list(dict.fromkeys(product for _resource, product in queue.gpus))

    def quota(resource: str, product: str) -> dict:
        entry = {"name": resource, "nominalQuota": queue.gpus.get((resource, product), 0)}
        return {**entry, "borrowingLimit": queue.borrowing_limit} if queue.borrowing_limit is not None else entry

    spec = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "queueingStrategy": "BestEffortFIFO",
        "resourceGroups": [{
            "coveredResources": resources,
            "flavors": [{"name": flavor_name(p), "resources": [quota(r, p) for r in resources]} for p in products],
        }],
        "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "LowerPriority"},
    }
    if queue.cohort:
        spec["cohortName"] = queue.cohort
    return {"apiVersion": API_VERSION, "kind": "ClusterQueue", "metadata": _meta(cluster_queue_name(queue.name)),
            "spec": spec}


def local_queue(queue: GPUQueue, namespace: str) -> dict:
    """The LocalQueue of ``queue`` in ``namespace``."""
    return {"apiVersion": API_VERSION, "kind": "LocalQueue", "metadata": _meta(queue.name, namespace),
            "spec": {"clusterQueue": cluster_queue_name(queue.name)}}


def priority_class(name: str) -> dict:
    """The WorkloadPriorityClass ``name`` (:data:`PRIORITIES`)."""
    about = "interactive workspaces (never preempted)" if name == INTERACTIVE else "batch work (preemptible)"
    return {"apiVersion": API_VERSION, "kind": "WorkloadPriorityClass", "metadata": _meta(name),
            "value": PRIORITIES[name], "description": f"workspacespawner: {about}"}


def render(queues: Mapping[str, GPUQueue], namespace: str) -> list[dict]:
    """Every Kueue object of ``queues`` for the workspaces' ``namespace``, in the order to apply them."""
    if not queues:
        return []
    products = dict.fromkeys(product for queue in queues.values() for _resource, product in queue.gpus)
    return [
        *(priority_class(name) for name in PRIORITIES),
        *(flavor(product) for product in products),
        *(cluster_queue(queue, namespace) for queue in queues.values()),
        *(local_queue(queue, namespace) for queue in queues.values()),
    ]
