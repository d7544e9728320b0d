"""The storage tiers of a hub's config, resolved and checked: pure functions over setting values.

:func:`storage_settings` turns the values of the storage settings (see
:class:`~workspacespawner.storage.traits.StorageTraits`) into one start's
frozen :class:`~workspacespawner.storage.tiers.StorageSettings`;
:func:`check_storage_config` checks a whole ``jupyterhub_config.py`` at
start-up, every profile override included, with errors that name the
setting and the value.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping

from traitlets import TraitError

from workspacespawner.config.check import merged_settings
from workspacespawner.storage import tiers
from workspacespawner.storage.tiers import Scratch, StorageSettings, TierConfigError

#: The storage settings (trait names of :class:`~workspacespawner.storage.traits.StorageTraits`).
SETTINGS = (
    "team_folders",
    "team_folder_claim_template",
    "team_folder_mount_template",
    "team_folder_size",
    "team_folder_storage_class",
    "scratch_size",
    "scratch_storage_class",
    "scratch_mount_path",
    "model_cache",
    "model_cache_mount_path",
    "cache_environment",
)



def setting_name(name: str) -> str:
    """How the setting reads in the hub's config: ``c.WorkspaceSpawner.<name>``."""
    return f"c.WorkspaceSpawner.{name}"


def storage_settings(values: Mapping, *, home_mount_path: str = "/home/jovyan") -> StorageSettings:
    """Resolve and check the storage settings in ``values`` (``{trait name: value}``, all of :data:`SETTINGS`).

    Raises :class:`TierConfigError` naming the setting and the value; also
    when two tiers would mount at the same or nested paths, or at home or
    around it. A tier inside home is fine (``/home/jovyan/shared/{team}``
    shows team folders in JupyterLab's file browser, which starts at home).
    """
    folders = tiers.resolve_team_folders(
        values["team_folders"],
        claim_template=values["team_folder_claim_template"],
        mount_template=values["team_folder_mount_template"],
        size=tiers.check_quantity(setting_name("team_folder_size"), values["team_folder_size"]),
        storage_class=tiers.check_storage_class(setting_name("team_folder_storage_class"), values["team_folder_storage_class"]),
    )
    scratch = None
    size = tiers.check_quantity(setting_name("scratch_size"), values["scratch_size"], allow_none=True)
    if size is not None:
        scratch = Scratch(
            size=size,
            storage_class=tiers.check_storage_class(setting_name("scratch_storage_class"), values["scratch_storage_class"]),
            mount_path=tiers.check_mount_path(setting_name("scratch_mount_path"), values["scratch_mount_path"]),
        )
    cache = tiers.resolve_model_cache(
        values["model_cache"],
        mount_path=tiers.check_mount_path(setting_name("model_cache_mount_path"), values["model_cache_mount_path"]),
    )
    location = tiers.check_cache_location(setting_name("cache_environment"), values["cache_environment"])
    tier_paths = [("scratch_mount_path", scratch.mount_path)] if scratch else []
    tier_paths += [("model_cache_mount_path", cache.mount_path)] if cache else []
    tier_paths += [(f"team_folders[{f.group!r}]", f.mount_path) for f in folders.values()]
    home = posixpath.normpath(home_mount_path)
    for i, (setting, path) in enumerate(tier_paths):
        clash = [(other, p) for other, p in tier_paths[:i] if tiers.paths_overlap(path, p)]
        clash += [("home_mount_path", home)] if path == home or home.startswith(path.rstrip("/") + "/") else []
        if clash:
            other, other_path = clash[0]
            raise TierConfigError(
                f"{setting_name(setting)} mounts at {path!r}, which overlaps {setting_name(other)} = {other_path!r}; "
                "tiers need separate paths (a tier may sit inside home, not home inside a tier)"
            )
    return StorageSettings(
        team_folders=folders, scratch=scratch, model_cache=cache, cache_location=location, home_mount_path=home_mount_path
    )


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
    merged = merged_settings(config)
    from workspacespawner.storage.traits import StorageTraits

    traits = StorageTraits.class_traits()
    values = {name: merged.get(name, traits[name].default()) for name in SETTINGS}
    home = merged.get("home_mount_path", "/home/jovyan")
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
