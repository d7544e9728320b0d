"""A user's card-hours for the dashboard: this month's balance, card-hours per day, the last months, per server.

Every number is :func:`workspacespawner.quota.policy.card_hours` of the
ledger's runs (:class:`~workspacespawner.quota.policy.Run`) clipped to a
period: a day, a month. Nothing here counts a run's time another way, so a
run crossing midnight is split exactly between its two days, an open run
counts up to ``now``, reservations count nothing, and the days of this month
add up to what :meth:`Ledger.usage <workspacespawner.quota.ledger.Ledger.usage>`
says for the month (up to float rounding of the additions).

Days and months are the quota's calendar: ``WorkspaceQuota.timezone``
(``tz``, an IANA name or a tzinfo), as :func:`policy.month_bounds` draws
them. Units: card-hours (one GPU held for one hour), aware datetimes.
Server names are JupyterHub's: ``""`` is the default server
(:func:`server_label` names it for people).

One ledger read gives a user's view (:func:`history_span`, then
:meth:`Ledger.runs_of`); :func:`load` does it on the database thread. The
Cluster view's biggest users and their 7- and 30-day trends
(:func:`.cluster.top_users`, days by :func:`trend`) come from one
:meth:`Ledger.runs_all` over :func:`trend_span`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo

from workspacespawner.quota import policy
from workspacespawner.quota.policy import Run

#: How many months before this one the history shows.
HISTORY_MONTHS = 6


def server_label(server_name: str) -> str:
    """A server name for people: ``""`` (JupyterHub's default server) is ``"(default)"``."""
    return server_name or "(default)"


@dataclass(frozen=True)
class Balance:
    """The header of "My card-hours": this month's card-hours up to ``now``.

    ``used``, ``limit`` and ``left`` (``max(0, limit - used)``) in
    card-hours; ``reset``: when they reset (the next month's first instant,
    in the quota's time zone); ``period_start``: this month's first instant;
    ``running_gpus``: GPUs of the workspaces reserved or running now.
    """

    used: float
    limit: float
    left: float
    reset: datetime
    period_start: datetime
    running_gpus: int

    def to_json(self) -> dict:
        """A JSON-safe dict (times in ISO 8601 with their offset)."""
        return {
            "used": self.used,
            "limit": self.limit,
            "left": self.left,
            "reset": self.reset.isoformat(),
            "period_start": self.period_start.isoformat(),
            "running_gpus": self.running_gpus,
        }


@dataclass(frozen=True)
class ServerSeries:
    """Card-hours per period (days or months), per server: what a stacked bar chart draws.

    ``labels``: one per period (``"1"``.. ``"31"`` for days, ``"2025-01"``
    for months); ``starts``: each period's first instant (aware, in the
    quota's time zone), one more at the end for the last period's end;
    ``servers``: the servers with card-hours in any period, the default
    server (``""``) first, then by name; ``values[server][i]``: that
    server's card-hours in period ``i``; ``totals[i]``: every server's
    card-hours in period ``i`` (runs of any server, counted together).
    """

    labels: list[str]
    starts: list[datetime]
    servers: list[str]
    values: dict[str, list[float]]
    totals: list[float]

    @property
    def total(self) -> float:
        """Card-hours of every period together."""
        return sum(self.totals)

    def server_total(self, server_name: str) -> float:
        """Card-hours of ``server_name`` in every period together (0 for a server not listed)."""
        return sum(self.values.get(server_name, ()))

    def labelled(self) -> dict[str, list[float]]:
        """``values`` keyed by :func:`server_label` (what a chart's legend shows)."""
        return {server_label(name): values for name, values in self.values.items()}

    def to_json(self) -> dict:
        """A JSON-safe dict: ``labels``, ``starts`` (ISO 8601), ``servers``, ``values``, ``totals``."""
        return {
            "labels": self.labels,
            "starts": [moment.isoformat() for moment in self.starts],
            "servers": self.servers,
            "values": self.values,
            "totals": self.totals,
        }


def _month_start(year: int, month: int, where: tzinfo) -> datetime:
    """The first instant of month ``month`` of ``year`` (months past 12 or below 1 wrap into other years)."""
    year, month = year + (month - 1) // 12, (month - 1) % 12 + 1
    return datetime(year, month, 1, tzinfo=where)


def day_starts(now: datetime, tz: str | tzinfo = "UTC") -> list[datetime]:
    """The local midnights of the month holding ``now`` in ``tz``, and the next month's first: ``days + 1`` instants.

    A day with a daylight-saving change is 23 or 25 hours long.
    """
    where = policy.zone(tz)
    start, end = policy.month_bounds(now, where)
    count = (end.replace(tzinfo=None) - start.replace(tzinfo=None)).days
    return [datetime(start.year, start.month, day, tzinfo=where) for day in range(1, count + 1)] + [end]


def month_starts(now: datetime, tz: str | tzinfo = "UTC", months: int = HISTORY_MONTHS) -> list[datetime]:
    """The first instants of the ``months`` months before the one holding ``now``, oldest first, then this month's.

    ``months + 1`` instants: the bounds of the ``months`` months of the history.
    """
    where = policy.zone(tz)
    this, _end = policy.month_bounds(now, where)
    return [_month_start(this.year, this.month - back, where) for back in range(months, -1, -1)]


def history_span(now: datetime, tz: str | tzinfo = "UTC", months: int = HISTORY_MONTHS) -> tuple[datetime, datetime]:
    """The period one :meth:`Ledger.runs_of` read covers for :func:`view`: from ``months`` months back to this month's end."""
    where = policy.zone(tz)
    return month_starts(now, where, months)[0], policy.month_bounds(now, where)[1]


def _servers(runs: list[Run], start: datetime, end: datetime, now: datetime) -> list[str]:
    """The servers whose runs used card-hours inside ``[start, end)``: ``""`` first, then by name."""
    found = {
        run.server_name
        for run in runs
        if policy.card_hours([run], start, end, now) > 0
    }
    return sorted(found, key=lambda name: (name != "", name))


def per_server(runs, bounds: list[datetime], labels: list[str], now: datetime) -> ServerSeries:
    """Card-hours of ``runs`` per period ``[bounds[i], bounds[i+1])``, per server, up to ``now`` (pure).

    ``bounds``: ``len(labels) + 1`` increasing aware instants. Raises
    ValueError when the counts do not match.
    """
    runs = list(runs)
    if len(bounds) != len(labels) + 1:
        raise ValueError(f"{len(labels)} periods need {len(labels) + 1} bounds, not {len(bounds)}")
    periods = list(zip(bounds, bounds[1:], strict=False))
    servers = _servers(runs, bounds[0], bounds[-1], now)
    by_server = {name: [run for run in runs if run.server_name == name] for name in servers}
    values = {
        name: [policy.card_hours(theirs, start, end, now) for start, end in periods] for name, theirs in by_server.items()
    }
    totals = [policy.card_hours(runs, start, end, now) for start, end in periods]
    return ServerSeries(labels=list(labels), starts=list(bounds), servers=servers, values=values, totals=totals)


def days_of_month(runs, now: datetime, tz: str | tzinfo = "UTC") -> ServerSeries:
    """Card-hours per day of the month holding ``now`` (in ``tz``), per server; days after today are 0 (pure).

    Labels are the days of the month, ``"1"`` to ``"28"``..``"31"``.
    """
    bounds = day_starts(now, tz)
    return per_server(runs, bounds, [str(moment.day) for moment in bounds[:-1]], now)


def past_months(runs, now: datetime, tz: str | tzinfo = "UTC", months: int = HISTORY_MONTHS) -> ServerSeries:
    """Card-hours per month for the ``months`` months before the one holding ``now``, oldest first, per server (pure).

    Labels are ``"YYYY-MM"``. ``runs`` must cover them (:func:`history_span`).
    """
    bounds = month_starts(now, tz, months)
    return per_server(runs, bounds, [f"{moment:%Y-%m}" for moment in bounds[:-1]], now)


def balance(runs, limit: float, now: datetime, tz: str | tzinfo = "UTC") -> Balance:
    """This month's :class:`Balance` from ``runs`` (this month's and active ones, more do no harm) and the
    user's ``limit`` (card-hours per month, :attr:`Limits.card_hours_per_month`) (pure)."""
    period = policy.month_bounds(now, tz)
    usage = policy.usage_from_runs(runs, period, now)
    return Balance(
        used=usage.card_hours,
        limit=limit,
        left=max(0.0, limit - usage.card_hours),
        reset=period[1],
        period_start=period[0],
        running_gpus=usage.running_gpus,
    )


@dataclass(frozen=True)
class CardHoursView:
    """Everything "My card-hours" shows: the ``balance``, this month's ``days`` and the ``months`` before it."""

    balance: Balance
    days: ServerSeries
    months: ServerSeries

    def to_json(self) -> dict:
        return {"balance": self.balance.to_json(), "days": self.days.to_json(), "months": self.months.to_json()}


def view(runs, limit: float, now: datetime, tz: str | tzinfo = "UTC", months: int = HISTORY_MONTHS) -> CardHoursView:
    """The :class:`CardHoursView` of ``runs`` (the ledger's runs over :func:`history_span`) (pure)."""
    runs = list(runs)
    return CardHoursView(
        balance=balance(runs, limit, now, tz),
        days=days_of_month(runs, now, tz),
        months=past_months(runs, now, tz, months),
    )


async def load(ledger, executor, user: str, limit: float, now: datetime, tz: str | tzinfo = "UTC") -> CardHoursView:
    """``user``'s :class:`CardHoursView`: one :meth:`Ledger.runs_of` read on ``executor`` (a
    :class:`~workspacespawner.db.executor.DatabaseExecutor`), never on the event loop.

    Raises :class:`~workspacespawner.quota.ledger.LedgerUnavailable` when the ledger cannot be read.
    """
    runs = await executor.run(ledger.runs_of, user, history_span(now, tz))
    return view(runs, limit, now, tz)


def trend_starts(now: datetime, days: int, tz: str | tzinfo = "UTC") -> list[datetime]:
    """The local midnights of the ``days`` days up to and including today (in ``tz``), and tomorrow's: ``days + 1``
    instants, oldest first. Raises ValueError for ``days`` below 1."""
    if isinstance(days, bool) or not isinstance(days, int) or days < 1:
        raise ValueError(f"a trend needs a whole number of days, at least 1, not {days!r}")
    where = policy.zone(tz)
    local = policy.aware(now).astimezone(where)
    today = datetime(local.year, local.month, local.day)
    return [(today - timedelta(days=back)).replace(tzinfo=where) for back in range(days - 1, -2, -1)]


def trend(runs, now: datetime, days: int, tz: str | tzinfo = "UTC") -> list[float]:
    """Card-hours per day of the ``days`` days up to and including today (in ``tz``), oldest first (pure).

    For a sparkline of the last 7 or 30 days; today counts up to ``now``.
    Raises ValueError for ``days`` below 1.
    """
    starts = trend_starts(now, days, tz)
    runs = list(runs)
    return [policy.card_hours(runs, start, end, now) for start, end in zip(starts, starts[1:], strict=False)]


def trend_span(now: datetime, tz: str | tzinfo = "UTC", days: int = 30) -> tuple[datetime, datetime]:
    """The period one :meth:`Ledger.runs_all` read covers for :func:`.cluster.top_users`: the last ``days`` days to tomorrow."""
    starts = trend_starts(now, days, tz)
    return starts[0], starts[-1]
