"""``workspacespawner image``: publish a user's stopped VM workspace's root disk as a new golden image (audited).

``image publish USER [--server S] --name NAME [--via snapshot|clone] [--wait SECONDS]``
    a VolumeSnapshot of USER's root disk and a CDI DataSource NAME naming it
    in the golden-image namespace (``--via clone``: a DataVolume cloning the
    disk there instead, for clusters without snapshots). Refused while the
    workspace runs, for a name that is taken or not a DNS-1123 subdomain of
    at most 63 characters. The workspace is left as it was.

Settings from the hub's config: ``c.ImagePublish.mode`` (the default of
``--via``), ``.snapshot_class`` and ``.namespace`` (else
``c.WorkspaceSpawner.vm_golden_image_namespace``).
"""

from __future__ import annotations

import argparse
import asyncio

from workspacespawner.admin import common
from workspacespawner.config.imagepublish import MODES, golden_namespace, publish_settings
from workspacespawner.core.rsttext import summary
from workspacespawner.k8s.kinds import DATA_SOURCE
from workspacespawner.k8s.objects import ready_condition
from workspacespawner.vmdisk.publish import GoldenPublisher


async def _wait_ready(kube, namespace: str, name: str, seconds: float) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not ready_condition(await kube.get(DATA_SOURCE, namespace, name)):
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(1)
    return True


async def _run(args) -> int:
    config = common.load_config(args)
    settings = publish_settings(config)
    namespace = common.namespace_of(config, args.namespace)
    golden = golden_namespace(config, settings)
    async with common.kube_client(common.kubeconfig_of(args)) as kube:
        publisher = GoldenPublisher(
            kube, namespace, golden, audit=common.audit_log(config), actor=common.actor_of(args),
            mode=args.via or settings.mode, snapshot_class=settings.snapshot_class,
        )
        done = await publisher.publish(args.user, args.server, args.name)
        print(f"Published {done.user}'s root disk {done.disk} as golden image {done.image} (DataSource), "
              f"by {done.mode} {done.source}")
        if args.wait and not await _wait_ready(kube, golden, args.name, args.wait):
            return common.fail(f"golden image {done.image} not Ready after {args.wait:.0f} s")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="workspacespawner image", description=summary(__doc__))
    sub = parser.add_subparsers(dest="action", required=True)
    publish = sub.add_parser("publish", help="publish a stopped VM workspace's root disk as a golden image")
    publish.add_argument("user")
    publish.add_argument("--server", default="", help="the user's named server (default: their default server)")
    publish.add_argument("--name", required=True, help="the golden image's name (a new DataSource's)")
    publish.add_argument("--via", choices=MODES, help="snapshot or clone (default: c.ImagePublish.mode)")
    publish.add_argument("--wait", type=float, default=0, metavar="SECONDS", help="wait until the golden image is Ready")
    common.add_common_arguments(publish)
    args = parser.parse_args(argv)
    return common.run(_run(args))
