"""``workspacespawner usage``: card-hours used and left per user, and their running workspaces.

``card_hours_used`` is weighted (each run's GPU units × the weight it was
charged at × hours: :func:`~workspacespawner.quota.policy.card_hours`), what
quotas count; ``gpu_hours`` is the raw unit-hours (GPU units × hours, of any
resource) and ``gpu_hours_by_type`` splits them by GPU resource and product
(``nvidia.com/gpu NVIDIA-A100-SXM4-80GB 3.5; nvidia.com/mig-1g.10gb NVIDIA-A100-SXM4-80GB 2``,
``(unknown)`` for a run not placed on a labelled node).

Reads the hub's own ``jupyterhub_config.py`` (``-f``), loaded the way
JupyterHub loads it (traitlets' ``PyFileConfigLoader``, so
``load_subconfig`` works), for the ``c.WorkspaceQuota.*`` settings and the
ledger, and the hub's database (``c.JupyterHub.db_url``) for group
membership, read-only. A relative SQLite path of the ledger is relative to
the config file's folder, as for the hub (:func:`~workspacespawner.quota.config.config_folder`);
a ledger file that does not exist is an error, never a new empty ledger::

    workspacespawner usage -f /srv/jupyterhub/jupyterhub_config.py --month 2025-06 --group students --csv
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from traitlets.config import Config, PyFileConfigLoader

from workspacespawner.quota import policy
from workspacespawner.quota.config import WorkspaceQuota
from workspacespawner.quota.ledger import Ledger, LedgerUnavailable
from workspacespawner.quota.policy import OPEN, number

COLUMNS = (
    "user",
    "groups",
    "card_hours_used",
    "card_hours_limit",
    "card_hours_left",
    "running",
    "running_gpus",
    "workspaces",
    "gpu_hours",
    "gpu_hours_by_type",
)

#: How :func:`gpu_hours_by_type` names a run whose GPU product is not known (its node had no product label).
UNKNOWN_PRODUCT = "(unknown)"


def gpu_hours_by_type(hours: dict[tuple[str, str], float]) -> str:
    """Raw unit-hours by ``(resource, product)`` as one cell: ``nvidia.com/gpu Tesla-V100-SXM2-16GB 3.5; ...``
    (sorted, two decimals at most; ``""`` when none)."""
    return "; ".join(
        f"{resource} {product or UNKNOWN_PRODUCT} {number(round(value, 2))}" for (resource, product), value in sorted(hours.items())
    )


def load_hub_config(path: str | None) -> Config:
    """The traitlets Config of a ``jupyterhub_config.py``; empty if ``path`` is None and no such file is here.

    ``JupyterHub.config_file`` is set to the file's absolute path, as
    ``jupyterhub -f`` sets it, so relative paths in it resolve the hub's way.
    Raises FileNotFoundError for a ``path`` that does not exist.
    """
    if path is None:
        if not Path("jupyterhub_config.py").exists():
            return Config()
        path = "jupyterhub_config.py"
    file = Path(path).resolve()
    if not file.exists():
        raise FileNotFoundError(f"no config file {path}")
    config = PyFileConfigLoader(file.name, path=str(file.parent)).load_config()
    config.JupyterHub.config_file = str(file)
    return config


def _read_hub_db(config: Config, read):
    """``read(conn)`` on JupyterHub's database (``c.JupyterHub.db_url``), with plain SQL; None if it cannot be read."""
    import sqlalchemy as sa

    url = config.JupyterHub.get("db_url", "sqlite:///jupyterhub.sqlite")
    parsed = sa.engine.make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database and not Path(parsed.database).exists():
        return None
    engine = sa.create_engine(parsed)
    try:
        with engine.connect() as conn:
            return read(conn)
    except sa.exc.SQLAlchemyError:
        return None
    finally:
        engine.dispose()


def hub_groups(config: Config) -> dict[str, set[str]] | None:
    """``{user: {group, ...}}`` from the hub's database, or None if it cannot be read.

    Reads JupyterHub's ``users``, ``groups`` and ``user_group_map`` tables
    with plain SQL (their schema since JupyterHub 1.0), so the admin
    commands need no JupyterHub installed.
    """
    import sqlalchemy as sa

    def read(conn):
        groups: dict[str, set[str]] = {name: set() for (name,) in conn.execute(sa.text("SELECT name FROM users"))}
        members = conn.execute(sa.text(
            "SELECT users.name, groups.name FROM user_group_map"
            " JOIN users ON users.id = user_group_map.user_id JOIN groups ON groups.id = user_group_map.group_id"
        ))
        for user, group in members:
            groups.setdefault(user, set()).add(group)
        return groups

    return _read_hub_db(config, read)


def hub_servers(config: Config) -> tuple[set[str], set[tuple[str, str]]] | None:
    """``(users, active)`` from the hub's database: every user name, and ``(user, server)`` of every server
    JupyterHub has running, starting or stopping (a ``spawners`` row with a ``server_id``); None if unreadable.
    """
    import sqlalchemy as sa

    def read(conn):
        users = {name for (name,) in conn.execute(sa.text("SELECT name FROM users"))}
        active = {(user, server or "") for user, server in conn.execute(sa.text(
            "SELECT users.name, spawners.name FROM spawners JOIN users ON users.id = spawners.user_id"
            " WHERE spawners.server_id IS NOT NULL"
        ))}
        return users, active

    return _read_hub_db(config, read)


def usage_rows(
    settings: WorkspaceQuota,
    ledger: Ledger,
    groups: dict[str, set[str]] | None,
    period,
    now,
    *,
    user=None,
    group=None,
    include=(),
) -> list[dict]:
    """One row per user (the columns of :data:`COLUMNS`), sorted by user name.

    ``card_hours_*`` are weighted card-hours; ``gpu_hours`` raw unit-hours
    and ``gpu_hours_by_type`` the same per GPU resource and product
    (:func:`~workspacespawner.quota.policy.gpu_hours`).

    Everyone with use in ``period``, and the users named in ``include``
    (use or not: the dashboard's report lists disk owners and group members
    too); with ``group``, every member of it (use or not); with ``user``,
    that user alone. Running workspaces are listed for the month holding
    ``now`` only. One ledger read (blocking).
    """
    runs = ledger.runs_all(period)
    usage = {name: policy.usage_from_runs(theirs, period, now) for name, theirs in runs.items()}
    names = set(usage) | set(include)
    if group is not None:
        names = {name for name, theirs in (groups or {}).items() if group in theirs}
    if user is not None:
        names = {user} if group is None or user in names else set()
    current = period[0] <= now < period[1]
    rows = []
    for name in sorted(names):
        theirs = (groups or {}).get(name, set())
        use = usage.get(name) or policy.Usage(0.0, *period)
        if not current:
            use = policy.Usage(use.card_hours, *period)  # running workspaces belong to this month only
        limit = settings.limits_for(name, theirs).card_hours_per_month
        by_type = policy.gpu_hours(runs.get(name, ()), *period, now)
        workspaces = [
            f"{run.server_name or '(default)'}:{run.workspace_kind}:{run.gpus}gpu{'' if run.state == OPEN else ':' + run.state}"
            for run in use.active
        ]
        rows.append(
            {
                "user": name,
                "groups": " ".join(sorted(theirs)),
                "card_hours_used": round(use.card_hours, 2),
                "card_hours_limit": limit,
                "card_hours_left": round(max(0.0, limit - use.card_hours), 2),
                "running": use.running,
                "running_gpus": use.running_gpus,
                "workspaces": " ".join(workspaces),
                "gpu_hours": round(sum(by_type.values()), 2),
                "gpu_hours_by_type": gpu_hours_by_type(by_type),
            }
        )
    return rows


def print_table(rows: list[dict], header: str, out) -> None:
    print(header, file=out)
    shown = [{k: number(v) if isinstance(v, float) else str(v) for k, v in row.items()} for row in rows]
    widths = {c: max([len(c)] + [len(row[c]) for row in shown]) for c in COLUMNS}
    print("  ".join(c.ljust(widths[c]) for c in COLUMNS).rstrip(), file=out)
    for row in shown:
        print("  ".join(row[c].ljust(widths[c]) for c in COLUMNS).rstrip(), file=out)
    if not rows:
        print("(no users)", file=out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="workspacespawner usage",
        description="Card-hours used and left per user this month (or --month), and their running workspaces, "
        "read with the hub's own config file.",
    )
    parser.add_argument(
        "-f", "--config", help="the hub's jupyterhub_config.py (default: ./jupyterhub_config.py if there)"
    )
    parser.add_argument("--month", help="the month, YYYY-MM (default: this month, in WorkspaceQuota.timezone)")
    parser.add_argument("--user", help="only this user")
    parser.add_argument("--group", help="only members of this JupyterHub group")
    parser.add_argument("--csv", action="store_true", help="print CSV instead of a table")
    args = parser.parse_args(argv)
    try:
        config = load_hub_config(args.config)
        settings = WorkspaceQuota(config=config)
        now = policy.utcnow()
        period = (
            policy.named_month(args.month, settings.timezone)
            if args.month
            else policy.month_bounds(now, settings.timezone)
        )
    except (FileNotFoundError, ValueError) as e:
        print(f"workspacespawner usage: {e}", file=sys.stderr)
        return 2
    groups = hub_groups(config)
    if groups is None:
        print(
            "workspacespawner usage: the hub's database cannot be read: group limits are not applied", file=sys.stderr
        )
    try:
        ledger = Ledger(settings.existing_ledger_url(), timeout=settings.ledger_timeout)
    except LedgerUnavailable as e:
        print(f"workspacespawner usage: {e}", file=sys.stderr)
        return 1
    try:
        rows = usage_rows(settings, ledger, groups, period, now, user=args.user, group=args.group)
    except LedgerUnavailable as e:
        print(f"workspacespawner usage: {e}", file=sys.stderr)
        return 1
    finally:
        ledger.dispose()
    if args.csv:
        writer = csv.DictWriter(sys.stdout, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    else:
        start, end = period
        print_table(
            rows, f"Card-hours for {start:%Y-%m} ({settings.timezone}); they reset on {policy.when(end)}.", sys.stdout
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
