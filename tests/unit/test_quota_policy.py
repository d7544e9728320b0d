"""Quota decisions and card-hour arithmetic: pure functions, no database, no loop, no cluster.

Covers: the month in a configurable timezone and runs clipped to it (a run
across midnight of the 1st in Europe/Berlin counts in both months; a month
with a daylight-saving change counts its 743 or 745 hours), open
runs counted up to now, multi-GPU runs, named servers and VM workspaces
metered alike, when the card-hours ran out, group overrides (most generous
wins, per-user override wins over all), CPU starts never refused for
card-hours, the start minimum that makes racing starts unable to share the
last card-hours, instance-size and disk refusals with their numbers in the
message, the ledger-down rule, the enforcement verdicts and graces, the
spawn form's lines, the metrics' bounded labels, and the settings' checks.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from traitlets import TraitError
from traitlets.config import Config

from workspacespawner.quota import policy
from workspacespawner.quota.config import WorkspaceQuota
from workspacespawner.quota.metrics import top_users
from workspacespawner.quota.policy import (
    OPEN,
    RESERVED,
    Limits,
    Request,
    Run,
    card_hours,
    decide,
    effective_limits,
    enforcement,
    exhausted_at,
    month_bounds,
    usage_from_runs,
)

BERLIN = ZoneInfo("Europe/Berlin")
GIB = 2**30


def at(*args, tz=UTC) -> datetime:
    return datetime(*args, tzinfo=tz)


# -- months and card-hours -------------------------------------------------------


def test_month_bounds_in_a_timezone():
    # 23:30 UTC on 31 May is already 1 June in Berlin (UTC+2 in summer)
    start, end = month_bounds(at(2025, 5, 31, 23, 30), "Europe/Berlin")
    assert (start, end) == (at(2025, 6, 1, tz=BERLIN), at(2025, 7, 1, tz=BERLIN))
    assert start.astimezone(UTC) == at(2025, 5, 31, 22)
    assert month_bounds(at(2025, 12, 15), "UTC") == (at(2025, 12, 1), at(2026, 1, 1))


def test_named_month_and_bad_names():
    assert policy.named_month("2025-02", "UTC") == (at(2025, 2, 1), at(2025, 3, 1))
    with pytest.raises(ValueError, match="YYYY-MM"):
        policy.named_month("June", "UTC")
    with pytest.raises(ValueError, match="IANA"):
        month_bounds(at(2025, 1, 1), "Mars/Olympus")


def test_run_across_midnight_of_the_first_counts_in_both_months_in_berlin():
    # 2 GPUs from 23:00 on 31 May to 01:00 on 1 June, Berlin time
    run = Run(gpus=2, started=at(2025, 5, 31, 23, tz=BERLIN), stopped=at(2025, 6, 1, 1, tz=BERLIN))
    may = month_bounds(at(2025, 5, 20), "Europe/Berlin")
    june = month_bounds(at(2025, 6, 20), "Europe/Berlin")
    later = at(2025, 7, 1)
    assert card_hours([run], *may, later) == pytest.approx(2.0)
    assert card_hours([run], *june, later) == pytest.approx(2.0)
    # In UTC the same run lies wholly in May (21:00 to 23:00 UTC)
    assert card_hours([run], *month_bounds(at(2025, 5, 20), "UTC"), later) == pytest.approx(4.0)
    assert card_hours([run], *month_bounds(at(2025, 6, 20), "UTC"), later) == 0


def test_a_month_with_a_daylight_saving_change_has_its_real_hours():
    # 1 GPU through all of March and October 2025 in Berlin: 743 and 745 hours, not 31 x 24
    run = Run(gpus=1, started=at(2025, 2, 1), stopped=at(2025, 12, 1))
    later = at(2026, 1, 1)
    assert card_hours([run], *month_bounds(at(2025, 3, 20), "Europe/Berlin"), later) == 743
    assert card_hours([run], *month_bounds(at(2025, 10, 20), "Europe/Berlin"), later) == 745
    assert card_hours([run], *month_bounds(at(2025, 6, 20), "Europe/Berlin"), later) == 720


def test_open_runs_count_up_to_now_and_reservations_count_nothing():
    start, end = month_bounds(at(2025, 6, 10), "UTC")
    runs = [
        Run(gpus=1, started=at(2025, 6, 10, 8), state=OPEN),
        Run(gpus=8, started=at(2025, 6, 10, 9), state=RESERVED),
    ]
    assert card_hours(runs, start, end, at(2025, 6, 10, 9, 30)) == pytest.approx(1.5)


def test_multi_gpu_named_servers_and_vms_are_metered_alike():
    start, end = month_bounds(at(2025, 6, 10), "UTC")
    runs = [
        Run(gpus=2, started=at(2025, 6, 2, 10), stopped=at(2025, 6, 2, 11, 30)),  # 3 card-hours
        Run(gpus=1, started=at(2025, 6, 3, 10), stopped=at(2025, 6, 3, 12), server_name="thesis"),  # 2
        Run(gpus=1, started=at(2025, 6, 4, 10), stopped=at(2025, 6, 4, 12), workspace_kind="vm"),  # 2
        Run(gpus=0, started=at(2025, 6, 5, 10), stopped=at(2025, 6, 5, 20)),  # CPU: 0
    ]
    assert card_hours(runs, start, end, at(2025, 6, 10)) == pytest.approx(7.0)
    vm = [Run(gpus=4, started=at(2025, 6, 2), stopped=at(2025, 6, 2, 1), workspace_kind="vm")]
    container = [Run(gpus=4, started=at(2025, 6, 2), stopped=at(2025, 6, 2, 1))]
    assert card_hours(vm, start, end, at(2025, 6, 10)) == card_hours(container, start, end, at(2025, 6, 10)) == 4


def test_exhausted_at_follows_the_rate():
    start = at(2025, 6, 1)
    runs = [
        Run(gpus=1, started=at(2025, 6, 2, 10), stopped=at(2025, 6, 2, 12)),  # 2 card-hours
        Run(gpus=2, started=at(2025, 6, 3, 10), state=OPEN),  # 2 per hour from 10:00
    ]
    assert exhausted_at(runs, start, 5, at(2025, 6, 3, 12)) == at(2025, 6, 3, 11, 30)
    assert exhausted_at(runs, start, 50, at(2025, 6, 3, 12)) is None


# -- limits ---------------------------------------------------------------------------


def test_group_overrides_most_generous_and_user_override_wins():
    defaults = Limits(card_hours_per_month=50, max_concurrent=2, max_gpus=1, max_disk="50Gi")
    groups = {
        "students": {"card_hours_per_month": 20, "max_disk": "20Gi"},
        "research": {"card_hours_per_month": 500, "max_gpus": 8, "max_concurrent": 1},
        "lab": {"max_concurrent": 4, "max_disk": "200Gi", "max_cpu": None},
    }
    assert (
        effective_limits(defaults, groups, {}, "sam", {"students"}).card_hours_per_month == 20
    )  # a group may give less
    both = effective_limits(defaults, groups, {}, "ann", {"students", "research", "lab"})
    assert both == Limits(card_hours_per_month=500, max_concurrent=4, max_cpu=None, max_gpus=8, max_disk="200Gi")
    assert effective_limits(defaults, groups, {}, "bob", {"unrelated"}) == defaults
    special = effective_limits(defaults, groups, {"ann": {"card_hours_per_month": 5}}, "ann", {"research"})
    assert special.card_hours_per_month == 5 and special.max_gpus == 8


def test_no_limit_is_the_most_generous():
    defaults = Limits(max_gpus=1)
    groups = {"a": {"max_gpus": 4}, "b": {"max_gpus": None}}
    assert effective_limits(defaults, groups, {}, "u", {"a", "b"}).max_gpus is None


# -- the pre-spawn decision ----------------------------------------------------------


def usage(card_hours_used=0.0, active=(), now=at(2025, 6, 10)):
    start, end = month_bounds(now, "UTC")
    return policy.Usage(card_hours_used, start, end, tuple(active))


def test_cpu_is_never_refused_for_card_hours():
    spent = usage(card_hours_used=999)
    assert decide(Request(gpus=0), spent, Limits(card_hours_per_month=0), at(2025, 6, 10)).allowed


def test_card_hours_refusal_says_asked_used_left_reset_and_whom_to_ask():
    decision = decide(Request(gpus=2, profile="two"), usage(49.6), Limits(card_hours_per_month=50), at(2025, 6, 10))
    assert not decision.allowed and decision.reason == "card-hours"
    assert (decision.asked, decision.used, decision.allowed_max) == (2, 49.6, 50) and decision.left == pytest.approx(
        0.4
    )
    assert decision.reset == at(2025, 7, 1)
    text = decision.message("the GPU team")
    for words in (
        "2 card-hours per hour",
        "used 49.6 of your 50",
        "0.4 left",
        "2025-07-01 00:00 (UTC)",
        "ask the GPU team",
        "CPU",
    ):
        assert words in text


def test_gpu_start_needs_time_for_all_gpu_workspaces():
    now = at(2025, 6, 10)
    limits = Limits(card_hours_per_month=10, max_concurrent=5)
    first = decide(Request(gpus=1), usage(9.5), limits, now, min_start_hours=0.25)
    assert first.allowed
    one_running = usage(9.5, [Run(gpus=1, started=now, state=RESERVED)])
    assert decide(Request(gpus=1), one_running, limits, now, min_start_hours=0.25).allowed  # 0.5 >= 2 * 0.25
    two_running = usage(9.5, [Run(gpus=1, started=now, state=RESERVED)] * 2)
    assert decide(Request(gpus=1), two_running, limits, now, min_start_hours=0.25).reason == "card-hours"
    # without a start minimum, anything left will do; nothing left will not
    assert decide(Request(gpus=8), usage(9.99), limits, now, min_start_hours=0).allowed
    assert not decide(Request(gpus=1), usage(10), limits, now, min_start_hours=0).allowed


def test_concurrency_counts_starting_and_running_of_both_kinds():
    now = at(2025, 6, 10)
    active = [
        Run(gpus=0, started=now, state=OPEN, workspace_kind="vm"),
        Run(gpus=0, started=now, state=RESERVED, server_name="b"),
    ]
    decision = decide(Request(gpus=0, server_name="c"), usage(0, active), Limits(max_concurrent=2), now)
    assert decision.reason == "concurrency" and (decision.used, decision.allowed_max) == (2, 2)
    assert "2 workspaces starting or running" in decision.message()


@pytest.mark.parametrize(
    "request_, limits, limit, words",
    [
        (Request(gpus=8), Limits(max_gpus=1), "max_gpus", ["8 GPUs", "1 GPU"]),
        (Request(cpu=30), Limits(max_cpu=16), "max_cpu", ["30 CPU cores", "16 CPU cores"]),
        (Request(memory="240G"), Limits(max_memory="64Gi"), "max_memory", ["240G of memory", "64Gi"]),
    ],
)
def test_instance_size_refusals_name_the_numbers(request_, limits, limit, words):
    decision = decide(request_, usage(), limits, at(2025, 6, 10))
    assert (decision.reason, decision.limit) == ("instance-size", limit)
    for word in words:
        assert word in decision.message()


def test_disk_refused_only_for_new_disk_beyond_the_limit():
    now = at(2025, 6, 10)
    limits = Limits(max_disk="50Gi")
    refused = decide(Request(disk_new=20 * GIB, disk_existing=40 * GIB), usage(), limits, now)
    assert refused.reason == "disk" and (refused.asked, refused.used, refused.left) == (20 * GIB, 40 * GIB, 10 * GIB)
    assert "20 GiB of new disk" in refused.message() and "40 GiB of your 50 GiB" in refused.message()
    # restarting a workspace whose disks exist creates nothing: allowed even above the limit
    assert decide(Request(disk_new=0, disk_existing=80 * GIB), usage(), limits, now).allowed
    assert decide(Request(disk_new=10 * GIB, disk_existing=40 * GIB), usage(), limits, now).allowed


def test_ledger_down_gpu_fails_closed_cpu_as_configured():
    assert policy.ledger_down(Request(gpus=1), allow_cpu=True).reason == "ledger-down"
    assert policy.ledger_down(Request(gpus=0), allow_cpu=True).allowed
    assert policy.ledger_down(Request(gpus=0), allow_cpu=False).reason == "ledger-down"


# -- enforcement --------------------------------------------------------------------------


def test_enforcement_warns_then_grace_then_stop():
    period = month_bounds(at(2025, 6, 10), "UTC")
    runs = [Run(gpus=2, started=at(2025, 6, 10, 10), state=OPEN)]  # 2 card-hours per hour, limit 4: out at 12:00

    def verdict(hour, minute):
        return enforcement(
            runs, period, 4, at(2025, 6, 10, hour, minute), warn_before=1800, grace_period=900, grace_card_hours=0
        )

    assert verdict(11, 0).action == "none"
    warned = verdict(11, 40)
    assert warned.action == "warn" and warned.stop_at == at(2025, 6, 10, 12, 15)
    assert verdict(12, 10).action == "grace"
    assert verdict(12, 15).action == "stop"
    # a card-hour grace of 1 at 2 per hour lasts 30 minutes: the more generous grace wins
    longer = enforcement(
        runs, period, 4, at(2025, 6, 10, 12, 20), warn_before=1800, grace_period=900, grace_card_hours=1
    )
    assert longer.action == "grace" and longer.stop_at == at(2025, 6, 10, 12, 30)


def test_enforcement_ignores_users_without_gpu_servers():
    period = month_bounds(at(2025, 6, 10), "UTC")
    runs = [
        Run(gpus=0, started=at(2025, 6, 1), state=OPEN),
        Run(gpus=1, started=at(2025, 6, 2), stopped=at(2025, 6, 9)),
    ]
    assert (
        enforcement(runs, period, 1, at(2025, 6, 10), warn_before=1800, grace_period=0, grace_card_hours=0).action
        == "none"
    )


# -- spawn form, metrics, settings --------------------------------------------------------------


def test_metrics_label_top_users_and_other():
    used = {"ann": 10.0, "bob": 30.0, "cy": 5.0, "dee": 1.0}
    assert top_users(used, 2) == [("bob", 30.0), ("ann", 10.0), ("other", 6.0)]
    assert top_users(used, 10) == sorted(used.items(), key=lambda kv: -kv[1])
    assert top_users(used, 0) == [("other", 46.0)]


def test_settings_errors_name_the_setting_and_value():
    cases = [
        (
            {"group_limits": {"students": {"card_hours_per_month": "lots"}}},
            "group_limits['students']['card_hours_per_month']",
            "'lots'",
        ),
        ({"user_limits": {"ann": {"max_gpu": 2}}}, "user_limits['ann']['max_gpu']", "not a quota limit"),
        ({"timezone": "Mars/Olympus"}, "WorkspaceQuota.timezone", "'Mars/Olympus'"),
        ({"max_disk": "big"}, "WorkspaceQuota.max_disk", "'big'"),
        ({"card_hours_per_month": -1}, "card_hours_per_month", "-1"),
        ({"ledger_url": "not a url"}, "WorkspaceQuota.ledger_url", "'not a url'"),
    ]
    for settings, name, value in cases:
        config = Config()
        for key, setting in settings.items():
            setattr(config.WorkspaceQuota, key, setting)
        with pytest.raises(TraitError) as info:
            WorkspaceQuota(config=config)
        assert name in str(info.value) and value in str(info.value)


def test_settings_defaults_and_limits_for():
    quota = WorkspaceQuota()
    assert quota.default_limits() == Limits(50.0, 2, None, None, None, "50Gi")
    assert (quota.timezone, quota.ledger_url) == ("UTC", "sqlite:///workspacespawner-ledger.sqlite")
    config = Config()
    config.WorkspaceQuota.group_limits = {"research": {"card_hours_per_month": 500}}
    assert WorkspaceQuota(config=config).limits_for("ann", ["research"]).card_hours_per_month == 500


def test_usage_from_runs_splits_active_from_closed():
    now = at(2025, 6, 10, 12)
    runs = [
        Run(gpus=1, started=at(2025, 6, 10, 10), state=OPEN),
        Run(gpus=0, started=now - timedelta(minutes=1), state=RESERVED, server_name="b"),
        Run(gpus=3, started=at(2025, 6, 1), stopped=at(2025, 6, 1, 1)),
    ]
    use = usage_from_runs(runs, month_bounds(now, "UTC"), now)
    assert (use.card_hours, use.running, use.running_gpus) == (pytest.approx(5.0), 2, 1)
