"""Scheduler: kube-scheduler (default profile, filters only) plus the node lifecycle the cluster's nodes need.

On start it registers the cluster's Nodes (``cluster.nodes``, or
:data:`DEFAULT_NODES`; :data:`ECONOMY_NODES` is a mixed set of GPU kinds):
labels ``kubernetes.io/hostname`` and, on GPU nodes,
the NVIDIA GPU feature discovery labels (``nvidia.com/gpu.product``,
``nvidia.com/gpu.count``, time-slicing's ``nvidia.com/gpu.replicas``, the
MIG mixed strategy's ``nvidia.com/mig-<profile>.*``: :mod:`.gpunodes`);
capacity and allocatable ``cpu``, ``memory``, ``pods`` and what the NVIDIA
device plugin advertises (``nvidia.com/gpu``, its time-sliced replicas,
``nvidia.com/gpu.shared``, MIG slices ``nvidia.com/mig-1g.10gb``, ...,
other device names of the node spec's ``gpu_resources``); condition
``Ready``; the ``taints`` a node spec lists. The default GPU node carries
``nvidia.com/gpu=present:NoSchedule``, as GPU operators and cloud GPU pools
taint theirs, so only workloads asking for GPUs land there (the API server's
ExtendedResourceToleration admission gives GPU Pods the toleration, see
:mod:`..defaults`). Nodes already registered (restored from a saved state)
are kept and reported Ready again, as their kubelets would on restart.
:meth:`Scheduler.set_node_ready` plays the node lifecycle controller: a node
that stops reporting gets ``Ready=Unknown`` and the
``node.kubernetes.io/unreachable`` taints.

It binds Pending Pods (``schedulerName: default-scheduler``, no
``nodeName``) the way kube-scheduler's filter plugins decide, in their order:
NodeUnschedulable, TaintToleration (NoSchedule/NoExecute), NodeAffinity
(``nodeSelector`` and required ``nodeAffinity`` terms) and NodeResourcesFit
(requests, falling back to limits, of every non-terminated Pod and VMI on the
node, every extended resource by its own name; a VMI's virt-launcher Pod is
counted as its VMI, once). Among fitting nodes the least allocated wins. A bound Pod gets
``spec.nodeName`` (the ``binding`` subresource), ``PodScheduled=True`` and the
Event ``Scheduled``; a Pod that fits nowhere gets ``PodScheduled=False``
(``Unschedulable``) and a ``FailedScheduling`` Warning worded as
kube-scheduler's, e.g. ``0/2 nodes are available: 1 Insufficient
nvidia.com/gpu, 1 node(s) didn't match Pod's node affinity/selector.``
(without the preemption postscript). Before that, a Pod's claims must allow
it (:mod:`.volumebinding`: none missing, none unbound unless it binds
``WaitForFirstConsumer``, which is then provisioned for the chosen node
before the Pod is bound). Unschedulable Pods are retried when Nodes change,
resources are freed or one of their claims changes.

KubeVirt VMIs stand for their virt-launcher Pods: a VMI in phase
``Scheduling`` is placed likewise (``status.nodeName``, phase ``Scheduled``,
label ``kubevirt.io/nodeName``) or gets ``PodScheduled=False`` /
``Unschedulable`` and the Events on the VMI itself. A VMI consumes its
``spec.domain.resources`` requests (else one core per vCPU and the guest
memory) and one device per entry of ``devices.gpus``/``devices.hostDevices``
under its ``deviceName``, and tolerates, besides its ``spec.tolerations``,
the NoSchedule taint of each extended resource it asks for (what
ExtendedResourceToleration gives its virt-launcher Pod): a GPU VMI may use
the GPU node, a CPU VMI may not. A GPU device name no node of the cluster
advertises (e.g. ``nvidia.com/GA102GL_A10``) counts as the generic
``nvidia.com/gpu``, and so do such names in Pod requests and in tolerations:
so VM tests need no node per host device name. A name some node advertises
(a MIG slice, ``nvidia.com/gpu.shared``, a device in a node's
``gpu_resources``) fits only where it is advertised, as on a real cluster.

Knobs: ``autoscaler_scale_up`` (bool): also report, as the cluster-autoscaler
does, ``TriggeredScaleUp`` "pod triggered scale-up: [{<group> 0->1 (max:
<max>)}]" for each unschedulable Pod or VMI, with ``autoscaler_group``
(default ``gpu-pool``) and ``autoscaler_max`` (default 4).
"""

from __future__ import annotations

import copy
import logging
from collections import Counter
from decimal import Decimal

from ..conditions import remove_condition, set_condition
from ..defaults import is_extended_resource
from ..selectors import Requirement
from ..store import rfc3339
from ..validation import parse_quantity
from ..version import GIT_VERSION
from . import scoring
from .base import Controller
from .gpunodes import gpu_fields
from .launcher import is_launcher
from .refs import NODES, PODS, PVCS, STORAGE_CLASSES, VMIS, get_or_none
from .volumebinding import claims_problem, pod_claims, select_node

log = logging.getLogger("localcluster.scheduler")

COMPONENT = "default-scheduler"
UNREACHABLE = "node.kubernetes.io/unreachable"
GENERIC_GPU = "nvidia.com/gpu"
TERMINATED = ("Succeeded", "Failed")

#: The taint GPU operators and cloud GPU node pools put on GPU nodes: only Pods asking for GPUs (and so tolerating it) go there.
GPU_TAINT = {"key": GENERIC_GPU, "value": "present", "effect": "NoSchedule"}

#: The demo cluster: one CPU node and one node with eight A100s, tainted for GPU workloads only.
DEFAULT_NODES = [
    {"name": "cpu-node-1", "cpu": "16", "memory": "64Gi", "gpus": 0},
    {"name": "gpu-node-1", "cpu": "32", "memory": "256Gi", "gpus": 8, "gpu_product": "NVIDIA-A100-SXM4-80GB", "taints": [GPU_TAINT]},
]


#: A mixed GPU economy for demos and tests: the default CPU node and 8 x A100 node, an older node with 2 x V100, an
#: A100 node in MIG mode (mixed strategy: one card as 7 x 1g.10gb, one as 2 x 1g.10gb + 2g.20gb + 3g.40gb) and a
#: T4 time-sliced into 4 replicas (``renameByDefault: false``). Whole-GPU nodes carry :data:`GPU_TAINT`; the MIG
#: node none (a Pod tolerates, by ExtendedResourceToleration, only the slice names it asks for, so no single taint
#: could keep CPU Pods off a node advertising several).
ECONOMY_NODES = [
    *DEFAULT_NODES,
    {"name": "gpu-node-v100", "cpu": "16", "memory": "128Gi", "gpus": 2, "gpu_product": "Tesla-V100-SXM2-16GB",
     "taints": [GPU_TAINT]},
    {"name": "gpu-node-mig", "cpu": "32", "memory": "256Gi", "gpu_product": "NVIDIA-A100-SXM4-80GB",
     "gpu_resources": {"nvidia.com/mig-1g.10gb": 9, "nvidia.com/mig-2g.20gb": 1, "nvidia.com/mig-3g.40gb": 1}, "mig_gpus": 2},
    {"name": "gpu-node-t4", "cpu": "8", "memory": "64Gi", "gpus": 1, "gpu_product": "Tesla-T4", "gpu_replicas": 4,
     "taints": [GPU_TAINT]},
]


def demo_nodes(cpu_nodes: int = 1) -> list[dict]:
    """:data:`DEFAULT_NODES` with ``cpu_nodes`` CPU nodes (``cpu-node-1`` … ``cpu-node-N``, each like the first).

    Each node takes 110 Pods (kubelet's default ``maxPods``), so a benchmark
    of N servers asks for ``ceil(N / 100)`` or more. Raises ValueError below 1.
    """
    if cpu_nodes < 1:
        raise ValueError(f"cpu_nodes must be at least 1, not {cpu_nodes}")
    cpu, gpu = DEFAULT_NODES
    return [dict(cpu, name=f"cpu-node-{i}") for i in range(1, cpu_nodes + 1)] + [gpu]

_OPERATORS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!", "Gt": "gt", "Lt": "lt"}


# -- nodes -------------------------------------------------------------------


def node_address(spec: dict, index: int) -> str:
    """The ``InternalIP`` of the ``index``-th node of ``spec``: its ``ip``, else ``127.1.0.<index + 1>``."""
    return spec.get("ip", f"127.1.0.{index + 1}")


def make_node(spec: dict, index: int, now: str, kubelet_port: int = 10250) -> dict:
    """A Node object (with status, conditions stamped ``now``, its kubelet's API on ``kubelet_port``) from
    ``{"name", "cpu", "memory", "pods", "labels", "taints"}``
    and the GPU keys of :mod:`.gpunodes` (``gpus``, ``gpu_product``, ``gpu_replicas``, ``gpu_shared_name``,
    ``gpu_resources``, ``mig_gpus``). Raises ValueError for GPU keys that cannot be."""
    name = spec["name"]
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
    capacity = {"cpu": str(spec.get("cpu", "8")), "memory": str(spec.get("memory", "32Gi")), "pods": str(spec.get("pods", "110"))}
    gpu_labels, gpu_capacity = gpu_fields(spec)
    labels.update(gpu_labels)
    capacity.update(gpu_capacity)
    labels.update(spec.get("labels") or {})
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}, "spec": {}}
    if spec.get("taints"):
        node["spec"]["taints"] = copy.deepcopy(spec["taints"])
    node["status"] = {
        "capacity": capacity,
        "allocatable": dict(capacity),
        "addresses": [
            {"type": "InternalIP", "address": node_address(spec, index)},
            {"type": "Hostname", "address": name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
        "nodeInfo": {
            "architecture": "amd64",
            "bootID": f"00000000-0000-4000-8000-{index:012d}",
            "containerRuntimeVersion": "containerd://1.7.20",
            "kernelVersion": "6.8.0-45-generic",
            "kubeProxyVersion": GIT_VERSION,
            "kubeletVersion": GIT_VERSION,
            "machineID": f"{index:032x}",
            "operatingSystem": "linux",
            "osImage": "Ubuntu 22.04.4 LTS",
            "systemUUID": f"10000000-0000-4000-8000-{index:012d}",
        },
        "conditions": [],
    }
    _set_node_conditions(node, True, now)
    return node


def _set_node_conditions(node: dict, ready: bool, now: str) -> None:
    conditions = node["status"].setdefault("conditions", [])
    stamps = ("lastHeartbeatTime", "lastTransitionTime")
    for ctype, reason, message in (
        ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ):
        set_condition(conditions, ctype, "False" if ready else "Unknown", reason if ready else "NodeStatusUnknown",
                      message if ready else "Kubelet stopped posting node status.", now=now, stamps=stamps)
    if ready:
        set_condition(conditions, "Ready", "True", "KubeletReady", "kubelet is posting ready status", now=now, stamps=stamps)
    else:
        set_condition(conditions, "Ready", "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.", now=now, stamps=stamps)


# -- what workloads ask for ----------------------------------------------------


def _resources(values: dict | None) -> dict[str, Decimal]:
    out = {}
    for name, amount in (values or {}).items():
        try:
            out[name] = parse_quantity(amount)
        except (TypeError, ValueError):
            continue
    return out


def _add(total: dict, more: dict) -> dict:
    out = dict(total)
    for name, amount in more.items():
        out[name] = out.get(name, Decimal(0)) + amount
    return out


def _container_requests(container: dict) -> dict[str, Decimal]:
    resources = container.get("resources") or {}
    return {**_resources(resources.get("limits")), **_resources(resources.get("requests"))}


def pod_requests(pod: dict) -> dict[str, Decimal]:
    """What a Pod asks of its node: the sum over containers, at least each init container's, plus one pod slot."""
    spec = pod.get("spec") or {}
    total: dict[str, Decimal] = {}
    for container in spec.get("containers") or []:
        total = _add(total, _container_requests(container))
    for container in spec.get("initContainers") or []:
        for name, amount in _container_requests(container).items():
            total[name] = max(total.get(name, Decimal(0)), amount)
    total["pods"] = Decimal(1)
    return total


def vmi_requests(vmi: dict) -> dict[str, Decimal]:
    """What a VMI's virt-launcher asks of its node (see the module docstring)."""
    domain = (vmi.get("spec") or {}).get("domain") or {}
    resources = domain.get("resources") or {}
    total = {**_resources(resources.get("limits")), **_resources(resources.get("requests"))}
    if "cpu" not in total:
        cpu = domain.get("cpu") or {}
        total["cpu"] = Decimal(int(cpu.get("cores", 1)) * int(cpu.get("sockets", 1)) * int(cpu.get("threads", 1)))
    guest = (domain.get("memory") or {}).get("guest")
    if "memory" not in total and guest:
        total["memory"] = parse_quantity(guest)
    devices = domain.get("devices") or {}
    for device in (devices.get("gpus") or []) + (devices.get("hostDevices") or []):
        name = device.get("deviceName") or GENERIC_GPU
        total[name] = total.get(name, Decimal(0)) + 1
    total["pods"] = Decimal(1)
    return total


def vmi_tolerations(vmi: dict) -> list[dict]:
    """The tolerations of a VMI's virt-launcher Pod: its own, plus ExtendedResourceToleration's for each extended resource it asks for."""
    own = list(((vmi.get("spec") or {}).get("tolerations")) or [])
    wanted = sorted(name for name in vmi_requests(vmi) if is_extended_resource(name))
    return own + [{"key": name, "operator": "Exists", "effect": "NoSchedule"} for name in wanted]


def advertised_resources(nodes: list[dict]) -> frozenset[str]:
    """The resource names some Node of ``nodes`` advertises (a positive ``status.allocatable``)."""
    return frozenset(name for node in nodes for name, amount in _resources((node.get("status") or {}).get("allocatable")).items()
                     if amount > 0)


def _as_counted(name: str, advertised) -> str:
    """A resource name as the cluster counts it: an nvidia.com/* device name no node advertises is nvidia.com/gpu.

    So a VM asking for a host device by a name the local cluster has no node
    for (``nvidia.com/GA102GL_A10``) still gets a GPU; a name some node
    advertises (a MIG slice, ``nvidia.com/gpu.shared``, a declared device)
    is only ever that resource, as on a real cluster.
    """
    return GENERIC_GPU if name not in advertised and name.startswith("nvidia.com/") else name


def counted_requests(requests: dict, advertised) -> dict:
    """``requests`` (``{resource: amount}``) as the cluster counts them (:func:`_as_counted`; ``advertised``: the names
    :func:`advertised_resources` gives)."""
    out: dict[str, Decimal] = {}
    for name, amount in requests.items():
        name = _as_counted(name, advertised)
        out[name] = out.get(name, Decimal(0)) + amount
    return out


def _tolerations_for(tolerations: list, advertised) -> list[dict]:
    """Tolerations as the cluster reads them: one keyed by a device name it counts as nvidia.com/gpu also tolerates nvidia.com/gpu."""
    out = list(tolerations or [])
    for tol in tolerations or []:
        key = tol.get("key") or ""
        if key and _as_counted(key, advertised) != key:
            out.append({**tol, "key": _as_counted(key, advertised)})
    return out


# -- filters -------------------------------------------------------------------


def _tolerates(tolerations: list, taint: dict) -> bool:
    for tol in tolerations or []:
        if tol.get("effect") not in (None, "", taint.get("effect")):
            continue
        if tol.get("operator") == "Exists":
            if not tol.get("key") or tol["key"] == taint["key"]:
                return True
        elif tol.get("key") == taint["key"] and tol.get("value", "") == taint.get("value", ""):
            return True
    return False


def _term_matches(term: dict, node: dict) -> bool:
    labels = node["metadata"].get("labels") or {}
    fields = {"metadata.name": node["metadata"]["name"]}
    expressions = [(e, labels) for e in term.get("matchExpressions") or []]
    expressions += [(e, fields) for e in term.get("matchFields") or []]
    if not expressions:
        return False
    for expr, values in expressions:
        requirement = Requirement(expr["key"], _OPERATORS.get(expr.get("operator"), "in"), frozenset(expr.get("values") or []))
        if not requirement.matches(values):
            return False
    return True


def matches_node_affinity(spec: dict, node: dict) -> bool:
    """``nodeSelector`` and required node affinity terms (ORed terms, ANDed expressions)."""
    labels = node["metadata"].get("labels") or {}
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")) or {}
    terms = required.get("nodeSelectorTerms")
    return terms is None or any(_term_matches(t, node) for t in terms)


def filter_node(spec: dict, requests: dict, node: dict, used: dict, tolerations: list | None = None,
                advertised: frozenset[str] | None = None) -> list[str]:
    """Why ``node`` cannot take the workload (kube-scheduler's filter reasons); empty if it can.

    ``tolerations`` default to ``spec.tolerations`` (a Pod's); VMIs pass
    :func:`vmi_tolerations`. ``advertised``: the resource names of the
    whole cluster (:func:`advertised_resources`; default: this node's), so
    that a device name some other node advertises is never counted as
    ``nvidia.com/gpu`` here. ``used``: the node's requests so far, as
    :func:`counted_requests` counts them.
    """
    if (node.get("spec") or {}).get("unschedulable"):
        return ["node(s) were unschedulable"]
    allocatable = _resources((node.get("status") or {}).get("allocatable"))
    advertised = frozenset(allocatable) if advertised is None else advertised
    tolerations = _tolerations_for(spec.get("tolerations") if tolerations is None else tolerations, advertised)
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerates(tolerations, taint):
            return [f"node(s) had untolerated taint {{{taint['key']}: {taint.get('value', '')}}}"]
    if not matches_node_affinity(spec, node):
        return ["node(s) didn't match Pod's node affinity/selector"]
    reasons = []
    for name, amount in sorted(counted_requests(requests, advertised).items()):
        if amount > 0 and used.get(name, Decimal(0)) + amount > allocatable.get(name, Decimal(0)):
            reasons.append("Too many pods" if name == "pods" else f"Insufficient {name}")
    return reasons


def unschedulable_message(node_count: int, reasons: Counter) -> str:
    """kube-scheduler's FitError message."""
    if not node_count:
        return "no nodes available to schedule pods"
    parts = sorted(f"{count} {reason}" for reason, count in reasons.items())
    return f"0/{node_count} nodes are available: {', '.join(parts)}."


async def set_node_ready(client, name: str, ready: bool, kubelet_port: int | None = None) -> None:
    """Mark node ``name`` Ready, or unreachable (``Ready=Unknown`` plus the unreachable taints), through ``client``;
    with ``kubelet_port``, its kubelet's API on that port (a restarted kubelet's)."""
    kind = client.kind(*NODES)
    node = client.get(kind, None, name)
    now = rfc3339(client.clock())
    taints = [t for t in node["spec"].get("taints") or [] if t.get("key") != UNREACHABLE]
    if not ready:
        taints += [{"key": UNREACHABLE, "effect": effect, "timeAdded": now} for effect in ("NoSchedule", "NoExecute")]
    if taints:
        node["spec"]["taints"] = taints
    else:
        node["spec"].pop("taints", None)
    node = await client.replace(kind, None, name, node)
    _set_node_conditions(node, ready, now)
    if kubelet_port is not None:
        node["status"]["daemonEndpoints"] = {"kubeletEndpoint": {"Port": kubelet_port}}
    await client.replace(kind, None, name, node, subresource="status")


async def report_node_ready(client, name: str) -> None:
    """Post node ``name``'s status as its kubelet does: Ready, with fresh heartbeats (the node lifecycle controller
    then lifts the unreachable taints it added while the node was Unknown). Unconditional, as a kubelet's."""
    kind = client.kind(*NODES)
    node = copy.deepcopy(client.get(kind, None, name))
    _set_node_conditions(node, True, rfc3339(client.clock()))
    node["metadata"].pop("resourceVersion", None)
    await client.replace(kind, None, name, node, subresource="status")


async def register_nodes(client, specs: list[dict], kubelet_port: int = 10250) -> None:
    """Register a Node per spec (see :func:`make_node`; its kubelet's API on ``kubelet_port``), as kubelets do; one
    already registered reports Ready again, with that port."""
    await client.watch((NODES,))
    kind = client.kind(*NODES)
    for index, spec in enumerate(specs):
        if get_or_none(client, NODES, None, spec["name"]) is not None:
            await set_node_ready(client, spec["name"], True, kubelet_port)  # its kubelet, restarted, reports again
            continue
        node = make_node(spec, index, rfc3339(client.clock()), kubelet_port)
        status = node.pop("status")
        created = await client.create(kind, None, node)
        created["status"] = status
        # Unconditional, as a kubelet's status update: the node lifecycle controller may have tainted it meanwhile.
        created["metadata"].pop("resourceVersion", None)
        await client.replace(kind, None, spec["name"], created, subresource="status")


class Scheduler(Controller):
    """Places Pods and VMIs on the cluster's Nodes (see the module docstring).

    On the real control plane (``cluster.real_control_plane``) kube-scheduler
    places Pods and the node agent registers the Nodes; this scheduler then
    places only VMIs (which stand for their virt-launcher Pods here).
    """

    name = "scheduler"
    watches = (PODS, VMIS, NODES, PVCS)
    reads = (STORAGE_CLASSES,)

    def __init__(self, cluster):
        super().__init__(cluster)
        self.autoscaler_scale_up = False
        self.autoscaler_group = "gpu-pool"
        self.autoscaler_max = 4

    async def start(self) -> None:
        if not self.real_control_plane:
            await register_nodes(self.client, self.cluster.nodes or DEFAULT_NODES)
        await super().start()

    async def set_node_ready(self, name: str, ready: bool) -> None:
        """Mark node ``name`` Ready, or unreachable (see :func:`set_node_ready`)."""
        await set_node_ready(self.client, name, ready)

    # -- reconcile ---------------------------------------------------------

    async def reconcile(self, kind, obj, deleted) -> None:
        phase = (obj.get("status") or {}).get("phase")
        if kind.key == PVCS:
            await self._retry_claimants(obj)
        elif kind.key == NODES or deleted or phase in TERMINATED:
            await self._retry_all()  # capacity changed or was freed
        elif self._waiting(kind.key, obj):
            await self._schedule(kind.key, obj, retry=False)

    def _waiting(self, key, obj: dict) -> bool:
        if obj["metadata"].get("deletionTimestamp"):
            return False
        if key == PODS:
            spec = obj.get("spec") or {}
            return (
                not self.real_control_plane
                and not spec.get("nodeName")
                and spec.get("schedulerName", COMPONENT) == COMPONENT
                and (obj.get("status") or {}).get("phase", "Pending") == "Pending"
            )
        status = obj.get("status") or {}
        return status.get("phase") == "Scheduling" and not status.get("nodeName")

    async def _retry_all(self) -> None:
        for key in (PODS, VMIS):
            for obj in self.client.objects(self.client.kind(*key)):
                if self._waiting(key, obj):
                    await self._schedule(key, copy.deepcopy(obj), retry=True)

    async def _retry_claimants(self, pvc: dict) -> None:
        """Try again the waiting Pods that use claim ``pvc`` (created, bound or deleted)."""
        meta = pvc["metadata"]
        for pod in self.client.objects(self.client.kind(*PODS)):
            if pod["metadata"]["namespace"] == meta["namespace"] and self._waiting(PODS, pod) and any(
                name == meta["name"] for name, _ephemeral in pod_claims(pod)
            ):
                await self._schedule(PODS, copy.deepcopy(pod), retry=True)

    def _usage(self, advertised: frozenset[str]) -> dict[str, dict]:
        """Per node: the summed requests of the non-terminated Pods and VMIs placed there (as :func:`counted_requests` counts)."""
        usage: dict[str, dict] = {n["metadata"]["name"]: {} for n in self.client.objects(self.client.kind(*NODES))}
        for pod in self.client.objects(self.client.kind(*PODS)):
            node = (pod.get("spec") or {}).get("nodeName")
            if is_launcher(pod):  # its VMI is counted below
                continue
            if node in usage and (pod.get("status") or {}).get("phase") not in TERMINATED:
                usage[node] = _add(usage[node], counted_requests(pod_requests(pod), advertised))
        for vmi in self.client.objects(self.client.kind(*VMIS)):
            status = vmi.get("status") or {}
            if status.get("nodeName") in usage and status.get("phase") not in TERMINATED:
                node = status["nodeName"]
                usage[node] = _add(usage[node], counted_requests(vmi_requests(vmi), advertised))
        return usage

    async def _schedule(self, key, obj: dict, *, retry: bool) -> None:
        requests = pod_requests(obj) if key == PODS else vmi_requests(obj)
        spec = obj.get("spec") or {}
        tolerations = None if key == PODS else vmi_tolerations(obj)
        nodes = self.client.objects(self.client.kind(*NODES))
        advertised = advertised_resources(nodes)
        usage = self._usage(advertised)
        reasons: Counter = Counter()
        fits = []
        waiting_claims: list[dict] = []
        if key == PODS:
            problem, waiting_claims = claims_problem(self.client, obj)
            if problem:
                await self._unschedulable(key, obj, f"0/{len(nodes)} nodes are available: {problem}.", retry)
                return
        for node in nodes:
            why = filter_node(spec, requests, node, usage[node["metadata"]["name"]], tolerations, advertised)
            reasons.update(why)
            if not why:
                fits.append(node)
        if fits:
            prefers = self._preferences(spec, obj["metadata"].get("namespace", ""), nodes)
            best = max(fits, key=lambda n: (prefers(n), self._free_share(n, usage), n["metadata"]["name"]))
            if waiting_claims:  # bound once its claims are (a claim's change retries it)
                await select_node(self.client, waiting_claims, best["metadata"]["name"])
                return
            await self._bind(key, obj, best["metadata"]["name"])
        else:
            await self._unschedulable(key, obj, unschedulable_message(len(nodes), reasons), retry)

    def _preferences(self, spec: dict, namespace: str, nodes: list[dict]):
        """``(node) -> score`` of ``spec``'s preferred affinities (:func:`.scoring.preference_score`), ranked first."""
        affinity = spec.get("affinity") or {}
        if not any((affinity.get(f) or {}).get(scoring.PREFERRED) for f in ("nodeAffinity", "podAffinity", "podAntiAffinity")):
            return lambda node: 0
        by_name = {n["metadata"]["name"]: n for n in nodes}
        placed = [scoring.Placed(p["metadata"].get("namespace", ""), p["metadata"].get("labels") or {}, p["spec"]["nodeName"])
                  for p in self.client.objects(self.client.kind(*PODS))
                  if (p.get("spec") or {}).get("nodeName") and not is_launcher(p)
                  and (p.get("status") or {}).get("phase") not in TERMINATED]
        placed += [scoring.Placed(v["metadata"].get("namespace", ""), v["metadata"].get("labels") or {}, v["status"]["nodeName"])
                   for v in self.client.objects(self.client.kind(*VMIS))
                   if (v.get("status") or {}).get("nodeName") and v["status"].get("phase") not in TERMINATED]
        return lambda node: scoring.preference_score(spec, namespace, node, by_name, placed, _term_matches)

    @staticmethod
    def _free_share(node: dict, usage: dict) -> Decimal:
        """LeastAllocated score: the mean free fraction of cpu and memory."""
        allocatable = _resources(node.get("status", {}).get("allocatable"))
        used = usage[node["metadata"]["name"]]
        shares = [
            (allocatable[r] - used.get(r, Decimal(0))) / allocatable[r]
            for r in ("cpu", "memory")
            if allocatable.get(r)
        ]
        return sum(shares, Decimal(0)) / max(len(shares), 1)

    # -- outcomes ----------------------------------------------------------

    async def _bind(self, key, obj: dict, node: str) -> None:
        meta = obj["metadata"]
        kind = self.client.kind(*key)
        current = get_or_none(self.client, key, meta["namespace"], meta["name"])
        if current is None or not self._waiting(key, current):
            return
        now = rfc3339(self.client.clock())
        if key == PODS:
            current["spec"]["nodeName"] = node
            current = await self.client.replace(kind, meta["namespace"], meta["name"], current)
            status = current.setdefault("status", {})
            set_condition(status.setdefault("conditions", []), "PodScheduled", "True", now=now)
        else:
            current["metadata"].setdefault("labels", {})["kubevirt.io/nodeName"] = node
            current = await self.client.replace(kind, meta["namespace"], meta["name"], current)
            status = current.setdefault("status", {})
            remove_condition(status.setdefault("conditions", []), "PodScheduled")
            status.update(nodeName=node, phase="Scheduled")
        await self.client.replace(kind, meta["namespace"], meta["name"], current, subresource="status")
        if key == PODS:  # KubeVirt records no Scheduled on a VMI (kube-scheduler records it on the virt-launcher Pod)
            await self.client.record_event(current, "Scheduled", f"Successfully assigned {meta['namespace']}/{meta['name']} to {node}",
                                           component=COMPONENT)
        log.debug("bound %s %s/%s to %s", kind.kind, meta["namespace"], meta["name"], node)

    async def _unschedulable(self, key, obj: dict, message: str, retry: bool) -> None:
        meta = obj["metadata"]
        kind = self.client.kind(*key)
        current = get_or_none(self.client, key, meta["namespace"], meta["name"])
        if current is None:
            return
        conditions = current.setdefault("status", {}).setdefault("conditions", [])
        before = copy.deepcopy(conditions)
        set_condition(conditions, "PodScheduled", "False", "Unschedulable", message, now=rfc3339(self.client.clock()))
        if conditions == before and not retry:
            return  # already reported; the next retry re-reports
        if conditions != before:
            current = await self.client.replace(kind, meta["namespace"], meta["name"], current, subresource="status")
        await self.client.record_event(current, "FailedScheduling", message, type="Warning", component=COMPONENT)
        if self.autoscaler_scale_up:
            await self.client.record_event(current,
                "TriggeredScaleUp",
                f"pod triggered scale-up: [{{{self.autoscaler_group} 0->1 (max: {self.autoscaler_max})}}]",
                component="cluster-autoscaler",
            )
