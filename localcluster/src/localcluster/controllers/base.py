"""The shape every local-cluster controller shares: watch some kinds, reconcile each object.

A controller plays one part of a real cluster (PVC binder, CDI, virt-controller,
scheduler, kubelet). It reads and writes through ``cluster.client``, a
:class:`~localcluster.client.Client`: the embedded store (every
write validated like a client's) or a real API server, the same code for both. Tests switch a controller off (``enabled = False``)
or slow it down (``delay`` seconds before each reconcile) to reproduce a
cluster that lags or is missing a component.
"""

from __future__ import annotations

import asyncio
import logging

from ..client import Client
from ..errors import ApiError
from ..kinds import Kind
from ..store import DELETED

log = logging.getLogger("localcluster")


class Controller:
    """Base class: subclasses set ``watches`` and implement :meth:`reconcile`.

    ``watches`` is a tuple of (group, version, plural); for every change to an
    object of those kinds, ``reconcile(kind, obj, deleted)`` runs on the
    cluster's event loop after ``delay`` seconds. ``resync`` (seconds, 0 for
    never) re-reconciles every watched object periodically, as informers do.
    ``reads`` are the further kinds it only reads (its client caches them too).
    Its client is ``cluster.client_for(name)`` where the cluster gives each
    component credentials of its own (the real control plane), else
    ``cluster.client``.

    A reconcile that fails with an API error (a 409 lost to another writer,
    a 5xx, a write refused) is queued again after a back-off that doubles
    from ``retry_first_seconds`` up to ``retry_max_seconds``, and forgotten
    once the object reconciles, as client-go's rate-limited work queue does
    (``AddRateLimited`` / ``Forget``): a controller never waits for a next
    event that may not come.
    """

    name = "controller"
    watches: tuple[tuple[str, str, str], ...] = ()
    reads: tuple[tuple[str, str, str], ...] = ()
    resync: float = 0
    retry_first_seconds: float = 0.05
    retry_max_seconds: float = 5.0

    def __init__(self, cluster):
        self.cluster = cluster
        client_for = getattr(cluster, "client_for", None)
        self.client: Client = client_for(self.name) if client_for else cluster.client
        self.real_control_plane = bool(getattr(cluster, "real_control_plane", False))
        self.enabled = True
        self.delay = 0.0
        self._queue: asyncio.Queue = asyncio.Queue()
        self._tasks: list[asyncio.Task] = []
        self._failures: dict[tuple, int] = {}
        self._retries: dict[tuple, asyncio.TimerHandle] = {}

    def _on_change(self, event_type: str, kind: Kind, obj: dict, old: dict | None) -> None:
        if kind.key in self.watches:
            self._queue.put_nowait((kind, obj, event_type == DELETED))

    async def start(self) -> None:
        """Begin reconciling: existing objects first, then every change."""
        await self.client.watch(self.watches + self.reads)
        self.client.on_change(self._on_change)
        self.kick()
        self._tasks.append(asyncio.create_task(self._run(), name=f"{self.name}-loop"))
        if self.resync:
            self._tasks.append(asyncio.create_task(self._resync_loop(), name=f"{self.name}-resync"))

    async def stop(self) -> None:
        for timer in self._retries.values():
            timer.cancel()
        self._retries.clear()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        self._tasks.clear()

    def kick(self) -> None:
        """Re-reconcile every watched object now (after a knob changed)."""
        for key in self.watches:
            kind = self.client.kind(*key)
            for obj in self.client.objects(kind):
                self._queue.put_nowait((kind, obj, False))

    async def _resync_loop(self) -> None:
        while True:
            await asyncio.sleep(self.resync)
            self.kick()

    async def _run(self) -> None:
        while True:
            kind, obj, deleted = await self._queue.get()
            if not self.enabled:
                continue
            if self.delay:
                await asyncio.sleep(self.delay)
            item = (kind.key, obj["metadata"].get("namespace"), obj["metadata"].get("name"))
            try:
                await self.reconcile(kind, obj, deleted)
            except ApiError as e:
                # Conflicts and races with other writers are normal: try again after a back-off.
                delay = self._retry_later(item, kind, obj, deleted)
                log.debug("%s: %s %s/%s: %s (again in %.2fs)", self.name, kind.kind, item[1], item[2], e, delay)
            except Exception:
                log.exception("%s failed on %s %s", self.name, kind.kind, obj["metadata"].get("name"))
            else:
                self._failures.pop(item, None)

    def _retry_later(self, item: tuple, kind: Kind, obj: dict, deleted: bool) -> float:
        """Queue ``obj`` again after the item's next back-off (seconds, returned); one timer per item."""
        failures = self._failures.get(item, 0)
        self._failures[item] = failures + 1
        delay = min(self.retry_max_seconds, self.retry_first_seconds * 2**failures)
        pending = self._retries.pop(item, None)
        if pending is not None:
            pending.cancel()

        def again() -> None:
            self._retries.pop(item, None)
            self._queue.put_nowait((kind, obj, deleted))

        self._retries[item] = asyncio.get_running_loop().call_later(delay, again)
        return delay

    async def reconcile(self, kind: Kind, obj: dict, deleted: bool) -> None:
        """Bring the cluster toward what ``obj`` asks for. ``obj`` is a copy; re-read before writing."""
        raise NotImplementedError
