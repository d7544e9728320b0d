"""The spawn form's quota lines: each GPU profile's cost per hour and the user's card-hours used and left.

Pure: takes the profile list, the user's usage and limits, and returns an
annotated copy (the configured list is never changed). The lines are
appended to a profile's ``description`` (and to the ``display_name`` of a
``profile_options`` choice that sets GPUs), which kubespawner's form shows
as text.
"""

from __future__ import annotations

import copy
from datetime import datetime

from workspacespawner.config.profiles import GPU_RESOURCE
from workspacespawner.quota.policy import Limits, Usage, number, when


def override_gpus(override) -> int:
    """GPUs a ``kubespawner_override`` asks for (``extra_resource_limits["nvidia.com/gpu"]``), 0 if none."""
    limits = (override or {}).get("extra_resource_limits") or {}
    try:
        return int(str(limits.get(GPU_RESOURCE, 0) or 0))
    except ValueError:
        return 0


def cost_line(gpus: int) -> str:
    """``Costs 2 card-hours per hour (2 GPUs).``"""
    return f"Costs {number(gpus)} card-hour{'s' if gpus != 1 else ''} per hour ({number(gpus)} GPU{'s' if gpus != 1 else ''})."


def balance_line(usage: Usage, limits: Limits, now: datetime) -> str:
    """``You have used 12.5 of your 50 card-hours this month; 37.5 left. They reset in 3 days, on 2025-07-01 00:00 (UTC).``"""
    left = max(0.0, limits.card_hours_per_month - usage.card_hours)
    days = max(0, (usage.period_end - now).days)
    soon = "less than a day" if days == 0 else f"{days} day{'s' if days != 1 else ''}"
    return (
        f"You have used {number(usage.card_hours)} of your {number(limits.card_hours_per_month)} card-hours this month; "
        f"{number(left)} left. They reset in {soon}, on {when(usage.period_end)}."
    )


def annotate_profiles(profile_list: list[dict], usage: Usage, limits: Limits, now: datetime) -> list[dict]:
    """A copy of ``profile_list`` whose GPU profiles say what they cost and what the user has left.

    ``now``: the moment ``usage`` was computed for (the days until the
    reset count from it). CPU profiles are returned unchanged.
    """
    annotated = copy.deepcopy(profile_list)
    balance = balance_line(usage, limits, now)
    for profile in annotated:
        gpus = override_gpus(profile.get("kubespawner_override"))
        if gpus:
            text = profile.get("description") or ""
            profile["description"] = " ".join(part for part in (text, cost_line(gpus), balance) if part)
        for option in (profile.get("profile_options") or {}).values():
            for choice in (option.get("choices") or {}).values():
                choice_gpus = override_gpus(choice.get("kubespawner_override"))
                if choice_gpus:
                    choice["display_name"] = (
                        f"{choice.get('display_name', '')} ({number(choice_gpus)} card-hours per hour)"
                    )
    return annotated
