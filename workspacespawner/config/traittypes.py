"""Trait types for settings that traitlets has no type for: Kubernetes quantities, deprecated aliases.

A trait type carries its own check, so a spawner instance and the hub's
start-up check (:func:`workspacespawner.spawner.check_hub_config`) validate a
setting the same way.
"""

from __future__ import annotations

import logging

from traitlets import TraitError, TraitType, Unicode

from workspacespawner.core.quantities import parse_quantity

log = logging.getLogger("workspacespawner")


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


#: Messages :func:`warn_once` has logged in this process.
said: set[str] = set()


def warn_once(logger, message: str, level: int = logging.WARNING) -> None:
    """Log ``message`` on ``logger`` the first time only in this process (a deprecation, say, seen by every spawner)."""
    if message not in said:
        said.add(message)
        logger.log(level, "%s", message)


class DeprecatedAlias(TraitType):
    """An old setting kept as an alias of its replacement: reading gives the replacement's value, setting sets it.

    ``new`` names the replacement trait on the same object, ``section`` the
    config section it is documented under (``"KubeSpawner"``), ``z2jh`` the
    zero-to-jupyterhub value that sets it, if any. ``to_new`` converts an
    old value to the new setting's unit and ``from_new`` back (minutes to
    seconds, say); both default to the value unchanged. Setting the alias
    (config, a profile's ``kubespawner_override``) logs once per process
    which setting to use instead.
    """

    def __init__(self, new: str, *, section: str, z2jh: str | None = None, to_new=None, from_new=None, **kwargs):
        self.new, self.section, self.z2jh = new, section, z2jh
        self.to_new = to_new or (lambda value: value)
        self.from_new = from_new or (lambda value: value)
        kwargs.setdefault("help", f"Deprecated: use ``c.{section}.{new}``" + (f" (z2jh: ``{z2jh}``)." if z2jh else "."))
        super().__init__(None, allow_none=True, config=True, **kwargs)

    def replacement(self) -> str:
        """What to use instead, as a sentence fragment: ``c.KubeSpawner.storage_class (z2jh: ...)``."""
        return f"c.{self.section}.{self.new}" + (f" (z2jh: {self.z2jh})" if self.z2jh else "")

    def deprecation(self, owner: str) -> str:
        """The warning for setting the alias on ``owner`` (a class name)."""
        return f"{owner}.{self.name} is deprecated; use {self.replacement()}"

    def convert(self, value):
        """``value`` in the new setting's unit; ``TraitError`` when it cannot be converted (not a number, say)."""
        try:
            return self.to_new(value)
        except (TypeError, ValueError):
            raise TraitError(f"The {self.name!r} setting cannot be {value!r}; use {self.replacement()}") from None

    def get(self, obj, cls=None):
        return self.from_new(getattr(obj, self.new))

    def set(self, obj, value):
        warn_once(getattr(obj, "log", None) or log, self.deprecation(type(obj).__name__))
        setattr(obj, self.new, self.convert(value))

    def instance_init(self, obj):
        """Nothing to initialise: the value lives in the replacement trait."""


def minutes(value):
    """Minutes (an old setting's unit) in seconds (the settings' unit); None stays None."""
    return None if value is None else value * 60


def in_minutes(seconds):
    """Seconds back in minutes, as an old minutes setting reads."""
    return None if seconds is None else seconds / 60


def days(value):
    """Days (an old setting's unit) in seconds (the settings' unit); None stays None."""
    return None if value is None else value * 86400


def in_days(seconds):
    """Seconds back in days, as an old days setting reads."""
    return None if seconds is None else seconds / 86400


def resolve_aliases(settings: dict, traits: dict) -> tuple[dict, dict[str, str]]:
    """``settings`` (``{trait name: value}``, later keys winning) with every deprecated alias replaced by its new
    setting, converted, and ``{new name: the name it was set under}``; for the start-up check, which sees config
    before any spawner exists."""
    resolved, written = {}, {}
    for name, value in settings.items():
        trait = traits.get(name)
        new, value = (trait.new, trait.convert(value)) if isinstance(trait, DeprecatedAlias) else (name, value)
        resolved.pop(new, None)
        resolved[new], written[new] = value, name
    return resolved, written
