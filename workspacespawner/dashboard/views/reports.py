"""Reports (admins): card-hours and disk per department, group and user for a month; retained disks; the audit log.

``GET <prefix>reports``              the page (``?month=YYYY-MM``, default this month; the audit filters
                                     ``user``, ``action``, ``disk``, ``result``, ``since``, ``until``, ``offset``)
``GET <prefix>api/reports``          the month's report, the purge preview and one audit page as JSON
``GET <prefix>api/reports.csv``      the month's report as CSV (an attachment): :func:`~..reports.to_csv`
``GET <prefix>api/audit``            one page of the audit log as JSON (the same filters)

Only a viewer who :attr:`~..access.Viewer.sees_reports` (an admin, or the
unfiltered reports scope) gets any of them; everyone else gets 403. A
bad month or filter is 400 with a sentence naming it.

The numbers are :func:`~..reports.read_report`'s (the rows of
``workspacespawner usage`` for the month, one ledger read on the database
thread), group membership the hub's (:meth:`HubApi.group_members`), disks
and the purge preview the watch caches' objects (no API call per request).
"""

from __future__ import annotations

import logging
from datetime import datetime, tzinfo
from urllib.parse import urlencode

from workspacespawner.dashboard import auditview, charts, purgeview
from workspacespawner.dashboard import reports as report_data
from workspacespawner.dashboard.base import DashboardHandler
from workspacespawner.k8s.kinds import DATA_VOLUME, PVC
from workspacespawner.quota import policy
from workspacespawner.quota.ledger import LedgerUnavailable

log = logging.getLogger("workspacespawner.dashboard")

#: How many users the per-user charts show at most (the most card-hours first); the table lists all.
CHART_USERS = 20

#: The charts' width in pixels: two side by side in the page's column.
CHART_WIDTH = 460


class MonthError(ValueError):
    """The ``month`` argument is not a month the report can show."""


def report_period(text: str | None, now: datetime, tz: str | tzinfo = "UTC") -> tuple[datetime, datetime]:
    """The bounds of month ``text`` (``"YYYY-MM"``) in ``tz``; this month (the one holding ``now``) for None or ``""``.

    Pure. Raises :class:`MonthError` ("month: ...") for another shape or a
    month after this one.
    """
    this = policy.month_bounds(now, tz)
    text = (text or "").strip()
    if not text:
        return this
    try:
        period = policy.named_month(text, tz)
    except ValueError:
        raise MonthError(f"month: must be a month written YYYY-MM, such as {this[0]:%Y-%m}") from None
    if period[0] > this[0]:
        raise MonthError(f"month: must be this month ({this[0]:%Y-%m}) or an earlier one")
    return period


def groups_of_users(members: dict[str, frozenset[str]]) -> dict[str, set[str]]:
    """``{user: {group}}`` from the hub's ``{group: members}`` (pure)."""
    found: dict[str, set[str]] = {}
    for group, users in members.items():
        for user in users:
            found.setdefault(user, set()).add(group)
    return found


def report_charts(report: report_data.Report, *, users: int = CHART_USERS) -> list[dict]:
    """The Reports page's charts (pure): per level with rows (departments, groups, users), a bar chart of the
    card-hours used and one of disk in GiB (the limits and what is left are in the tables); ``[{"level", "title", "svg"}]``. The user charts show the
    ``users`` users with the most card-hours (then disk), the table every one."""
    found = []
    levels = (("department", report.departments), ("group", report.groups), ("user", report.users))
    for level, rows in levels:
        if not rows:
            continue
        if level == "user" and len(rows) > users:
            rows = sorted(rows, key=lambda r: (-r.card_hours_used, -r.disk_gib, r.name))[:users]
        labels, axis = [row.name for row in rows], level.capitalize() + "s"
        title = f"Card-hours used per {level}, {report.month}"
        found.append({"level": level, "title": title, "svg": charts.grouped_bars(
            labels, {"used": [row.card_hours_used for row in rows]}, title=title, x_title=axis, width=CHART_WIDTH)})
        title = f"Disk per {level} (GiB, now)"
        found.append({"level": level, "title": title, "svg": charts.grouped_bars(
            labels, {"disk": [row.disk_gib for row in rows]}, title=title, unit="GiB", x_title=axis, width=CHART_WIDTH)})
    return found


class ReportsHandler(DashboardHandler):
    """What the Reports page and its APIs share: the admin check, the month, the report, the preview, the audit."""

    async def prepare(self):
        await super().prepare()
        if self.viewer is None:  # sent to the hub's login
            return
        if not self.viewer.sees_reports:
            self.refuse(403, "Reports are for admins.")

    def _args(self) -> dict[str, str]:
        return {name: self.get_argument(name) for name in self.request.arguments}

    def period(self, now: datetime) -> tuple[datetime, datetime]:
        """The requested month's bounds; 400 for a bad ``month``."""
        try:
            return report_period(self.get_argument("month", ""), now, self.ctx.quota.timezone)
        except MonthError as e:
            self.refuse(400, str(e))

    async def report(self, period: tuple[datetime, datetime], now: datetime) -> tuple[report_data.Report, str]:
        """The month's :class:`~..reports.Report` and a sentence when card-hours are unknown (quotas off, or the
        ledger unreadable: then disk only)."""
        ctx = self.ctx
        groups = groups_of_users(await ctx.hub.group_members())
        departments = report_data.check_departments(dict(ctx.settings.departments))
        pvcs, datavolumes = await ctx.caches.objects(PVC), await ctx.caches.objects(DATA_VOLUME)
        if ctx.ledger is not None:
            try:
                found = await ctx.call(report_data.read_report, ctx.quota, ctx.ledger, groups, departments, pvcs,
                                       datavolumes, period, now)
                return found, ""
            except LedgerUnavailable as e:
                log.error("Could not read the ledger for the report: %s", e)
                note = "The ledger cannot be read just now: card-hours are missing."
        else:
            note = "Card-hour quotas are off: the report shows disk only."
        disks = report_data.disk_bytes_by_user(pvcs, datavolumes)
        return report_data.build_report([], groups, departments, disks, period), note

    async def purge(self, now: datetime) -> purgeview.PurgePreview:
        """The retained disks and what a purge at ``now`` would delete (the caches' objects; changes nothing)."""
        objects = [obj for objs in (await self.ctx.caches.snapshot()).values() for obj in objs]
        return purgeview.preview(objects, now)

    async def audit(self) -> auditview.AuditPage:
        """The audit page the query asks for; 400 for a bad filter."""
        args = self._args()
        try:
            filters = auditview.AuditFilters.from_query(args)
            offset, limit = auditview.page_args(args)
        except auditview.FilterError as e:
            self.refuse(400, str(e))
        return await self.ctx.call(auditview.read_page, self.ctx.audit, filters, offset=offset, limit=limit,
                                   tz=self.ctx.quota.timezone)


class ReportsPage(ReportsHandler):
    """``GET reports``: tables, charts, the CSV link, retained disks, the audit log with filters."""

    async def get(self):
        now = self.ctx.now()
        period = self.period(now)
        audit = await self.audit()
        found, note = await self.report(period, now)
        this_month = policy.month_bounds(now, self.ctx.quota.timezone)[0]
        months = [f"{start:%Y-%m}" for start in _months_back(this_month, 12)]
        self.render_page(
            "reports.html", title="Reports", report=found, note=note, charts=report_charts(found),
            purge=await self.purge(now), audit=audit, filters=audit.filters.to_query(), months=months,
            actions=auditview.ACTIONS, results=auditview.RESULTS, timezone=str(self.ctx.quota.timezone),
            paging=_paging(self._args(), audit))


class ReportsApi(ReportsHandler):
    """``GET api/reports``: ``{"report", "note", "purge", "audit"}``."""

    async def get(self):
        now = self.ctx.now()
        period = self.period(now)
        audit = await self.audit()
        found, note = await self.report(period, now)
        purge = await self.purge(now)
        self.write_json({"report": found.to_json(), "note": note, "purge": purge.to_json(), "audit": audit.to_json()})


class ReportsCsv(ReportsHandler):
    """``GET api/reports.csv``: the month's report as ``reports-YYYY-MM.csv``."""

    async def get(self):
        now = self.ctx.now()
        found, _note = await self.report(self.period(now), now)
        self.set_header("Content-Type", "text/csv; charset=UTF-8")
        self.set_header("Content-Disposition", f'attachment; filename="workspaces-report-{found.month}.csv"')
        self.finish(report_data.to_csv(found))


class AuditApi(ReportsHandler):
    """``GET api/audit``: one :class:`~..auditview.AuditPage` as JSON."""

    async def get(self):
        self.write_json((await self.audit()).to_json())


def _months_back(start: datetime, count: int) -> list[datetime]:
    """``start`` (a month's first instant) and the ``count - 1`` months before it, newest first."""
    found = []
    year, month = start.year, start.month
    for _ in range(count):
        found.append(datetime(year, month, 1, tzinfo=start.tzinfo))
        year, month = (year, month - 1) if month > 1 else (year - 1, 12)
    return found


def _paging(args: dict[str, str], page: auditview.AuditPage) -> dict:
    """Query strings (without ``?``) of the audit log's newer and older pages, keeping the other arguments."""
    def at(offset):
        if offset is None:
            return None
        kept = {k: v for k, v in args.items() if k != "offset"}
        return urlencode({**kept, "offset": offset})

    return {"newer": at(page.previous_offset), "older": at(page.next_offset)}


ROUTES = [
    (r"reports", ReportsPage),
    (r"api/reports", ReportsApi),
    (r"api/reports\.csv", ReportsCsv),
    (r"api/audit", AuditApi),
]
