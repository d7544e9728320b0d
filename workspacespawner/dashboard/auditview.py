"""The audit log on the Reports page: filters from the page's query string, newest first, one page at a time.

Filters (each optional): ``user``, ``action`` (one of
:data:`~workspacespawner.lifecycle.audit.ACTIONS`), ``disk`` (a PVC or
DataVolume name), ``result`` (``ok``, ``refused`` or ``error``), ``since``
and ``until`` (dates ``YYYY-MM-DD``, both included, as days of the quota's
time zone). The database does the filtering and the paging
(:meth:`AuditLog.query <workspacespawner.lifecycle.audit.AuditLog.query>`);
one page asks for one record more than it shows, to know whether a next
page exists.

:func:`read_page` is blocking (a database read): run it on the database
thread (``await executor.run(read_page, log, filters, ...)``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, tzinfo

from workspacespawner.lifecycle.audit import ACTIONS
from workspacespawner.quota import policy

#: The first words a record's result starts with.
RESULTS = ("ok", "refused", "error")

#: Records on one page unless the page asks for another number; at most :data:`MAX_PAGE`.
PAGE_SIZE = 50
MAX_PAGE = 500


class FilterError(ValueError):
    """A filter of the query string is not valid; ``name``: which one (``user``, ``since``...)."""

    def __init__(self, name: str, message: str):
        super().__init__(f"{name}: {message}")
        self.name = name


@dataclass(frozen=True)
class AuditFilters:
    """The audit log's filters; None: not filtered on. ``since`` and ``until``: days, both included."""

    user: str | None = None
    action: str | None = None
    disk: str | None = None
    result: str | None = None
    since: date | None = None
    until: date | None = None

    @classmethod
    def from_query(cls, args: Mapping[str, str]) -> AuditFilters:
        """The filters of a page's query arguments (``{"user": "ann", "since": "2025-06-01"}``); empty values are
        no filter. Raises :class:`FilterError` naming the filter; it repeats
        no text of the request, which a link could fill."""

        def text(name: str) -> str | None:
            value = (args.get(name) or "").strip()
            return value or None

        def day(name: str) -> date | None:
            value = text(name)
            if value is None:
                return None
            try:
                return date.fromisoformat(value)
            except ValueError:
                raise FilterError(name, "must be a date such as 2025-06-01") from None

        action, result = text("action"), text("result")
        if action is not None and action not in ACTIONS:
            raise FilterError("action", f"must be one of {', '.join(ACTIONS)}")
        if result is not None and result not in RESULTS:
            raise FilterError("result", f"must be one of {', '.join(RESULTS)}")
        since, until = day("since"), day("until")
        if since is not None and until is not None and until < since:
            raise FilterError("until", f"must not be before since ({since.isoformat()}), not {until.isoformat()}")
        return cls(user=text("user"), action=action, disk=text("disk"), result=result, since=since, until=until)

    def bounds(self, tz: str | tzinfo = "UTC") -> tuple[datetime | None, datetime | None]:
        """``(from, before)``: ``since``'s midnight and the midnight after ``until``, in ``tz`` (None where unset)."""
        where = policy.zone(tz)
        start = None if self.since is None else datetime(self.since.year, self.since.month, self.since.day, tzinfo=where)
        end = None
        if self.until is not None:
            after = self.until + timedelta(days=1)
            end = datetime(after.year, after.month, after.day, tzinfo=where)
        return start, end

    def to_query(self) -> dict[str, str]:
        """The filters that are set, as query arguments (what :meth:`from_query` reads back)."""
        values = {
            "user": self.user,
            "action": self.action,
            "disk": self.disk,
            "result": self.result,
            "since": self.since and self.since.isoformat(),
            "until": self.until and self.until.isoformat(),
        }
        return {name: value for name, value in values.items() if value}


@dataclass(frozen=True)
class AuditPage:
    """One page of records, newest first.

    ``records``: :meth:`AuditRecord.to_json
    <workspacespawner.lifecycle.audit.AuditRecord.to_json>` dicts (``time``
    in RFC 3339 UTC; ``before``/``after`` dicts or None); ``offset``: how
    many newer records came before this page; ``limit``: the page's size;
    ``has_more``: whether older records follow.
    """

    records: list[dict]
    offset: int
    limit: int
    has_more: bool
    filters: AuditFilters = field(default_factory=AuditFilters)

    @property
    def next_offset(self) -> int | None:
        """The offset of the next (older) page, or None on the last page."""
        return self.offset + self.limit if self.has_more else None

    @property
    def previous_offset(self) -> int | None:
        """The offset of the previous (newer) page, or None on the first page."""
        return max(0, self.offset - self.limit) if self.offset > 0 else None

    def to_json(self) -> dict:
        return {
            "records": self.records,
            "offset": self.offset,
            "limit": self.limit,
            "has_more": self.has_more,
            "next_offset": self.next_offset,
            "previous_offset": self.previous_offset,
            "filters": self.filters.to_query(),
        }


def page_args(args: Mapping[str, str]) -> tuple[int, int]:
    """``(offset, limit)`` of a page's query arguments ``offset`` and ``limit`` (defaults 0 and :data:`PAGE_SIZE`).

    Raises :class:`FilterError` for a value that is not a whole number, a
    negative offset, or a limit outside 1..:data:`MAX_PAGE`.
    """

    def whole(name: str, default: int) -> int:
        value = (args.get(name) or "").strip()
        if not value:
            return default
        try:
            return int(value)
        except ValueError:
            raise FilterError(name, "must be a whole number") from None

    offset, limit = whole("offset", 0), whole("limit", PAGE_SIZE)
    if offset < 0:
        raise FilterError("offset", f"must be 0 or more, not {offset}")
    if not 1 <= limit <= MAX_PAGE:
        raise FilterError("limit", f"must be from 1 to {MAX_PAGE}, not {limit}")
    return offset, limit


def read_page(log, filters: AuditFilters, *, offset: int = 0, limit: int = PAGE_SIZE, tz: str | tzinfo = "UTC") -> AuditPage:
    """One :class:`AuditPage` of ``log`` (an :class:`~workspacespawner.lifecycle.audit.AuditLog`): one query, blocking.

    ``tz``: the time zone ``since`` and ``until`` are days of (the quota's).
    Raises :class:`workspacespawner.db.DatabaseUnavailable` when the
    database cannot be read.
    """
    since, until = filters.bounds(tz)
    found = log.query(
        user=filters.user,
        action=filters.action,
        disk=filters.disk,
        result=filters.result,
        since=since,
        until=until,
        newest_first=True,
        limit=limit + 1,
        offset=offset,
    )
    return AuditPage(
        records=[record.to_json() for record in found[:limit]],
        offset=offset,
        limit=limit,
        has_more=len(found) > limit,
        filters=filters,
    )
