"""``workspacespawner retention``: list retained disks, purge those past their time, give a user's disks back.

``retention list [--user U] [--json]``
    retained disks (and those being deleted): owner, size, retain-until.
``retention purge [--dry-run] [--every SECONDS]``
    delete retained disks past retain-until that nothing uses (with the VM,
    Service and cloud-init Secret of a root disk), audited. A delete that
    fails prints a line naming the disk and the error, and the command
    exits 1 (the disk stays ``DeletingDisk`` for the next purge). ``--every``
    repeats it until stopped: run it as a JupyterHub managed service for a
    periodic purge::

        c.JupyterHub.services.append({
            "name": "disk-purge",
            "command": ["workspacespawner", "retention", "purge", "--every", "3600",
                        "-f", "/usr/local/etc/jupyterhub/jupyterhub_config.py"],
        })

``retention reclaim USER``
    give USER their retained disks back (what the ``admin-only`` reclaim
    policy leaves to an admin), audited.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from workspacespawner.admin import common
from workspacespawner.admin.disk import LIST_COLUMNS
from workspacespawner.core import names
from workspacespawner.core.rsttext import summary
from workspacespawner.lifecycle.disks import PARKED, DiskOps
from workspacespawner.lifecycle.retention import Purger, reclaim_user

log = logging.getLogger("workspacespawner")

PURGE_COLUMNS = ["owner", "name", "kind", "action", "why"]


def purge_rows(plan) -> list[dict]:
    """One row per disk of a :class:`~workspacespawner.lifecycle.retention.PurgePlan`: purged (with the result) or kept (with why)."""
    rows = [
        {"owner": item.owner, "name": item.name, "kind": item.disk["kind"], "action": "purge", "why": item.result,
         "goes_with": [f"{o['kind']}/{o['metadata']['name']}" for o in item.goes_with]}
        for item in plan.purge
    ]
    rows += [
        {"owner": names.owner_name(disk["metadata"]) or "", "name": disk["metadata"]["name"],
         "kind": disk["kind"], "action": "keep", "why": why}
        for disk, why in plan.kept
    ]
    return rows


def failed_purges(plan) -> list[str]:
    """One line per disk of ``plan`` whose purge failed: the disk, its owner and the error."""
    return [
        f"could not purge {item.disk['kind']} {item.name} of {item.owner}: {item.result.removeprefix('error: ')}"
        for item in plan.purge
        if item.result.startswith("error")
    ]


async def _run(args) -> int:
    config = common.load_config(args)
    namespace = common.namespace_of(config, args.namespace)
    async with common.kube_client(common.kubeconfig_of(args)) as kube:
        if args.action == "list":
            rows = [row for row in await DiskOps(kube, namespace).listing(args.user) if row["phase"] in PARKED]
            common.print_rows(rows, LIST_COLUMNS, as_json=args.json, empty="(no retained disks)")
            return 0
        audit = common.audit_log(config)
        if args.action == "reclaim":
            moved = await reclaim_user(kube, namespace, args.user, audit=audit, actor=common.actor_of(args))
            print(f"Gave {args.user} back: {', '.join(moved)}" if moved else f"{args.user} has no retained disks.")
            return 0
        purger = Purger(kube, namespace, audit=audit, actor=common.actor_of(args))
        while True:
            failed = []
            try:
                plan = await purger.purge(dry_run=args.dry_run)
                common.print_rows(purge_rows(plan), PURGE_COLUMNS, as_json=args.json, empty="(no retained disks)")
                failed = failed_purges(plan)
            except common.errors() as e:
                if not args.every:
                    raise
                log.error("Purge failed (%s); trying again in %.0f s", common.describe(e), args.every)  # a periodic purge carries on
            for line in failed:
                if args.every:
                    log.error("%s; trying again in %.0f s", line, args.every)
                else:
                    common.fail(line)
            if not args.every:
                return 1 if failed else 0
            sys.stdout.flush()
            await asyncio.sleep(args.every)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="workspacespawner retention", description=summary(__doc__))
    sub = parser.add_subparsers(dest="action", required=True)
    listing = sub.add_parser("list", help="retained disks: owner, size, retain-until")
    listing.add_argument("--user", help="only this user's disks")
    purge = sub.add_parser("purge", help="delete retained disks past retain-until that nothing uses")
    purge.add_argument("--dry-run", action="store_true", help="say what would be deleted, delete nothing")
    purge.add_argument("--every", type=float, metavar="SECONDS", help="repeat every SECONDS until stopped (a periodic purge)")
    reclaim = sub.add_parser("reclaim", help="give a user their retained disks back")
    reclaim.add_argument("user", help="the JupyterHub user name")
    for each in (listing, purge, reclaim):
        common.add_common_arguments(each)
        each.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    if getattr(args, "every", None) is not None and args.every <= 0:
        return common.fail("--every must be a number of seconds > 0", 2)
    return common.run(_run(args))
