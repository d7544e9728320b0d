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
import re
import unicodedata

from sqlalchemy.orm import object_session

from workspacespawner import upstream
from workspacespawner.config.profiles import (
    UNLISTED_MAX_CHARS,
    ResolvedProfile,
    gpu_limit,
    profile_allowed,
    profiles_for_user,
    unlisted_rule,
    validate_profile_list,
    with_unlisted_defaults,
)
from workspacespawner.config.teampools import TeamPool, check_profile_pools, pool_allows, pool_of_profile
from workspacespawner.core.errors import WorkspaceError
from workspacespawner.core.gpuresources import GPU_PRODUCT_LABEL

#: How kubespawner names the free-form value of option ``x`` in user_options: ``x--unlisted-choice``.
UNLISTED_SUFFIX = "--unlisted-choice"
#: What kubespawner's spawn form sends as the option itself when its free-form field is used.
UNLISTED_FORM_CHOICE = "unlisted-choice"

#: Refusals never quote what the request sent (a profile, a choice, a typed value): /hub/spawn?profile=... is a link
#: anyone can send, and its words would be shown in the spawn page's error box as ours.

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
    "team_pool",
)


def group_names(spawner) -> set[str]:
    """The names of the spawner's user's JupyterHub groups."""
    return {g.name for g in getattr(spawner.user, "groups", None) or []}


def is_admin(spawner) -> bool:
    return bool(getattr(spawner.user, "admin", False))


def team_pools(spawner) -> dict[str, TeamPool]:
    """The site's team GPU pools (``c.TeamGPUPools.pools``), by name: the hub's, read once at start-up
    (:attr:`HubServices.team_pools <workspacespawner.services.HubServices.team_pools>`)."""
    return spawner.services.team_pools


def visible_profiles(spawner, profiles: list[dict]) -> list[dict]:
    """The profiles of ``profiles`` the spawner's user may see and start: their groups' (``allowed_groups``) and their
    team pools' (:func:`~workspacespawner.config.teampools.pool_allows`), in order; admins see every one."""
    groups, admin, pools = group_names(spawner), is_admin(spawner), team_pools(spawner)
    return [p for p in profiles_for_user(profiles, groups, admin) if pool_allows(p, pools, groups, admin)]


async def maybe_await(value):
    if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
        return await value
    return value


async def profile_list(spawner) -> list[dict]:
    """The spawner's profile_list, a callable one called (and checked whole), as kubespawner initializes it."""
    profiles = upstream.sorted_profile_list(spawner)
    if callable(profiles):
        profiles = await maybe_await(profiles(spawner))
        validate_profile_list(profiles, spawner.trait_names(), spawner.services.economy.declared())
        check_profile_pools(profiles, team_pools(spawner))
    return with_unlisted_defaults(upstream.initialized_profiles(spawner, profiles))


def check_user_options(spawner, profiles: list[dict]) -> dict:
    """The chosen profile, or a 400/403 WorkspaceError for a missing, forbidden or tampered choice."""
    options = spawner.user_options or {}
    slug = options.get("profile")
    groups, admin = group_names(spawner), is_admin(spawner)
    if slug is not None and not isinstance(slug, str):
        raise WorkspaceError("The profile must be given by its name.", reason="invalid-options")
    visible = visible_profiles(spawner, profiles)
    if not slug:
        profile = next((p for p in visible if p.get("default")), visible[0] if visible else None)
        if profile is None:
            raise WorkspaceError(
                "No server profile is available to you. Please ask an administrator.", reason="forbidden", status_code=403
            )
        check_option_names(options, profile)
        return profile
    profile = next((p for p in profiles if p["slug"] == slug), None)
    if profile is None:
        raise WorkspaceError("There is no such profile; pick one of the page's.", reason="invalid-options")
    if not profile_allowed(profile, groups, admin):
        raise WorkspaceError(
            f"You may not start the profile {profile.get('display_name', slug)!r}: it is limited to other groups.",
            reason="forbidden",
            status_code=403,
        )
    if not pool_allows(profile, team_pools(spawner), groups, admin):
        raise WorkspaceError(
            f"You may not start the profile {profile.get('display_name', slug)!r}: it runs in the team GPU pool "
            f"{pool_of_profile(profile)!r}, which is for the members of other groups.",
            reason="forbidden",
            status_code=403,
        )
    check_option_names(options, profile)
    for option_name, option in (profile.get("profile_options") or {}).items():
        choice = options.get(option_name)
        if choice is not None and not isinstance(choice, str):
            raise WorkspaceError(
                f"A choice of {option.get('display_name', option_name)!r} must be given by its name.", reason="invalid-options"
            )
        typed = options.get(f"{option_name}{UNLISTED_SUFFIX}")
        if typed is not None and typed != "":
            check_unlisted_choice(option, option_name, typed)
        elif choice == UNLISTED_FORM_CHOICE and (option.get("unlisted_choice") or {}).get("enabled"):
            raise WorkspaceError(
                f"Type a value for {option.get('display_name', option_name)!r}, or pick one of its choices.",
                reason="invalid-options",
            )
        if choice is not None and choice not in (option.get("choices") or {}) and not (
            choice == UNLISTED_FORM_CHOICE and typed
        ):
            raise WorkspaceError(
                f"That is not a choice of {option.get('display_name', option_name)!r}.", reason="invalid-options"
            )
    try:
        upstream.validate_user_options(spawner, profiles)
    except ValueError as e:
        raise WorkspaceError(str(e), reason="invalid-options") from None
    return profile


def check_option_names(options: dict, profile: dict) -> None:
    """Refuse (400) options that ``profile`` does not define: kubespawner would ignore them, and JupyterHub would keep
    them in the server's ``user_options`` as if they applied (a REST API start, or a tampered spawn form).

    Known are ``profile``, and each of the profile's ``profile_options``
    with its free-form value (``<option>--unlisted-choice``). The refusal
    names the options the profile has (the site's names), never the request's.
    """
    defined = profile.get("profile_options") or {}
    known = {"profile", *defined, *(f"{name}{UNLISTED_SUFFIX}" for name in defined)}
    if set(options) - known:
        takes = f"the options {', '.join(sorted(defined))}" if defined else "no options"
        raise WorkspaceError(
            f"The start asked for an option that profile {profile.get('display_name', profile['slug'])!r} does not have; "
            f"it takes {takes}. Nothing was started.",
            reason="invalid-options",
        )


def check_unlisted_choice(option: dict, option_name: str, value) -> None:
    """Refuse (400) a value typed into an option's free-form field unless it is allowed, short, one line and matches whole.

    The regex is the admin's ``validation_regex``, or for a field that sets
    ``image`` an image reference (:func:`~workspacespawner.config.profiles.unlisted_rule`);
    it must match the whole value (kubespawner's own check is ``re.match``,
    whose ``$`` also matches before a trailing newline).
    """
    name = option.get("display_name", option_name)
    unlisted = option.get("unlisted_choice") or {}
    if not unlisted.get("enabled"):
        raise WorkspaceError(f"{name!r} takes only one of its listed choices, not a value of your own.", reason="invalid-options")
    if not isinstance(value, str):
        raise WorkspaceError(f"The value for {name!r} must be text.", reason="invalid-options")
    if len(value) > UNLISTED_MAX_CHARS:
        raise WorkspaceError(
            f"The value for {name!r} is {len(value)} characters long; at most {UNLISTED_MAX_CHARS} characters are allowed.",
            reason="invalid-options",
        )
    bad = next((ch for ch in value if unicodedata.category(ch)[0] == "C" or unicodedata.category(ch) in ("Zl", "Zp")), None)
    if bad is not None:
        raise WorkspaceError(
            f"The value for {name!r} contains a control character (U+{ord(bad):04X}); it must be one line of plain text.",
            reason="invalid-options",
        )
    regex, message = unlisted_rule(unlisted)
    if regex and not re.fullmatch(regex, value):
        raise WorkspaceError(f"The value typed for {name!r} is not allowed: {message.rstrip('. ')}.", reason="invalid-options")


def check_form_options(spawner, options: dict) -> None:
    """:func:`check_user_options` for options from the spawn form, before they are kept (static profile_list only)."""
    if spawner.profile_list and not callable(spawner.profile_list):
        saved, spawner.user_options = spawner.user_options, options
        try:
            profiles = upstream.initialized_profiles(spawner, upstream.sorted_profile_list(spawner))
            check_user_options(spawner, with_unlisted_defaults(profiles))
        finally:
            spawner.user_options = saved


async def refuse_bad_options(spawner, user_options: dict, *, sent: bool = True) -> None:
    """JupyterHub's ``apply_user_options`` hook (JupyterHub 5.3+): refuse a forbidden or tampered choice before start().

    Raises :class:`WorkspaceError` (400/403), which JupyterHub passes to the
    client. Saved options JupyterHub reuses for a start that names none
    (``sent`` False, see :func:`~workspacespawner.hubcompat.options_sent`)
    that no longer hold, say a profile the admin removed, are dropped
    instead: the start gets the default profile (kubespawner#758). The
    chosen profile itself is applied in ``load_user_options``, fresh on
    every start, from the profile list checked here (JupyterHub runs this
    hook just before ``run_pre_spawn_hook``): one list per start, so a
    callable profile_list is called once and the check and the start see
    the same profiles.
    """
    spawner.checked_profiles = None
    profiles = await profile_list(spawner)
    if not profiles:
        return
    try:
        check_user_options(spawner, profiles)
    except WorkspaceError as e:
        if sent:
            forget_saved_options(spawner)
            raise
        spawner.log.warning("Saved options of %s no longer hold (%s); starting the default profile", upstream.log_name(spawner), e)
        spawner.user_options = {}
        check_user_options(spawner, profiles)
    spawner.checked_profiles = profiles


def forget_saved_options(spawner) -> None:
    """Keep nothing of a refused request's options: JupyterHub saved them as the server's ``user_options`` (what its
    next start without options reuses, and the spawn form pre-selects) before any hook ran; they become empty, in the
    database and on the spawner (what the REST API shows of a stopped server)."""
    spawner.user_options = {}
    orm_spawner = getattr(spawner, "orm_spawner", None)
    session = object_session(orm_spawner) if orm_spawner is not None else None
    if session is not None:
        orm_spawner.user_options = {}
        session.commit()


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
    """The frozen profile of this start, from the spawner's traits as the profile left them.

    Its GPUs are the one GPU resource of ``extra_resource_limits``; a VM's
    are its ``vm_gpu_device_name`` devices. ``gpu_weight`` is what a unit
    costs on the profile's GPU product, or the most it may cost when the
    profile names none (:class:`~workspacespawner.config.gpueconomy.GPUEconomy`).
    """
    economy = spawner.services.economy  # the hub's one GPUEconomy, read from the same config at start-up
    resource, gpus = gpu_limit(spawner.extra_resource_limits, economy.declared())
    if gpus and spawner.workspace_kind == "vm":
        resource = spawner.vm_gpu_device_name
    product = (spawner.node_selector or {}).get(GPU_PRODUCT_LABEL)
    return ResolvedProfile(
        slug=profile.get("slug", ""),
        display_name=profile.get("display_name", ""),
        workspace_kind=spawner.workspace_kind,
        ide=spawner.ide,
        gpus=gpus,
        gpu_product=product,
        cpu=spawner.cpu_limit,
        memory=str(spawner.mem_limit) if spawner.mem_limit else None,
        image=spawner.image,
        default_url=spawner.default_url or "",
        gpu_resource=resource,
        gpu_weight=economy.weight(resource, product) if product else economy.highest_weight(resource),
    )


async def apply_chosen_profile(spawner, configured: dict) -> ResolvedProfile:
    """Check the user's choice, reset overridable settings, let kubespawner apply the profile, resolve it.

    The profiles are those :func:`refuse_bad_options` checked for this start
    (``spawner.checked_profiles``, used once: kubespawner's ``_load_profile``
    may hand parts of it to the spawner's settings), else the profile_list
    initialized afresh (JupyterHub before 5.3 has no such hook).
    """
    profiles = spawner.checked_profiles or await profile_list(spawner)
    spawner.checked_profiles = None
    if not profiles:
        reset_to_configured(spawner, [], configured)
        return resolve_profile(spawner, {"slug": "", "display_name": "Default"})
    profile = check_user_options(spawner, profiles)
    reset_to_configured(spawner, profiles, configured)
    options = dict(spawner.user_options or {})
    options["profile"] = profile["slug"]
    saved, spawner.user_options = spawner.user_options, options
    try:
        upstream.load_profile(spawner, profile["slug"], profiles)
    finally:
        spawner.user_options = saved
    if spawner.ide == "code-server" and "default_url" not in (profile.get("kubespawner_override") or {}):
        spawner.default_url = spawner.code_server_url
    return resolve_profile(spawner, profile)
