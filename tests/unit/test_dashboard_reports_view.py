"""The Reports view's and the My card-hours section's pure parts, and their templates rendered with plain data.

Covers: the report's month from ``?month=`` (default this month in the quota's time zone, a bad shape or a
future month refused naming ``month``); the hub's group members turned into each user's groups; the report's
charts (card-hours used and left, disk) per level, the user charts limited to the biggest users; the My
card-hours charts drawing the same numbers as the ledger's runs per server and per day; reports.html and the
My card-hours block of workspaces.html rendering those numbers (no server, no mocks: Jinja2 and the pure data
modules).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from workspacespawner.dashboard import cardhours, purgeview
from workspacespawner.dashboard.app import templates
from workspacespawner.dashboard.auditview import ACTIONS, RESULTS, AuditFilters, AuditPage
from workspacespawner.dashboard.reports import build_report
from workspacespawner.dashboard.views.reports import (
    MonthError,
    groups_of_users,
    report_charts,
    report_period,
)
from workspacespawner.dashboard.views.workspaces import cardhours_charts
from workspacespawner.quota.policy import Run

NOW = datetime(2026, 3, 15, 12, 0, tzinfo=UTC)


def run(server: str, start: datetime, hours: float, gpus: int = 1, user: str = "ann") -> Run:
    return Run(id=None, user=user, server_name=server, profile="p", workspace_kind="container", gpus=gpus,
               started=start, stopped=start + timedelta(hours=hours), last_seen=start + timedelta(hours=hours),
               state="closed")


def test_the_month_defaults_to_this_one_in_the_quotas_time_zone():
    assert report_period(None, NOW) == (datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 4, 1, tzinfo=UTC))
    start, end = report_period("", datetime(2026, 2, 28, 23, 30, tzinfo=UTC), "Europe/Berlin")
    assert (start.month, end.month) == (3, 4)  # already March in Berlin
    assert report_period("2025-12", NOW)[0] == datetime(2025, 12, 1, tzinfo=UTC)


@pytest.mark.parametrize("text", ["2026-13", "March", "2026-3-1", "2026-04", "Your quota was revoked: contact admin"])
def test_a_bad_or_future_month_is_refused_naming_month_not_repeating_it(text):
    """The refusal is shown on the page's red banner: it names the argument, never repeats a link's text."""
    with pytest.raises(MonthError, match=r"^month: ") as caught:
        report_period(text, NOW)
    assert text not in str(caught.value)


def test_group_members_become_each_users_groups():
    found = groups_of_users({"physics": frozenset({"ann", "bob"}), "research": frozenset({"bob"}), "empty": frozenset()})
    assert found == {"ann": {"physics"}, "bob": {"physics", "research"}}


def user_row(name, used, limit=100.0):
    return {"user": name, "groups": "", "card_hours_used": used, "card_hours_limit": limit,
            "card_hours_left": max(0.0, limit - used), "running": 0, "running_gpus": 0, "workspaces": ""}


def a_report():
    rows = [user_row("ann", 12.5), user_row("bob", 30.0), user_row("cy", 0.0)]
    groups = {"ann": {"physics"}, "bob": {"physics", "research"}, "cy": {"research"}}
    period = (datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 4, 1, tzinfo=UTC))
    return build_report(rows, groups, {"Physics": ["physics", "research"]}, {"ann": 10 * 2**30}, period)


def bars(svg: str) -> dict[tuple[str, str], float]:
    return {(s, label): float(v) for s, label, v in
            re.findall(r'data-series="([^"]*)" data-label="([^"]*)" data-value="([^"]*)"', svg)}


def test_the_report_charts_draw_the_rows_numbers_per_level():
    report = a_report()
    found = report_charts(report)
    assert [(c["level"], c["title"].split(",")[0].split(" (")[0]) for c in found] == [
        ("department", "Card-hours used per department"), ("department", "Disk per department"),
        ("group", "Card-hours used per group"), ("group", "Disk per group"),
        ("user", "Card-hours used per user"), ("user", "Disk per user")]
    hours = bars(found[4]["svg"])  # one series: plain bars, no series name
    assert hours == {("", "ann"): 12.5, ("", "bob"): 30.0}  # a zero (cy) draws no bar
    assert bars(found[0]["svg"]) == {("", "Physics"): 42.5}  # ann and bob (in both groups) once each
    assert re.findall(r'data-label="([^"]*)" data-value="([^"]*)"', found[5]["svg"]) == [("ann", "10.0")]


def test_the_user_charts_show_only_the_biggest_users():
    report = a_report()
    found = report_charts(report, users=2)
    drawn = {label for _s, label in bars(found[4]["svg"])}
    assert drawn == {"ann", "bob"}


def test_the_my_cardhours_charts_draw_the_runs_per_server_and_day():
    runs = [run("", datetime(2026, 3, 2, 10, tzinfo=UTC), 3, gpus=2), run("big", datetime(2026, 3, 14, 23, tzinfo=UTC), 2),
            run("", datetime(2026, 1, 5, tzinfo=UTC), 4)]
    data = cardhours.view(runs, 100.0, NOW).to_json()
    found = cardhours_charts(data)
    days, months = bars(found["days"]), bars(found["months"])
    assert days == {("(default)", "2"): 6.0, ("big", "14"): 1.0, ("big", "15"): 1.0}
    # the six past months and this one so far (the table below the chart covers the same months)
    assert {key: value for key, value in months.items() if value} == {
        ("(default)", "2026-01"): 4.0, ("(default)", "2026-03"): 6.0, ("big", "2026-03"): 2.0,
    }
    assert cardhours_charts(None) == {}


def render(name: str, **ns) -> str:
    base = dict(viewer=None, nav=[], prefix="/services/workspaces/", hub_prefix="/hub/", xsrf_form_html=lambda: "",
                static_url=lambda path: "/static/" + path)
    return templates().get_template(name).render(**base, **ns)


def test_reports_html_shows_the_rows_the_purge_preview_and_the_audit_page():
    report = a_report()
    preview = purgeview.PurgePreview(now=NOW, disks=[purgeview.RetainedDisk(
        owner="ann", name="old-home", kind="PersistentVolumeClaim", server="", size_gib=5.0, phase="Retained",
        retain_until=NOW - timedelta(days=1), purge_next=True)])
    page = AuditPage(records=[{"time": "2026-03-14T10:00:00Z", "actor": "ann", "user": "ann", "action": "snapshot",
                               "disk": "home-ann", "server": "", "result": "ok"}], offset=0, limit=50, has_more=True,
                     filters=AuditFilters(user="ann"))
    html = render("reports.html", title="Reports", report=report, note="", charts=report_charts(report), purge=preview,
                  audit=page, filters=page.filters.to_query(), months=["2026-03", "2026-02"], actions=ACTIONS,
                  results=RESULTS, timezone="UTC", paging={"newer": None, "older": "user=ann&offset=50"})
    assert 'href="/services/workspaces/api/reports.csv?month=2026-03"' in html
    bob = re.search(r'<tr data-name="bob">(.*?)</tr>', html, re.S).group(1)
    assert '<td class="reports-num" data-field="card_hours_used">30</td>' in bob
    assert re.search(r'<tr data-name="Physics">.*?data-field="users">3<', html, re.S)
    assert "deletes it" in html and 'data-field="purge_count">1<' in html
    assert 'data-field="action">snapshot<' in html and 'href="/services/workspaces/reports?user=ann&amp;offset=50"' in html
    assert html.count("<svg") == 6


def test_the_department_table_has_a_row_of_the_users_in_none_and_a_total():
    rows = [user_row("ann", 12.5), user_row("bob", 30.0), user_row("dee", 4.0, limit=10.0)]
    period = (datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 4, 1, tzinfo=UTC))
    report = build_report(rows, {"ann": {"physics"}, "bob": {"physics"}}, {"Physics": ["physics"]}, {}, period)
    html = render("reports.html", title="Reports", report=report, note="", charts=report_charts(report),
                  purge=purgeview.PurgePreview(now=NOW, disks=[]), audit=AuditPage(records=[], offset=0, limit=50,
                  has_more=False, filters=AuditFilters()), filters={}, months=["2026-03"], actions=ACTIONS,
                  results=RESULTS, timezone="UTC", paging={"newer": None, "older": None})
    departments = re.search(r'<table[^>]*data-level="department">(.*?)</table>', html, re.S).group(1)
    none = re.search(r'<tr data-name="\(no department\)"[^>]*>(.*?)</tr>', departments, re.S).group(1)
    assert 'data-field="card_hours_used">4<' in none and 'data-field="users">1<' in none  # dee
    total = re.search(r'<tfoot><tr class="reports-total" data-name="All users">(.*?)</tr>', departments, re.S).group(1)
    assert 'data-field="card_hours_used">46.5<' in total and 'data-field="users">3<' in total


def test_the_my_cardhours_block_lists_this_month_and_the_last_six_per_server():
    runs = [run("", datetime(2026, 3, 2, 10, tzinfo=UTC), 3, gpus=2), run("big", datetime(2026, 1, 5, tzinfo=UTC), 4)]
    data = cardhours.view(runs, 100.0, NOW).to_json()
    html = render("workspaces.html", title="My workspaces", data={"cardhours": data, "balance": None, "servers": [],
                                                                  "snapshots": [], "retained": []},
                  owner="ann", can_act=True, others=[], cardhours_charts=cardhours_charts(data))
    default = re.search(r'<tr data-server="">(.*?)</tr>', html, re.S).group(1)
    assert '<td class="cardhours-num" data-field="this_month">6</td>' in default
    big = re.search(r'<tr data-server="big">(.*?)</tr>', html, re.S).group(1)
    assert re.findall(r'<td class="cardhours-num">([^<]*)</td>', big) == ["0", "0", "0", "0", "4", "0"]
    assert 'data-field="this_month_total">6<' in html
    assert html.count("<svg") == 2
