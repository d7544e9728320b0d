"""The home's and the storage tiers' setting values, resolved and checked: pure functions over them.

:func:`storage_settings` turns the values of the storage settings (see
:class:`~workspacespawner.storage.settings.StorageTraits`) into one start's
frozen :class:`~workspacespawner.storage.tiers.StorageSettings`; the
``check_*`` functions check one value each, with errors that name the
setting and the value. The traits (:mod:`.settings`) and the start-up check of
a whole config (:mod:`.startcheck`) build on this module; it imports neither.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping

from traitlets import TraitError

from workspacespawner.core.quantities import parse_quantity
from workspacespawner.storage import tiers
from workspacespawner.storage.tiers import Scratch, StorageSettings, TierConfigError

#: Today's home where kubespawner's own defaults differ (kubespawner: ``claim-{user_server}``, no class, no size).
HOME_DEFAULTS = {"pvc_name_template": "home-{username}", "storage_class": "ceph-rbd", "storage_capacity": "10Gi"}

#: Every access mode a PersistentVolumeClaim may ask for.
ACCESS_MODES = ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod")

#: The storage settings (trait names of :class:`~workspacespawner.storage.settings.StorageTraits`).
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

#: The claim of kubespawner's own per-user volume in its ``volumes`` setting (z2jh's ``singleuser.storage.type: dynamic``).
KUBESPAWNER_HOME_CLAIM = "{pvc_name}"
#: Where the home is mounted when nothing says otherwise.
DEFAULT_HOME_MOUNT_PATH = "/home/jovyan"


def _entries(setting) -> list:
    """The entries of kubespawner's ``volumes`` or ``volume_mounts`` setting, a dict (z2jh's) or a list."""
    entries = setting.values() if isinstance(setting, Mapping) else setting or ()
    return [entry for entry in entries if isinstance(entry, Mapping)]


def kubespawner_home_volumes(volumes) -> set[str]:
    """Names (templates, as configured) of the volumes in kubespawner's ``volumes`` that claim ``{pvc_name}``.

    That is kubespawner's own per-user PVC, which z2jh's ``singleuser.storage.type: dynamic`` mounts at
    ``homeMountPath``: for WorkspaceSpawner, the home.
    """
    return {entry.get("name") for entry in _entries(volumes)
            if (entry.get("persistentVolumeClaim") or {}).get("claimName") == KUBESPAWNER_HOME_CLAIM}


def home_mount_default(volumes, volume_mounts) -> str:
    """The home's mount path when ``home_mount_path`` is not set: the ``mountPath`` of kubespawner's home volume
    (:func:`kubespawner_home_volumes`) in ``volume_mounts`` (z2jh's ``singleuser.storage.homeMountPath``), else
    :data:`DEFAULT_HOME_MOUNT_PATH`."""
    homes = kubespawner_home_volumes(volumes)
    for mount in _entries(volume_mounts):
        if mount.get("name") in homes and mount.get("mountPath"):
            return mount["mountPath"]
    return DEFAULT_HOME_MOUNT_PATH


def check_capacity(value, setting: str = "c.KubeSpawner.storage_capacity"):
    """``value`` if it is a positive Kubernetes quantity (the home's size), else ``TraitError`` naming ``setting``."""
    amount = None
    if isinstance(value, str):
        try:
            amount = parse_quantity(value)
        except ValueError:
            amount = None
    if amount is None or amount <= 0:
        raise TraitError(f"{setting} = {value!r} is invalid: the home's size must be a positive Kubernetes quantity such as '10Gi'")
    return value


def check_access_modes(value, setting: str = "c.KubeSpawner.storage_access_modes"):
    """``value`` if it is a non-empty list of PersistentVolumeClaim access modes, else ``TraitError`` naming ``setting``."""
    if not value or not isinstance(value, list | tuple) or any(mode not in ACCESS_MODES for mode in value):
        raise TraitError(f"{setting} = {value!r} is invalid: the home's access modes must be a list of {', '.join(ACCESS_MODES)}")
    return value


def check_home_config(merged: Mapping, shown=lambda name: f"c.KubeSpawner.{name}") -> None:
    """Check the home's settings among a hub's ``merged`` spawner settings (aliases resolved); ``TraitError`` names the
    setting as ``shown(name)`` gives it (the config's own spelling) and the value."""
    values = {**HOME_DEFAULTS, **merged}
    check_capacity(values["storage_capacity"], shown("storage_capacity"))
    check_access_modes(values.get("storage_access_modes", ["ReadWriteOnce"]), shown("storage_access_modes"))
    path = values.get("home_mount_path") or home_mount_default(values.get("volumes"), values.get("volume_mounts"))
    if not isinstance(path, str) or not path.startswith("/"):
        raise TraitError(f"{shown('home_mount_path')} = {path!r} is invalid: the home's mount path must be absolute")


def setting_name(name: str) -> str:
    """How the setting reads in the hub's config: ``c.WorkspaceSpawner.<name>``."""
    return f"c.WorkspaceSpawner.{name}"


def storage_settings(values: Mapping, *, home_mount_path: str = DEFAULT_HOME_MOUNT_PATH) -> StorageSettings:
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
