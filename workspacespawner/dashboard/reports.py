"""The Reports page's numbers: card-hours and disk per department, group and user for one month, and their CSV.

**Users.** A user row is the row ``workspacespawner usage`` prints for the
same month (:func:`workspacespawner.quota.cli.usage_rows`, called, not
copied): card-hours used, the user's monthly limit and what is left, in
card-hours, rounded to two decimals. Listed: everyone with card-hours in the
month, every member of a JupyterHub group, every owner of a disk.

**Disk.** What the user's disks ask for now (PersistentVolumeClaims and
DataVolumes carrying their owner labels, counted once each:
:func:`workspacespawner.lifecycle.disks.user_disk_bytes`), in GiB (2**30
bytes), rounded to two decimals. It is the disk held when the report is
made, whatever the month.

**Groups.** One row per JupyterHub group with a member listed: the sums of
its members' rows. A user in two groups counts in both, so group rows can
add up to more than all users together.

**Departments.** ``departments`` maps a department's name to JupyterHub
group names (the dashboard's ``departments`` setting, e.g. ``{"Physics":
["physics-students", "physics-staff"]}``). A department row sums its
*distinct* users: a user in two of its groups counts once. With departments
set, the users in no department's group make one more row,
:data:`NO_DEPARTMENT`, so no one is left out of the department totals.

**Total.** One row (level ``total``, :data:`TOTAL`) of every user, each
counted once: the departments' rows (with :data:`NO_DEPARTMENT`) add up to it
unless a user is in two departments.

Sums: ``card_hours_used``, ``card_hours_limit``, ``card_hours_left`` and
``disk_gib`` add up the user rows' numbers (``left`` is each user's left,
never below 0, added: not ``limit - used``); ``users`` counts them.
"""

from __future__ import annotations

import csv
import io
from dataclasses import asdict, dataclass
from datetime import datetime

from workspacespawner.core import names as labels
from workspacespawner.lifecycle.disks import user_disk_bytes
from workspacespawner.quota.cli import usage_rows

#: The levels of a report row, in the order rows are listed.
LEVELS = ("department", "group", "user", "total")
#: The department row of the users in no department's group.
NO_DEPARTMENT = "(no department)"
#: The name of the row of every user.
TOTAL = "All users"

#: The CSV's columns, in order (:func:`to_csv`).
CSV_COLUMNS = (
    "level",
    "name",
    "card_hours_used",
    "card_hours_limit",
    "card_hours_left",
    "disk_gib",
    "users",
    "groups",
)

GIB = 2**30


@dataclass(frozen=True)
class ReportRow:
    """One row: a department, a group or a user (``level``) and its numbers.

    ``card_hours_*`` in card-hours, ``disk_gib`` in GiB, both rounded to two
    decimals; ``users``: how many users the row counts (1 for a user);
    ``groups``: a user's groups, or a department's groups, space-separated
    and sorted (empty for a group).
    """

    level: str
    name: str
    card_hours_used: float
    card_hours_limit: float
    card_hours_left: float
    disk_gib: float
    users: int
    groups: str = ""

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Report:
    """One month's report: ``month`` (``"YYYY-MM"``), its bounds (aware, in the quota's time zone), the rows
    of each level (departments in name order then :data:`NO_DEPARTMENT`, groups in name order, users in name
    order) and ``total``, every user once."""

    month: str
    period_start: datetime
    period_end: datetime
    departments: list[ReportRow]
    groups: list[ReportRow]
    users: list[ReportRow]
    total: ReportRow

    def rows(self) -> list[ReportRow]:
        """Every row: departments, then groups, then users, then the total."""
        return [*self.departments, *self.groups, *self.users, self.total]

    def to_json(self) -> dict:
        return {
            "month": self.month,
            "period_start": self.period_start.isoformat(),
            "period_end": self.period_end.isoformat(),
            "departments": [row.to_json() for row in self.departments],
            "groups": [row.to_json() for row in self.groups],
            "users": [row.to_json() for row in self.users],
            "total": self.total.to_json(),
        }


def check_departments(value) -> dict[str, list[str]]:
    """``value`` checked as a departments mapping (department name → list of JupyterHub group names).

    Returns it with each group list sorted and without repeats. Raises
    ValueError saying what is wrong, to read after the setting's name
    (``"must be ..., not ..."``).
    """
    if not isinstance(value, dict):
        raise ValueError(f"must be a dict of department names to lists of JupyterHub groups, not {value!r}")
    checked = {}
    for name, groups in value.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"must have department names that are non-empty strings, not {name!r}")
        if name == NO_DEPARTMENT:
            raise ValueError(f"must not name a department {NO_DEPARTMENT!r}: the report's row of the users in none")
        if isinstance(groups, str) or not isinstance(groups, (list, tuple, set, frozenset)):
            raise ValueError(f"[{name!r}] must be a list of JupyterHub group names such as ['physics'], not {groups!r}")
        if not all(isinstance(group, str) and group for group in groups):
            raise ValueError(f"[{name!r}] must hold non-empty group names, not {groups!r}")
        checked[name] = sorted(set(groups))
    return checked


def disk_bytes_by_user(pvcs: list[dict], datavolumes: list[dict]) -> dict[str, int]:
    """``{user: bytes}``: what each owner's disks ask for, summed (pure; owners from consistent owner labels only).

    ``pvcs`` and ``datavolumes``: the objects as plain dicts (the watch
    caches' PersistentVolumeClaims and DataVolumes). A DataVolume and the
    PVC of the same name count once (:func:`~workspacespawner.lifecycle.disks.user_disk_bytes`).
    """
    owners = {
        owner
        for obj in (*pvcs, *datavolumes)
        if (owner := labels.owner_name(obj.get("metadata") or {})) is not None
    }
    return {owner: sum(user_disk_bytes(pvcs, datavolumes, owner).values()) for owner in sorted(owners)}


def _round(value: float) -> float:
    return round(float(value), 2)


def _sum_row(level: str, name: str, rows: list[ReportRow], groups: str = "") -> ReportRow:
    return ReportRow(
        level=level,
        name=name,
        card_hours_used=_round(sum(row.card_hours_used for row in rows)),
        card_hours_limit=_round(sum(row.card_hours_limit for row in rows)),
        card_hours_left=_round(sum(row.card_hours_left for row in rows)),
        disk_gib=_round(sum(row.disk_gib for row in rows)),
        users=len(rows),
        groups=groups,
    )


def build_report(
    user_rows: list[dict],
    groups: dict[str, set[str]],
    departments: dict[str, list[str]],
    disk_bytes: dict[str, int],
    period: tuple[datetime, datetime],
) -> Report:
    """The :class:`Report` (pure) from ``workspacespawner usage``'s rows for the month (``user_rows``,
    :func:`~workspacespawner.quota.cli.usage_rows`), ``groups`` (``{user: {group}}``), ``departments``
    (:func:`check_departments`' shape) and ``disk_bytes`` (:func:`disk_bytes_by_user`).

    A disk owner without a usage row gets a user row with 0 card-hours and
    an unknown limit (0): pass them to ``usage_rows(include=...)`` to get
    their limits (:func:`read_report` does).
    """
    users = []
    for row in sorted(user_rows, key=lambda r: r["user"]):
        name = row["user"]
        users.append(
            ReportRow(
                level="user",
                name=name,
                card_hours_used=row["card_hours_used"],
                card_hours_limit=row["card_hours_limit"],
                card_hours_left=row["card_hours_left"],
                disk_gib=_round(disk_bytes.get(name, 0) / GIB),
                users=1,
                groups=row["groups"],
            )
        )
    listed = {row.name for row in users}
    for name in sorted(set(disk_bytes) - listed):
        users.append(ReportRow("user", name, 0.0, 0.0, 0.0, _round(disk_bytes[name] / GIB), 1,
                               " ".join(sorted(groups.get(name, ())))))
    users.sort(key=lambda row: row.name)
    by_name = {row.name: row for row in users}
    members: dict[str, list[ReportRow]] = {}
    for name, theirs in groups.items():
        if name in by_name:
            for group in theirs:
                members.setdefault(group, []).append(by_name[name])
    group_rows = [_sum_row("group", group, sorted(rows, key=lambda r: r.name)) for group, rows in sorted(members.items())]
    department_rows, in_one = [], set()
    for department, its_groups in sorted(departments.items()):
        distinct = {row.name: row for group in its_groups for row in members.get(group, [])}
        in_one |= set(distinct)
        department_rows.append(
            _sum_row("department", department, [distinct[n] for n in sorted(distinct)], " ".join(sorted(its_groups)))
        )
    if departments:
        department_rows.append(_sum_row("department", NO_DEPARTMENT, [row for row in users if row.name not in in_one]))
    start, end = period
    return Report(
        month=f"{start:%Y-%m}",
        period_start=start,
        period_end=end,
        departments=department_rows,
        groups=group_rows,
        users=users,
        total=_sum_row("total", TOTAL, users),
    )


def read_report(
    settings,
    ledger,
    groups: dict[str, set[str]] | None,
    departments: dict[str, list[str]],
    pvcs: list[dict],
    datavolumes: list[dict],
    period: tuple[datetime, datetime],
    now: datetime,
) -> Report:
    """The :class:`Report` of ``period`` (one ledger read: blocking, run it on the database thread).

    ``settings``: the hub's :class:`~workspacespawner.quota.config.WorkspaceQuota`;
    ``ledger``: a :class:`~workspacespawner.quota.ledger.Ledger`; ``groups``:
    ``{user: {group}}`` of every hub user (None: unknown, no group rows);
    ``pvcs``, ``datavolumes``: plain dicts from the watch caches. Raises
    :class:`~workspacespawner.quota.ledger.LedgerUnavailable` when the ledger
    cannot be read.
    """
    groups = groups or {}
    disks = disk_bytes_by_user(pvcs, datavolumes)
    include = {name for name, theirs in groups.items() if theirs} | set(disks)
    rows = usage_rows(settings, ledger, groups, period, now, include=include)
    return build_report(rows, groups, departments, disks, period)


def _cell(value):
    """A text cell a spreadsheet will not run: one starting with ``= + - @`` (or a tab, a return) gets a ``'`` first."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def to_csv(report: Report) -> str:
    """The report as CSV text: a header row of :data:`CSV_COLUMNS`, then every row (departments, groups, users,
    the total).

    Numbers as the rows hold them; a name that a spreadsheet would take for
    a formula (``=...``, ``+...``, ``-...``, ``@...``) is written with a
    leading ``'``.
    """
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in report.rows():
        writer.writerow({key: _cell(value) for key, value in row.to_json().items()})
    return out.getvalue()
