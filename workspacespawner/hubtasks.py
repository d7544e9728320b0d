"""What a spawner starts for the whole hub, and what it reads of it: the hub-wide background tasks, the namespace's
shared watches, and which servers' compute those watches hold.

Tasks and watches are started from any spawner (JupyterHub builds spawners
on its loop at start-up, for its running servers) and joined by every
later one: the tasks run once per hub process
(:class:`~workspacespawner.services.HubServices`), the watches once per
namespace (kubespawner's and ours, in :mod:`~workspacespawner.k8s.watches`).
A stopped server's metered run is closed only once those watches no longer
hold its compute (:func:`close_run_if_gone`).
"""

from __future__ import annotations

import asyncio
import logging
import sys
from functools import partial

from jupyterhub import orm
from kubespawner.clients import shared_client

from workspacespawner import upstream
from workspacespawner.k8s import watches
from workspacespawner.quota.enforcer import alive_from_objects


def start_hub_tasks(spawner) -> None:
    """Start the hub's compute reconciler, each backend's own tasks (a VM's root-disk pools), the quota enforcer and the
    idle-GPU pass on the running loop (once per hub process; nothing without a running loop).

    ``spawner``: a WorkspaceSpawner (its ``services``, ``backends``, ``reconcile_interval`` and ``hub``).
    """
    send_logs_to_hub()
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    services = spawner.services
    # the hub's session, through the user (Spawner.db is deprecated); none outside a hub (kubespawner's mock user)
    db = getattr(spawner.user, "db", None)
    if services.hub_database is None and db is not None:
        services.hub_database = partial(running_in_database, db)
    services.start_reconciler(watches.compute_objects, interval=spawner.reconcile_interval)
    for backend in spawner.backends.values():
        backend.start_hub_tasks()
    if spawner.hub is not None:
        services.quota.start_enforcer(hub_api_url=spawner.hub.api_url, alive=alive_workspaces)
        services.start_idle_pass(watches.pods_and_vmis, hub_api_url=spawner.hub.api_url)


def send_logs_to_hub() -> None:
    """In a JupyterHub process, make the app's log the parent of the ``workspacespawner`` logger, as JupyterHub does
    for tornado's: what our modules log (a run the enforcer closed, a disk retained) then reaches the hub's log with
    its format and level. Without it only warnings reached stderr, bare, through Python's last-resort handler.

    Nothing outside a hub (no JupyterHub app instance) or once our logger has a parent of its own (set by the
    operator's logging configuration, or already done).
    """
    app = sys.modules.get("jupyterhub.app")
    if app is None or not app.JupyterHub.initialized():
        return
    ours = logging.getLogger("workspacespawner")
    if ours.parent is logging.root:
        ours.parent = app.JupyterHub.instance().log
        ours.setLevel(logging.NOTSET)  # the level stays the hub's; this also clears the loggers' cached levels


def running_in_database(db, user: str, server: str) -> bool | None:
    """True if JupyterHub's database (``db``: its session) has ``user``'s server ``server`` running, else None."""
    found = (db.query(orm.Spawner.server_id).join(orm.User, orm.Spawner.user_id == orm.User.id)
             .filter(orm.User.name == user, orm.Spawner.name == server).first())
    return True if found is not None and found.server_id is not None else None


async def watch_workspaces(spawner) -> bool:
    """Start (or join) the namespace's shared Pod, VMI and PVC watches (and the current backend's own,
    :meth:`~workspacespawner.backends.base.Backend.watch`), which the hot path reads
    (:class:`~workspacespawner.k8s.cachedkube.CachedKube`); False, logged, when they cannot start (API down, no
    permission): reads then go to the API server."""
    try:
        await upstream.watch_pods(spawner)
        await watches.shared_reflector(watches.VirtualMachineInstanceReflector, spawner.namespace,
                                       custom_api=shared_client("CustomObjectsApi"))
        await watches.shared_reflector(watches.PersistentVolumeClaimReflector, spawner.namespace,
                                       core_api=shared_client("CoreV1Api"))
        await spawner.backend.watch()
    except Exception as e:
        spawner.log.warning("The Pod, VMI and PVC watches of %s cannot start (%s): reading from the API server",
                            spawner.namespace, e)
        return False
    return True


def alive_workspaces() -> set[tuple[str, str]] | None:
    """(user, server) of every Pod and VMI the shared watch caches hold; None until they have loaded."""
    objects = watches.compute_objects()
    return None if objects is None else alive_from_objects(objects)


async def close_run_if_gone(spawner, *, gone: bool = False) -> None:
    """Close ``spawner``'s run (now, or at its last sighting if ``gone``) unless the watch caches still hold its compute.

    Compute that is still there (a stop whose DELETE kept failing) stays
    metered: the enforcer's reconciliation closes the run once it is gone.
    """
    alive = alive_workspaces()
    if alive is not None and (spawner.user.name, spawner.name or "") in alive:
        spawner.log.warning("The compute of %s is still there: its run stays open until it is gone", upstream.log_name(spawner))
        return
    await spawner.services.quota.stopped(spawner.user.name, spawner.name, gone=gone)
