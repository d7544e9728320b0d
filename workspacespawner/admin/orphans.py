"""``workspacespawner orphans``: Pods and VMIs with a user's owner labels that no server of the hub runs; ``--remove`` removes them.

It compares the namespace's Pods and VMIs carrying our owner labels with
JupyterHub's database (``c.JupyterHub.db_url``, read with plain SQL): each
one whose ``(user, server)`` JupyterHub does not have running, starting or
stopping is listed, as ``orphan`` (no such user) or ``ghost`` (the hub
shows that server stopped; the hub's reconciler removes those by itself).
With ``--remove`` each is removed: a Pod deleted with its uid as
precondition, a VMI's VirtualMachine stopped. Disks are never touched; the
ledger closes their runs once the hub sees them gone. Exit 0 when none are
left to remove, 2 when some are listed and not removed, 1 on an error.
"""

from __future__ import annotations

import argparse

from workspacespawner.admin import common
from workspacespawner.core import names
from workspacespawner.core.rsttext import summary
from workspacespawner.k8s.kinds import POD, VMI
from workspacespawner.k8s.objects import node_of
from workspacespawner.lifecycle.reconciler import classify, remove
from workspacespawner.quota.cli import hub_servers

COLUMNS = ["what", "kind", "name", "user", "server", "node", "action"]


def _row(found, action: str) -> dict:
    return {"what": found.what, "kind": found.obj["kind"], "name": found.obj["metadata"]["name"], "user": found.user,
            "server": found.server, "node": node_of(found.obj), "action": action}


async def _run(args) -> int:
    config = common.load_config(args)
    namespace = common.namespace_of(config, args.namespace)
    known = hub_servers(config)
    if known is None:
        return common.fail("cannot read the hub's database (c.JupyterHub.db_url): which servers run is unknown; nothing done")
    users, active = known

    def believed_running(user: str, server: str) -> bool | None:
        return True if (user, server) in active else (False if user in users else None)

    selector = f"{names.MANAGED_BY_LABEL}={names.MANAGED_BY}"
    async with common.kube_client(common.kubeconfig_of(args)) as kube:
        objects = await kube.list(POD, namespace, labels=selector) + await kube.list(VMI, namespace, labels=selector)
        found = classify(objects, believed_running)
        rows = []
        for item in found:
            if args.remove:
                await remove(kube, item.obj)
            rows.append(_row(item, "removed" if args.remove else "would remove (add --remove)"))
    common.print_rows(rows, COLUMNS, as_json=args.json, empty="(no orphan compute)")
    return 2 if found and not args.remove else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="workspacespawner orphans", description=summary(__doc__))
    parser.add_argument("--remove", action="store_true", help="remove every one listed (Pods by uid, VMs stopped)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    common.add_common_arguments(parser, actor=False)
    args = parser.parse_args(argv)
    return common.run(_run(args))
