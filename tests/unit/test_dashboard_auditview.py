"""The audit log on the Reports page (:mod:`workspacespawner.dashboard.auditview`) and the filters it adds to
:meth:`AuditLog.query`.

Covers, on SQLite and PostgreSQL: the filters done in SQL (user, action,
disk, result by its first word, since and until as days of the quota's time
zone, both included), newest first, paging with limit and offset and
whether an older page follows; the query string read into filters (empty
values ignored) and back, with bad values refused naming the filter; the
older callers' oldest-first order unchanged.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from workspacespawner.dashboard import auditview
from workspacespawner.dashboard.auditview import AuditFilters, FilterError
from workspacespawner.lifecycle.audit import AuditLog

T0 = datetime(2025, 6, 1, 10, 0, tzinfo=UTC)


@pytest.fixture
def filled_log(database_url):
    """Seven records, one a day from 1 June 10:00 UTC, of ann, anna and bob."""
    log = AuditLog.from_url(database_url)
    rows = [
        ("ann", "home-ann", "expand", "ok"),
        ("ann", "home-ann", "expand", "refused: over quota (60 GiB of 50 GiB)"),
        ("anna", "home-anna", "snapshot", "ok"),
        ("ann", "ws-ann-gpu-root", "retain", "ok"),
        ("bob", "home-bob", "restore", "error: 500 Internal Server Error"),
        ("ann", "home-ann", "snapshot", "ok"),
        ("bob", "home-bob", "purge", "okay-ish"),  # starts with "ok" but is not "ok" nor "ok: ..."
    ]
    for day, (user, disk, action, result) in enumerate(rows):
        log.record(actor="system", user=user, disk=disk, action=action, before=None, after={"n": day}, result=result,
                   time=T0 + timedelta(days=day))
    yield log
    log.dispose()


def days_of(records) -> list[int]:
    return [r.after["n"] if hasattr(r, "after") else r["after"]["n"] for r in records]


def test_query_filters_in_sql_newest_first(filled_log):
    assert days_of(filled_log.query()) == [0, 1, 2, 3, 4, 5, 6]  # the older callers' order
    assert days_of(filled_log.query(newest_first=True)) == [6, 5, 4, 3, 2, 1, 0]
    assert days_of(filled_log.query(user="ann", newest_first=True)) == [5, 3, 1, 0]  # not anna
    assert days_of(filled_log.query(disk="home-ann")) == [0, 1, 5]
    assert days_of(filled_log.query(result="ok")) == [0, 2, 3, 5]
    assert days_of(filled_log.query(result="refused")) == [1]
    assert days_of(filled_log.query(result="error")) == [4]
    assert days_of(filled_log.query(since=T0 + timedelta(days=2), until=T0 + timedelta(days=4))) == [2, 3]
    assert days_of(filled_log.query(action="snapshot", user="ann")) == [5]
    assert days_of(filled_log.query(newest_first=True, limit=2, offset=1)) == [5, 4]
    assert days_of(filled_log.query(limit=0)) == []
    with pytest.raises(ValueError):
        filled_log.query(offset=-1)


def test_pages_newest_first_with_a_next_page(filled_log):
    first = auditview.read_page(filled_log, AuditFilters(), limit=3)
    assert days_of(first.records) == [6, 5, 4] and first.has_more
    assert (first.next_offset, first.previous_offset) == (3, None)
    last = auditview.read_page(filled_log, AuditFilters(), offset=6, limit=3)
    assert days_of(last.records) == [0] and not last.has_more
    assert (last.next_offset, last.previous_offset) == (None, 3)
    exact = auditview.read_page(filled_log, AuditFilters(user="ann"), limit=4)
    assert days_of(exact.records) == [5, 3, 1, 0] and not exact.has_more
    assert exact.records[0]["time"] == "2025-06-06T10:00:00Z" and exact.to_json()["filters"] == {"user": "ann"}


def test_days_are_the_quota_time_zones_and_both_included(filled_log):
    # 2 June to 3 June in UTC: the records of 10:00 on the 2nd and the 3rd
    in_utc = AuditFilters(since=date(2025, 6, 2), until=date(2025, 6, 3))
    assert days_of(auditview.read_page(filled_log, in_utc).records) == [2, 1]
    # In Tokyo (UTC+9) 10:00 UTC is 19:00 the same day: the same two; in Kiritimati (UTC+14) it is the next day
    assert days_of(auditview.read_page(filled_log, in_utc, tz="Asia/Tokyo").records) == [2, 1]
    assert days_of(auditview.read_page(filled_log, in_utc, tz="Pacific/Kiritimati").records) == [1, 0]
    filtered = AuditFilters(user="bob", result="error", disk="home-bob", action="restore")
    assert days_of(auditview.read_page(filled_log, filtered).records) == [4]


def test_filters_from_the_query_string_and_back():
    args = {"user": " ann ", "action": "expand", "disk": "", "result": "refused", "since": "2025-06-01", "until": "2025-06-30"}
    filters = AuditFilters.from_query(args)
    assert filters == AuditFilters(user="ann", action="expand", result="refused", since=date(2025, 6, 1), until=date(2025, 6, 30))
    assert AuditFilters.from_query(filters.to_query()) == filters
    assert filters.bounds("UTC") == (datetime(2025, 6, 1, tzinfo=UTC), datetime(2025, 7, 1, tzinfo=UTC))
    assert AuditFilters.from_query({}) == AuditFilters() and AuditFilters().bounds() == (None, None)


@pytest.mark.parametrize(
    "args, name",
    [
        ({"action": "format"}, "action"),
        ({"result": "fine"}, "result"),
        ({"since": "June"}, "since"),
        ({"until": "2025-13-01"}, "until"),
        ({"since": "2025-06-02", "until": "2025-06-01"}, "until"),
    ],
)
def test_bad_filters_name_the_filter(args, name):
    with pytest.raises(FilterError) as caught:
        AuditFilters.from_query(args)
    assert caught.value.name == name and str(caught.value).startswith(f"{name}: ")


@pytest.mark.parametrize("name", ["since", "action", "result", "offset"])
def test_a_refused_filter_does_not_repeat_the_links_words(name):
    """The page shows a refusal on its red banner: a link's text must not appear there as ours."""
    words = "Your quota was revoked: contact admin@evil.example"
    with pytest.raises(FilterError) as caught:
        if name == "offset":
            auditview.page_args({name: words})
        else:
            AuditFilters.from_query({name: words})
    assert "quota" not in str(caught.value) and "evil" not in str(caught.value)


def test_page_arguments():
    assert auditview.page_args({}) == (0, auditview.PAGE_SIZE)
    assert auditview.page_args({"offset": "100", "limit": "25"}) == (100, 25)
    for bad, name in [({"offset": "-1"}, "offset"), ({"limit": "0"}, "limit"), ({"limit": "501"}, "limit"), ({"offset": "x"}, "offset")]:
        with pytest.raises(FilterError) as caught:
            auditview.page_args(bad)
        assert caught.value.name == name
