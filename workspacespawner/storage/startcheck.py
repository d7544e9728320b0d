"""The start-up check of a hub's storage settings: the home's and the tiers', every profile override included.

:func:`check_storage_config` reads a whole ``jupyterhub_config.py`` (its
``c``) as a spawner would, resolves deprecated aliases to the settings they
stand for, and raises ``TraitError`` naming the setting (as the config spells
it) and the value. The admin commands and the hub's start-up check call it.
"""

from __future__ import annotations

from traitlets import TraitError

from workspacespawner.config.check import merged_settings, section_of
from workspacespawner.config.traittypes import resolve_aliases
from workspacespawner.storage.settings import HomeTraits, StorageTraits
from workspacespawner.storage.tiers import StorageSettings, TierConfigError
from workspacespawner.storage.values import SETTINGS, check_home_config, home_mount_default, storage_settings


def _profile_overrides(profile_list):
    """``(where, override)`` for every ``kubespawner_override`` in a static profile_list."""
    if not isinstance(profile_list, list):
        return
    for index, profile in enumerate(profile_list):
        if not isinstance(profile, dict):
            continue
        slug = profile.get("slug") or f"#{index}"
        yield f"profile {slug!r}, field 'kubespawner_override'", profile.get("kubespawner_override") or {}
        for option_name, option in (profile.get("profile_options") or {}).items():
            for choice_name, choice in ((option or {}).get("choices") or {}).items():
                where = f"profile {slug!r}, field 'profile_options.{option_name}.choices.{choice_name}.kubespawner_override'"
                yield where, (choice or {}).get("kubespawner_override") or {}


def check_storage_config(config) -> StorageSettings:
    """Check the storage settings of a hub's config at start-up; raise ``TraitError`` naming the setting and value.

    ``config`` is the traitlets Config of ``jupyterhub_config.py`` (``c``);
    ``c.Spawner``, ``c.KubeSpawner`` and ``c.WorkspaceSpawner`` sections
    apply in that order, as a spawner reads them. Every ``kubespawner_override`` in ``profile_list`` that sets one of
    these settings is checked with it applied. Returns the resolved settings.
    """
    merged, written = resolve_aliases(merged_settings(config), HomeTraits.class_traits())
    check_home_config(merged, lambda name: f"{section_of(config, written.get(name, name))}.{written.get(name, name)}")
    traits = StorageTraits.class_traits()
    values = {name: merged.get(name, traits[name].default()) for name in SETTINGS}
    home = merged.get("home_mount_path") or home_mount_default(merged.get("volumes"), merged.get("volume_mounts"))
    try:
        settings = storage_settings(values, home_mount_path=home)
    except TierConfigError as e:
        raise TraitError(str(e)) from None
    for where, override in _profile_overrides(merged.get("profile_list")):
        changed = {key: override[key] for key in SETTINGS if key in override and not callable(override[key])}
        if not changed:
            continue
        try:
            storage_settings({**values, **changed}, home_mount_path=override.get("home_mount_path", home))
        except TierConfigError as e:
            raise TraitError(f"profile_list: {where}: {e}") from None
    return settings
