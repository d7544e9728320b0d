"""``workspacespawner disk``: expand, snapshot, restore, rebuild and list users' disks, each audited.

``disk list [USER] [--json]``
    every disk we manage (of USER): owner, kind, role, size, phase, what uses it,
    which server holds its attach claim.
``disk expand USER --size 100Gi [--pvc NAME]``
    grow USER's home (or PVC NAME); never shrinks, never past the user's
    disk limit (``c.WorkspaceQuota`` max_disk, else ``c.WorkspaceSpawner.disk_limit``).
``disk snapshot USER [--name SNAP] [--pvc NAME] [--wait SECONDS]``
    a VolumeSnapshot of USER's home (or PVC NAME).
``disk restore USER --snapshot SNAP``
    a new disk from the snapshot, swapped in while the workspace is stopped:
    a home's snapshot gives a new home, a VM system disk's a new root disk the
    VM boots from (within the disk limit); the disk it replaces is retained
    (``retention_days``).
``disk rebuild USER [--server S] [--image NAME]``
    a new root disk for USER's stopped VM workspace (server S, default the
    default server), cloned from golden image NAME (a DataSource in
    ``c.WorkspaceSpawner.vm_golden_image_namespace``; default: the one the
    old disk was cloned from); the old root disk is retained
    (``retention_days``), the home is untouched.
"""

from __future__ import annotations

import argparse
import asyncio

from workspacespawner.admin import common
from workspacespawner.config.goldenimages import golden_image_namespace
from workspacespawner.core.rsttext import summary
from workspacespawner.k8s.kinds import VOLUME_SNAPSHOT
from workspacespawner.lifecycle.disks import DiskOps, disk_limit
from workspacespawner.lifecycle.phases import rfc3339
from workspacespawner.quota.cli import hub_groups
from workspacespawner.vmdisk.rebuild import rebuild
from workspacespawner.vmdisk.restore import restore

#: The columns of ``disk list`` (and ``retention list``): the keys of :meth:`~workspacespawner.lifecycle.disks.DiskOps.listing` rows.
LIST_COLUMNS = ["owner", "name", "kind", "role", "size", "phase", "retain_until", "used_by", "claimed_by"]


async def _wait_ready(kube, namespace: str, name: str, seconds: float) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        snap = await kube.get(VOLUME_SNAPSHOT, namespace, name)
        if snap and (snap.get("status") or {}).get("readyToUse"):
            return True
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(1)


async def _run(args) -> int:
    config = common.load_config(args)
    namespace = common.namespace_of(config, args.namespace)
    settings = common.lifecycle_settings(config)
    async with common.kube_client(common.kubeconfig_of(args)) as kube:
        if args.action == "list":
            common.print_rows(await DiskOps(kube, namespace).listing(args.user), LIST_COLUMNS, as_json=args.json, empty="(no disks)")
            return 0
        ops = DiskOps(kube, namespace, audit=common.audit_log(config), actor=common.actor_of(args), retention_days=settings.retention_days)
        pvc = getattr(args, "pvc", None)
        if args.action in ("expand", "restore", "rebuild"):
            groups = (hub_groups(config) or {}).get(args.user, set())
            limit = disk_limit(common.quota_settings(config), args.user, groups, settings.disk_limit)
        if args.action == "expand":
            name = pvc or (await ops.home_of(args.user))["metadata"]["name"]
            await ops.expand(args.user, name, args.size, limit=limit)
            print(f"{name} of {args.user}: {args.size}")
        elif args.action == "snapshot":
            name = pvc or (await ops.home_of(args.user))["metadata"]["name"]
            snap = await ops.snapshot(args.user, name, args.name)
            print(f"Snapshot {snap['metadata']['name']} of {name} requested")
            if args.wait and not await _wait_ready(kube, namespace, snap["metadata"]["name"], args.wait):
                return common.fail(f"snapshot {snap['metadata']['name']} not ready after {args.wait:.0f} s")
        elif args.action == "restore":
            done = await restore(ops, args.user, args.snapshot, limit=limit)
            if done.system:
                print(f"{done.rebuilt.vm} now boots from {done.disk} (from {args.snapshot}); {done.rebuilt.old} is retained "
                      f"until {rfc3339(done.rebuilt.retain_until)}; the home is untouched")
            else:
                print(f"{args.user}'s home is now {done.disk} (from {args.snapshot}); the old one is retained")
        elif args.action == "rebuild":
            done = await rebuild(ops, args.user, server=args.server, image=args.image, golden_namespace=golden_image_namespace(config),
                                 limit=limit)
            print(f"{'Finished the interrupted rebuild: ' if done.resumed else ''}{done.vm} now boots from {done.new} "
                  f"(from {done.image}); {done.old} is retained until {rfc3339(done.retain_until)}; the home is untouched")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="workspacespawner disk", description=summary(__doc__))
    sub = parser.add_subparsers(dest="action", required=True)
    listing = sub.add_parser("list", help="disks: owner, size, phase, what uses them")
    listing.add_argument("user", nargs="?", help="only this user's disks")
    listing.add_argument("--json", action="store_true", help="print JSON")
    expand = sub.add_parser("expand", help="grow a user's home")
    expand.add_argument("user")
    expand.add_argument("--size", required=True, help="the new size, a Kubernetes quantity such as 100Gi")
    expand.add_argument("--pvc", help="this PVC of the user instead of their home")
    snapshot = sub.add_parser("snapshot", help="take a VolumeSnapshot of a user's home")
    snapshot.add_argument("user")
    snapshot.add_argument("--name", help="the snapshot's name (default: <pvc>-<time>)")
    snapshot.add_argument("--pvc", help="this PVC of the user instead of their home")
    snapshot.add_argument("--wait", type=float, default=0, metavar="SECONDS", help="wait until it is ready to use")
    restore = sub.add_parser("restore", help="swap a stopped workspace's home, or a VM's system disk, for one made from a snapshot")
    restore.add_argument("user")
    restore.add_argument("--snapshot", required=True, help="the user's VolumeSnapshot")
    rebuilt = sub.add_parser("rebuild", help="give a stopped VM workspace a new root disk from a golden image")
    rebuilt.add_argument("user")
    rebuilt.add_argument("--server", default="", help="the named server (default: the default server)")
    rebuilt.add_argument("--image", help="the golden image, a DataSource name (default: the one the old disk was cloned from)")
    for each in (listing, expand, snapshot, restore, rebuilt):
        common.add_common_arguments(each)
    args = parser.parse_args(argv)
    return common.run(_run(args))
