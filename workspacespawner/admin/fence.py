"""``workspacespawner fence USER --confirm-node-down``: force-delete a user's Pods and VMIs left on a node that is down.

Only after you made sure the node is really down (powered off, or cut off
from storage): a Pod there may still hold the user's RBD disk. Without
``--confirm-node-down`` it only shows what it would delete. Each deletion is
audited (``fence``); the user's Degraded disks go back to Stopped, so their
next start can go ahead.
"""

from __future__ import annotations

import argparse

from workspacespawner.admin import common
from workspacespawner.core.rsttext import summary
from workspacespawner.k8s.objects import node_of
from workspacespawner.lifecycle.fence import Fencer

COLUMNS = ["kind", "name", "node", "action"]


def _row(obj: dict, action: str) -> dict:
    return {"kind": obj["kind"], "name": obj["metadata"]["name"], "node": node_of(obj), "action": action}


async def _run(args) -> int:
    config = common.load_config(args)
    namespace = common.namespace_of(config, args.namespace)
    async with common.kube_client(common.kubeconfig_of(args)) as kube:
        if not args.confirm_node_down:
            targets, kept = await Fencer(kube, namespace).plan(args.user)
            common.print_rows([_row(o, "would force-delete") for o in targets] + [_row(o, f"keep: {why}") for o, why in kept], COLUMNS,
                       empty=f"(nothing of {args.user} is running)")
            if targets:
                print("Nothing was deleted: add --confirm-node-down once you know the node is down.")
            return 2 if targets else 0
        fenced = await Fencer(kube, namespace, audit=common.audit_log(config), actor=common.actor_of(args)).fence(args.user)
        common.print_rows([_row(o, "force-deleted") for o in fenced], COLUMNS, empty=f"(nothing of {args.user} was on a node that is down)")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="workspacespawner fence", description=summary(__doc__))
    parser.add_argument("user", help="the JupyterHub user name")
    parser.add_argument("--confirm-node-down", action="store_true", help="you made sure the node is down: force-delete")
    common.add_common_arguments(parser)
    args = parser.parse_args(argv)
    return common.run(_run(args))
