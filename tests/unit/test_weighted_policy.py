"""Weighted card-hours as pure functions: units × weight × hours, and the decisions that read them.

Covers: :func:`policy.card_hours` weighting each run by the weight it was
charged at, exact to the second across a month boundary (split by the
month's UTC bounds and by a time zone's); a weight change that prices the
runs placed after it and leaves a closed month's total as it was;
:func:`policy.gpu_hours` (raw unit-hours per resource and product, clipped
the same way); :func:`policy.exhausted_at` with fractional rates;
``Usage.card_hour_rate``; the pre-spawn check needing the weighted rate of
all GPU workspaces for ``min_start_hours`` and its refusal naming the cost;
``max_gpus`` counting units of any GPU resource; the enforcer's grace at
the weighted rate.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from workspacespawner.config.gpueconomy import GPUEconomy
from workspacespawner.quota import policy
from workspacespawner.quota.policy import CLOSED, OPEN, RESERVED, Limits, Request, Run

A100, V100, P4 = "NVIDIA-A100-SXM4-80GB", "Tesla-V100-SXM2-16GB", "Tesla-P4"
MIG = "nvidia.com/mig-1g.10gb"
GPU = "nvidia.com/gpu"


def at(*args) -> datetime:
    return datetime(*args, tzinfo=UTC)


def run(gpus, started, stopped=None, *, resource=GPU, product="", weight=1.0, state=None) -> Run:
    return Run(gpus=gpus, started=started, stopped=stopped, gpu_resource=resource, gpu_product=product, weight=weight,
               state=state or (CLOSED if stopped else OPEN))


def month(year: int, number: int, tz: str = "UTC"):
    return policy.month_bounds(at(year, number, 15), tz)


def test_card_hours_weigh_each_run_by_the_weight_it_was_charged_at():
    runs = [
        run(1, at(2026, 6, 1, 10), at(2026, 6, 1, 14), product=A100, weight=1.0),  # 4 h × 1 × 1.0 = 4
        run(2, at(2026, 6, 2, 10), at(2026, 6, 2, 13), product=V100, weight=0.5),  # 3 h × 2 × 0.5 = 3
        run(7, at(2026, 6, 3, 0), at(2026, 6, 3, 1), resource=MIG, product=A100, weight=1 / 7),  # 1 h × 7 × 1/7 = 1
        run(1, at(2026, 6, 4, 0), at(2026, 6, 4, 8), resource="nvidia.com/gpu.shared", weight=0.25),  # 8 × 0.25 = 2
        run(0, at(2026, 6, 5, 0), at(2026, 6, 5, 8), weight=1.0),  # CPU: nothing
    ]
    start, end = month(2026, 6)
    assert policy.card_hours(runs, start, end, at(2026, 7, 1)) == pytest.approx(10.0)
    assert policy.gpu_hours(runs, start, end, at(2026, 7, 1)) == pytest.approx(
        {(GPU, A100): 4.0, (GPU, V100): 6.0, (MIG, A100): 7.0, ("nvidia.com/gpu.shared", ""): 8.0}
    )


def test_a_weighted_run_across_the_first_splits_exactly_between_the_months():
    """A V100 run at 0.5 from 30 June 22:00:00 to 1 July 01:30:00 UTC: 2 h in June, 1.5 h in July, to the second."""
    across = run(2, at(2026, 6, 30, 22), at(2026, 7, 1, 1, 30), product=V100, weight=0.5)
    later = at(2026, 8, 1)
    june = policy.card_hours([across], *month(2026, 6), later)
    july = policy.card_hours([across], *month(2026, 7), later)
    assert (june, july) == (2.0, 1.5)  # exact: 2 units × 0.5 × 2 h, 2 units × 0.5 × 1.5 h
    assert june + july == policy.card_hours([across], at(2026, 1, 1), at(2027, 1, 1), later) == 3.5
    assert policy.gpu_hours([across], *month(2026, 6), later) == {(GPU, V100): 4.0}
    assert policy.gpu_hours([across], *month(2026, 7), later) == {(GPU, V100): 3.0}
    # Berlin's July begins at 22:00 UTC on 30 June: all of it is July there
    assert policy.card_hours([across], *month(2026, 6, "Europe/Berlin"), later) == 0.0
    assert policy.card_hours([across], *month(2026, 7, "Europe/Berlin"), later) == 3.5
    # open and seen mid-month: counted up to now only, at its weight
    still = run(1, at(2026, 6, 30, 23), product=P4, weight=0.25)
    assert policy.card_hours([still], *month(2026, 7), at(2026, 7, 1, 4)) == 1.0
    assert policy.card_hours([still], *month(2026, 6), at(2026, 7, 1, 4)) == 0.25


def test_a_changed_weight_prices_runs_placed_after_it_and_never_a_closed_month():
    """June's runs were placed at V100 = 0.5; the weights then change to 0.75 for runs placed afterwards."""
    before = GPUEconomy(card_hour_weights={GPU: {V100: 0.5, A100: 1.0}})
    after = GPUEconomy(card_hour_weights={GPU: {V100: 0.75, A100: 1.0}})
    june_run = run(1, at(2026, 6, 20, 8), at(2026, 6, 20, 12), product=V100, weight=before.weight(GPU, V100))
    across = run(1, at(2026, 6, 30, 20), product=V100, weight=before.weight(GPU, V100))  # placed before, still open
    closed_june = policy.card_hours([june_run, across], *month(2026, 6), at(2026, 7, 1))
    assert closed_june == 2.0 + 2.0
    # the change: a run placed after it gets the new weight; the open one keeps its own
    new_run = run(1, at(2026, 7, 2, 8), at(2026, 7, 2, 12), product=V100, weight=after.weight(GPU, V100))
    runs = [june_run, across, new_run]
    now = at(2026, 7, 3)
    assert policy.card_hours(runs, *month(2026, 6), now) == closed_june  # June identical after the change
    assert policy.card_hours(runs, *month(2026, 7), now) == 2 * 24 * 0.5 + 4 * 0.75  # across: 48 h at 0.5; new: 4 h
    assert policy.gpu_hours(runs, *month(2026, 7), now) == {(GPU, V100): 48.0 + 4.0}  # raw hours do not care


def test_exhausted_at_follows_fractional_rates():
    start = at(2026, 6, 1)
    runs = [run(1, at(2026, 6, 10, 10), product=V100, weight=0.5),  # 0.5 per hour from 10:00
            run(7, at(2026, 6, 10, 12), resource=MIG, weight=1 / 7)]  # + 1 per hour from 12:00
    # 10-12: 1 card-hour; from 12: 1.5 per hour; 2.5 card-hours reached at 13:00
    assert policy.exhausted_at(runs, start, 2.5, at(2026, 6, 10, 20)) == at(2026, 6, 10, 13)
    assert policy.exhausted_at(runs, start, 2.5, at(2026, 6, 10, 12, 30)) is None
    free = [run(1, at(2026, 6, 10, 10), weight=0.0)]
    assert policy.exhausted_at(free, start, 1, at(2026, 6, 30)) is None  # a GPU priced at 0 never runs out


def test_usage_knows_units_and_the_weighted_rate_of_what_runs_now():
    active = (run(2, at(2026, 6, 10), product=V100, weight=0.5), run(1, at(2026, 6, 10), weight=1.0, state=RESERVED))
    use = policy.Usage(0.0, *month(2026, 6), active)
    assert (use.running, use.running_gpus, use.card_hour_rate) == (2, 3, 2.0)


def test_the_pre_spawn_check_needs_the_weighted_rate_for_min_start_hours():
    limits = Limits(card_hours_per_month=10, max_concurrent=5)
    now = at(2026, 6, 10, 12)
    running = (run(2, at(2026, 6, 10, 8), product=V100, weight=0.5),)  # 1 card-hour per hour
    use = policy.Usage(9.4, *month(2026, 6), running)  # 0.6 left
    v100 = Request(gpus=1, gpu_product=V100, gpu_weight=0.5)  # (1 + 0.5) × 0.25 = 0.375 needed
    a100s = Request(gpus=2, gpu_product=A100, gpu_weight=1.0)  # (1 + 2) × 0.25 = 0.75 needed
    assert policy.decide(v100, use, limits, now).allowed
    refused = policy.decide(a100s, use, limits, now)
    assert (refused.reason, refused.asked, refused.left) == ("card-hours", 2.0, pytest.approx(0.6))
    slow = policy.decide(Request(gpus=1, gpu_product=V100, gpu_weight=0.5), policy.Usage(9.9, *month(2026, 6), running),
                         limits, now)
    assert "this profile costs 0.5 card-hours per hour (1 Tesla-V100-SXM2-16GB GPU at 0.5)" in slow.message()
    assert "needs 0.38 card-hours left to start" in slow.message()
    mig = policy.decide(Request(gpus=2, gpu_resource=MIG, gpu_weight=1 / 7), policy.Usage(10, *month(2026, 6)), limits, now)
    assert "costs 0.29 card-hours per hour (2 MIG slices 1g.10gb at 0.14)" in mig.message()


def test_max_gpus_counts_units_of_any_gpu_resource():
    limits = Limits(max_gpus=2)
    use = policy.Usage(0.0, *month(2026, 6))
    now = at(2026, 6, 10)
    assert policy.decide(Request(gpus=2, gpu_resource=MIG, gpu_weight=1 / 7), use, limits, now).allowed
    refused = policy.decide(Request(gpus=3, gpu_resource=MIG, gpu_weight=1 / 7), use, limits, now)
    assert (refused.reason, refused.limit, refused.asked) == ("instance-size", "max_gpus", 3)
    assert refused.detail == "This profile asks for 3 GPU units; the largest workspace you may start has 2 GPU units."


def test_the_enforcer_counts_time_left_and_grace_at_the_weighted_rate():
    period = month(2026, 6)
    t0 = at(2026, 6, 10, 12)
    runs = [run(2, t0, product=V100, weight=0.5)]  # 1 card-hour per hour, 2 GPU units
    kwargs = dict(warn_before=1800, grace_period=600, grace_card_hours=0.5)
    ok = policy.enforcement(runs, period, 2.0, t0 + timedelta(minutes=60), **kwargs)
    assert (ok.action, ok.running_gpus, ok.rate, ok.left) == ("none", 2, 1.0, 1.0)
    assert ok.stop_at == t0 + timedelta(hours=2, minutes=30)  # out at 14:00, then 0.5 card-hours at 1 per hour
    warn = policy.enforcement(runs, period, 2.0, t0 + timedelta(minutes=100), **kwargs)
    assert warn.action == "warn"
    stop = policy.enforcement(runs, period, 2.0, t0 + timedelta(minutes=150), **kwargs)
    assert (stop.action, stop.used) == ("stop", 2.5)
