"""The GPU resource names a workspace may ask for, what kind of GPU each one is, and what one unit of it costs by default.

Kubernetes exposes GPUs as extended resources that NVIDIA's device plugin
(or the GPU operator) advertises on a Node's ``status.allocatable``:

``nvidia.com/gpu``
    a whole GPU, of the type the node's ``nvidia.com/gpu.product`` label
    names (GPU feature discovery). With time-slicing and
    ``renameByDefault: false`` the same name counts *replicas* of a shared
    card: the node is labelled ``nvidia.com/gpu.replicas`` (more than 1)
    and its product label gets the suffix ``-SHARED``.
``nvidia.com/gpu.shared``
    a time-sliced replica under its own name (``renameByDefault: true``).
``nvidia.com/mig-<G>g.<M>gb``
    a MIG slice, as the device plugin's ``mixed`` strategy names them
    (``nvidia.com/mig-1g.10gb``, ``nvidia.com/mig-3g.40gb``, ``...+me``):
    ``G`` of the card's 7 compute slices and ``M`` GB of its memory.

A KubeVirt VM gets GPUs as host devices (PCI passthrough) or mediated
devices (vGPU) under the resource name KubeVirt's ``permittedHostDevices``
gives them (``nvidia.com/GA100_A100_PCIE_80GB``, ``nvidia.com/GRID_A100-1-10C``):
those are site names, so a deployment declares them
(:attr:`~workspacespawner.config.gpueconomy.GPUEconomy.card_hour_weights`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: A whole GPU (or, on a time-sliced node, one replica of one).
WHOLE_GPU = "nvidia.com/gpu"
#: A time-sliced replica, as the GPU operator names it with ``renameByDefault: true``.
SHARED_GPU = "nvidia.com/gpu.shared"
#: The node label GPU feature discovery puts the GPU type in (``NVIDIA-A100-SXM4-80GB``, ``Tesla-T4-SHARED``).
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
#: The node label the GPU operator sets to the number of time-sliced replicas per card.
GPU_REPLICAS_LABEL = "nvidia.com/gpu.replicas"
#: The suffix GPU feature discovery adds to a time-sliced node's product label.
SHARED_PRODUCT_SUFFIX = "-SHARED"

#: Compute slices of a MIG-capable card (A100, H100, ...): a ``<G>g`` profile holds G of them.
MIG_COMPUTE_SLICES = 7

_MIG = re.compile(r"^nvidia\.com/mig-(?P<compute>[1-7])g\.(?P<memory>[0-9]+)gb(?P<extra>(\+[a-z0-9]+)*)$")
#: What a GPU resource name of a site (a VM host device) may look like: a vendor domain, a slash, a name.
_DEVICE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.+]*[A-Za-z0-9])?$")
#: The domains of GPU vendors: a resource name under one that is not a known GPU resource is refused as a likely typo.
GPU_DOMAINS = ("nvidia.com/", "amd.com/", "gpu.intel.com/")

WHOLE, SHARED, MIG, DEVICE = "whole", "shared", "mig", "device"


@dataclass(frozen=True)
class GPUResource:
    """One GPU resource name and what one unit of it is.

    ``kind``: ``whole`` (a GPU, or a replica on a time-sliced node),
    ``shared`` (``nvidia.com/gpu.shared``), ``mig`` (a MIG slice) or
    ``device`` (a declared host or mediated device, for VMs);
    ``compute_slices``: of 7, for a MIG slice (0 otherwise);
    ``memory_gb``: a MIG slice's memory (0 otherwise).
    """

    name: str
    kind: str
    compute_slices: int = 0
    memory_gb: int = 0

    @property
    def default_weight(self) -> float:
        """Card-hours one unit costs per hour unless the weights say otherwise: a MIG slice its share of the card
        (``G``/7), anything else 1.0 (a whole GPU's price, which a deployment lowers for shares and older cards)."""
        return self.compute_slices / MIG_COMPUTE_SLICES if self.kind == MIG else 1.0

    def describe(self, count: int = 1) -> str:
        """``count`` units in words: ``2 GPUs``, ``1 MIG slice 1g.10gb``, ``1 shared GPU``, ``1 nvidia.com/GRID_T4-4Q``."""
        many = count != 1
        if self.kind == WHOLE:
            return f"{count} GPU{'s' if many else ''}"
        if self.kind == SHARED:
            return f"{count} shared GPU{'s' if many else ''}"
        if self.kind == MIG:
            return f"{count} MIG slice{'s' if many else ''} {self.name.removeprefix('nvidia.com/mig-')}"
        return f"{count} × {self.name}"


def parse_gpu_resource(name: str, declared=()) -> GPUResource | None:
    """The :class:`GPUResource` ``name`` is, or None when it is not a GPU resource this deployment knows.

    Known: :data:`WHOLE_GPU`, :data:`SHARED_GPU`, every MIG name of the
    mixed strategy, and the names in ``declared`` (site device names, each
    ``domain/name``), which come out as kind ``device``.
    """
    if name == WHOLE_GPU:
        return GPUResource(name, WHOLE)
    if name == SHARED_GPU:
        return GPUResource(name, SHARED)
    mig = _MIG.match(name)
    if mig:
        return GPUResource(name, MIG, int(mig["compute"]), int(mig["memory"]))
    if name in declared and _DEVICE.match(name):
        return GPUResource(name, DEVICE)
    return None


def looks_like_gpu(name: str) -> bool:
    """Whether a resource name is under a GPU vendor's domain (so a typo of a GPU name is caught, not passed on)."""
    return any(name.startswith(domain) for domain in GPU_DOMAINS)


def valid_device_name(name: str) -> bool:
    """Whether ``name`` has the shape of an extended resource name (``domain/name``) a deployment may declare."""
    return bool(_DEVICE.match(name))


def gpu_resources_of(quantities: dict, declared=()) -> dict[str, str]:
    """The entries of a resource map (``limits``, ``allocatable``) that are GPU resources: ``{name: quantity}``."""
    return {name: value for name, value in (quantities or {}).items() if parse_gpu_resource(name, declared)}


#: Tokens of a GPU product label that name the card's form factor, left out of its display name.
FORM_FACTORS = frozenset({"SXM", "SXM2", "SXM3", "SXM4", "SXM5", "PCIE", "PCIe", "NVL"})


def product_display_name(product: str) -> str:
    """A GPU product label (gpu-feature-discovery's ``nvidia.com/gpu.product``) as people name the card.

    ``NVIDIA-A100-SXM4-80GB`` reads ``NVIDIA A100 80GB``, ``Tesla-V100-SXM2-16GB`` ``NVIDIA V100 16GB``,
    ``Tesla-T4-SHARED`` (a time-sliced replica) ``NVIDIA T4 (shared)``, ``NVIDIA-A100-SXM4-80GB-MIG-1g.10gb``
    ``NVIDIA A100 80GB MIG 1g.10gb``; a label of another vendor is only split at its dashes. ``""`` stays ``""``.
    """
    if not product:
        return ""
    shared = product.endswith(SHARED_PRODUCT_SUFFIX)
    tokens = [t for t in product.removesuffix(SHARED_PRODUCT_SUFFIX).split("-") if t]
    if tokens and tokens[0] in ("NVIDIA", "Tesla"):
        tokens = ["NVIDIA", *(t for t in tokens[1:] if t not in FORM_FACTORS)]
    name = " ".join(tokens)
    return f"{name} (shared)" if shared else name

