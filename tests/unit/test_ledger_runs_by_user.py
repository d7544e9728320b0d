"""``Ledger.runs_all``: every user's runs in one read, held so that the enforcer's pass does not feed the garbage collector.

Covers: the mapping holds each user's runs exactly as the per-user read
(``runs_of``) returns them, users sorted, with ``get``, ``in`` and ``len``;
and the objects the garbage collector tracks inside it do not grow with
the number of runs (the pass holds it for its whole length, and thousands
of tracked objects alive that long set off full collections of the hub's
heap: see ``benchmarks/enforcer.py``).
"""

from __future__ import annotations

import gc
import types
from datetime import UTC, datetime, timedelta

import pytest

from workspacespawner.quota import policy
from workspacespawner.quota.ledger import Ledger, RunsByUser, runs
from workspacespawner.quota.policy import CLOSED, OPEN

NOW = datetime(2026, 6, 10, 12, tzinfo=UTC)
JUNE = policy.month_bounds(NOW, "UTC")


@pytest.fixture
def ledger(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    ledger.upgrade()
    yield ledger
    ledger.dispose()


def fill(ledger: Ledger, users: int, closed_each: int) -> None:
    """``closed_each`` closed runs this month and one open run per user, users inserted in reverse order."""
    rows = []
    for i in reversed(range(users)):
        common = {"user_name": f"u{i:04d}", "server_name": "", "profile": "gpu1", "workspace_kind": "container", "gpus": 1,
                  "last_seen": None, "stopped": None}
        for k in range(closed_each):
            began = JUNE[0] + timedelta(hours=k + 1)
            rows.append({**common, "started": began, "stopped": began + timedelta(minutes=30), "state": CLOSED})
        rows.append({**common, "started": NOW - timedelta(hours=1), "last_seen": NOW, "state": OPEN})
    with ledger.engine.begin() as conn:
        conn.execute(runs.insert(), rows)


def tracked_inside(obj) -> int:
    """The objects the garbage collector tracks among what ``obj`` holds, after a full collection.

    Follows its attributes through containers and plain objects only, never
    into classes or modules (which would reach the whole heap).
    """
    gc.collect()
    seen, todo, count = set(), list(vars(obj).values()), 0
    while todo:
        item = todo.pop()
        if id(item) in seen or isinstance(item, type | types.ModuleType | types.FunctionType):
            continue
        seen.add(id(item))
        if not gc.is_tracked(item):
            continue
        count += 1
        if isinstance(item, dict):
            todo.extend([*item.keys(), *item.values()])
        elif isinstance(item, list | tuple | set | frozenset):
            todo.extend(item)
        elif hasattr(item, "__dict__"):
            todo.extend(vars(item).values())
    return count


def test_the_count_of_tracked_objects_sees_runs_held_as_objects():
    """The measure below can fail: a dict of lists of Runs, as ``runs_all`` returned before, counts every Run."""
    run = policy.Run(gpus=1, started=NOW)
    holder = types.SimpleNamespace(by_user={"ann": [run, policy.Run(gpus=2, started=NOW)], "bob": [run]})
    assert tracked_inside(holder) == 5  # the dict, two lists, two Runs


def test_each_user_gets_the_runs_their_own_read_returns(ledger):
    fill(ledger, users=3, closed_each=2)
    by_user = ledger.runs_all(JUNE)
    assert isinstance(by_user, RunsByUser)
    assert list(by_user) == ["u0000", "u0001", "u0002"] and len(by_user) == 3
    for user in by_user:
        key = lambda run: run.id  # noqa: E731
        assert sorted(by_user[user], key=key) == sorted(ledger.runs_of(user, JUNE), key=key)
        assert [run.state for run in sorted(by_user[user], key=key)] == [CLOSED, CLOSED, OPEN]
    assert "u0001" in by_user and "nobody" not in by_user
    assert by_user.get("nobody", ()) == ()
    assert dict(by_user.items())["u0002"] == by_user["u0002"]


def test_an_empty_period_reads_as_no_users(ledger):
    by_user = ledger.runs_all((datetime(2020, 1, 1, tzinfo=UTC), datetime(2020, 2, 1, tzinfo=UTC)))
    assert len(by_user) == 0 and list(by_user.items()) == []


def test_tracked_objects_do_not_grow_with_the_runs(ledger, tmp_path):
    fill(ledger, users=10, closed_each=2)
    small = ledger.runs_all(JUNE)
    bigger = Ledger(f"sqlite:///{tmp_path / 'bigger.sqlite'}")
    try:
        bigger.upgrade()
        fill(bigger, users=1000, closed_each=2)
        large = bigger.runs_all(JUNE)
    finally:
        bigger.dispose()
    assert sum(len(large[user]) for user in large) == 3000
    assert tracked_inside(large) == tracked_inside(small)
