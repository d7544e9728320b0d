"""The profile a user chose, checked and applied fresh on every start: WorkspaceSpawner's half of kubespawner's profile_list.

kubespawner applies a profile by writing its ``kubespawner_override`` onto
the spawner; a setting of yesterday's profile would leak into today's
spawn. So every start first resets each overridable trait to its configured
value (:func:`reset_to_configured`), then lets kubespawner apply the chosen
profile, then freezes the result into a
:class:`~workspacespawner.config.profiles.ResolvedProfile`.

Choices are checked before anything starts (:func:`check_user_options`):
a profile the user's groups do not allow is 403, one that does not exist
or a tampered option choice is 400, each a
:class:`~workspacespawner.core.errors.WorkspaceError` with a sentence.
"""

from __future__ import annotations

import asyncio
import copy

from workspacespawner.config.profiles import (
    GPU_RESOURCE,
    ResolvedProfile,
    profile_allowed,
    profiles_for_user,
    validate_profile_list,
)
from workspacespawner.core.errors import WorkspaceError

#: Traits every start resets to their configured values before a profile applies its overrides.
ALWAYS_RESET = (
    "workspace_kind",
    "ide",
    "default_url",
    "extra_resource_limits",
    "extra_resource_guarantees",
    "node_selector",
    "cpu_limit",
    "cpu_guarantee",
    "mem_limit",
    "mem_guarantee",
    "image",
    "environment",
)


def group_names(spawner) -> set[str]:
    """The names of the spawner's user's JupyterHub groups."""
    return {g.name for g in getattr(spawner.user, "groups", None) or []}


def is_admin(spawner) -> bool:
    return bool(getattr(spawner.user, "admin", False))


async def maybe_await(value):
    if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
        return await value
    return value


async def profile_list(spawner) -> list[dict]:
    """The spawner's profile_list, a callable one called (and checked whole), as kubespawner initializes it."""
    profiles = spawner._sorted_dict_values(spawner.profile_list)
    if callable(profiles):
        profiles = await maybe_await(profiles(spawner))
        validate_profile_list(profiles, spawner.trait_names())
    return spawner._get_initialized_profile_list(profiles)


def check_user_options(spawner, profiles: list[dict]) -> dict:
    """The chosen profile, or a 400/403 WorkspaceError for a missing, forbidden or tampered choice."""
    options = spawner.user_options or {}
    slug = options.get("profile")
    groups, admin = group_names(spawner), is_admin(spawner)
    if slug is not None and not isinstance(slug, str):
        raise WorkspaceError("The profile must be given by its name.", reason="invalid-options")
    visible = profiles_for_user(profiles, groups, admin)
    if not slug:
        profile = next((p for p in visible if p.get("default")), visible[0] if visible else None)
        if profile is None:
            raise WorkspaceError(
                "No server profile is available to you. Please ask an administrator.", reason="forbidden", status_code=403
            )
        return profile
    profile = next((p for p in profiles if p["slug"] == slug), None)
    if profile is None:
        raise WorkspaceError(f"There is no profile {slug!r}.", reason="invalid-options")
    if not profile_allowed(profile, groups, admin):
        raise WorkspaceError(
            f"You may not start the profile {profile.get('display_name', slug)!r}: it is limited to other groups.",
            reason="forbidden",
            status_code=403,
        )
    for option_name, option in (profile.get("profile_options") or {}).items():
        choice = options.get(option_name)
        if choice is not None and choice not in (option.get("choices") or {}):
            raise WorkspaceError(
                f"{choice!r} is not a choice of {option.get('display_name', option_name)!r}.", reason="invalid-options"
            )
    try:
        spawner._validate_user_options(profiles)
    except ValueError as e:
        raise WorkspaceError(str(e), reason="invalid-options") from None
    return profile


def check_form_options(spawner, options: dict) -> None:
    """:func:`check_user_options` for options from the spawn form, before they are kept (static profile_list only)."""
    if spawner.profile_list and not callable(spawner.profile_list):
        saved, spawner.user_options = spawner.user_options, options
        try:
            check_user_options(spawner, spawner._get_initialized_profile_list(spawner._sorted_dict_values(spawner.profile_list)))
        finally:
            spawner.user_options = saved


async def refuse_bad_options(spawner, user_options: dict) -> None:
    """JupyterHub's ``apply_user_options`` hook (JupyterHub 5.3+): refuse a forbidden or tampered choice before start().

    Raises :class:`WorkspaceError` (400/403), which JupyterHub passes to the
    client. The chosen profile itself is applied in ``load_user_options``,
    fresh on every start.
    """
    profiles = await profile_list(spawner)
    if profiles:
        check_user_options(spawner, profiles)


def reset_to_configured(spawner, profiles: list[dict], configured: dict) -> None:
    """Put every trait a profile may override back to its configured value (kept in ``configured`` the first time)."""
    keys = set(ALWAYS_RESET)
    for profile in profiles:
        keys.update((profile.get("kubespawner_override") or {}).keys())
        for option in (profile.get("profile_options") or {}).values():
            for choice in (option.get("choices") or {}).values():
                keys.update((choice.get("kubespawner_override") or {}).keys())
            keys.update(((option.get("unlisted_choice") or {}).get("kubespawner_override") or {}).keys())
    for key in keys:
        if key not in configured:
            configured[key] = copy.deepcopy(getattr(spawner, key))
        elif getattr(spawner, key) != configured[key]:
            setattr(spawner, key, copy.deepcopy(configured[key]))


def resolve_profile(spawner, profile: dict) -> ResolvedProfile:
    """The frozen profile of this start, from the spawner's traits as the profile left them."""
    gpus = int(str((spawner.extra_resource_limits or {}).get(GPU_RESOURCE, 0) or 0))
    return ResolvedProfile(
        slug=profile.get("slug", ""),
        display_name=profile.get("display_name", ""),
        workspace_kind=spawner.workspace_kind,
        ide=spawner.ide,
        gpus=gpus,
        gpu_product=(spawner.node_selector or {}).get("nvidia.com/gpu.product"),
        cpu=spawner.cpu_limit,
        memory=str(spawner.mem_limit) if spawner.mem_limit else None,
        image=spawner.image,
        default_url=spawner.default_url or "",
    )


async def apply_chosen_profile(spawner, configured: dict) -> ResolvedProfile:
    """Check the user's choice, reset overridable settings, let kubespawner apply the profile, resolve it."""
    profiles = await profile_list(spawner)
    if not profiles:
        reset_to_configured(spawner, [], configured)
        return resolve_profile(spawner, {"slug": "", "display_name": "Default"})
    profile = check_user_options(spawner, profiles)
    reset_to_configured(spawner, profiles, configured)
    options = dict(spawner.user_options or {})
    options["profile"] = profile["slug"]
    saved, spawner.user_options = spawner.user_options, options
    try:
        spawner._load_profile(profile["slug"], profiles)
    finally:
        spawner.user_options = saved
    if spawner.ide == "code-server" and "default_url" not in (profile.get("kubespawner_override") or {}):
        spawner.default_url = spawner.code_server_url
    return resolve_profile(spawner, profile)


async def render_form(spawner, quota) -> str:
    """The spawn form, listing only the profiles this user may start, with their card-hour lines."""
    profiles = await profile_list(spawner)
    visible = profiles_for_user(profiles, group_names(spawner), is_admin(spawner))
    visible = await quota.annotated_profiles(visible, user=spawner.user.name, groups=group_names(spawner))
    if not visible:
        return "<p>No server profile is available to you. Please ask an administrator.</p>"
    if not any(p.get("default") for p in visible):
        visible[0] = dict(visible[0], default=True)
    return spawner._render_options_form(visible)
