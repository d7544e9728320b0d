"""The storage-tier side of WorkspaceSpawner: its settings and the glue a start calls.

:class:`StorageTiersMixin` is mixed into WorkspaceSpawner (which supplies
``user``, ``namespace``, ``api``, ``home_mount_path``, ``_group_names()``,
``_step()`` and ``_runs_vm()``). Its settings are resolved into a frozen
:class:`StorageSettings` on every start (so a profile's ``scratch_size``
applies to that start only) and checked whole when the hub starts
(:func:`check_storage_config`), with errors that name the setting and the
value. The builders are in :mod:`.tiers` (Pods) and :mod:`.vmtiers` (VMs);
the claims are ensured by :mod:`.teamclaims`.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping

from kubernetes_asyncio.client import V1Container, V1Volume, V1VolumeMount
from kubespawner.utils import get_k8s_model
from traitlets import Dict, TraitError, Unicode, validate
from traitlets.config import LoggingConfigurable

from workspacespawner.backends.vm.tiers import VMTiers, vm_tiers
from workspacespawner.storage import tiers
from workspacespawner.storage.teamclaims import ensure_team_claims
from workspacespawner.storage.tiers import Scratch, StorageSettings, TierConfigError

#: The spawner settings of this mixin (trait names).
_SETTINGS = (
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


def _setting(name: str) -> str:
    return f"c.WorkspaceSpawner.{name}"


def storage_settings(values: Mapping, *, home_mount_path: str = "/home/jovyan") -> StorageSettings:
    """Resolve and check the storage settings in ``values`` (``{trait name: value}``, all of :data:`_SETTINGS`).

    Raises :class:`TierConfigError` naming the setting and the value; also
    when two tiers would mount at the same or nested paths, or at home or
    around it. A tier inside home is fine (``/home/jovyan/shared/{team}``
    shows team folders in JupyterLab's file browser, which starts at home).
    """
    folders = tiers.resolve_team_folders(
        values["team_folders"],
        claim_template=values["team_folder_claim_template"],
        mount_template=values["team_folder_mount_template"],
        size=tiers.check_quantity(_setting("team_folder_size"), values["team_folder_size"]),
        storage_class=tiers.check_storage_class(_setting("team_folder_storage_class"), values["team_folder_storage_class"]),
    )
    scratch = None
    size = tiers.check_quantity(_setting("scratch_size"), values["scratch_size"], allow_none=True)
    if size is not None:
        scratch = Scratch(
            size=size,
            storage_class=tiers.check_storage_class(_setting("scratch_storage_class"), values["scratch_storage_class"]),
            mount_path=tiers.check_mount_path(_setting("scratch_mount_path"), values["scratch_mount_path"]),
        )
    cache = tiers.resolve_model_cache(
        values["model_cache"],
        mount_path=tiers.check_mount_path(_setting("model_cache_mount_path"), values["model_cache_mount_path"]),
    )
    location = tiers.check_cache_location(_setting("cache_environment"), values["cache_environment"])
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
                f"{_setting(setting)} mounts at {path!r}, which overlaps {_setting(other)} = {other_path!r}; "
                "tiers need separate paths (a tier may sit inside home, not home inside a tier)"
            )
    return StorageSettings(
        team_folders=folders, scratch=scratch, model_cache=cache, cache_location=location, home_mount_path=home_mount_path
    )


class StorageTiersMixin(LoggingConfigurable):
    """Settings and glue for team folders, scratch, the model cache and cache variables; mixed into WorkspaceSpawner."""

    team_folders = Dict(
        config=True,
        help="""Team folders: JupyterHub group name -> settings of that team's shared folder.

        Each member of the group gets the folder at
        :attr:`team_folder_mount_template` (``/shared/<team>``) on every
        start; a user who leaves the group loses it at the next start. Keys,
        all optional: ``claim`` (PersistentVolumeClaim name; default from
        :attr:`team_folder_claim_template`), ``sub_path`` (a folder inside
        the claim, so teams can share one CephFS volume), ``read_only``
        (default False), ``size`` (a quantity, default
        :attr:`team_folder_size`: a created claim's size, shown to users),
        ``storage_class`` (default :attr:`team_folder_storage_class`),
        ``create`` (default True: the spawner creates a missing claim,
        ReadWriteMany; False: the admin does, and a missing one is left out
        with a message), ``mount_path``. Team claims are never deleted by a
        stop, a user deletion or the retention purge. Example::

            c.WorkspaceSpawner.team_folders = {
                "physics": {"size": "200Gi"},
                "ML Lab": {"claim": "labs", "sub_path": "ml"},
                "course-101": {"claim": "course-101-material", "read_only": True, "create": False},
            }
        """,
    )

    team_folder_claim_template = Unicode(
        "team-{team}",
        config=True,
        help="""Name of a team's claim when its entry names none; ``{team}`` is the group name as a DNS label.

        A group name that is not a valid label (capitals, spaces, ``_``) is
        lowercased and ends in 8 hex digits of its sha256, so two groups
        never share a claim by accident.
        """,
    )

    team_folder_mount_template = Unicode(
        "/shared/{team}",
        config=True,
        help="""Where a team folder appears in the workspace; ``{team}`` is the group name (or its DNS label if not path-safe).""",
    )

    team_folder_size = Unicode(
        "100Gi",
        config=True,
        help="""Size of a team claim the spawner creates, a Kubernetes quantity, when the entry sets no ``size``.""",
    )

    team_folder_storage_class = Unicode(
        "cephfs",
        allow_none=True,
        config=True,
        help="""StorageClass of the team claims the spawner creates (ReadWriteMany). ``None``: the cluster default.""",
    )

    scratch_size = Unicode(
        "20Gi",
        allow_none=True,
        config=True,
        help="""Size of ``/scratch``, node-local space wiped when the server stops, a Kubernetes quantity.

        The ``emptyDir`` ``sizeLimit`` (a Pod writing more is evicted) or the
        ephemeral claim's size; a VM gets an empty disk of this size.
        ``None``: no scratch. Usually set per profile in
        ``kubespawner_override`` (e.g. ``"200Gi"`` on GPU nodes with NVMe).
        """,
    )

    scratch_storage_class = Unicode(
        None,
        allow_none=True,
        config=True,
        help="""StorageClass of scratch as a generic ephemeral volume (e.g. a local-NVMe class). ``None``: an ``emptyDir``.""",
    )

    scratch_mount_path = Unicode(
        "/scratch",
        config=True,
        help="""Where scratch appears in the workspace; a ``README-SCRATCH.txt`` there says it is wiped with the server.""",
    )

    model_cache = Dict(
        config=True,
        help="""The read-only model cache: ``{"claim": name}`` (a ReadOnlyMany claim) or ``{"host_path": path}``.

        Optional keys: ``sub_path``; ``host_path_type`` (``DirectoryOrCreate``,
        the default, or ``Directory``). ``{}``: no model cache. VMs get a
        claim, not a host path. Example::

            c.WorkspaceSpawner.model_cache = {"claim": "model-cache"}
        """,
    )

    model_cache_mount_path = Unicode(
        "/models",
        config=True,
        help="""Where the model cache appears in the workspace (read-only).""",
    )

    cache_environment = Unicode(
        "scratch",
        config=True,
        help="""Where package-manager caches go: ``scratch``, ``home`` or ``none`` (variables left unset).

        Sets ``XDG_CACHE_HOME``, ``PIP_CACHE_DIR``, ``UV_CACHE_DIR``,
        ``CONDA_PKGS_DIRS``, ``npm_config_cache``, ``HF_HUB_CACHE``,
        ``HF_DATASETS_CACHE`` and ``TORCH_HOME`` (``HF_HOME``, which holds
        the Hugging Face token, stays in home), so their small-file storms
        never land on CephFS. ``scratch`` without scratch means home. A
        variable set in ``environment`` wins.
        """,
    )

    # -- checks of single settings (also run on a profile's override) --------------------------

    @validate("scratch_size", "team_folder_size")
    def _check_tier_quantity(self, proposal):
        name = proposal.trait.name
        return _traited(tiers.check_quantity, name, proposal.value, allow_none=name == "scratch_size")

    @validate("scratch_mount_path", "model_cache_mount_path")
    def _check_tier_mount_path(self, proposal):
        return _traited(tiers.check_mount_path, proposal.trait.name, proposal.value)

    @validate("scratch_storage_class", "team_folder_storage_class")
    def _check_tier_storage_class(self, proposal):
        return _traited(tiers.check_storage_class, proposal.trait.name, proposal.value)

    @validate("cache_environment")
    def _check_cache_environment(self, proposal):
        return _traited(tiers.check_cache_location, "cache_environment", proposal.value)

    @validate("model_cache")
    def _check_model_cache(self, proposal):
        try:
            tiers.resolve_model_cache(proposal.value)
        except TierConfigError as e:
            raise TraitError(str(e)) from None
        return proposal.value

    # -- glue for start ----------------------------------------------------------------------------

    def _storage_settings(self) -> StorageSettings:
        """This start's storage tiers, from the settings as the chosen profile left them."""
        return storage_settings({name: getattr(self, name) for name in _SETTINGS}, home_mount_path=self.home_mount_path)

    async def _ensure_storage_tiers(self) -> StorageSettings:
        """Resolve this start's tiers and ensure the user's team claims; progress steps say what each tier is.

        Call after the profile is loaded and before the Pod or VM is built.
        A team claim that cannot be used is left out of this start (with a
        step saying why); the start goes on.
        """
        settings = self._storage_settings()
        mine = tiers.teams_for_user(self._group_names(), settings.team_folders)
        statuses = await ensure_team_claims(
            self.api, namespace=self.namespace, folders=mine, all_folders=list(settings.team_folders.values())
        )
        self._tier_settings = settings
        self._tier_unavailable = frozenset(s.claim for s in statuses if not s.usable)
        for status in statuses:
            self._step(status.message)
        if settings.scratch is not None:
            self._step(tiers.scratch_notice(settings.scratch))
        return settings

    def _current_tiers(self) -> tuple[StorageSettings, frozenset[str]]:
        settings = getattr(self, "_tier_settings", None) or self._storage_settings()
        return settings, getattr(self, "_tier_unavailable", frozenset())

    def _add_storage_tiers_to_pod(self, pod):
        """Add team folders, scratch (and its notice) and the model cache to kubespawner's ``V1Pod``; return it.

        Our volumes replace any of the same name; the notebook container
        (the first) gets the mounts, and the notice's init container its
        securityContext.
        """
        settings, unavailable = self._current_tiers()
        notebook = pod.spec.containers[0]
        sanitize = self.api.api_client.sanitize_for_serialization
        additions = tiers.pod_tiers(
            settings=settings,
            groups_of_user=self._group_names(),
            unavailable=unavailable,
            image=notebook.image,
            security_context=sanitize(notebook.security_context) if notebook.security_context else None,
        )
        ours = {v["name"] for v in additions.volumes}
        pod.spec.volumes = [v for v in pod.spec.volumes or [] if _name(v) not in ours]
        pod.spec.volumes += [get_k8s_model(V1Volume, v) for v in additions.volumes]
        notebook.volume_mounts = [m for m in notebook.volume_mounts or [] if _name(m) not in ours]
        notebook.volume_mounts += [get_k8s_model(V1VolumeMount, m) for m in additions.volume_mounts]
        added = {c["name"] for c in additions.init_containers}
        init = [c for c in pod.spec.init_containers or [] if _name(c) not in added]
        pod.spec.init_containers = init + [get_k8s_model(V1Container, c) for c in additions.init_containers] or None
        return pod

    def _storage_env(self) -> dict[str, str]:
        """Environment variables of the tiers (cache locations, ``WORKSPACE_*``) for ``get_env()``."""
        settings, unavailable = self._current_tiers()
        mounted = [t for t in tiers.teams_for_user(self._group_names(), settings.team_folders) if t.claim not in unavailable]
        if self._runs_vm():
            mounted = [t for t in mounted if not t.sub_path]
        return tiers.workspace_env(settings=settings, teams=mounted)

    def _vm_storage_tiers(self) -> VMTiers:
        """The tiers of a VM workspace (after :meth:`_ensure_storage_tiers`); steps say what a VM cannot get."""
        settings, unavailable = self._current_tiers()
        result = vm_tiers(settings=settings, groups_of_user=self._group_names(), unavailable=unavailable)
        for message in result.left_out:
            self._step(message)
        return result


def _name(obj) -> str | None:
    return obj.get("name") if isinstance(obj, dict) else getattr(obj, "name", None)


def _traited(check, name: str, value, **kwargs):
    """``check(setting, value)``, its :class:`TierConfigError` as the ``TraitError`` traitlets expects."""
    try:
        return check(_setting(name), value, **kwargs)
    except TierConfigError as e:
        raise TraitError(str(e)) from None


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
    ``c.Spawner``, ``c.KubeSpawner``, ``c.StorageTiersMixin`` and
    ``c.WorkspaceSpawner`` sections apply in that order, as a spawner reads
    them. Every ``kubespawner_override`` in ``profile_list`` that sets one of
    these settings is checked with it applied. Returns the resolved settings.
    """
    merged: dict = {}
    for section in ("Spawner", "KubeSpawner", "StorageTiersMixin", "WorkspaceSpawner"):
        if section in config:
            merged.update(config[section])
    traits = StorageTiersMixin.class_traits()
    values = {name: merged.get(name, traits[name].default()) for name in _SETTINGS}
    home = merged.get("home_mount_path", "/home/jovyan")
    try:
        settings = storage_settings(values, home_mount_path=home)
    except TierConfigError as e:
        raise TraitError(str(e)) from None
    for where, override in _profile_overrides(merged.get("profile_list")):
        changed = {key: override[key] for key in _SETTINGS if key in override and not callable(override[key])}
        if not changed:
            continue
        try:
            storage_settings({**values, **changed}, home_mount_path=override.get("home_mount_path", home))
        except TierConfigError as e:
            raise TraitError(f"profile_list: {where}: {e}") from None
    return settings
