"""GPU and disk metrics from Prometheus, joined to the workspaces that hold them.

NVIDIA's dcgm-exporter reports each GPU with the ``pod`` and ``namespace``
of the Pod the device is allocated to (see
:mod:`localcluster.controllers.gpumetrics` for the labels).
The join goes by labels and uids only, never by a name pattern:

- ``(namespace, pod)`` is one of our server Pods: its owner labels and
  kubespawner's annotations (:func:`~workspacespawner.core.names.server_of`,
  :func:`~workspacespawner.core.names.labelled_for`) give user and server,
  kind ``container``;
- or it is a virt-launcher Pod (label ``kubevirt.io=virt-launcher``): its
  ``kubevirt.io/created-by`` label is the uid of its
  VirtualMachineInstance, whose owner labels give user and server, kind
  ``vm``;
- anything else (a GPU free, or held by a Pod that is not a workspace) has
  no owner.

When Prometheus relabels the exporter's own ``pod``/``namespace`` to
``exported_pod``/``exported_namespace`` (a scrape without ``honor_labels``),
those are read instead. The node is the joined Pod's node, else the
series' ``kubernetes_node`` or ``node`` label, else dcgm-exporter's
``Hostname`` (which is the exporter Pod's host name unless it is set to
the node's).

:func:`join_gpus` and :func:`join_volumes` are pure (tested with dicts);
:func:`read_gpu_metrics` and :func:`read_volume_usage` ask Prometheus (one
query per metric); the utilisation an idle GPU is judged on is the idle
settings' (:func:`workspacespawner.idle.activity.read_idle_readings`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from workspacespawner.core.names import labelled_for, server_of
from workspacespawner.core.prometheus import PrometheusClient, Sample
from workspacespawner.k8s.objects import is_virt_launcher, launched_vmi

UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
POWER = "DCGM_FI_DEV_POWER_USAGE"
#: The ratio (0-1) of time a GPU's graphics engine is busy: the only utilisation DCGM reports for a MIG slice
#: (``DCGM_FI_DEV_GPU_UTIL`` is not supported for MIG instances; their series carry ``GPU_I_ID``).
ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"

GPU_METRICS = (UTIL, FB_USED, FB_FREE, POWER)
VOLUME_USED = "kubelet_volume_stats_used_bytes"
VOLUME_CAPACITY = "kubelet_volume_stats_capacity_bytes"

CONTAINER = "container"
VM = "vm"


def utilisation_over(function: str, window_seconds: int) -> str:
    """PromQL for each GPU's utilisation in percent through ``function`` (``avg_over_time``, ``max_over_time``) over
    ``window_seconds``: ``DCGM_FI_DEV_GPU_UTIL`` for whole cards, ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` × 100 for MIG
    slices (``GPU_I_ID`` set), in one query."""
    window = f"[{int(window_seconds)}s]"
    return f'{function}({UTIL}{window}) or ({function}({ENGINE_ACTIVE}{{GPU_I_ID!=""}}{window}) * 100)'



@dataclass(frozen=True)
class Holder:
    """Whose a Pod is: ``user``, ``server`` (``""``: the default server), ``kind`` (``container``/``vm``), its ``node``.

    ``name``: the workspace's own object (the Pod, or the VMI of a
    virt-launcher Pod) in ``namespace``.
    """

    user: str
    server: str
    kind: str
    namespace: str
    name: str
    node: str | None = None


@dataclass(frozen=True)
class GPUStat:
    """One GPU now: where (``node``, ``gpu`` device index, ``uuid``, ``model``) and what it reports.

    ``util`` (%), ``fb_used_mib`` and ``fb_free_mib`` (MiB), ``power_watts``
    (W): None when that metric is missing. ``holder``: the workspace holding
    it, None when free or held by something that is not a workspace;
    ``pod``/``namespace``: the Pod dcgm-exporter named (``""`` when none);
    ``instance``: a MIG slice's GPU instance id (``GPU_I_ID``; ``""`` for a
    whole card), so the slices of one card are told apart, and
    ``mig_profile`` its profile (``GPU_I_PROFILE``, ``1g.10gb``). A MIG
    slice's ``util`` is its ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` × 100 (DCGM
    reports no ``DCGM_FI_DEV_GPU_UTIL`` for MIG instances).
    """

    node: str
    gpu: int
    uuid: str
    model: str
    util: float | None
    fb_used_mib: float | None
    fb_free_mib: float | None
    power_watts: float | None
    pod: str
    namespace: str
    holder: Holder | None
    instance: str = ""
    mig_profile: str = ""


@dataclass(frozen=True)
class VolumeUsage:
    """A PersistentVolumeClaim's usage as its kubelet measures it: ``used_bytes``, ``capacity_bytes`` (None: not reported)."""

    namespace: str
    claim: str
    used_bytes: float
    capacity_bytes: float | None


def _meta(obj: dict) -> dict:
    return obj.get("metadata") or {}


def _owner(meta: dict) -> tuple[str, str] | None:
    """``(user, server)`` of our workspace object's metadata (owner labels agreeing with the annotations), else None."""
    found = server_of(meta)
    return found if found is not None and labelled_for(meta, found[0]) else None


def holders(pods: list[dict], vmis: list[dict]) -> dict[tuple[str, str], Holder]:
    """``{(namespace, Pod name): Holder}`` for our server Pods and the virt-launcher Pods of our VMIs.

    ``pods``: Pod dicts (server Pods and virt-launcher Pods; others are
    ignored); ``vmis``: VirtualMachineInstance dicts.
    """
    by_uid = {_meta(vmi).get("uid"): vmi for vmi in vmis if _meta(vmi).get("uid")}
    found: dict[tuple[str, str], Holder] = {}
    for pod in pods:
        meta = _meta(pod)
        key = (meta.get("namespace", ""), meta.get("name", ""))
        node = (pod.get("spec") or {}).get("nodeName")
        if is_virt_launcher(pod):
            vmi = by_uid.get(launched_vmi(pod))
            if vmi is None or _meta(vmi).get("namespace") != key[0]:
                continue
            owner = _owner(_meta(vmi))
            if owner is not None:
                node = node or (vmi.get("status") or {}).get("nodeName")
                found[key] = Holder(owner[0], owner[1], VM, key[0], _meta(vmi).get("name", ""), node)
        else:
            owner = _owner(meta)
            if owner is not None:
                found[key] = Holder(owner[0], owner[1], CONTAINER, key[0], key[1], node)
    return found


def _pod_of(labels: dict[str, str]) -> tuple[str, str]:
    """``(namespace, pod)`` a series names, preferring the exporter's own labels when Prometheus renamed them."""
    namespace = labels.get("exported_namespace") or labels.get("namespace") or ""
    pod = labels.get("exported_pod") or labels.get("pod") or ""
    return namespace, pod


def _number(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else value


def join_gpus(samples: dict[str, list[Sample]], pods: list[dict], vmis: list[dict]) -> list[GPUStat]:
    """One :class:`GPUStat` per GPU in ``samples`` (``{metric name: [Sample, ...]}`` of :data:`GPU_METRICS`).

    GPUs are told apart by node, device index (``gpu`` label) and MIG
    instance (``GPU_I_ID``); the result is sorted by node, index, instance. Series without a ``gpu`` label
    are ignored. When one GPU has several series (a range function such as
    ``avg_over_time`` also returns those of the GPU's past holders, each
    Pod its own series), the one naming a workspace that holds it now wins,
    then the one naming no Pod (the GPU is free), then the first.
    """
    owners = holders(pods, vmis)
    rows: dict[tuple[str, int, str], dict] = {}

    def rank(holder, pod: str) -> int:
        return 2 if holder is not None else 1 if not pod else 0
    for metric in (*GPU_METRICS, ENGINE_ACTIVE):
        for sample in samples.get(metric) or []:
            labels = sample.labels
            if metric == ENGINE_ACTIVE and not labels.get("GPU_I_ID"):
                continue  # a whole card's: its DCGM_FI_DEV_GPU_UTIL says it
            try:
                index = int(labels.get("gpu", ""))
            except ValueError:
                continue
            namespace, pod = _pod_of(labels)
            holder = owners.get((namespace, pod)) if pod else None
            node = (holder.node if holder is not None else None) or labels.get("kubernetes_node") or labels.get("node") \
                or labels.get("Hostname") or ""
            key = (node, index, labels.get("GPU_I_ID", ""))
            row = rows.get(key)
            if row is not None and (row["pod"], row["namespace"]) != (pod, namespace):
                if rank(holder, pod) <= rank(row["holder"], row["pod"]):
                    continue  # another series of this GPU: a past holder's
                row = None
            if row is None:
                row = rows[key] = {"uuid": labels.get("UUID", ""), "model": labels.get("modelName", ""),
                                   "mig_profile": labels.get("GPU_I_PROFILE", ""),
                                             "pod": pod, "namespace": namespace, "holder": holder}
            if metric == ENGINE_ACTIVE:
                value = _number(sample.value)
                row.setdefault(UTIL, None if value is None else value * 100)
            else:
                row[metric] = _number(sample.value)
    return [
        GPUStat(node=node, gpu=index, uuid=row["uuid"], model=row["model"], util=row.get(UTIL),
                fb_used_mib=row.get(FB_USED), fb_free_mib=row.get(FB_FREE), power_watts=row.get(POWER),
                pod=row["pod"], namespace=row["namespace"], holder=row["holder"], instance=instance,
                mig_profile=row["mig_profile"])
        for (node, index, instance), row in sorted(rows.items())
    ]


def join_volumes(used: list[Sample], capacity: list[Sample]) -> dict[tuple[str, str], VolumeUsage]:
    """``{(namespace, claim): VolumeUsage}`` from the kubelets' volume stats (labels ``namespace``, ``persistentvolumeclaim``).

    A claim reported by two kubelets (a move between nodes) keeps the larger reading.
    """
    def key(sample: Sample) -> tuple[str, str]:
        labels = sample.labels
        return (labels.get("exported_namespace") or labels.get("namespace") or "", labels.get("persistentvolumeclaim", ""))

    sizes: dict[tuple[str, str], float] = {}
    for sample in capacity:
        if key(sample)[1] and _number(sample.value) is not None:
            sizes[key(sample)] = max(sizes.get(key(sample), 0.0), sample.value)
    found: dict[tuple[str, str], VolumeUsage] = {}
    for sample in used:
        where = key(sample)
        if not where[1] or _number(sample.value) is None:
            continue
        before = found.get(where)
        if before is None or sample.value > before.used_bytes:
            found[where] = VolumeUsage(where[0], where[1], sample.value, sizes.get(where))
    return found


async def read_gpu_metrics(prometheus: PrometheusClient, pods: list[dict], vmis: list[dict]) -> list[GPUStat]:
    """The GPUs now (five instant queries: :data:`GPU_METRICS` and, for MIG slices, ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``),
    joined to ``pods`` and ``vmis`` (the watch caches' dicts).

    Raises :class:`~workspacespawner.core.prometheus.PrometheusError`.
    """
    samples = {metric: await prometheus.query(metric) for metric in (*GPU_METRICS, ENGINE_ACTIVE)}
    return join_gpus(samples, pods, vmis)


async def read_volume_usage(prometheus: PrometheusClient) -> dict[tuple[str, str], VolumeUsage]:
    """``{(namespace, claim): VolumeUsage}`` now (two instant queries). Raises PrometheusError."""
    return join_volumes(await prometheus.query(VOLUME_USED), await prometheus.query(VOLUME_CAPACITY))
