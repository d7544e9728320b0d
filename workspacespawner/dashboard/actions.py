"""What a viewer may do to a workspace from the dashboard, checked and audited; the service itself deletes nothing.

Each action checks :meth:`~.access.Viewer.can_act` first (else
:class:`ActionRefused` with code 403, and nothing is written, not even an
audit record), then phase and quota, then acts through the hub's REST API
(stop) or :class:`~workspacespawner.lifecycle.disks.DiskOps` (snapshot,
expand, restore: audited there), :func:`~workspacespawner.vmdisk.rebuild.rebuild`
(a VM's system disk, audited there) or
:class:`~workspacespawner.vmdisk.publish.GoldenPublisher` (publish a
stopped VM workspace as a golden image: hub admins, and members of
``c.ImagePublish.teacher_groups`` for their own, see :func:`may_publish`) or
:func:`~workspacespawner.lifecycle.retention.give_back`, with the viewer's
name as the audit actor. Refusals after the access check carry a sentence
for the page.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC

from tornado.httpclient import HTTPClientError

from workspacespawner.core import names
from workspacespawner.core.quantities import parse_quantity
from workspacespawner.dashboard.access import Viewer
from workspacespawner.dashboard.hubapi import SpawnPending
from workspacespawner.k8s.api import NotOurs
from workspacespawner.k8s.kinds import DATA_VOLUME, PVC
from workspacespawner.lifecycle import retention
from workspacespawner.lifecycle.disks import DiskOpError, disk_limit, is_home_disk
from workspacespawner.vmdisk.rebuild import rebuild as rebuild_root_disk
from workspacespawner.vmdisk.restore import restore as restore_snapshot

#: How a publish refusal (:class:`DiskOpError` reason) answers: the HTTP code.
PUBLISH_CODES = {"not-found": 404, "bad-name": 400}


class ActionRefused(Exception):
    """An action was refused: ``code`` (403 not theirs, 404 no such thing, 409 wrong phase or quota) and a sentence."""

    def __init__(self, message: str, code: int = 409):
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Done:
    """What an action did, in a sentence (``message``), and the object it made or changed (``name``)."""

    message: str
    name: str = ""


def check_access(viewer: Viewer, owner: str) -> None:
    """Raise :class:`ActionRefused` (403) unless ``viewer`` may act on ``owner``'s workspaces."""
    if not viewer.can_act(owner):
        raise ActionRefused(f"You may not act on {owner}'s workspaces.", 403)


async def stop(ctx, viewer: Viewer, owner: str, server: str) -> Done:
    """Stop ``owner``'s server ``server`` (``""``: default) through the hub's REST API; audited ``stop``."""
    check_access(viewer, owner)
    model = await ctx.hub.user(owner)
    found = ((model or {}).get("servers") or {}).get(server)
    label = f"server “{server}”" if server else "default server"
    if found is None or found.get("stopped"):
        raise ActionRefused(f"{owner}'s {label} is not running.", 409)
    try:
        asked = await ctx.hub.stop_server(owner, server)
    except SpawnPending:
        raise ActionRefused(f"{owner}'s {label} is still starting; stop it once it is up.", 409) from None
    except HTTPClientError as e:
        raise ActionRefused(f"The hub refused to stop {owner}'s {label} ({e.code}).", 502) from None
    await ctx.audit.arecord(actor=viewer.name, user=owner, server=server, namespace=ctx.namespace, disk="",
                            action="stop", before={"phase": "Running"}, after={"phase": "Stopping"},
                            result="ok" if asked else "ok: was not running", time=ctx.now())
    return Done(f"Stopping {owner}'s {label}.")


async def _owned_disk(ctx, owner: str, name: str) -> dict:
    for kind in (PVC, DATA_VOLUME):
        obj = await ctx.kube.get(kind, ctx.namespace, name)
        if obj is not None and names.owned_by(obj.get("metadata") or {}, owner):
            return obj
    raise ActionRefused(f"{owner} has no disk {name}.", 404)


async def snapshot(ctx, viewer: Viewer, owner: str, pvc: str) -> Done:
    """Take a VolumeSnapshot of ``owner``'s PersistentVolumeClaim ``pvc`` (audited ``snapshot``)."""
    check_access(viewer, owner)
    await _owned_disk(ctx, owner, pvc)
    try:
        made = await ctx.disk_ops(viewer.name).snapshot(owner, pvc, now=ctx.now())
    except DiskOpError as e:
        raise ActionRefused(str(e), 409) from None
    name = made["metadata"]["name"]
    return Done(f"Snapshot {name} of {pvc} taken; it is ready when the cluster says so.", name)


async def expand(ctx, viewer: Viewer, owner: str, pvc: str, size: str, groups) -> Done:
    """Grow ``owner``'s home ``pvc`` to ``size`` (a quantity, ``"20Gi"``) within their disk quota (audited ``expand``).

    ``groups``: ``owner``'s JupyterHub groups (their quota). Only a home disk
    grows here; a shrink or a size over the quota is refused in words.
    """
    check_access(viewer, owner)
    disk = await _owned_disk(ctx, owner, pvc)
    if disk.get("kind", PVC.kind) != PVC.kind or not is_home_disk(disk):
        raise ActionRefused(f"{pvc} is not a home disk; only a home can be expanded here.", 409)
    try:
        parse_quantity(size)
    except ValueError:
        raise ActionRefused(f"{size!r} is not a size such as '20Gi'.", 400) from None
    limit = disk_limit(ctx.quota, owner, groups, ctx.lifecycle.disk_limit or None)
    try:
        await ctx.disk_ops(viewer.name).expand(owner, pvc, size, limit=limit)
    except DiskOpError as e:
        raise ActionRefused(str(e), 409) from None
    return Done(f"{pvc} grows to {size}.", pvc)


async def restore(ctx, viewer: Viewer, owner: str, snapshot_name: str, groups) -> Done:
    """Restore ``owner``'s VolumeSnapshot ``snapshot_name`` where it was taken (audited ``restore``): a home into a new
    home, a VM's system disk into a new system disk the VM boots from, within their disk quota (``groups``: their
    JupyterHub groups); the disk it replaces is retained. Refused while the workspace runs."""
    check_access(viewer, owner)
    limit = disk_limit(ctx.quota, owner, groups, ctx.lifecycle.disk_limit or None)
    try:
        done = await restore_snapshot(ctx.disk_ops(viewer.name), owner, snapshot_name, limit=limit, now=ctx.now())
    except DiskOpError as e:
        raise ActionRefused(str(e), 404 if e.reason == "not-found" else 409) from None
    if done.system:
        return Done(f"Restored {snapshot_name} into the new system disk {done.disk}; the next start boots it, and the old "
                    f"system disk is kept until {done.rebuilt.retain_until.astimezone(UTC):%Y-%m-%d %H:%M} UTC.", done.disk)
    return Done(f"Restored {snapshot_name} into {done.disk}; the next start mounts it.", done.disk)


async def rebuild(ctx, viewer: Viewer, owner: str, server: str, image: str, groups) -> Done:
    """Give ``owner``'s stopped VM server ``server`` (``""``: default) a new system disk cloned from golden image
    ``image`` (a DataSource name; ``""``: the one its disk was cloned from), within their disk quota (audited
    ``rebuild``); the home is kept, the old system disk retained. Refused while the server runs."""
    check_access(viewer, owner)
    limit = disk_limit(ctx.quota, owner, groups, ctx.lifecycle.disk_limit or None)
    try:
        done = await rebuild_root_disk(ctx.disk_ops(viewer.name), owner, server=server, image=image or None,
                                       golden_namespace=ctx.golden_image_namespace, limit=limit, now=ctx.now())
    except DiskOpError as e:
        raise ActionRefused(str(e), 404 if e.reason == "not-found" else 409) from None
    return Done(f"The system disk of {owner}'s {f'server “{server}”' if server else 'default server'} is now {done.new} "
                f"(from {done.image}); the home is kept, and the old system disk {done.old} is kept until "
                f"{done.retain_until.astimezone(UTC):%Y-%m-%d %H:%M} UTC.", done.new)


async def give_back(ctx, viewer: Viewer, owner: str, disk: str) -> Done:
    """Give back ``owner``'s Retained disk: retain-until becomes now, so the next admin purge may delete it
    (audited ``retain``). Nothing is deleted here."""
    check_access(viewer, owner)
    obj = await _owned_disk(ctx, owner, disk)
    kind = DATA_VOLUME if obj.get("kind") == DATA_VOLUME.kind else PVC
    try:
        await retention.give_back(ctx.kube, ctx.namespace, owner, kind, disk, audit=ctx.audit, actor=viewer.name,
                                  now=ctx.now())
    except (ValueError, NotOurs) as e:
        raise ActionRefused(f"{disk} cannot be given back: {e}.", 409) from None
    return Done(f"{disk} is given back; the next purge may delete it.", disk)


def may_publish(ctx, viewer: Viewer, owner: str) -> bool:
    """Whether ``viewer`` may publish ``owner``'s workspaces as golden images: a hub admin anyone's, a member of
    ``c.ImagePublish.teacher_groups`` their own (:meth:`~workspacespawner.config.imagepublish.ImagePublish.may_publish`)."""
    return ctx.publish.may_publish(viewer=viewer.name, admin=viewer.admin, groups=viewer.groups, owner=owner)


async def publish(ctx, viewer: Viewer, owner: str, server: str, name: str) -> Done:
    """Publish ``owner``'s stopped VM workspace ``server`` (``""``: default) as golden image ``name`` (audited
    ``publish``, the viewer the actor); 403 unless :func:`may_publish`, 409 while it runs or the name is taken."""
    if not may_publish(ctx, viewer, owner):
        raise ActionRefused(f"You may not publish {owner}'s workspaces as golden images.", 403)
    try:
        done = await ctx.publisher(viewer.name).publish(owner, server, name, now=ctx.now())
    except DiskOpError as e:
        raise ActionRefused(str(e), PUBLISH_CODES.get(e.reason, 409)) from None
    return Done(f"Published {done.disk} as golden image {done.image} (by {done.mode} {done.source}); "
                "new root disks can be cloned from it once it is Ready.", done.image)
