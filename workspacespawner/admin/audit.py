"""``workspacespawner audit``: the audit trail of disk operations (expand, snapshot, restore, retain, reclaim, purge, delete, fence, publish).

Reads the ledger's database (``c.WorkspaceQuota.ledger_url`` of the hub's
config)::

    workspacespawner audit -f /srv/jupyterhub/jupyterhub_config.py --user ann --since 2025-06-01 --json
"""

from __future__ import annotations

import argparse

from workspacespawner.admin import common
from workspacespawner.core.rsttext import summary
from workspacespawner.core.times import parse_time
from workspacespawner.lifecycle.audit import ACTIONS

COLUMNS = ["time", "actor", "user", "server", "disk", "action", "before", "after", "result"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="workspacespawner audit", description=summary(__doc__))
    common.add_common_arguments(parser, cluster=False, actor=False)
    parser.add_argument("--user", help="only this user's records")
    parser.add_argument("--since", help="only records at or after this date or time (2025-06-01, 2025-06-01T12:00:00Z; UTC)")
    parser.add_argument("--action", choices=ACTIONS, help="only this action")
    parser.add_argument("--json", action="store_true", help="print a JSON array")
    args = parser.parse_args(argv)
    try:
        since = parse_time(args.since)
    except ValueError:
        return common.fail(f"--since {args.since!r} is not a date such as 2025-06-01", 2)
    try:
        log = common.audit_log(common.load_config(args), read_only=True)
        records = log.query(user=args.user, since=since, action=args.action)
    except common.errors() as e:
        return common.fail(common.describe(e))
    rows = [r.to_json() for r in records]
    if not args.json:
        rows = [{**row, "before": _compact(row["before"]), "after": _compact(row["after"])} for row in rows]
    common.print_rows(rows, COLUMNS, as_json=args.json, empty="(no records)")
    return 0


def _compact(value) -> str:
    if not value:
        return ""
    return " ".join(f"{k}={v}" for k, v in value.items() if v not in (None, ""))
