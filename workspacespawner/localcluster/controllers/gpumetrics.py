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
    ``DCGM_FI_DEV_FB_FREE`` (MiB), ``DCGM_FI_DEV_POWER_USAGE`` (W) for each
    GPU of each GPU node (its ``nvidia.com/gpu`` capacity), the node named
    in ``Hostname``. Values are what a test set with :meth:`NodeMetrics.set_gpu`
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
and VMI placed on the node gets as many device indices as it asks GPUs
(``nvidia.com/*`` requests, else limits; a VMI's ``devices.gpus`` and
``nvidia.com/`` host devices), the lowest free ones, kept for as long as it
lives (:class:`DeviceAssignments`). A VMI's devices are labelled with its
virt-launcher Pod (:mod:`.launcher`), found by its
``kubevirt.io/created-by`` label; before that Pod exists they are
unattributed, as dcgm-exporter reports them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import uuid
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import tornado.httpserver
import tornado.netutil
import tornado.web

from ..validation import parse_quantity
from ..volumes import claim_path
from .launcher import CREATED_BY_LABEL, LAUNCHER_LABEL, LAUNCHER_VALUE, is_launcher
from .refs import NODES, PODS, PVCS, VMIS, claim_names
from .scheduler import pod_requests, vmi_requests

log = logging.getLogger("workspacespawner.localcluster")

GPU_RESOURCE = "nvidia.com/gpu"
FINISHED = ("Succeeded", "Failed")
DRIVER_VERSION = "550.90.07"
GPU_FIELDS = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)."),
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
    """Device indices of each node's GPUs held by each consumer (a Pod or VMI uid), stable for the consumer's life."""

    def __init__(self):
        self._held: dict[str, dict[str, list[int]]] = {}

    def assign(self, node: str, total: int, wanted: dict[str, int]) -> dict[str, list[int]]:
        """``{uid: [device index, ...]}`` on ``node`` (``total`` GPUs) for the consumers ``wanted`` (``{uid: GPUs}``).

        A consumer keeps the indices it had; one no longer wanted frees them;
        a new one gets the lowest free indices (fewer than it asks when the
        node has fewer free: an overcommitted node, as it never happens on a
        real one). Consumers are served in the order of ``wanted``.
        """
        held = {uid: devices for uid, devices in self._held.get(node, {}).items() if uid in wanted}
        used = {index for devices in held.values() for index in devices}
        for uid, count in wanted.items():
            if uid in held or count <= 0:
                continue
            free = [index for index in range(total) if index not in used][:count]
            held[uid] = free
            used.update(free)
        self._held[node] = held
        return dict(held)


def _gpu_count(requests: dict[str, Decimal]) -> int:
    return int(sum((amount for name, amount in requests.items() if name.startswith("nvidia.com/")), Decimal(0)))


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


def framebuffer_mib(product: str) -> int:
    """The framebuffer of a GPU model, in MiB, from the ``<N>GB`` in its product name (16 GiB when none is named)."""
    found = re.search(r"(\d+)GB", product)
    return int(found.group(1)) * 1024 if found else 16 * 1024


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
        self.readings: dict[tuple[str, int], GPUReading] = {}
        #: What a held GPU reports unless :meth:`set_gpu` set its values; None: the same as a free one (idle).
        self.held: GPUReading | None = None
        self.assignments = DeviceAssignments()
        self.url: str | None = None
        self._server: tornado.httpserver.HTTPServer | None = None

    def set_gpu(self, node: str, gpu: int, *, util: float | None = None, fb_used_mib: float | None = None,
                power_watts: float | None = None) -> None:
        """Set what GPU ``gpu`` (device index) of ``node`` reports from now on; None leaves a value as it was."""
        reading = self.readings.setdefault((node, gpu), GPUReading())
        if util is not None:
            reading.util = float(util)
        if fb_used_mib is not None:
            reading.fb_used_mib = float(fb_used_mib)
        if power_watts is not None:
            reading.power_watts = float(power_watts)

    # -- who holds which GPU --------------------------------------------------------------

    def _objects(self, key) -> list[dict]:
        return self.client.objects(self.client.kind(*key))

    def holders(self) -> dict[str, dict[int, dict[str, str]]]:
        """``{node: {device index: {"pod", "namespace", "container"}}}`` for the GPUs allocated now."""
        launchers = {}
        for pod in self._objects(PODS):
            labels = pod["metadata"].get("labels") or {}
            if is_launcher(pod) and labels.get(LAUNCHER_LABEL) == LAUNCHER_VALUE and not pod["metadata"].get("deletionTimestamp"):
                launchers[labels.get(CREATED_BY_LABEL)] = pod
        consumers: dict[str, dict[str, tuple[int, dict[str, str]]]] = {}
        for pod in self._objects(PODS):
            node = (pod.get("spec") or {}).get("nodeName")
            if not node or is_launcher(pod) or (pod.get("status") or {}).get("phase") in FINISHED:
                continue
            count = _gpu_count(pod_requests(pod))
            if count:
                container = next((c["name"] for c in pod["spec"].get("containers") or []
                                  if _gpu_count(pod_requests({"spec": {"containers": [c]}}))), "")
                who = {"pod": pod["metadata"]["name"], "namespace": pod["metadata"]["namespace"], "container": container}
                consumers.setdefault(node, {})[pod["metadata"]["uid"]] = (count, who)
        for vmi in self._objects(VMIS):
            status = vmi.get("status") or {}
            node = status.get("nodeName")
            if not node or status.get("phase") in FINISHED:
                continue
            count = _gpu_count(vmi_requests(vmi))
            if count:
                launcher = launchers.get(vmi["metadata"]["uid"])
                who = {"pod": "", "namespace": "", "container": ""} if launcher is None else {
                    "pod": launcher["metadata"]["name"], "namespace": launcher["metadata"]["namespace"], "container": "compute"}
                consumers.setdefault(node, {})[vmi["metadata"]["uid"]] = (count, who)
        result: dict[str, dict[int, dict[str, str]]] = {}
        for node, total, _product in self.gpu_nodes():
            mine = consumers.get(node, {})
            devices = self.assignments.assign(node, total, {uid: count for uid, (count, _who) in mine.items()})
            result[node] = {index: mine[uid][1] for uid, indices in devices.items() for index in indices}
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

    def dcgm_text(self) -> str:
        """The ``/metrics`` page of dcgm-exporter for every GPU node (Prometheus text format 0.0.4)."""
        holders = self.holders()
        rows: dict[str, list[str]] = {name: [] for name, _help in GPU_FIELDS}
        for node, total, product in self.gpu_nodes():
            framebuffer = framebuffer_mib(product)
            for index in range(total):
                who = holders.get(node, {}).get(index)
                reading = self.readings.get((node, index)) or (who is not None and self.held) or GPUReading()
                who = who or {"pod": "", "namespace": "", "container": ""}
                labels = {
                    "gpu": str(index),
                    "UUID": f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{node}.gpu{index}')}",
                    "pci_bus_id": f"00000000:{0x10 + index:02X}:00.0",
                    "device": f"nvidia{index}",
                    "modelName": model_name(product),
                    "Hostname": node,
                    "DCGM_FI_DRIVER_VERSION": DRIVER_VERSION,
                    "container": who["container"],
                    "namespace": who["namespace"],
                    "pod": who["pod"],
                }
                used = min(reading.fb_used_mib, framebuffer)
                values = {"DCGM_FI_DEV_GPU_UTIL": reading.util, "DCGM_FI_DEV_FB_USED": used,
                          "DCGM_FI_DEV_FB_FREE": framebuffer - used, "DCGM_FI_DEV_POWER_USAGE": reading.power_watts}
                for name, value in values.items():
                    rows[name].append(_line(name, labels, value))
        return _page(GPU_FIELDS, rows)

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
