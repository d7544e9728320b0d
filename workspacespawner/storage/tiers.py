"""Storage tiers of a workspace beside its home: team folders, scratch, the model cache, cache variables.

Pure functions returning plain dicts (core/v1 Pod ``volumes``, container
``volumeMounts`` and ``env``, a PersistentVolumeClaim), as :mod:`.home` does
for the home volume. The tiers:

``/shared/<team>``
    one CephFS ``ReadWriteMany`` claim per team (a JupyterHub group),
    mounted in the workspaces of that group's members only, read-only or
    read-write, optionally a ``subPath`` of a claim several teams share.
    Team claims carry :func:`names.team_labels` and never an owner label,
    so a stop, a user deletion, the retention purge and the per-user disk
    quota never select them (:func:`is_user_disk`).
``/scratch``
    node-local space wiped with the Pod: an ``emptyDir`` with a
    ``sizeLimit``, or a generic ephemeral volume of a local-NVMe
    StorageClass. The workspace says so in a file
    (:data:`SCRATCH_NOTICE_FILE`, written by :func:`scratch_notice_init_container`)
    and in ``WORKSPACE_SCRATCH_NOTICE``.
``/models``
    a read-only model cache: a ``hostPath`` on the node or a
    ``ReadOnlyMany`` claim.
cache variables
    ``PIP_CACHE_DIR``, ``CONDA_PKGS_DIRS``, ``HF_HUB_CACHE``,
    ``XDG_CACHE_HOME`` and friends pointed at scratch (or home), so the
    small-file storms of package managers never land on CephFS
    (:func:`cache_env`).

Settings are resolved once into frozen values (:class:`TeamFolder`,
:class:`ModelCache`, :class:`Scratch`); a bad setting raises
:class:`TierConfigError` whose message names the setting and the value.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from workspacespawner.core import names
from workspacespawner.core.quantities import parse_quantity

#: Where :func:`cache_env` may point the package managers' caches.
CACHE_LOCATIONS = ("scratch", "home", "none")
#: The file in scratch that says it is wiped with the workspace.
SCRATCH_NOTICE_FILE = "README-SCRATCH.txt"
#: Pod volume names of the tiers (team volumes are ``shared-<claim>``).
SCRATCH_VOLUME = "scratch"
MODELS_VOLUME = "models"
#: Keys of one ``team_folders`` entry, and of ``model_cache``.
TEAM_KEYS = ("claim", "sub_path", "read_only", "size", "storage_class", "create", "mount_path")
MODEL_CACHE_KEYS = ("host_path", "claim", "sub_path", "host_path_type")
HOST_PATH_TYPES = ("Directory", "DirectoryOrCreate")
#: The longest volume name the tiers use: KubeVirt passes a filesystem's name as its virtiofs tag (36 bytes at most).
VOLUME_NAME_MAX = 36

_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_PATH_SAFE = re.compile(r"[A-Za-z0-9._-]+")


class TierConfigError(ValueError):
    """A storage setting that must not be served; the message names the setting and the value."""


def _bad(setting: str, value, problem: str) -> TierConfigError:
    return TierConfigError(f"{setting} = {value!r} is invalid: {problem}")


# -- checks of single values -----------------------------------------------------------------


def check_quantity(setting: str, value, *, allow_none: bool = False) -> str | None:
    """``value`` if it is a positive Kubernetes quantity (``"10Gi"``) given as a string; None if allowed."""
    if value is None and allow_none:
        return None
    try:
        if not isinstance(value, str) or parse_quantity(value) <= 0:
            raise ValueError
    except ValueError:
        raise _bad(setting, value, "must be a positive Kubernetes quantity such as '10Gi'") from None
    return value


def check_mount_path(setting: str, value) -> str:
    """``value`` if it is an absolute path in the workspace, not ``/``, without ``..`` or ``:``."""
    if not isinstance(value, str) or not value.startswith("/") or value.rstrip("/") == "":
        raise _bad(setting, value, "must be an absolute path such as '/scratch' (not '/')")
    if ".." in value.split("/") or ":" in value or "\0" in value:
        raise _bad(setting, value, "must not hold '..', ':' or NUL")
    return posixpath.normpath(value)


def check_sub_path(setting: str, value) -> str:
    """``value`` normalised if it is a relative path inside a claim (``""``: the whole claim)."""
    if value in (None, ""):
        return ""
    if not isinstance(value, str) or value.startswith("/") or ".." in value.split("/") or "\0" in value:
        raise _bad(setting, value, "must be a relative path inside the claim, without '..'")
    normal = posixpath.normpath(value)
    return "" if normal == "." else normal


def check_claim_name(setting: str, value) -> str:
    """``value`` if it is a valid PersistentVolumeClaim name (a DNS-1123 subdomain)."""
    if not isinstance(value, str) or len(value) > 253 or not _SUBDOMAIN.fullmatch(value):
        raise _bad(setting, value, "must be a PersistentVolumeClaim name: lowercase letters, digits, '-' and '.'")
    return value


def check_storage_class(setting: str, value) -> str | None:
    """``value`` if it is a StorageClass name, or None (the cluster's default class)."""
    if value is None:
        return None
    return check_claim_name(setting, value)


def check_cache_location(setting: str, value) -> str:
    """``value`` if it is one of :data:`CACHE_LOCATIONS`."""
    if value not in CACHE_LOCATIONS:
        raise _bad(setting, value, f"must be one of {', '.join(CACHE_LOCATIONS)}")
    return value


def _check_template(setting: str, template, example: str) -> None:
    if not isinstance(template, str) or "{team}" not in template:
        raise _bad(setting, template, f"must hold '{{team}}' (e.g. {example!r}), or every team would share one")
    try:
        template.format(team="x")
    except (KeyError, IndexError, ValueError):
        raise _bad(setting, template, "may use no placeholder but '{team}'") from None


# -- team folders ----------------------------------------------------------------------------


def team_slug(group: str) -> str:
    """``{team}`` in claim names: the group name as a DNS label of at most 40 characters.

    A valid label stays as it is; any other name is mapped by
    :func:`names.dns_label`, which ends it in 8 hex digits of the name's
    sha256, so ``ML_Lab``, ``ml-lab`` and ``ML Lab`` get three claims.
    """
    return names.dns_label(group, 40)


def team_path_segment(group: str) -> str:
    """``{team}`` in mount paths: the group name if it is path-safe (``[A-Za-z0-9._-]``), else :func:`team_slug`."""
    if _PATH_SAFE.fullmatch(group) and group not in (".", ".."):
        return group
    return team_slug(group)


def team_volume_name(claim: str) -> str:
    """The Pod volume (and VM filesystem) name of a team claim: ``shared-<claim>``, at most 36 characters."""
    return names.dns_label(f"shared-{claim}", VOLUME_NAME_MAX)


@dataclass(frozen=True)
class TeamFolder:
    """One team's folder, resolved from ``team_folders``.

    ``group``: the JupyterHub group. ``claim``: the PersistentVolumeClaim
    (several teams may share one, each with its own ``sub_path``).
    ``sub_path``: the folder inside the claim (``""``: all of it).
    ``read_only``: mounted read-only. ``size``: a quantity, the size of a
    claim the spawner creates and what users are told. ``storage_class``:
    of a created claim (None: the cluster default). ``create``: the spawner
    creates a missing claim; otherwise the admin does, and a missing one is
    left out of the start with a message. ``mount_path``: where it appears.
    """

    group: str
    claim: str
    sub_path: str
    read_only: bool
    size: str
    storage_class: str | None
    create: bool
    mount_path: str

    @property
    def volume_name(self) -> str:
        return team_volume_name(self.claim)


def _team_folder(group, entry, *, setting: str, claim_template: str, mount_template: str, size: str, storage_class) -> TeamFolder:
    where = f"{setting}[{group!r}]"
    if not isinstance(group, str) or not group:
        raise _bad(setting, group, "team names (keys) must be JupyterHub group names")
    entry = {} if entry is None else entry
    if not isinstance(entry, Mapping):
        raise _bad(where, entry, f"must be a mapping with keys among {', '.join(TEAM_KEYS)}")
    for key in entry:
        if key not in TEAM_KEYS:
            raise _bad(f"{where}.{key}", entry[key], f"unknown key (allowed: {', '.join(TEAM_KEYS)})")
    for key in ("read_only", "create"):
        if key in entry and not isinstance(entry[key], bool):
            raise _bad(f"{where}.{key}", entry[key], "must be True or False")
    claim = entry.get("claim")
    if claim is None:
        claim = claim_template.format(team=team_slug(group))
        check_claim_name(f"{where} (claim from team_folder_claim_template)", claim)
    else:
        check_claim_name(f"{where}.claim", claim)
    mount_path = entry.get("mount_path") or mount_template.format(team=team_path_segment(group))
    return TeamFolder(
        group=group,
        claim=claim,
        sub_path=check_sub_path(f"{where}.sub_path", entry.get("sub_path")),
        read_only=entry.get("read_only", False),
        size=check_quantity(f"{where}.size", entry.get("size", size)),
        storage_class=check_storage_class(f"{where}.storage_class", entry.get("storage_class", storage_class)),
        create=entry.get("create", True),
        mount_path=check_mount_path(f"{where}.mount_path", mount_path),
    )


def _nested(a: str, b: str) -> bool:
    """Whether one of two normalised relative paths is the other or lies inside it (``""`` holds everything)."""
    if a == "" or b == "":
        return True
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def paths_overlap(a: str, b: str) -> bool:
    """Whether one of two normalised absolute paths is the other or lies inside it."""
    return _nested(a.strip("/"), b.strip("/"))


def resolve_team_folders(
    value,
    *,
    claim_template: str = "team-{team}",
    mount_template: str = "/shared/{team}",
    size: str = "100Gi",
    storage_class: str | None = "cephfs",
    setting: str = "c.WorkspaceSpawner.team_folders",
) -> dict[str, TeamFolder]:
    """``team_folders`` resolved: ``{group name: TeamFolder}``; raises :class:`TierConfigError`.

    ``value`` maps a JupyterHub group name to a mapping with the keys of
    :data:`TEAM_KEYS` (all optional; ``None`` or ``{}`` takes every
    default). ``claim_template`` and ``mount_template`` expand ``{team}``
    (:func:`team_slug` and :func:`team_path_segment`); ``size`` and
    ``storage_class`` are the defaults of a created claim. Refused: unknown
    keys, bad names, paths or sizes; two teams at the same or nested mount
    paths; two teams of one claim whose sub-paths are the same or nested
    (neither ``""``), so no two groups share a folder by accident; two
    teams creating one claim with different sizes or classes.
    """
    if not isinstance(value, Mapping):
        raise _bad(setting, value, "must be a mapping of JupyterHub group name to team folder settings")
    _check_template("c.WorkspaceSpawner.team_folder_claim_template", claim_template, "team-{team}")
    _check_template("c.WorkspaceSpawner.team_folder_mount_template", mount_template, "/shared/{team}")
    folders = {
        group: _team_folder(
            group, entry, setting=setting, claim_template=claim_template, mount_template=mount_template,
            size=size, storage_class=storage_class,
        )
        for group, entry in value.items()
    }
    ordered = sorted(folders.values(), key=lambda f: f.group)
    for i, a in enumerate(ordered):
        for b in ordered[i + 1:]:
            pair = f"{setting}: teams {a.group!r} and {b.group!r}"
            if paths_overlap(a.mount_path, b.mount_path):
                raise TierConfigError(f"{pair} would mount at {a.mount_path!r} and {b.mount_path!r}; give one a mount_path of its own")
            if a.claim != b.claim:
                if a.volume_name == b.volume_name:
                    raise TierConfigError(f"{pair}: claims {a.claim!r} and {b.claim!r} give one volume name; rename one claim")
                continue
            if _nested(a.sub_path, b.sub_path):
                raise TierConfigError(
                    f"{pair} share the claim {a.claim!r} with sub_path {a.sub_path!r} and {b.sub_path!r}: "
                    "teams of one claim need separate, non-nested sub_paths"
                )
            if a.create and b.create and (a.size, a.storage_class) != (b.size, b.storage_class):
                raise TierConfigError(f"{pair} both create the claim {a.claim!r} but with different size or storage_class")
    return folders


def teams_for_user(groups_of_user: Iterable[str], team_folders: Mapping[str, TeamFolder]) -> list[TeamFolder]:
    """The team folders of a user's groups, by group name; groups without one are ignored."""
    return [team_folders[g] for g in sorted(set(groups_of_user)) if g in team_folders]


def team_volumes(
    *,
    groups_of_user: Iterable[str],
    team_folders: Mapping[str, TeamFolder],
    unavailable: Iterable[str] = (),
) -> tuple[list[dict], list[dict]]:
    """``(volumes, volume_mounts)`` of a user's team folders, for the Pod spec and the notebook container.

    One volume per claim (``persistentVolumeClaim.readOnly`` when every
    team of the user mounting it is read-only), one mount per team with its
    ``subPath`` and ``readOnly``. Groups the user is not in get nothing, so
    a user who left a group loses the mount at the next start. Claims named
    in ``unavailable`` (missing, or refused by :func:`claim_refusal`) are
    left out.
    """
    skip = set(unavailable)
    teams = [t for t in teams_for_user(groups_of_user, team_folders) if t.claim not in skip]
    volumes: dict[str, dict] = {}
    mounts = []
    for team in teams:
        volume = volumes.setdefault(
            team.claim, {"name": team.volume_name, "persistentVolumeClaim": {"claimName": team.claim, "readOnly": True}}
        )
        if not team.read_only:
            volume["persistentVolumeClaim"]["readOnly"] = False
        mount = {"name": team.volume_name, "mountPath": team.mount_path, "readOnly": team.read_only}
        if team.sub_path:
            mount["subPath"] = team.sub_path
        mounts.append(mount)
    return list(volumes.values()), mounts


def make_team_claim(*, folder: TeamFolder, namespace: str, groups: Sequence[str] = ()) -> dict:
    """A team claim (core/v1 PersistentVolumeClaim): ``ReadWriteMany`` of ``folder.size`` on its storage class.

    Labelled :func:`names.team_labels` of ``folder.group`` (no owner label,
    no ownerReferences); the annotation :data:`names.TEAM_ANNOTATION` lists
    every group served (``groups``, default ``[folder.group]``) as JSON.
    """
    spec = {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": folder.size}}}
    if folder.storage_class is not None:
        spec["storageClassName"] = folder.storage_class
    served = sorted(set(groups) | {folder.group})
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": folder.claim,
            "namespace": namespace,
            "labels": names.team_labels(folder.group),
            "annotations": {names.TEAM_ANNOTATION: json.dumps(served, ensure_ascii=False)},
        },
        "spec": spec,
    }


def claim_refusal(claim: dict) -> str | None:
    """Why an existing claim must not be mounted as a team folder, or None if it may.

    A claim a user owns (our owner label) or labelled as a home or root
    disk is somebody's own disk: a team_folders entry naming it is a
    mistake, never a reason to share it. Claims an admin made by hand
    (no labels of ours) are fine.
    """
    labels = (claim.get("metadata") or {}).get("labels") or {}
    if names.OWNER_LABEL in labels or labels.get(names.DISK_LABEL) in (names.HOME_DISK, names.ROOT_DISK):
        return "it is a user's own disk, not a team folder"
    return None


# -- scratch and the model cache --------------------------------------------------------------


@dataclass(frozen=True)
class Scratch:
    """Node-local scratch: ``size`` a quantity (the ``emptyDir`` ``sizeLimit``, or the ephemeral claim's request);
    ``storage_class`` None for an ``emptyDir``, else a generic ephemeral volume of that class (local NVMe)."""

    size: str
    storage_class: str | None = None
    mount_path: str = "/scratch"

    @property
    def notice_path(self) -> str:
        return posixpath.join(self.mount_path, SCRATCH_NOTICE_FILE)


def scratch_volume(*, scratch: Scratch) -> tuple[dict, dict]:
    """``(volume, volume_mount)`` of scratch, named :data:`SCRATCH_VOLUME`.

    Without a storage class: ``emptyDir: {sizeLimit: size}`` (the kubelet
    evicts a Pod that writes more). With one: ``ephemeral.volumeClaimTemplate``
    (``ReadWriteOnce``, ``size``, labelled :func:`names.scratch_labels`);
    Kubernetes creates the claim with the Pod and deletes it with the Pod.
    """
    if scratch.storage_class is None:
        volume = {"name": SCRATCH_VOLUME, "emptyDir": {"sizeLimit": scratch.size}}
    else:
        volume = {
            "name": SCRATCH_VOLUME,
            "ephemeral": {
                "volumeClaimTemplate": {
                    "metadata": {"labels": names.scratch_labels()},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "storageClassName": scratch.storage_class,
                        "resources": {"requests": {"storage": scratch.size}},
                    },
                }
            },
        }
    return volume, {"name": SCRATCH_VOLUME, "mountPath": scratch.mount_path}


def scratch_notice(scratch: Scratch) -> str:
    """The plain words of :data:`SCRATCH_NOTICE_FILE` (and ``WORKSPACE_SCRATCH_NOTICE``)."""
    return (
        f"{scratch.mount_path} is scratch space on this node's local disk ({scratch.size} at most). "
        "Everything in it is deleted when your server stops, restarts or moves to another node. "
        "Keep files you need in your home directory or a team folder under /shared."
    )


def scratch_notice_init_container(*, scratch: Scratch, image: str, security_context: dict | None = None) -> dict:
    """An init container writing :func:`scratch_notice` to ``<scratch>/README-SCRATCH.txt`` before the server starts.

    It runs the workspace's own image (already pulled for the server) with
    ``sh``, which every Jupyter image has; the text and the target travel in
    environment variables, never pasted into the shell line.
    ``security_context``: the notebook container's, so the file has the
    user's owner.
    """
    container = {
        "name": "scratch-notice",
        "image": image,
        "command": ["sh", "-c", 'printf "%s\\n" "$NOTICE" > "$NOTICE_FILE"'],
        "env": [
            {"name": "NOTICE", "value": scratch_notice(scratch)},
            {"name": "NOTICE_FILE", "value": scratch.notice_path},
        ],
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}},
        "volumeMounts": [{"name": SCRATCH_VOLUME, "mountPath": scratch.mount_path}],
    }
    if security_context:
        container["securityContext"] = dict(security_context)
    return container


@dataclass(frozen=True)
class ModelCache:
    """The read-only model cache: a node's ``host_path`` (of ``host_path_type``) or a ``ReadOnlyMany`` ``claim``."""

    host_path: str | None = None
    claim: str | None = None
    sub_path: str = ""
    host_path_type: str = "DirectoryOrCreate"
    mount_path: str = "/models"


def resolve_model_cache(value, *, mount_path: str = "/models", setting: str = "c.WorkspaceSpawner.model_cache") -> ModelCache | None:
    """``model_cache`` resolved (None when empty); raises :class:`TierConfigError`.

    ``value``: ``{}`` (no cache), ``{"host_path": "/mnt/models"}`` or
    ``{"claim": "model-cache"}``, with an optional ``sub_path`` and, for a
    host path, ``host_path_type`` (``DirectoryOrCreate``, the default, so a
    node without the cache starts with an empty ``/models`` instead of
    hanging; or ``Directory``).
    """
    if not value:
        return None
    if not isinstance(value, Mapping):
        raise _bad(setting, value, "must be a mapping such as {'claim': 'model-cache'} or {'host_path': '/mnt/models'}")
    for key in value:
        if key not in MODEL_CACHE_KEYS:
            raise _bad(f"{setting}.{key}", value[key], f"unknown key (allowed: {', '.join(MODEL_CACHE_KEYS)})")
    if ("host_path" in value) == ("claim" in value):
        raise _bad(setting, value, "needs exactly one of 'host_path' and 'claim'")
    kind = value.get("host_path_type", "DirectoryOrCreate")
    if kind not in HOST_PATH_TYPES:
        raise _bad(f"{setting}.host_path_type", kind, f"must be one of {', '.join(HOST_PATH_TYPES)}")
    return ModelCache(
        host_path=check_mount_path(f"{setting}.host_path", value["host_path"]) if "host_path" in value else None,
        claim=check_claim_name(f"{setting}.claim", value["claim"]) if "claim" in value else None,
        sub_path=check_sub_path(f"{setting}.sub_path", value.get("sub_path")),
        host_path_type=kind,
        mount_path=mount_path,
    )


def model_cache_volume(*, cache: ModelCache) -> tuple[dict, dict]:
    """``(volume, volume_mount)`` of the model cache, named :data:`MODELS_VOLUME`, mounted read-only."""
    if cache.claim is not None:
        volume = {"name": MODELS_VOLUME, "persistentVolumeClaim": {"claimName": cache.claim, "readOnly": True}}
    else:
        volume = {"name": MODELS_VOLUME, "hostPath": {"path": cache.host_path, "type": cache.host_path_type}}
    mount = {"name": MODELS_VOLUME, "mountPath": cache.mount_path, "readOnly": True}
    if cache.sub_path:
        mount["subPath"] = cache.sub_path
    return volume, mount


# -- environment ----------------------------------------------------------------------------

#: Each cache variable and where under the cache base it points.
CACHE_VARIABLES = (
    ("XDG_CACHE_HOME", ".cache"),
    ("PIP_CACHE_DIR", ".cache/pip"),
    ("UV_CACHE_DIR", ".cache/uv"),
    ("CONDA_PKGS_DIRS", ".cache/conda/pkgs"),
    ("npm_config_cache", ".cache/npm"),
    ("HF_HUB_CACHE", ".cache/huggingface/hub"),
    ("HF_DATASETS_CACHE", ".cache/huggingface/datasets"),
    ("TORCH_HOME", ".cache/torch"),
)


def cache_env(*, base: str, home: str) -> dict[str, str]:
    """The cache variables of :data:`CACHE_VARIABLES` under ``base`` (scratch's or home's mount path).

    pip, uv, conda (and mamba), npm, Hugging Face and PyTorch read them, so
    their many small files go to ``base`` instead of a team folder.
    ``HF_HOME`` stays in ``home`` (``<home>/.cache/huggingface``, its
    default there): it holds the user's Hugging Face token, which must
    outlive scratch; only the hub and datasets caches move.
    """
    env = {key: posixpath.join(base, relative) for key, relative in CACHE_VARIABLES}
    env["HF_HOME"] = posixpath.join(home, ".cache/huggingface")
    return env


def cache_base(*, location: str, scratch: Scratch | None, home_mount_path: str) -> str | None:
    """Where caches go: scratch's mount path (home's when there is no scratch), home's, or None for ``none``."""
    if location == "none":
        return None
    if location == "scratch" and scratch is not None:
        return scratch.mount_path
    return home_mount_path


def workspace_env(*, settings: StorageSettings, teams: Sequence[TeamFolder]) -> dict[str, str]:
    """Environment variables that tell the user and their tools where each tier is.

    ``WORKSPACE_SCRATCH`` and ``WORKSPACE_SCRATCH_NOTICE`` (with scratch),
    ``WORKSPACE_MODELS`` (with a model cache), ``WORKSPACE_TEAM_FOLDERS``
    (JSON: a list of ``{"team", "path", "read_only", "size"}`` of ``teams``,
    the folders this start mounts), plus :func:`cache_env` at :func:`cache_base`.
    """
    env: dict[str, str] = {}
    scratch = settings.scratch
    if scratch is not None:
        env["WORKSPACE_SCRATCH"] = scratch.mount_path
        env["WORKSPACE_SCRATCH_NOTICE"] = scratch_notice(scratch)
    if settings.model_cache is not None:
        env["WORKSPACE_MODELS"] = settings.model_cache.mount_path
    if teams:
        listing = [{"team": t.group, "path": t.mount_path, "read_only": t.read_only, "size": t.size} for t in teams]
        env["WORKSPACE_TEAM_FOLDERS"] = json.dumps(listing, ensure_ascii=False)
    base = cache_base(location=settings.cache_location, scratch=scratch, home_mount_path=settings.home_mount_path)
    if base is not None:
        env.update(cache_env(base=base, home=settings.home_mount_path))
    return env


@dataclass(frozen=True)
class StorageSettings:
    """The storage tiers of one start, resolved: every team folder (``{group: TeamFolder}``), scratch and the
    model cache (None: none), where caches go (``scratch``, ``home`` or ``none``) and home's mount path."""

    team_folders: Mapping[str, TeamFolder]
    scratch: Scratch | None = None
    model_cache: ModelCache | None = None
    cache_location: str = "scratch"
    home_mount_path: str = "/home/jovyan"


@dataclass(frozen=True)
class PodTiers:
    """What the tiers add to a Pod: volumes, the notebook container's mounts, init containers (plain dicts)."""

    volumes: tuple[dict, ...] = ()
    volume_mounts: tuple[dict, ...] = ()
    init_containers: tuple[dict, ...] = ()


def pod_tiers(
    *,
    settings: StorageSettings,
    groups_of_user: Iterable[str],
    unavailable: Iterable[str] = (),
    image: str,
    security_context: dict | None = None,
) -> PodTiers:
    """Every tier of a container workspace: the user's team folders, scratch (with its notice), the model cache."""
    volumes, mounts = team_volumes(groups_of_user=groups_of_user, team_folders=settings.team_folders, unavailable=unavailable)
    init = []
    if settings.scratch is not None:
        volume, mount = scratch_volume(scratch=settings.scratch)
        volumes.append(volume)
        mounts.append(mount)
        init.append(scratch_notice_init_container(scratch=settings.scratch, image=image, security_context=security_context))
    if settings.model_cache is not None:
        volume, mount = model_cache_volume(cache=settings.model_cache)
        volumes.append(volume)
        mounts.append(mount)
    return PodTiers(volumes=tuple(volumes), volume_mounts=tuple(mounts), init_containers=tuple(init))


# -- disk quota interplay -----------------------------------------------------------------------


def disk_role(meta: Mapping) -> str | None:
    """The :data:`names.DISK_LABEL` role of an object we made (``home``, ``root``, ``team``, ``scratch``), else None."""
    labels = meta.get("labels") or {}
    if labels.get(names.MANAGED_BY_LABEL) != names.MANAGED_BY:
        return None
    return labels.get(names.DISK_LABEL)


def is_user_disk(meta: Mapping, user_name: str | None = None) -> bool:
    """Whether a claim's (or DataVolume's) metadata makes it a per-user disk that counts toward the disk quota.

    True only for a ``home`` or ``root`` disk carrying our owner label (of
    ``user_name`` exactly, when given: label and name annotation, see
    :func:`names.owned_by`). Team folders and scratch claims never count:
    they carry no owner label, so :func:`.disks.user_disk_bytes` (which
    sums what ``names.owned_by`` accepts) leaves them out too.
    """
    if disk_role(meta) not in (names.HOME_DISK, names.ROOT_DISK):
        return False
    if user_name is None:
        return names.OWNER_LABEL in (meta.get("labels") or {})
    return names.owned_by(dict(meta), user_name)


def volume_usage(summary: Mapping) -> dict[tuple[str, str], tuple[int | None, int | None]]:
    """``{(namespace, claim): (used bytes, capacity bytes)}`` from a kubelet's ``/stats/summary`` document.

    Where the storage reports it (CephFS reports a subvolume's quota and
    use), every Pod mounting a claim carries ``pods[].volume[]`` with
    ``pvcRef`` and ``usedBytes``/``capacityBytes``; read through the API
    server at ``/api/v1/nodes/<node>/proxy/stats/summary``.
    """
    usage: dict[tuple[str, str], tuple[int | None, int | None]] = {}
    for pod in summary.get("pods") or []:
        for volume in pod.get("volume") or []:
            ref = volume.get("pvcRef") or {}
            if ref.get("name"):
                usage[(ref.get("namespace", ""), ref["name"])] = (volume.get("usedBytes"), volume.get("capacityBytes"))
    return usage
