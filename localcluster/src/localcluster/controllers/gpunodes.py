"""The GPUs of a local-cluster node: what its device plugin advertises, what GPU feature discovery labels, which devices it has.

A node spec (:data:`.scheduler.DEFAULT_NODES`, ``LocalCluster(nodes=...)``)
describes its GPUs with these keys (all optional):

``gpus`` (int)
    cards the NVIDIA device plugin advertises whole, as ``nvidia.com/gpu``.
``gpu_product`` (str)
    the cards' type, GPU feature discovery's ``nvidia.com/gpu.product``
    label (default ``NVIDIA-A100-SXM4-80GB``).
``gpu_replicas`` (int, default 1)
    time-slicing: each of the ``gpus`` cards is advertised as this many
    replicas (allocatable ``nvidia.com/gpu`` = gpus x replicas), the node is
    labelled ``nvidia.com/gpu.replicas=<N>`` and
    ``nvidia.com/gpu.sharing-strategy=time-slicing``, and the product label
    gets the suffix ``-SHARED``, as the GPU operator does with
    ``renameByDefault: false``.
``gpu_shared_name`` (bool)
    with ``gpu_replicas``: ``renameByDefault: true``, the replicas are
    advertised as ``nvidia.com/gpu.shared`` and ``nvidia.com/gpu`` not at
    all; the product label keeps its name (the resource name tells shares
    apart).
``gpu_resources`` ({name: count})
    further device-plugin resources. MIG slices as the ``mixed`` strategy
    names them (``nvidia.com/mig-1g.10gb: 7``) come from ``mig_gpus`` cards
    in MIG mode (default: as many as their compute slices need, 7 per
    card) and get GPU feature discovery's labels: ``nvidia.com/mig.strategy=mixed``,
    ``nvidia.com/mig.capable=true`` and per profile
    ``nvidia.com/mig-<profile>.count``, ``.memory`` (MiB, nominal: the
    profile's GB x 1024), ``.multiprocessors`` (an A100's 14 per compute
    slice), ``.product`` (``<product>-MIG-<profile>``), ``.replicas`` (1),
    ``.slices.gi`` and ``.slices.ci`` (its compute slices). Any other name
    (a KubeVirt host device such as ``nvidia.com/GA100_A100_SXM4_80GB``) is
    advertised as it is.

``nvidia.com/gpu.count`` counts the physical cards (``gpus`` plus
``mig_gpus``) and ``nvidia.com/gpu.present`` is ``true`` on any node with
GPUs. A spec that cannot be (replicas below 1, more MIG compute slices than
its MIG cards hold, a negative count) raises ValueError naming the node and key.

:func:`node_devices` reads the devices back from a Node object (its
capacity and labels), so it works on Nodes the real control plane stores
too: one per whole card, one per time-sliced replica (on its card), one per
MIG slice (a GPU instance on its card, numbered from 1 per card in the
order the slices were laid out: larger profiles first). Host devices for
VMs are passed through to guests, out of the host's sight: not listed.

Test infrastructure: imports nothing of the product.
"""

from __future__ import annotations

import math
import re
import uuid
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

GENERIC_GPU = "nvidia.com/gpu"
SHARED_GPU = "nvidia.com/gpu.shared"
PRODUCT_LABEL = "nvidia.com/gpu.product"
COUNT_LABEL = "nvidia.com/gpu.count"
REPLICAS_LABEL = "nvidia.com/gpu.replicas"
SHARING_LABEL = "nvidia.com/gpu.sharing-strategy"
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
SHARED_SUFFIX = "-SHARED"
DEFAULT_PRODUCT = "NVIDIA-A100-SXM4-80GB"
#: Compute slices of a MIG-capable card.
MIG_SLICES = 7
#: Streaming multiprocessors per compute slice of an A100 (98 of its 108 are usable under MIG).
SMS_PER_SLICE = 14
_MIG = re.compile(r"^nvidia\.com/mig-(?P<profile>(?P<compute>[1-7])g\.(?P<memory>[0-9]+)gb(\+[a-z0-9]+)*)$")


def mig_profile(resource: str) -> tuple[str, int, int] | None:
    """``(profile, compute slices, memory GB)`` of a MIG resource name (``nvidia.com/mig-3g.40gb`` -> ``("3g.40gb", 3, 40)``), else None."""
    found = _MIG.match(resource)
    return (found["profile"], int(found["compute"]), int(found["memory"])) if found else None


def _count(spec: dict, key: str, value, default: int = 0) -> int:
    try:
        count = int(value if value is not None else default)
    except (TypeError, ValueError):
        raise ValueError(f"node {spec.get('name')!r}: {key} must be a whole number, not {value!r}") from None
    if count < 0:
        raise ValueError(f"node {spec.get('name')!r}: {key} must not be negative, not {count}")
    return count


def mig_cards_needed(resources: dict[str, int]) -> int:
    """Cards in MIG mode the MIG slices of ``resources`` (``{name: count}``) need at least: their compute slices / 7, rounded up."""
    slices = sum(mig_profile(name)[1] * count for name, count in resources.items() if mig_profile(name))
    return math.ceil(slices / MIG_SLICES)


def gpu_fields(spec: dict) -> tuple[dict[str, str], dict[str, str]]:
    """``(labels, capacity)`` the GPUs of node ``spec`` add (see the module docstring); empty for a node without GPUs.

    Raises ValueError for a spec that cannot be.
    """
    gpus = _count(spec, "gpus", spec.get("gpus"))
    replicas = _count(spec, "gpu_replicas", spec.get("gpu_replicas"), 1)
    if replicas < 1:
        raise ValueError(f"node {spec.get('name')!r}: gpu_replicas must be at least 1, not {replicas}")
    extra = {name: _count(spec, f"gpu_resources[{name!r}]", count) for name, count in (spec.get("gpu_resources") or {}).items()}
    extra = {name: count for name, count in extra.items() if count}
    mig = {name: count for name, count in extra.items() if mig_profile(name)}
    needed = mig_cards_needed(mig)
    mig_gpus = _count(spec, "mig_gpus", spec.get("mig_gpus"), needed)
    if mig_gpus < needed:
        raise ValueError(f"node {spec.get('name')!r}: its MIG slices need {needed} card(s) of {MIG_SLICES} compute slices, "
                         f"mig_gpus is {mig_gpus}")
    labels: dict[str, str] = {}
    capacity: dict[str, str] = {}
    if not (gpus or extra):
        return labels, capacity
    product = spec.get("gpu_product", DEFAULT_PRODUCT)
    labels["nvidia.com/gpu.present"] = "true"
    labels[COUNT_LABEL] = str(gpus + mig_gpus)
    labels[PRODUCT_LABEL] = product
    if gpus:
        name = SHARED_GPU if replicas > 1 and spec.get("gpu_shared_name") else GENERIC_GPU
        capacity[name] = str(gpus * replicas)
        if replicas > 1:
            labels[REPLICAS_LABEL] = str(replicas)
            labels[SHARING_LABEL] = "time-slicing"
            if name == GENERIC_GPU:
                labels[PRODUCT_LABEL] = product + SHARED_SUFFIX
    if mig:
        labels[MIG_STRATEGY_LABEL] = "mixed"
        labels["nvidia.com/mig.capable"] = "true"
        for name, count in sorted(mig.items()):
            profile, compute, memory = mig_profile(name)
            prefix = f"nvidia.com/mig-{profile}"
            labels.update({
                f"{prefix}.count": str(count),
                f"{prefix}.memory": str(memory * 1024),
                f"{prefix}.multiprocessors": str(compute * SMS_PER_SLICE),
                f"{prefix}.product": f"{product}-MIG-{profile}",
                f"{prefix}.replicas": "1",
                f"{prefix}.slices.gi": str(compute),
                f"{prefix}.slices.ci": str(compute),
            })
    capacity.update({name: str(count) for name, count in extra.items()})
    return labels, capacity


# -- the devices of a Node object ----------------------------------------------------------


@dataclass(frozen=True)
class Device:
    """One GPU device of a node, as the device plugin hands it out.

    ``resource``: the resource name it counts under; ``gpu``: the card's
    index (dcgm-exporter's ``gpu`` label); ``uuid``: the card's UUID
    (``GPU-...``); ``replica``: its replica number on a time-sliced card
    (None otherwise); ``instance``: a MIG slice's GPU instance id (None
    otherwise), ``profile`` its MIG profile (``1g.10gb``); ``fb_mib``: the
    framebuffer it has (the card's, or the slice's), MiB.
    """

    resource: str
    gpu: int
    uuid: str
    fb_mib: int
    replica: int | None = None
    instance: int | None = None
    profile: str = ""

    @property
    def device_id(self) -> str:
        """What the kubelet's pod-resources API names it: the card's UUID, ``<uuid>::<replica>`` for a replica, ``MIG-<uuid>`` for a MIG slice."""
        if self.instance is not None:
            return "MIG-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{self.uuid}.gi{self.instance}"))
        return self.uuid if self.replica is None else f"{self.uuid}::{self.replica}"


def card_uuid(node: str, index: int) -> str:
    """The UUID of card ``index`` of ``node`` (stable: derived from both)."""
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{node}.gpu{index}')}"


def framebuffer_mib(product: str) -> int:
    """The framebuffer of a GPU model, in MiB, from the ``<N>GB`` in its product name (16 GiB when none is named)."""
    found = re.search(r"(\d+)GB", product)
    return int(found.group(1)) * 1024 if found else 16 * 1024


def _int(value, default: int = 0) -> int:
    try:
        return int(Decimal(str(value)))
    except (InvalidOperation, ValueError, TypeError):
        return default


def node_devices(node: dict) -> list[Device]:
    """The GPU devices of Node ``node`` (see the module docstring), whole cards and replicas first, then MIG slices."""
    name = node["metadata"]["name"]
    labels = node["metadata"].get("labels") or {}
    capacity = (node.get("status") or {}).get("capacity") or {}
    product = labels.get(PRODUCT_LABEL, "").removesuffix(SHARED_SUFFIX)
    replicas = max(_int(labels.get(REPLICAS_LABEL), 1), 1)
    resource = SHARED_GPU if _int(capacity.get(SHARED_GPU)) else GENERIC_GPU
    units = _int(capacity.get(resource))
    cards = units // replicas if replicas > 1 else units
    devices = []
    for unit in range(units):
        card = unit // replicas if replicas > 1 else unit
        devices.append(Device(resource, card, card_uuid(name, card), framebuffer_mib(product),
                              replica=unit % replicas if replicas > 1 else None))
    slices = sorted(((mig_profile(r), r, _int(n)) for r, n in capacity.items() if mig_profile(r)), key=lambda s: (-s[0][1], s[1]))
    free: list[int] = []  # compute slices left on each MIG card, in card order
    instances: list[int] = []
    for (profile, compute, memory), resource_name, count in slices:
        for _ in range(count):
            slot = next((i for i, left in enumerate(free) if left >= compute), None)
            if slot is None:
                free.append(MIG_SLICES)
                instances.append(0)
                slot = len(free) - 1
            free[slot] -= compute
            instances[slot] += 1
            card = cards + slot
            fb = _int(labels.get(f"nvidia.com/mig-{profile}.memory"), memory * 1024)
            devices.append(Device(resource_name, card, card_uuid(name, card), fb, instance=instances[slot], profile=profile))
    return devices
