"""The start-up check of a hub's spawner settings, and reading trait classes from a hub's config.

:func:`check_spawner_config` runs every ``c.Spawner``, ``c.KubeSpawner``
and ``c.WorkspaceSpawner`` value through the trait it sets (the same
validation a spawner applies), and checks the whole profile_list, without a
spawner or a cluster. :func:`traits_from_config` gives one trait-only class
(e.g. :class:`~workspacespawner.lifecycle.settings.LifecycleTraits`) as the
hub's spawner would see it, for the admin commands.
"""

from __future__ import annotations

import logging

from traitlets import HasTraits, TraitError
from traitlets.config import Config, Configurable

from workspacespawner.config.gpueconomy import GPUEconomy
from workspacespawner.config.profiles import validate_profile_list
from workspacespawner.config.traittypes import DeprecatedAlias

log = logging.getLogger("workspacespawner")

#: The config sections a WorkspaceSpawner reads, later ones winning.
SECTIONS = ("Spawner", "KubeSpawner", "WorkspaceSpawner")


def merged_settings(config) -> dict:
    """The spawner's settings: ``c.Spawner``, then ``c.KubeSpawner``, then ``c.WorkspaceSpawner`` (later wins)."""
    merged: dict = {}
    for section in SECTIONS:
        if section in config:
            merged.update(config[section])
    return merged


def section_of(config, name: str) -> str:
    """The section (``c.WorkspaceSpawner`` ...) that set ``name`` last, as the hub's config spells it."""
    for section in reversed(SECTIONS):
        if section in config and name in config[section]:
            return f"c.{section}"
    return "c.WorkspaceSpawner"


#: What trait checks at start-up run against (no spawner exists yet); its class name reads right in their messages.
_PROBE = type("WorkspaceSpawner", (HasTraits,), {})()


def check_spawner_config(config, spawner_class: type[HasTraits]) -> None:
    """Check every setting of ``config`` that ``spawner_class`` has a trait for; raise ``TraitError`` naming it and the value."""
    traits = spawner_class.class_traits()
    for name, value in merged_settings(config).items():
        trait = traits.get(name)
        shown, written = f"{section_of(config, name)}.{name}", value
        if isinstance(trait, DeprecatedAlias):
            log.warning("%s", trait.deprecation(spawner_class.__name__))
            try:
                name, value, trait = trait.new, trait.convert(value), traits.get(trait.new)
            except TraitError as e:
                raise TraitError(f"{shown} = {written!r} is invalid: {e}") from None
        if trait is None:
            continue
        if name == "profile_list":
            try:
                validate_profile_list(value, spawner_class.class_trait_names(), GPUEconomy(config=config).declared())
            except ValueError as e:
                raise TraitError(str(e)) from None
            continue
        if value is None and trait.allow_none:
            continue
        try:
            trait.validate(_PROBE, value)
        except TraitError as e:
            raise TraitError(f"{shown} = {written!r} is invalid: {e}") from None


def traits_from_config(traits_class: type[HasTraits], config):
    """An instance of the trait-only ``traits_class`` with the values ``config`` gives the spawner (checked).

    Raises ``TraitError`` for a bad value, as the spawner would.
    """
    names = set(traits_class.class_trait_names(config=True))
    values = {k: v for k, v in merged_settings(config).items() if k in names}
    reader = type("WorkspaceSpawner", (Configurable, traits_class), {})
    return reader(config=Config({"WorkspaceSpawner": values}))
