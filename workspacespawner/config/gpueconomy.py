"""What an hour of each kind of GPU costs in card-hours: ``c.GPUEconomy.card_hour_weights``, checked when loaded.

A card-hour is the price of one whole reference GPU (weight 1.0) for one
hour. A weight prices one unit of a GPU resource
(:mod:`workspacespawner.core.gpuresources`), optionally per product (the
node's ``nvidia.com/gpu.product`` label), so an hour of an old V100 may
cost 0.5 card-hours, a ``1g.10gb`` MIG slice 1/7 and a time-sliced share
0.25. The ledger records on every run the weight it was charged at, so a
changed weight prices the runs that start after the change and never
rewrites a closed month (:mod:`workspacespawner.quota.ledger`).

The hub, the ``workspacespawner usage`` command and the dashboard read the
same settings from the same config file.
"""

from __future__ import annotations

import math

from traitlets import Dict, TraitError, Unicode, validate
from traitlets.config import Configurable

from workspacespawner.core.gpuresources import (
    GPUResource,
    looks_like_gpu,
    parse_gpu_resource,
    product_display_name,
    valid_device_name,
)

#: The key of a resource's product table that prices the products it does not list.
ANY_PRODUCT = "*"


def _check_weight(where: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise TraitError(f"{where} must be a number of card-hours per hour >= 0, such as 0.5, not {value!r}")
    return float(value)


def check_weights(value) -> dict:
    """``value`` checked as ``card_hour_weights``; raises ``traitlets.TraitError`` naming the entry and its bad value.

    Shape: ``{resource: weight}`` or ``{resource: {product: weight, "*": weight}}``,
    weights in card-hours per unit-hour (float >= 0). A resource must be a
    known GPU resource or have the shape of an extended resource name
    (``domain/name``: a VM's host or mediated device, declared by being
    listed here).
    """
    if not isinstance(value, dict):
        raise TraitError(f"GPUEconomy.card_hour_weights must be a dict of GPU resource names to weights, not {value!r}")
    checked: dict = {}
    for resource, weight in value.items():
        where = f"GPUEconomy.card_hour_weights[{resource!r}]"
        if not isinstance(resource, str) or not (parse_gpu_resource(resource) or valid_device_name(resource)):
            raise TraitError(
                f"GPUEconomy.card_hour_weights: {resource!r} is not a GPU resource name (such as nvidia.com/gpu, "
                "nvidia.com/mig-1g.10gb, nvidia.com/gpu.shared, or a VM device such as nvidia.com/GA100_A100_PCIE_80GB)"
            )
        if isinstance(weight, dict):
            products = {}
            for product, each in weight.items():
                if not isinstance(product, str) or not product:
                    raise TraitError(f"{where} keys must be GPU product names (the nvidia.com/gpu.product label) or '*', not {product!r}")
                products[product] = _check_weight(f"{where}[{product!r}]", each)
            checked[resource] = products
        else:
            checked[resource] = _check_weight(where, weight)
    return checked


class GPUEconomy(Configurable):
    """Card-hour weights per GPU resource and product (``c.GPUEconomy.*``)."""

    card_hour_weights = Dict(
        config=True,
        help="""Card-hours one unit of a GPU resource costs per hour, per resource and optionally per GPU product.

        ``{resource: weight}`` or ``{resource: {product: weight, "*": weight}}``,
        where ``resource`` is a GPU resource name a profile asks for in
        ``extra_resource_limits`` (or a VM's ``vm_gpu_device_name``),
        ``product`` the node's ``nvidia.com/gpu.product`` label and ``"*"``
        the products not listed; weights are card-hours per unit per hour
        (1.0: one reference GPU). Example::

            c.GPUEconomy.card_hour_weights = {
                "nvidia.com/gpu": {"NVIDIA-A100-SXM4-80GB": 1.0, "Tesla-V100-SXM2-16GB": 0.5,
                                   "Tesla-P4": 0.25, "Tesla-T4-SHARED": 0.25},
                "nvidia.com/mig-1g.10gb": 0.15,
                "nvidia.com/gpu.shared": 0.25,
                "nvidia.com/GA100_A100_PCIE_80GB": 1.0,
            }

        Unlisted: a MIG slice costs its share of the card's 7 compute
        slices (``1g`` 1/7, ``3g`` 3/7), any other unit 1.0. Listing a
        resource name that is not one of ``nvidia.com/gpu``,
        ``nvidia.com/gpu.shared`` or ``nvidia.com/mig-*`` declares it
        (KubeVirt's ``permittedHostDevices`` names for VMs); a profile
        asking for an undeclared name under a GPU vendor's domain is
        refused at start-up. A run is charged at the weight of the GPU it
        was placed on, fixed when it is placed; changing a weight prices
        later runs and never rewrites a closed month.
        """,
    )

    product_names = Dict(
        value_trait=Unicode(),
        key_trait=Unicode(),
        config=True,
        help="""What users read for each GPU product, by its ``nvidia.com/gpu.product`` label.

        The spawn page, its refusals and the dashboard name a GPU type by
        this; a product not listed reads as its label made readable
        (``NVIDIA-A100-SXM4-80GB``: ``NVIDIA A100 80GB``; ``Tesla-T4-SHARED``,
        a time-sliced replica: ``NVIDIA T4 (shared)``). Example::

            c.GPUEconomy.product_names = {"NVIDIA-H100-80GB-HBM3": "H100 (Hopper, 80 GB)"}

        Names only what people read: node selectors, weights and the ledger
        keep the label.
        """,
    )

    @validate("card_hour_weights")
    def _check_card_hour_weights(self, proposal):
        return check_weights(proposal.value)

    @validate("product_names")
    def _check_product_names(self, proposal):
        for label, shown in proposal.value.items():
            if not label or not shown.strip():
                raise TraitError(f"c.GPUEconomy.product_names: {label!r}: {shown!r}: a product label and a name to show, "
                                 "neither empty")
        return proposal.value

    def display_name(self, product: str) -> str:
        """What users read for GPU ``product`` (a ``nvidia.com/gpu.product`` label): :attr:`product_names`, else the
        label made readable (:func:`~workspacespawner.core.gpuresources.product_display_name`)."""
        return self.product_names.get(product) or product_display_name(product)

    def declared(self) -> tuple[str, ...]:
        """The site device names ``card_hour_weights`` declares (those not in the built-in catalogue)."""
        return tuple(name for name in self.card_hour_weights if parse_gpu_resource(name) is None)

    def resource(self, name: str) -> GPUResource | None:
        """The :class:`~workspacespawner.core.gpuresources.GPUResource` ``name`` is here, None if unknown."""
        return parse_gpu_resource(name, self.declared())

    def is_unknown_gpu(self, name: str) -> bool:
        """Whether ``name`` (a resource a profile asks for) is under a GPU vendor's domain but not a known GPU resource."""
        return looks_like_gpu(name) and self.resource(name) is None

    def weight(self, resource: str, product: str | None = None) -> float:
        """Card-hours one unit of ``resource`` of GPU type ``product`` costs per hour.

        The product's own entry, else the resource's ``"*"`` entry, else
        the resource's single number, else the resource's default (a MIG
        slice G/7, anything else 1.0). ``product`` None or ``""``: not yet
        known (see :meth:`highest_weight`).
        """
        entry = self.card_hour_weights.get(resource)
        if isinstance(entry, dict):
            if product and product in entry:
                return entry[product]
            if ANY_PRODUCT in entry:
                return entry[ANY_PRODUCT]
        elif entry is not None:
            return entry
        known = self.resource(resource)
        return known.default_weight if known else 1.0

    def highest_weight(self, resource: str) -> float:
        """The most an hour of one unit of ``resource`` may cost, whatever product it lands on.

        What a start that names no product is checked against and charged
        until its node is known: never less than it may turn out to cost.
        """
        entry = self.card_hour_weights.get(resource)
        prices = [self.weight(resource, None)]
        if isinstance(entry, dict):
            prices += list(entry.values())
        return max(prices)

    def products_by_cost(self, resource: str) -> list[tuple[str, float]]:
        """The products ``card_hour_weights`` prices for ``resource``, cheapest first: ``[(product, weight)]``."""
        entry = self.card_hour_weights.get(resource)
        if not isinstance(entry, dict):
            return []
        return sorted(((p, w) for p, w in entry.items() if p != ANY_PRODUCT), key=lambda item: (item[1], item[0]))
