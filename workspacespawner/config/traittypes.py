"""Trait types for settings that traitlets has no type for: Kubernetes quantities.

A trait type carries its own check, so a spawner instance and the hub's
start-up check (:func:`workspacespawner.spawner.check_hub_config`) validate a
setting the same way.
"""

from __future__ import annotations

from traitlets import TraitError, Unicode

from workspacespawner.core.quantities import parse_quantity


class Quantity(Unicode):
    """A Kubernetes quantity (``"10Gi"``, ``"500M"``), the form ``resources.requests`` takes.

    ``positive=True`` also refuses zero and negative quantities. The value
    stays the string as written.
    """

    def __init__(self, default_value="", *, positive: bool = False, **kwargs):
        self.positive = positive
        super().__init__(default_value, **kwargs)

    def validate(self, obj, value):
        value = super().validate(obj, value)
        if value is None:
            return value
        try:
            amount = parse_quantity(value)
        except ValueError:
            amount = None
        if amount is None or (self.positive and amount <= 0):
            what = "a positive Kubernetes quantity" if self.positive else "a Kubernetes quantity"
            raise TraitError(f"The {self.name!r} setting must be {what} such as '10Gi', not {value!r}")
        return value
