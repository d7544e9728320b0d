"""The storage settings of WorkspaceSpawner as traits: the home PersistentVolumeClaim and the storage tiers.

The home's size, class, access modes, labels and name template are
kubespawner's own ``storage_*`` and ``pvc_name_template`` settings (what
zero-to-jupyterhub's ``singleuser.storage`` values set); the ``home_*``
names that once duplicated them are deprecated aliases.

Trait-only classes (``HasTraits``, not ``Configurable``): mixed into
``WorkspaceSpawner``, their settings are ``c.WorkspaceSpawner.*`` and
nothing else, and the start-up check sees every one of them.
"""

from __future__ import annotations

from traitlets import Dict, Float, HasTraits, TraitError, Unicode, default, validate

from workspacespawner.config.traittypes import DeprecatedAlias
from workspacespawner.storage import tiers
from workspacespawner.storage.tiers import StorageSettings, TierConfigError
from workspacespawner.storage.values import (
    DEFAULT_HOME_MOUNT_PATH,
    HOME_DEFAULTS,
    SETTINGS,
    check_access_modes,
    check_capacity,
    home_mount_default,
    setting_name,
    storage_settings,
)


class HomeTraits(HasTraits):
    """Settings of the user's home PersistentVolumeClaim: kubespawner's own storage settings, as z2jh sets them.

    The home is configured by kubespawner's traits, which zero-to-jupyterhub's
    ``singleuser.storage`` values set: ``storage_capacity``
    (``singleuser.storage.capacity``), ``storage_class``
    (``singleuser.storage.dynamic.storageClass``), ``storage_access_modes``
    (``...dynamic.storageAccessModes``), ``storage_extra_labels``
    (``singleuser.storage.extraLabels``) and ``pvc_name_template``
    (``...dynamic.pvcNameTemplate``), plus :attr:`home_mount_path`, whose
    default is z2jh's ``singleuser.storage.homeMountPath`` (the mount of
    kubespawner's ``{pvc_name}`` volume). Where kubespawner's defaults differ
    from today's home, :data:`~workspacespawner.storage.values.HOME_DEFAULTS` applies (set before the config
    is loaded, so any configured value wins). In the name template,
    ``{username}`` is kubespawner's safe slug of the user name, so odd names
    (capitals, ``@``, unicode, 60+ characters) still give a valid, stable,
    distinct name; ``home-{username}`` gives one home per user, shared by the
    default and named servers (mounted by one at a time: RBD is
    ReadWriteOnce), ``home-{user_server}`` one per server. The template names a new home
    only: homes are found by their owner labels
    (:func:`~workspacespawner.storage.home.find_home`). kubespawner never
    creates nor deletes it (``storage_pvc_ensure`` and ``delete_pvc`` stay off).
    The ``home_*`` names of these settings are deprecated aliases.
    """

    def __init__(self, *args, **kwargs):
        for name, value in HOME_DEFAULTS.items():
            setattr(self, name, value)
        super().__init__(*args, **kwargs)

    home_pvc_name_template = DeprecatedAlias("pvc_name_template", section="KubeSpawner",
                                             z2jh="singleuser.storage.dynamic.pvcNameTemplate")
    home_storage_class = DeprecatedAlias("storage_class", section="KubeSpawner", z2jh="singleuser.storage.dynamic.storageClass")
    home_size = DeprecatedAlias("storage_capacity", section="KubeSpawner", z2jh="singleuser.storage.capacity")
    home_access_modes = DeprecatedAlias("storage_access_modes", section="KubeSpawner",
                                        z2jh="singleuser.storage.dynamic.storageAccessModes")

    @validate("storage_capacity")
    def _check_storage_capacity(self, proposal):
        return check_capacity(proposal.value)

    @validate("storage_access_modes")
    def _check_storage_access_modes(self, proposal):
        return check_access_modes(proposal.value)

    claim_binding_timeout = Float(
        30.0,
        min=1,
        max=3600,
        config=True,
        help="""Seconds a start waits for each volume claim its workspace mounts to be Bound, before failing with the claim named.

        The failure names the claim, its StorageClass and the claim's last
        Event (say, a provisioner that never acts), instead of waiting out
        ``start_timeout``. A claim of a ``WaitForFirstConsumer`` class is
        timed from when the scheduler chose a node for the workspace (it
        binds only then); a claim that does not exist fails the start at
        once. The time runs from the last moment another start of this hub
        saw a claim of the same StorageClass become Bound, if that is later:
        when a whole class starts at once, a provisioner working through the
        queue of new homes is slow, not broken.
        """,
    )

    home_mount_path = Unicode(
        config=True,
        help="""Where the home PVC is mounted in the server's container (also its working directory), an absolute path.

        Default: the ``mountPath`` of kubespawner's own home volume (the one
        claiming ``{pvc_name}``) in ``volume_mounts``, which is how z2jh's
        ``singleuser.storage.homeMountPath`` arrives; else ``/home/jovyan``.
        That volume itself is left out of the Pod: this home replaces it.
        """,
    )

    @default("home_mount_path")
    def _home_mount_path_default(self):
        return home_mount_default(getattr(self, "volumes", None), getattr(self, "volume_mounts", None))


class StorageTraits(HasTraits):
    """The storage-tier settings of ``c.WorkspaceSpawner``: team folders, scratch, the model cache, cache variables.

    A trait-only class mixed into WorkspaceSpawner (no config section of its
    own). Each value is checked when set, a profile's override included;
    :meth:`storage_settings` resolves them into the frozen
    :class:`~workspacespawner.storage.tiers.StorageSettings` of one start.
    """

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

    def storage_settings(self) -> StorageSettings:
        """This start's tiers from the settings as the chosen profile left them (``home_mount_path``: the spawner's).

        Raises :class:`~workspacespawner.storage.tiers.TierConfigError` naming the setting.
        """
        values = {name: getattr(self, name) for name in SETTINGS}
        return storage_settings(values, home_mount_path=getattr(self, "home_mount_path", DEFAULT_HOME_MOUNT_PATH))


def _traited(check, name: str, value, **kwargs):
    """``check(setting, value)``, its :class:`TierConfigError` as the ``TraitError`` traitlets expects."""
    try:
        return check(setting_name(name), value, **kwargs)
    except TierConfigError as e:
        raise TraitError(str(e)) from None


