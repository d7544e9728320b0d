"""The compute reconciler: Pods and VMIs the hub believes stopped are removed; ones it does not know are reported.

One task per hub process (:class:`ComputeReconciler`), reading the shared
watch caches (kubespawner's Pod reflector, our VMI reflector), never polling
per user. On every pass, each Pod or VMI naming its owner in kubespawner's
annotations (:func:`~workspacespawner.core.names.server_of`) is sorted by
what the hub believes of its ``(user, server)``
(``believed_running(user, server)``):

* ``True``: running, starting or stopping: left alone;
* ``False``: the hub shows the server stopped (a stop whose DELETE or VM
  ``stop`` kept failing): a **ghost**, removed (a Pod deleted with its uid as
  precondition, a VMI's VM stopped) and tried again at each pass until it is
  gone. Its run stays open meanwhile: the quota's reconciliation closes it
  only once the caches no longer hold it;
* ``None``: no server of this hub (made while the hub was down, or left
  before a restart, by an older hub or name template, or by hand): an
  **orphan**, logged once from the first pass on (at hub start-up), counted in the ``workspacespawner_orphan_compute`` gauge and listed by
  ``workspacespawner orphans`` (:mod:`workspacespawner.admin.orphans`);
  ``workspacespawner orphans --remove`` removes them. Never removed here: the hub cannot tell whose it is.

Each pass first tries again the writes the hub could not make (a deleted
user's disks marked ``Retained``, see
:meth:`~workspacespawner.lifecycle.tracker.WorkspaceLifecycle.delete_forever`).

Shapes: objects are the API's JSON dicts (``kind`` ``Pod`` or
``VirtualMachineInstance``); ``interval`` is seconds. API followed: core/v1
Pod DELETE with ``DeleteOptions.preconditions.uid``; the ``stop``
subresource of ``kubevirt.io/v1`` VirtualMachines.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import aiohttp
from kubernetes_asyncio.client.rest import ApiException
from prometheus_client import Gauge

from workspacespawner.core import names
from workspacespawner.core.tasks import PeriodicPass
from workspacespawner.k8s.kinds import POD, VMI
from workspacespawner.k8s.kubevirt import stop_vm
from workspacespawner.k8s.objects import terminating

log = logging.getLogger("workspacespawner")

ORPHANS = Gauge("workspacespawner_orphan_compute", "Pods and VMIs with a user's owner labels that no server of the hub runs")
GHOSTS = Gauge("workspacespawner_ghost_compute", "Pods and VMIs of servers the hub shows stopped, being removed")


@dataclass(frozen=True)
class Found:
    """One Pod or VMI of a user's server, with what the hub believes of that server: ``ghost`` or ``orphan``."""

    what: str
    user: str
    server: str
    obj: dict

    @property
    def uid(self) -> str:
        return self.obj["metadata"]["uid"]

    def describe(self) -> str:
        meta = self.obj["metadata"]
        return f"{self.obj['kind']} {meta['namespace']}/{meta['name']} of {self.user}'s server {self.server!r}"


def classify(objects: Iterable[dict], believed_running: Callable[[str, str], bool | None]) -> list[Found]:
    """The ghosts and orphans among ``objects`` (see the module docstring); objects without an owner are skipped."""
    found = []
    for obj in objects:
        meta = obj.get("metadata") or {}
        owner = names.server_of(meta)
        if owner is None or names.CREATED_BY_LABEL in (meta.get("labels") or {}):
            continue  # not a server's, or a VMI's virt-launcher Pod (its VMI stands for it)
        belief = believed_running(*owner)
        if belief is False:
            found.append(Found("ghost", *owner, obj))
        elif belief is None:
            found.append(Found("orphan", *owner, obj))
    return found


async def remove(kube, obj: dict) -> None:
    """Remove one Pod (DELETE with its uid as precondition) or VMI (its VM's ``stop``); an object already going is left to go."""
    meta = obj["metadata"]
    if terminating(obj):
        return
    if obj["kind"] == VMI.kind:
        await stop_vm(kube.custom_api.api_client, meta["namespace"], meta["name"])
    else:
        await kube.delete(POD, meta["namespace"], meta["name"], uid=meta["uid"])


class ComputeReconciler(PeriodicPass):
    """The periodic pass of one hub process (see the module docstring).

    ``kube``: a :class:`~workspacespawner.k8s.api.Kube`; ``objects``:
    ``() -> list of dict | None``, every Pod and VMI the shared watch caches
    hold (None until they have loaded: no pass then); ``believed_running``:
    ``(user, server) -> bool | None``; ``interval``: seconds between passes;
    ``retry``: an ``async ()`` run first at each pass (the hub's writes to
    try again, :meth:`~workspacespawner.services.HubServices.retry_pending`).
    """

    name = "workspacespawner-reconciler"

    def __init__(self, kube, *, objects, believed_running, interval: float = 30.0, retry=None):
        self.kube = kube
        self.retry = retry
        self.objects = objects
        self.believed_running = believed_running
        self.every = interval
        self.orphans: dict[str, Found] = {}

    async def tick(self) -> list[Found]:
        """One pass: remove ghosts, report orphans; returns what it found (empty while the caches are not loaded)."""
        if self.retry is not None:
            await self.retry()
        objects = self.objects()
        if objects is None:
            return []
        found = classify(objects, self.believed_running)
        ghosts = [f for f in found if f.what == "ghost"]
        for ghost in ghosts:
            log.warning("Removing %s: the hub shows that server stopped", ghost.describe())
            try:
                await remove(self.kube, ghost.obj)
            except (ApiException, aiohttp.ClientError, TimeoutError) as e:
                log.warning("Could not remove %s yet (%s); trying again at the next pass", ghost.describe(),
                            getattr(e, "status", None) or type(e).__name__)
        orphans = {f.uid: f for f in found if f.what == "orphan"}
        for uid, orphan in orphans.items():
            if uid not in self.orphans:
                log.warning("Orphan compute: %s is not a server of this hub; "
                            "`workspacespawner orphans --remove` removes it", orphan.describe())
        self.orphans = orphans
        ORPHANS.set(len(orphans))
        GHOSTS.set(len(ghosts))
        return found

    def interval(self) -> float:
        return self.every
