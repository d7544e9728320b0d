"""profile_list validation, group filtering, and the profile resolved for one start.

The schema is kubespawner's ``profile_list`` (display_name, slug,
description, default, kubespawner_override, profile_options with choices and
unlisted_choice) plus ``allowed_groups`` (JupyterHub group names that may use
the profile; absent or empty means everyone). Our own settings travel inside
``kubespawner_override`` as ordinary spawner traits, so z2jh's
``singleuser.profileList`` carries them unchanged:

``workspace_kind``
    ``container`` (a Pod) or ``vm`` (a KubeVirt VirtualMachine).
``ide``
    ``jupyterlab`` or ``code-server``.
``extra_resource_limits``
    ``{"nvidia.com/gpu": N}`` for N GPUs (kubespawner's own trait), or N
    units of another GPU resource: a MIG slice (``nvidia.com/mig-1g.10gb``),
    a time-sliced share (``nvidia.com/gpu.shared``); one GPU resource per
    profile (:mod:`workspacespawner.core.gpuresources`).
``node_selector``
    ``{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}`` to pick a GPU type.
``vm_gpu_device_name``
    for a VM, the KubeVirt host or mediated device its GPUs are (declared
    in ``c.GPUEconomy.card_hour_weights`` unless it is a built-in name).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from workspacespawner.core.gpuresources import WHOLE_GPU, looks_like_gpu, parse_gpu_resource

WORKSPACE_KINDS = ("container", "vm")
IDES = ("jupyterlab", "code-server")
#: The whole-GPU resource (:data:`workspacespawner.core.gpuresources.WHOLE_GPU`), the default GPU resource of a profile.
GPU_RESOURCE = WHOLE_GPU

PROFILE_KEYS = {
    "display_name",
    "slug",
    "description",
    "default",
    "kubespawner_override",
    "profile_options",
    "allowed_groups",
}
OPTION_KEYS = {"display_name", "choices", "unlisted_choice"}
CHOICE_KEYS = {"display_name", "default", "kubespawner_override"}
UNLISTED_KEYS = {
    "enabled",
    "display_name",
    "display_name_in_choices",
    "validation_regex",
    "validation_message",
    "kubespawner_override",
}
_SLUG = re.compile(r"^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$")

#: The longest value a user may type into an unlisted choice.
UNLISTED_MAX_CHARS = 1000

#: What an unlisted choice that sets ``image`` must be when the admin gave no
#: validation_regex: a container image reference, ``[registry[:port]/]path[:tag][@digest]``
#: (path components lowercase). Written so it is also a valid HTML ``pattern``.
IMAGE_REFERENCE_REGEX = (
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9\-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9\-]*[A-Za-z0-9])?)*(?::[0-9]+)?/)?"
    r"[a-z0-9]+(?:(?:[._]|__|\-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|\-+)[a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[\-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?"
)
IMAGE_REFERENCE_MESSAGE = "an image reference such as quay.io/jupyter/scipy-notebook:2025-10-20"


class ProfileConfigError(ValueError):
    """A profile_list that must not be served; the message names the profile slug and the field."""


def _fail(slug: str, field: str, problem: str):
    raise ProfileConfigError(f"profile_list: profile {slug!r}, field {field!r}: {problem}")


def _check_override(slug: str, field: str, override, trait_names: set[str], declared: tuple[str, ...] = ()) -> None:
    if not isinstance(override, dict):
        _fail(slug, field, f"must be a mapping of spawner settings, not {type(override).__name__}")
    for key, value in override.items():
        where = f"{field}.{key}"
        if key not in trait_names:
            _fail(slug, where, "is not a setting of WorkspaceSpawner (misspelled?)")
        if callable(value):
            continue
        if key == "workspace_kind" and value not in WORKSPACE_KINDS:
            _fail(slug, where, f"must be one of {', '.join(WORKSPACE_KINDS)}, not {value!r}")
        if key == "ide" and value not in IDES:
            _fail(slug, where, f"must be one of {', '.join(IDES)}, not {value!r}")
        if key == "extra_resource_limits" and isinstance(value, dict):
            _check_gpu_limits(slug, where, value, declared)
        if key == "vm_gpu_device_name" and isinstance(value, str) and parse_gpu_resource(value, declared) is None:
            _fail(slug, where, f"{value!r} is not a known GPU resource; declare a VM device by giving it a weight in "
                               "GPUEconomy.card_hour_weights")


def _check_gpu_limits(slug: str, where: str, limits: dict, declared: tuple[str, ...]) -> None:
    """GPU entries of an ``extra_resource_limits``: known names, whole counts, one GPU resource at most."""
    gpu_names = []
    for name, count in limits.items():
        if not looks_like_gpu(str(name)) and parse_gpu_resource(str(name), declared) is None:
            continue
        if parse_gpu_resource(str(name), declared) is None:
            _fail(slug, f"{where}.{name}", "is not a known GPU resource (nvidia.com/gpu, nvidia.com/gpu.shared, "
                                           "nvidia.com/mig-<G>g.<M>gb, or a device declared in GPUEconomy.card_hour_weights)")
        gpu_names.append(name)
        if parse_count(count) is None:
            _fail(slug, f"{where}.{name}", f"must be a whole number of GPUs >= 0, not {count!r}")
    if len(gpu_names) > 1:
        _fail(slug, where, f"asks for {len(gpu_names)} GPU resources ({', '.join(gpu_names)}); a profile asks for one")


def parse_count(value) -> int | None:
    """``value`` as a whole number >= 0 (``2``, ``"2"``), None when it is not one."""
    try:
        count = int(str(value))
    except ValueError:
        return None
    return count if count >= 0 and str(count) == str(value).strip() else None


def _check_keys(slug: str, field: str, mapping, allowed: set[str]) -> None:
    if not isinstance(mapping, dict):
        _fail(slug, field, "must be a mapping")
    for key in mapping:
        if key not in allowed:
            _fail(slug, f"{field}.{key}" if field else key, f"unknown key (allowed: {', '.join(sorted(allowed))})")


def validate_profile_list(profile_list, trait_names: Iterable[str], declared_gpus: Iterable[str] = ()) -> None:
    """Check a whole static profile_list; raise :class:`ProfileConfigError` on the first problem.

    ``trait_names`` are the settings a ``kubespawner_override`` may name
    (``WorkspaceSpawner.class_trait_names()``). Checks: known keys at every
    level, a unique slug per profile, ``workspace_kind`` and ``ide`` values,
    one known GPU resource per override with a whole count >= 0 (known:
    :func:`~workspacespawner.core.gpuresources.parse_gpu_resource`, with
    the site device names ``declared_gpus``), ``allowed_groups`` a list of strings,
    profile_options choices, and unlisted_choice settings (a compilable
    validation_regex, overrides of known settings). A callable profile_list is checked when it is called.
    """
    if callable(profile_list):
        return
    if not isinstance(profile_list, list):
        raise ProfileConfigError(f"profile_list must be a list of profiles, not {type(profile_list).__name__}")
    names = set(trait_names)
    declared = tuple(declared_gpus)
    seen: set[str] = set()
    for index, profile in enumerate(profile_list):
        if not isinstance(profile, dict):
            raise ProfileConfigError(f"profile_list[{index}] must be a mapping, not {type(profile).__name__}")
        slug = profile.get("slug") or f"#{index}"
        _check_keys(slug, "", profile, PROFILE_KEYS)
        if "display_name" not in profile:
            _fail(slug, "display_name", "is required")
        if "slug" in profile and not (isinstance(profile["slug"], str) and _SLUG.match(profile["slug"])):
            _fail(slug, "slug", "must be lowercase letters, digits, '-', '_' or '.'")
        if slug in seen:
            _fail(slug, "slug", "is used by another profile; slugs must be unique")
        seen.add(slug)
        groups = profile.get("allowed_groups", [])
        if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
            _fail(slug, "allowed_groups", "must be a list of JupyterHub group names")
        _check_override(slug, "kubespawner_override", profile.get("kubespawner_override", {}), names, declared)
        options = profile.get("profile_options", {})
        if not isinstance(options, dict):
            _fail(slug, "profile_options", "must be a mapping")
        for opt_name, option in options.items():
            field = f"profile_options.{opt_name}"
            _check_keys(slug, field, option, OPTION_KEYS)
            for choice_name, choice in (option.get("choices") or {}).items():
                cfield = f"{field}.choices.{choice_name}"
                _check_keys(slug, cfield, choice, CHOICE_KEYS)
                _check_override(slug, f"{cfield}.kubespawner_override", choice.get("kubespawner_override", {}), names,
                                declared)
            _check_unlisted(slug, f"{field}.unlisted_choice", option.get("unlisted_choice", {}), names, declared)


def _check_unlisted(slug: str, field: str, unlisted, trait_names: set[str], declared: tuple[str, ...]) -> None:
    _check_keys(slug, field, unlisted, UNLISTED_KEYS)
    if not isinstance(unlisted.get("enabled", False), bool):
        _fail(slug, f"{field}.enabled", "must be true or false")
    for key in ("display_name", "display_name_in_choices", "validation_message"):
        if not isinstance(unlisted.get(key, ""), str):
            _fail(slug, f"{field}.{key}", "must be text")
    regex = unlisted.get("validation_regex")
    if regex is not None and not isinstance(regex, str):
        _fail(slug, f"{field}.validation_regex", "must be a regular expression as text")
    if regex:
        try:
            re.compile(regex)
        except re.error as e:
            _fail(slug, f"{field}.validation_regex", f"does not compile: {e}")
    _check_override(slug, f"{field}.kubespawner_override", unlisted.get("kubespawner_override", {}), trait_names, declared)


def unlisted_rule(unlisted: dict) -> tuple[str | None, str]:
    """The regex a value typed into this unlisted choice must match whole, and what to tell a user whose value does not.

    The admin's ``validation_regex`` and ``validation_message`` when set; an
    image reference for a choice that sets ``image``; else no regex (None).
    """
    regex = unlisted.get("validation_regex") or None
    if regex is None and "image" in (unlisted.get("kubespawner_override") or {}):
        return IMAGE_REFERENCE_REGEX, unlisted.get("validation_message") or f"it must be {IMAGE_REFERENCE_MESSAGE}"
    return regex, unlisted.get("validation_message") or (f"it must match {regex}" if regex else "")


def with_unlisted_defaults(profiles: list[dict]) -> list[dict]:
    """``profiles`` (an initialized copy, changed in place) with the image-reference rule on unlisted image choices.

    So the spawn form's field (its HTML ``pattern``) and kubespawner's own
    check use the same rule as :func:`unlisted_rule`. An option offering only
    the free-form field gets an empty ``choices`` (kubespawner's form template
    reads ``choices`` of every option: without it the spawn page was a 500).
    """
    for profile in profiles:
        for option in (profile.get("profile_options") or {}).values():
            option.setdefault("choices", {})
            unlisted = option.get("unlisted_choice")
            if isinstance(unlisted, dict) and unlisted.get("enabled") and not unlisted.get("validation_regex"):
                regex, message = unlisted_rule(unlisted)
                if regex:
                    unlisted["validation_regex"] = regex
                    unlisted.setdefault("validation_message", message)
    return profiles


def profile_allowed(profile: dict, group_names: Iterable[str], is_admin: bool = False) -> bool:
    """True if a user in ``group_names`` may start ``profile`` (no allowed_groups: everyone).

    Admins see every profile, as JupyterHub admins may act for any user.
    """
    allowed = profile.get("allowed_groups") or []
    return not allowed or is_admin or bool(set(allowed) & set(group_names))


def gpu_limit(limits, declared=()) -> tuple[str, int]:
    """The GPU resource an ``extra_resource_limits`` asks for and how many units: ``("nvidia.com/gpu", 0)`` if none.

    The first GPU resource (:func:`~workspacespawner.core.gpuresources.parse_gpu_resource`
    with the site device names ``declared``) with a readable count.
    """
    for name, value in (limits or {}).items():
        if parse_gpu_resource(str(name), declared):
            count = parse_count(value or 0)
            if count:
                return str(name), count
    return GPU_RESOURCE, 0


def override_gpus(override, declared=()) -> int:
    """GPU units a ``kubespawner_override`` asks for (its ``extra_resource_limits``), 0 if none or unreadable."""
    return gpu_limit((override or {}).get("extra_resource_limits"), declared)[1]


def profiles_for_user(profile_list: list[dict], group_names: Iterable[str], is_admin: bool = False) -> list[dict]:
    """The profiles a user may start, in the configured order."""
    group_names = set(group_names)
    return [p for p in profile_list if profile_allowed(p, group_names, is_admin)]


@dataclass(frozen=True)
class ResolvedProfile:
    """What one start of a workspace runs, fixed before anything is created.

    ``gpus`` is the count of units of ``gpu_resource`` (0 for CPU):
    ``nvidia.com/gpu``, a MIG slice, a time-sliced share, or for a VM its
    host or mediated device (:mod:`workspacespawner.core.gpuresources`);
    ``gpu_weight`` the card-hours one unit costs per hour before the node
    is known (:meth:`~workspacespawner.config.gpueconomy.GPUEconomy.highest_weight`
    unless ``gpu_product`` names the type); ``cpu`` is in cores (None: no
    limit set); ``memory`` a Kubernetes quantity string (``"16Gi"``) or
    None; ``gpu_product`` the ``nvidia.com/gpu.product`` node label the
    profile selects, or None.
    """

    slug: str
    display_name: str
    workspace_kind: str
    ide: str
    gpus: int
    gpu_product: str | None
    cpu: float | None
    memory: str | None
    image: str
    default_url: str
    gpu_resource: str = GPU_RESOURCE
    gpu_weight: float = 1.0

    @property
    def card_hours_per_hour(self) -> float:
        """Card-hours an hour of this profile costs (``gpus`` × ``gpu_weight``)."""
        return self.gpus * self.gpu_weight

    def to_state(self) -> dict:
        """A JSON-safe dict for spawner state."""
        return dict(self.__dict__)

    @classmethod
    def from_state(cls, state: dict) -> ResolvedProfile:
        """The profile :meth:`to_state` saved (fields a newer version added take their defaults; unknown ones are dropped)."""
        known = set(cls.__dataclass_fields__)
        return cls(**{key: value for key, value in state.items() if key in known})
