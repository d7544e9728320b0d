"""The dashboard's card-hours (:mod:`workspacespawner.dashboard.cardhours`): per day, per month, per server.

Covers, with hand-made runs of known start and stop times in the quota's
time zone (Europe/Berlin): a run crossing local midnight split exactly
between its days, a run crossing the 1st split between its months, an open
run counted up to ``now``, a reservation and a CPU run counting nothing, the
day of a daylight-saving change (23 hours), the six months before this one
(oldest first, a whole month of March counted as its 743 hours), the
balance (used, left, reset, running GPUs), the 7-day trend, the biggest
users (GPUs held now, then the last 30 days; reservations hold nothing);
and, on a real
ledger (SQLite and PostgreSQL), that the days of this month and each past
month add up to exactly what ``Ledger.usage`` says for that month.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from workspacespawner.dashboard import cardhours
from workspacespawner.quota import policy
from workspacespawner.quota.ledger import Ledger
from workspacespawner.quota.policy import CLOSED, OPEN, RESERVED, Limits, Request, Run

BERLIN = ZoneInfo("Europe/Berlin")
NOW = datetime(2025, 6, 10, 12, 0, tzinfo=UTC)  # 14:00 in Berlin


def berlin(*args) -> datetime:
    return datetime(*args, tzinfo=BERLIN).astimezone(UTC)


# (server, gpus, started, stopped or None for open, state)
RUNS = [
    ("", 2, berlin(2025, 5, 31, 23), berlin(2025, 6, 1, 1), CLOSED),  # 2 card-hours in May, 2 on 1 June
    ("", 4, berlin(2025, 6, 2, 10), berlin(2025, 6, 2, 15), CLOSED),  # 20 on 2 June
    ("thesis", 1, berlin(2025, 6, 3, 22, 30), berlin(2025, 6, 4, 1, 15), CLOSED),  # 1.5 on the 3rd, 1.25 on the 4th
    ("cpu", 0, berlin(2025, 6, 5, 9), berlin(2025, 6, 5, 17), CLOSED),  # a CPU server: nothing
    ("", 1, berlin(2025, 1, 15, 11), berlin(2025, 1, 15, 15), CLOSED),  # 4 in January
    ("long", 1, berlin(2025, 2, 28, 13), berlin(2025, 4, 1, 8), CLOSED),  # 11 in Feb, all 743 hours of March, 8 in April
    ("thesis", 1, NOW - timedelta(hours=3), None, OPEN),  # running since 11:00: 3 on the 10th
    ("pending", 1, NOW, None, RESERVED),  # a reservation: nothing
]


def hand_made() -> list[Run]:
    return [
        Run(gpus=gpus, started=start, stopped=stop, user="ann", server_name=server, state=state)
        for server, gpus, start, stop, state in RUNS
    ]


def test_days_split_at_local_midnight_per_server():
    days = cardhours.days_of_month(hand_made(), NOW, "Europe/Berlin")
    assert days.labels == [str(day) for day in range(1, 31)]
    assert days.starts[0] == datetime(2025, 6, 1, tzinfo=BERLIN) and days.starts[-1] == datetime(2025, 7, 1, tzinfo=BERLIN)
    assert days.servers == ["", "thesis"]  # the default server first; "cpu" and "pending" used none
    expected = {"": {1: 2.0, 2: 20.0}, "thesis": {3: 1.5, 4: 1.25, 10: 3.0}}
    for server, by_day in expected.items():
        assert days.values[server] == [by_day.get(day, 0.0) for day in range(1, 31)]
    assert days.totals[:10] == [2.0, 20.0, 1.5, 1.25, 0, 0, 0, 0, 0, 3.0] and sum(days.totals[10:]) == 0
    assert days.total == 27.75 and days.server_total("thesis") == 5.75 and days.server_total("nobody") == 0
    assert list(days.labelled()) == ["(default)", "thesis"]


def test_an_open_run_counts_up_to_now():
    later = cardhours.days_of_month(hand_made(), NOW + timedelta(minutes=45), "Europe/Berlin")
    assert later.values["thesis"][9] == 3.75


def test_the_six_months_before_this_one_oldest_first():
    months = cardhours.past_months(hand_made(), NOW, "Europe/Berlin")
    assert months.labels == ["2024-12", "2025-01", "2025-02", "2025-03", "2025-04", "2025-05"]
    assert months.servers == ["", "long"]
    assert months.values[""] == [0, 4.0, 0, 0, 0, 2.0]
    # 1 March 00:00 CET to 1 April 00:00 CEST is 743 hours, not 31 x 24.
    assert months.values["long"] == [0, 0, 11.0, 743.0, 8.0, 0]
    assert months.totals == [0, 4.0, 11.0, 743.0, 8.0, 2.0]


def test_history_span_covers_the_six_months_and_this_one():
    start, end = cardhours.history_span(NOW, "Europe/Berlin")
    assert (start, end) == (datetime(2024, 12, 1, tzinfo=BERLIN), datetime(2025, 7, 1, tzinfo=BERLIN))
    january = cardhours.month_starts(datetime(2025, 1, 20, tzinfo=UTC), "UTC", 2)
    assert [f"{m:%Y-%m}" for m in january] == ["2024-11", "2024-12", "2025-01"]


def test_the_day_the_clocks_go_forward_has_23_card_hours_per_gpu():
    run = Run(gpus=1, started=berlin(2025, 3, 29, 12), stopped=berlin(2025, 3, 31, 12), server_name="long")
    days = cardhours.days_of_month([run], datetime(2025, 3, 31, 18, tzinfo=UTC), "Europe/Berlin")
    assert len(days.labels) == 31
    assert days.values["long"][28:31] == [12.0, 23.0, 12.0]


def test_balance_used_left_reset_and_running_gpus():
    balance = cardhours.balance(hand_made(), 50.0, NOW, "Europe/Berlin")
    assert (balance.used, balance.limit, balance.left) == (27.75, 50.0, 22.25)
    assert balance.reset == datetime(2025, 7, 1, tzinfo=BERLIN) and balance.period_start == datetime(2025, 6, 1, tzinfo=BERLIN)
    assert balance.running_gpus == 2  # the open run and the reservation
    assert cardhours.balance(hand_made(), 20.0, NOW, "Europe/Berlin").left == 0.0
    assert balance.to_json()["reset"] == "2025-07-01T00:00:00+02:00"


def test_trend_of_the_last_seven_days():
    assert cardhours.trend(hand_made(), NOW, 7, "Europe/Berlin") == [1.25, 0, 0, 0, 0, 0, 3.0]
    assert len(cardhours.trend(hand_made(), NOW, 30, "Europe/Berlin")) == 30
    with pytest.raises(ValueError):
        cardhours.trend(hand_made(), NOW, 0)


def test_periods_and_bounds_must_match():
    with pytest.raises(ValueError, match="2 periods need 3 bounds"):
        cardhours.per_server([], [NOW, NOW + timedelta(days=1)], ["a", "b"], NOW)
    assert cardhours.server_label("") == "(default)" and cardhours.server_label("gpu") == "gpu"


@pytest.fixture
def filled_ledger(database_url):
    """A ledger holding :data:`RUNS`, made through the ledger's own calls (reserve, open, close)."""
    ledger = Ledger(database_url)
    roomy = Limits(max_concurrent=10, card_hours_per_month=10_000)
    for server, gpus, start, stop, state in RUNS:
        decision = ledger.check_and_reserve("ann", Request(gpus=gpus, server_name=server), roomy, start)
        if state == RESERVED:
            continue
        ledger.open_run(decision.reservation, start)
        if stop is not None:
            ledger.close_run(decision.reservation.id, stop)
    # someone else's use never shows in ann's numbers
    other = ledger.check_and_reserve("anna", Request(gpus=8), roomy, berlin(2025, 6, 2, 9))
    ledger.open_run(other.reservation, berlin(2025, 6, 2, 9))
    ledger.close_run(other.reservation.id, berlin(2025, 6, 2, 19))
    yield ledger
    ledger.dispose()


def test_the_views_numbers_are_the_ledgers(filled_ledger):
    tz = "Europe/Berlin"
    runs = filled_ledger.runs_of("ann", cardhours.history_span(NOW, tz))
    view = cardhours.view(runs, 50.0, NOW, tz)
    month = policy.month_bounds(NOW, tz)
    usage = filled_ledger.usage("ann", month, NOW)
    assert usage.card_hours == 27.75
    assert view.balance.used == usage.card_hours == view.days.total
    assert sum(view.days.server_total(server) for server in view.days.servers) == usage.card_hours
    assert view.balance.running_gpus == usage.running_gpus == 2
    for label, total in zip(view.months.labels, view.months.totals, strict=True):
        assert total == filled_ledger.usage("ann", policy.named_month(label, tz), NOW).card_hours
    assert view.months.totals == [0, 4.0, 11.0, 743.0, 8.0, 2.0]


async def test_load_reads_the_ledger_on_its_database_thread(filled_ledger):
    view = await cardhours.load(filled_ledger, filled_ledger.executor, "ann", 50.0, NOW, "Europe/Berlin")
    assert view.days.values["thesis"][9] == 3.0 and view.balance.left == 22.25
    assert view.to_json()["months"]["labels"][0] == "2024-12"


def test_trend_of_the_last_7_and_30_days():
    def run(user, gpus, start, stop=None, state=CLOSED):
        return Run(gpus=gpus, started=start, stopped=stop, user=user, state=OPEN if stop is None and state == CLOSED else state)

    runs = {
        "ann": hand_made(),  # 1 GPU running now; 2 + 20 + 1.5 + 1.25 + 3 in June, 2 on 31 May (inside the 30 days)
        "bob": [run("bob", 8, berlin(2025, 6, 9, 8), berlin(2025, 6, 9, 18))],  # 80 yesterday, nothing now
        "cy": [run("cy", 2, berlin(2025, 6, 10, 13))],  # 2 GPUs since 13:00: 2 card-hours so far
        "dee": [run("dee", 1, berlin(2025, 4, 1, 8), berlin(2025, 4, 1, 9))],  # long ago: none in the window
        "eve": [run("eve", 4, NOW, state=RESERVED)],  # a reservation holds nothing yet
    }
    week = {user: cardhours.trend(theirs, NOW, 7, "Europe/Berlin") for user, theirs in runs.items()}
    month = {user: cardhours.trend(theirs, NOW, 30, "Europe/Berlin") for user, theirs in runs.items()}
    assert week["ann"] == [1.25, 0, 0, 0, 0, 0, 3.0] and len(month["ann"]) == 30
    assert {user: (sum(week[user]), sum(month[user])) for user in runs} == {
        "ann": (4.25, 29.75), "bob": (80.0, 80.0), "cy": (2.0, 2.0), "dee": (0, 0), "eve": (0, 0),
    }
    start, end = cardhours.trend_span(NOW, "Europe/Berlin")
    assert (start, end) == (datetime(2025, 5, 12, tzinfo=BERLIN), datetime(2025, 6, 11, tzinfo=BERLIN))
