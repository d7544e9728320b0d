"""GPU and volume metrics of the local cluster's nodes, as NVIDIA's dcgm-exporter and the kubelet expose them.

A GPU node of a real cluster runs dcgm-exporter (a DaemonSet of the GPU
operator) whose ``/metrics`` has one gauge per GPU and field, labelled
``gpu`` (the device index), ``UUID``, ``pci_bus_id``, ``device``
(``nvidia<index>``), ``modelName``, ``Hostname`` (the node), and, in its
Kubernetes mode (from the kubelet's pod-resources API), ``pod``,
``namespace`` and ``container`` of the Pod the device is allocated to (empty
when none is). A VM's GPU is allocated to its virt-launcher Pod, so that is
the Pod it names. Each kubelet serves ``kubelet_volume_stats_*`` gauges of
the volumes mounted on its node, labelled ``namespace`` and
``persistentvolumeclaim``.

:class:`NodeMetrics` plays both for every node of the local cluster, on one
loopback HTTP server (:meth:`NodeMetrics.serve`):

``/metrics``
    ``DCGM_FI_DEV_GPU_UTIL`` (%), ``DCGM_FI_DEV_FB_USED`` and
    ``DCGM_FI_DEV_FB_FREE`` (MiB), ``DCGM_FI_DEV_POWER_USAGE`` (W) and
    ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (ratio, 0-1) for each card of each GPU
    node (:func:`~.gpunodes.node_devices`), the node named in ``Hostname``.
    A card in MIG mode is reported per MIG slice, as dcgm-exporter does:
    labels ``GPU_I_PROFILE`` (``1g.10gb``) and ``GPU_I_ID`` (the GPU
    instance id) on top of the card's ``gpu``/``UUID``, the slice's own
    framebuffer, and no ``DCGM_FI_DEV_GPU_UTIL`` (DCGM does not report it
    for MIG instances; their utilisation is ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``).
    A time-sliced card is one series whichever replicas are held, attributed
    to one Pod (the holder of its lowest held replica): dcgm-exporter's pod
    mapper keeps one Pod per device (NVIDIA/dcgm-exporter#307), so the
    other Pods sharing the card have no series of their own; with
    :attr:`NodeMetrics.virtual_gpus` (its ``KUBERNETES_VIRTUAL_GPUS``) the
    card's series is repeated per held replica with the label ``vgpu``.
    Values are what a test set with :meth:`NodeMetrics.set_gpu`
    (default: idle, 0 %, 0 MiB used, 60 W; a GPU some Pod or VMI holds
    reports :attr:`NodeMetrics.held` instead when that is set, as the demo
    does).
``/kubelet/metrics``
    ``kubelet_volume_stats_used_bytes``, ``..._capacity_bytes`` and
    ``..._available_bytes`` of every bound claim a placed Pod or VMI uses:
    used is the real size of the claim's PersistentVolume directory
    (measured in a worker thread), capacity the claim's
    ``status.capacity.storage``.

Which devices a consumer holds: each non-finished Pod (not a virt-launcher)
and VMI placed on the node gets, per GPU resource it asks for
(``nvidia.com/*`` requests, else limits; a VMI's ``devices.gpus`` and
``nvidia.com/`` host devices, as the scheduler counts them), as many of
that resource's devices (cards, replicas, MIG slices) as it asks, the lowest
free ones, kept for as long as it lives (:class:`DeviceAssignments`). A VMI's devices are labelled with its
virt-launcher Pod (:mod:`.launcher`), found by its
``kubevirt.io/created-by`` label; before that Pod exists they are
unattributed, as dcgm-exporter reports them.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import tornado.httpserver
import tornado.netutil
import tornado.web

from ..validation import parse_quantity
from ..volumes import claim_path
from .gpunodes import Device, node_devices
from .launcher import CREATED_BY_LABEL, LAUNCHER_LABEL, LAUNCHER_VALUE, is_launcher
from .refs import NODES, PODS, PVCS, VMIS, claim_names
from .scheduler import advertised_resources, counted_requests, pod_requests, vmi_requests

log = logging.getLogger("localcluster")

GPU_RESOURCE = "nvidia.com/gpu"
FINISHED = ("Succeeded", "Failed")
DRIVER_VERSION = "550.90.07"
GPU_FIELDS = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)."),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active."),
)
VOLUME_FIELDS = (
    ("kubelet_volume_stats_used_bytes", "Number of used bytes in the volume"),
    ("kubelet_volume_stats_capacity_bytes", "Capacity in bytes of the volume"),
    ("kubelet_volume_stats_available_bytes", "Number of available bytes in the volume"),
)


@dataclass
class GPUReading:
    """What one GPU reports: utilisation (%), framebuffer used (MiB), power draw (W)."""

    util: float = 0.0
    fb_used_mib: float = 0.0
    power_watts: float = 60.0


class DeviceAssignments:
    """Device indices of each node's GPU devices, per resource, held by each consumer (a Pod or VMI uid), stable for the consumer's life."""

    def __init__(self):
        self._held: dict[tuple[str, str], dict[str, list[int]]] = {}

    def assign(self, node: str, total: int, wanted: dict[str, int], resource: str = GPU_RESOURCE) -> dict[str, list[int]]:
        """``{uid: [device index, ...]}`` on ``node`` (``total`` devices of ``resource``) for the consumers ``wanted``
        (``{uid: units}``); each resource (``nvidia.com/gpu``, a MIG slice, ...) has its own devices, indexed from 0.

        A consumer keeps the indices it had; one no longer wanted frees them;
        a new one gets the lowest free indices (fewer than it asks when the
        node has fewer free: an overcommitted node, as it never happens on a
        real one). Consumers are served in the order of ``wanted``.
        """
        held = {uid: devices for uid, devices in self._held.get((node, resource), {}).items() if uid in wanted}
        used = {index for devices in held.values() for index in devices}
        for uid, count in wanted.items():
            if uid in held or count <= 0:
                continue
            free = [index for index in range(total) if index not in used][:count]
            held[uid] = free
            used.update(free)
        self._held[(node, resource)] = held
        return dict(held)


def _gpu_units(requests: dict[str, Decimal], advertised) -> dict[str, int]:
    """``{resource: units}`` of the ``nvidia.com/*`` requests, as the scheduler counts them (:func:`~.scheduler.counted_requests`)."""
    return {name: int(amount) for name, amount in counted_requests(requests, advertised).items()
            if name.startswith("nvidia.com/") and amount > 0}


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _line(name: str, labels: dict[str, str], value: float) -> str:
    inner = ",".join(f'{key}="{_escape(str(text))}"' for key, text in labels.items())
    number = float(value)
    text = str(int(number)) if number.is_integer() else repr(number)
    return f"{name}{{{inner}}} {text}"


def model_name(product: str) -> str:
    """dcgm-exporter's ``modelName`` for GPU feature discovery's product label (which put ``-`` for the first space)."""
    return product.replace("-", " ", 1) if product.startswith("NVIDIA-") else product


def _directory_bytes(path: Path) -> int:
    """Bytes the files under ``path`` take (their sizes; blocking: run it in a thread)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


class NodeMetrics:
    """The dcgm-exporter and kubelet metrics of the local cluster (see the module docstring).

    ``cluster``: the :class:`~..cluster.LocalCluster`; its client's caches
    must hold Nodes, Pods, VMIs and PVCs (the node agent's do).
    """

    def __init__(self, cluster, client=None):
        self.cluster = cluster
        self.client = client or cluster.client
        self.readings: dict[tuple, GPUReading] = {}
        #: dcgm-exporter's ``KUBERNETES_VIRTUAL_GPUS``: a time-sliced card reported once per held replica (label ``vgpu``).
        self.virtual_gpus = False
        #: What a held GPU reports unless :meth:`set_gpu` set its values; None: the same as a free one (idle).
        self.held: GPUReading | None = None
        self.assignments = DeviceAssignments()
        self.url: str | None = None
        self._server: tornado.httpserver.HTTPServer | None = None

    def set_gpu(self, node: str, gpu: int, *, util: float | None = None, fb_used_mib: float | None = None,
                power_watts: float | None = None, gpu_instance: int | None = None) -> None:
        """Set what card ``gpu`` (its index) of ``node`` reports from now on, or with ``gpu_instance`` its MIG slice of that
        GPU instance id (:attr:`~.gpunodes.Device.instance`); None leaves a value as it was. ``util``: % (a MIG slice
        reports it as ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` only, as util/100)."""
        key = (node, gpu) if gpu_instance is None else (node, gpu, gpu_instance)
        reading = self.readings.setdefault(key, GPUReading())
        if util is not None:
            reading.util = float(util)
        if fb_used_mib is not None:
            reading.fb_used_mib = float(fb_used_mib)
        if power_watts is not None:
            reading.power_watts = float(power_watts)

    # -- who holds which GPU --------------------------------------------------------------

    def _objects(self, key) -> list[dict]:
        return self.client.objects(self.client.kind(*key))

    def consumers(self) -> dict[str, dict[str, tuple[dict[str, int], dict[str, str]]]]:
        """``{node: {uid: ({resource: units}, who)}}``: the GPU units each placed, non-finished Pod (not a virt-launcher)
        and VMI asks for, by resource name as the scheduler counts them, and the ``{"pod", "namespace", "container"}``
        dcgm-exporter names for them (a VMI: its virt-launcher Pod's ``compute`` container, empty before that Pod exists)."""
        launchers = {}
        for pod in self._objects(PODS):
            labels = pod["metadata"].get("labels") or {}
            if is_launcher(pod) and labels.get(LAUNCHER_LABEL) == LAUNCHER_VALUE and not pod["metadata"].get("deletionTimestamp"):
                launchers[labels.get(CREATED_BY_LABEL)] = pod
        advertised = advertised_resources(self._objects(NODES))
        found: dict[str, dict[str, tuple[dict[str, int], dict[str, str]]]] = {}
        for pod in self._objects(PODS):
            node = (pod.get("spec") or {}).get("nodeName")
            if not node or is_launcher(pod) or (pod.get("status") or {}).get("phase") in FINISHED:
                continue
            units = _gpu_units(pod_requests(pod), advertised)
            if units:
                container = next((c["name"] for c in pod["spec"].get("containers") or []
                                  if _gpu_units(pod_requests({"spec": {"containers": [c]}}), advertised)), "")
                who = {"pod": pod["metadata"]["name"], "namespace": pod["metadata"]["namespace"], "container": container}
                found.setdefault(node, {})[pod["metadata"]["uid"]] = (units, who)
        for vmi in self._objects(VMIS):
            status = vmi.get("status") or {}
            node = status.get("nodeName")
            if not node or status.get("phase") in FINISHED:
                continue
            units = _gpu_units(vmi_requests(vmi), advertised)
            if units:
                launcher = launchers.get(vmi["metadata"]["uid"])
                who = {"pod": "", "namespace": "", "container": ""} if launcher is None else {
                    "pod": launcher["metadata"]["name"], "namespace": launcher["metadata"]["namespace"], "container": "compute"}
                found.setdefault(node, {})[vmi["metadata"]["uid"]] = (units, who)
        return found

    def assigned(self) -> dict[str, list[tuple[Device, dict[str, str] | None]]]:
        """``{node: [(device, who or None), ...]}`` for every GPU device of every node (:func:`~.gpunodes.node_devices`):
        who holds it now (``{"pod", "namespace", "container"}``), per resource, stable for each consumer's life."""
        consumers = self.consumers()
        result: dict[str, list[tuple[Device, dict[str, str] | None]]] = {}
        for node in sorted(self._objects(NODES), key=lambda n: n["metadata"]["name"]):
            name = node["metadata"]["name"]
            devices = node_devices(node)
            if not devices:
                continue
            mine = consumers.get(name, {})
            rows: list[tuple[Device, dict[str, str] | None]] = []
            for resource in dict.fromkeys(d.resource for d in devices):
                own = [d for d in devices if d.resource == resource]
                wanted = {uid: units.get(resource, 0) for uid, (units, _who) in mine.items() if units.get(resource)}
                holder = {index: mine[uid][1] for uid, indices in
                          self.assignments.assign(name, len(own), wanted, resource).items() for index in indices}
                rows += [(device, holder.get(index)) for index, device in enumerate(own)]
            result[name] = rows
        return result

    def holders(self) -> dict[str, dict[int, dict[str, str]]]:
        """``{node: {card index: {"pod", "namespace", "container"}}}`` for the cards allocated now, as dcgm-exporter attributes
        them: a whole card to its holder, a time-sliced card to the holder of its lowest held replica; MIG slices
        are left out (see :meth:`assigned`)."""
        result: dict[str, dict[int, dict[str, str]]] = {}
        for node, rows in self.assigned().items():
            cards: dict[int, dict[str, str]] = {}
            for device, who in rows:
                if who is not None and device.instance is None:
                    cards.setdefault(device.gpu, who)
            result[node] = cards
        return result

    def gpu_nodes(self) -> list[tuple[str, int, str]]:
        """``[(node, GPUs, product label), ...]`` of the nodes with ``nvidia.com/gpu`` capacity."""
        found = []
        for node in self._objects(NODES):
            capacity = (node.get("status") or {}).get("capacity") or {}
            total = int(parse_quantity(capacity.get(GPU_RESOURCE, "0")))
            if total > 0:
                product = (node["metadata"].get("labels") or {}).get("nvidia.com/gpu.product", "")
                found.append((node["metadata"]["name"], total, product))
        return sorted(found)

    # -- the exposition ---------------------------------------------------------------------

    def _reading(self, node: str, device: Device, held: bool) -> GPUReading:
        key = (node, device.gpu) if device.instance is None else (node, device.gpu, device.instance)
        return self.readings.get(key) or (held and self.held) or GPUReading()

    def dcgm_text(self) -> str:
        """The ``/metrics`` page of dcgm-exporter for every GPU node (Prometheus text format 0.0.4).

        One series per card and field; a card in MIG mode has one per MIG
        slice instead, labelled ``GPU_I_PROFILE`` and ``GPU_I_ID``, without
        ``DCGM_FI_DEV_GPU_UTIL`` (DCGM does not report it for MIG instances:
        ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` is their utilisation). A
        time-sliced card is one series, attributed to the holder of its
        lowest held replica, as dcgm-exporter's pod mapper keeps one Pod per
        device; with :attr:`virtual_gpus` (dcgm-exporter's
        ``KUBERNETES_VIRTUAL_GPUS``) one per held replica, labelled ``vgpu``.
        """
        rows: dict[str, list[str]] = {name: [] for name, _help in GPU_FIELDS}
        for node, assigned in self.assigned().items():
            cards: dict[int, list[tuple[Device, dict[str, str] | None]]] = {}
            for device, who in assigned:
                cards.setdefault(device.gpu, []).append((device, who))
            product = next((n["metadata"].get("labels") or {} for n in self._objects(NODES)
                            if n["metadata"]["name"] == node), {}).get("nvidia.com/gpu.product", "")
            for card, devices in sorted(cards.items()):
                for device, who, extra in self._series(devices):
                    reading = self._reading(node, device, who is not None)
                    who = who or {"pod": "", "namespace": "", "container": ""}
                    labels = {
                        "gpu": str(card),
                        "UUID": device.uuid,
                        "pci_bus_id": f"00000000:{0x10 + card:02X}:00.0",
                        "device": f"nvidia{card}",
                        "modelName": model_name(product.removesuffix("-SHARED")),
                        "Hostname": node,
                        **extra,
                        "DCGM_FI_DRIVER_VERSION": DRIVER_VERSION,
                        "container": who["container"],
                        "namespace": who["namespace"],
                        "pod": who["pod"],
                    }
                    used = min(reading.fb_used_mib, device.fb_mib)
                    values = {"DCGM_FI_DEV_GPU_UTIL": reading.util, "DCGM_FI_DEV_FB_USED": used,
                              "DCGM_FI_DEV_FB_FREE": device.fb_mib - used, "DCGM_FI_DEV_POWER_USAGE": reading.power_watts,
                              "DCGM_FI_PROF_GR_ENGINE_ACTIVE": reading.util / 100}
                    if device.instance is not None:
                        del values["DCGM_FI_DEV_GPU_UTIL"]
                    for name, value in values.items():
                        rows[name].append(_line(name, labels, value))
        return _page(GPU_FIELDS, rows)

    def _series(self, devices: list[tuple[Device, dict[str, str] | None]]):
        """``[(device, who, extra labels), ...]``: the series dcgm-exporter reports for one card's devices."""
        if devices[0][0].instance is not None:  # MIG: one per GPU instance
            return [(d, who, {"GPU_I_PROFILE": d.profile, "GPU_I_ID": str(d.instance)}) for d, who in devices]
        if devices[0][0].replica is None:  # a whole card
            return [(devices[0][0], devices[0][1], {})]
        held = [(d, who) for d, who in devices if who is not None]
        if self.virtual_gpus and held:
            return [(d, who, {"vgpu": str(d.replica)}) for d, who in held]
        return [(held[0] if held else devices[0]) + ({},)]

    def mounted_claims(self) -> list[tuple[str, str]]:
        """``[(namespace, claim), ...]`` used by the placed, non-finished Pods and VMIs."""
        found = set()
        for pod in self._objects(PODS):
            if (pod.get("spec") or {}).get("nodeName") and (pod.get("status") or {}).get("phase") not in FINISHED:
                for name in claim_names(pod["spec"].get("volumes"), pod["metadata"]["name"]):
                    found.add((pod["metadata"]["namespace"], name))
        for vmi in self._objects(VMIS):
            status = vmi.get("status") or {}
            if status.get("nodeName") and status.get("phase") not in FINISHED:
                for name in claim_names((vmi.get("spec") or {}).get("volumes")):
                    found.add((vmi["metadata"]["namespace"], name))
        return sorted(found)

    async def kubelet_text(self) -> str:
        """The kubelets' ``kubelet_volume_stats_*`` gauges of the mounted claims (sizes measured in a thread)."""
        rows: dict[str, list[str]] = {name: [] for name, _help in VOLUME_FIELDS}
        for namespace, name in self.mounted_claims():
            path = claim_path(self.cluster, namespace, name, self.client)
            pvc = next((p for p in self._objects(PVCS)
                        if p["metadata"]["namespace"] == namespace and p["metadata"]["name"] == name), None)
            if path is None or pvc is None:
                continue
            capacity = int(parse_quantity(((pvc.get("status") or {}).get("capacity") or {}).get("storage", "0")))
            used = await asyncio.to_thread(_directory_bytes, path)
            labels = {"namespace": namespace, "persistentvolumeclaim": name}
            rows["kubelet_volume_stats_used_bytes"].append(_line("kubelet_volume_stats_used_bytes", labels, used))
            rows["kubelet_volume_stats_capacity_bytes"].append(_line("kubelet_volume_stats_capacity_bytes", labels, capacity))
            rows["kubelet_volume_stats_available_bytes"].append(
                _line("kubelet_volume_stats_available_bytes", labels, max(capacity - used, 0)))
        return _page(VOLUME_FIELDS, rows)

    # -- serving --------------------------------------------------------------------------

    async def serve(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve ``/metrics`` and ``/kubelet/metrics`` on ``host:port`` (0: a free port); the base URL. Idempotent."""
        if self.url is not None:
            return self.url
        app = tornado.web.Application([(r"/metrics", _DcgmHandler, {"metrics": self}),
                                       (r"/kubelet/metrics", _KubeletHandler, {"metrics": self})])
        sockets = tornado.netutil.bind_sockets(port, host)
        self._server = tornado.httpserver.HTTPServer(app)
        self._server.add_sockets(sockets)
        self.url = f"http://{host}:{sockets[0].getsockname()[1]}"
        return self.url

    async def close(self) -> None:
        """Stop serving (nothing if not serving)."""
        if self._server is not None:
            self._server.stop()
            await self._server.close_all_connections()
            self._server = None
            self.url = None


def _page(fields, rows: dict[str, list[str]]) -> str:
    lines = []
    for name, text in fields:
        lines += [f"# HELP {name} {text}", f"# TYPE {name} gauge", *rows[name]]
    return "\n".join(lines) + "\n"


class _DcgmHandler(tornado.web.RequestHandler):
    def initialize(self, metrics: NodeMetrics):
        self.metrics = metrics

    def get(self):
        self.set_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.write(self.metrics.dcgm_text())


class _KubeletHandler(tornado.web.RequestHandler):
    def initialize(self, metrics: NodeMetrics):
        self.metrics = metrics

    async def get(self):
        self.set_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.write(await self.metrics.kubelet_text())
