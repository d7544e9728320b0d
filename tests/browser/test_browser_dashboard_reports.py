"""The dashboard's Reports view and My card-hours charts in a real browser (Debian's chromium, driven by playwright)
on the demo's configuration.

The ledger holds closed runs of the researcher's this month and in the two months before. The admin opens Reports
(logging in through the hub's OAuth): the researcher's row shows the card-hours the API reports, the charts are
there, and the CSV downloaded through the page's link parses to the API's numbers. The researcher's My workspaces
page shows the card-hours charts and a table whose totals equal the ledger's card-hours for those months. The
screenshots test-artifacts/dashboard-reports-admin.png and test-artifacts/dashboard-my-cardhours.png are kept for a
person to look at.
"""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

import pytest

from tests.browser.test_browser_dashboard import demo  # noqa: F401 (the module's fixture: cluster and hub)
from tests.browser.test_browser_demo import CHROMIUM, launch, log_in
from tests.support.hubharness import core_and_custom
from tests.support.paths import ARTIFACTS
from workspacespawner.core import names
from workspacespawner.dashboard import cardhours
from workspacespawner.quota import policy
from workspacespawner.quota.ledger import Ledger
from workspacespawner.quota.policy import Reservation, number

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"),
]

TZ = "Europe/Berlin"  # the demo's WorkspaceQuota.timezone


def ledger_of(hub) -> Ledger:
    """The demo's ledger (``sqlite:///workspacespawner-ledger.sqlite``, relative to the hub's directory)."""
    return Ledger(f"sqlite:///{hub.workdir / 'workspacespawner-ledger.sqlite'}")


@pytest.fixture(scope="module")
def history(demo):  # noqa: F811
    """Closed runs of the researcher's (server, start, GPUs, hours): two this month, one in each of the two months
    before; and a 10 GiB home PersistentVolumeClaim of theirs. Returns the runs as the ledger keeps them."""
    cluster, hub = demo
    now = datetime.now(UTC)
    this_month = policy.month_bounds(now, TZ)[0]
    start = max(this_month + timedelta(hours=1), now - timedelta(hours=30))
    before = cardhours.month_starts(now, TZ, 2)
    runs = [("", start, 1, 2.0), ("big", start + timedelta(minutes=30), 2, 1.5),
            ("", before[0] + timedelta(days=9, hours=10), 1, 5.0), ("big", before[1] + timedelta(days=2), 4, 3.0)]
    ledger = ledger_of(hub)
    try:
        for server, begin, gpus, hours in runs:
            run_id = ledger.open_run(Reservation(None, "researcher", server, "jupyterlab-1gpu", "container", gpus, begin),
                                     begin)
            ledger.close_run(run_id, begin + timedelta(hours=hours))
        kept = ledger.runs_of("researcher", cardhours.history_span(now, TZ))
    finally:
        ledger.dispose()
    body = {"metadata": {"name": "researcher-data", "labels": {**names.owner_labels("researcher"), names.DISK_LABEL: "home"},
                         "annotations": names.owner_annotations("researcher")},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}}}
    with core_and_custom(cluster) as (core, _custom):
        core.create_namespaced_persistent_volume_claim("default", body)
    return kept


def test_the_admin_opens_reports_and_downloads_the_csv(demo, history):  # noqa: F811
    from playwright.sync_api import sync_playwright

    _cluster, hub = demo
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = launch(p)
        page = log_in(browser, hub.url, "admin")
        page.goto(hub.service_url("reports"))
        page.wait_for_selector("table[data-level=user] tr[data-name=researcher]", timeout=60_000)
        api = page.request.get(hub.service_url("api/reports"))
        assert api.status == 200
        report = api.json()["report"]
        (mine,) = [row for row in report["users"] if row["name"] == "researcher"]
        row = page.locator("table[data-level=user] tr[data-name=researcher]")
        assert row.locator("[data-field=card_hours_used]").inner_text() == number(mine["card_hours_used"])
        now = datetime.now(UTC)
        assert mine["card_hours_used"] == round(policy.card_hours(history, *policy.month_bounds(now, TZ), now), 2) == 5
        assert page.locator("figure.reports-chart svg").count() >= 2
        departments = page.locator("table[data-level=department]")  # the demo's Physics, then everyone else
        assert departments.locator("tbody th").all_inner_texts() == ["Physics", "(no department)"]
        assert departments.locator("tfoot [data-field=users]").inner_text() == str(report["total"]["users"])
        page.screenshot(path=str(ARTIFACTS / "dashboard-reports-admin.png"), full_page=True)

        with page.expect_download() as download:
            page.click("a.reports-csv")
        text = open(download.value.path(), encoding="utf-8").read()
        rows = list(csv.DictReader(io.StringIO(text)))
        listed = [r for level in ("departments", "groups", "users") for r in report[level]] + [report["total"]]
        assert [(r["level"], r["name"], float(r["card_hours_used"]), float(r["disk_gib"])) for r in rows] == [
            (r["level"], r["name"], r["card_hours_used"], r["disk_gib"]) for r in listed]
        assert download.value.suggested_filename == f"workspaces-report-{report['month']}.csv"

        other = log_in(browser, hub.url, "researcher")
        assert other.goto(hub.service_url("reports")).status == 403
        browser.close()


def test_a_user_sees_the_card_hours_charts_on_my_workspaces(demo, history):  # noqa: F811
    from playwright.sync_api import sync_playwright

    _cluster, hub = demo
    now = datetime.now(UTC)
    expected = cardhours.view(history, 0.0, now, TZ)
    with sync_playwright() as p:
        browser = launch(p)
        page = log_in(browser, hub.url, "researcher")
        page.goto(hub.service_url())
        page.wait_for_selector("figure[data-chart=days] svg", timeout=60_000)
        assert page.locator("figure[data-chart=months] svg").count() == 1
        api = page.request.get(hub.service_url("api/workspaces")).json()["cardhours"]
        assert api["months"]["totals"] == expected.months.totals and api["days"]["totals"] == expected.days.totals
        table = page.locator("table[data-table=months]")
        assert table.locator("[data-field=this_month_total]").inner_text() == number(expected.days.total) == "5"
        month_cells = table.locator("tr[data-server='*'] td").all_inner_texts()
        assert month_cells == [number(v) for v in expected.months.totals] + ["5"]
        assert sorted(expected.months.totals)[-2:] == [5.0, 12.0]
        assert page.locator("[data-field=used]").inner_text() == "5"
        page.locator("section.cardhours").scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "dashboard-my-cardhours.png"), full_page=True)
        browser.close()
