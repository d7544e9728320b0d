"""Watch caches that wake whoever waits for an object's next version: a wait follows the watch instead of polling.

A start that waits for something the cluster does to one of its objects
(its home claim becoming Bound) reads the object from the hub's shared
watch cache. Looking again every second costs each waiting start a wake-up
a second for as long as the wait lasts: with a class of 300 new homes
queued at the provisioner, ~30 looks per start that find nothing new.
:class:`ChangeNotifyingObjects` lets it sleep until the watch stores a new
version of that object instead (:meth:`~ChangeNotifyingObjects.next_change`).

The reflector replaces its whole cache after each list (a watch restart,
a 410 Gone); a new cache made from an old one wakes every waiter of the
old one, which then reads the new cache. A waiter of a cache whose watch
gave up is woken by nothing: waits keep a timeout of their own.
"""

from __future__ import annotations

import asyncio

from workspacespawner.k8s.interning import InterningObjects, InterningReflector


class ChangeNotifyingObjects(InterningObjects):
    """An :class:`~workspacespawner.k8s.interning.InterningObjects` cache (``{"namespace/name": object}``) whose
    changes wake the futures of :meth:`next_change`.

    kubespawner's reflector changes its cache by ``cache[key] = obj`` and
    ``cache.pop(key, None)``; those and ``del`` wake the key's waiters.
    ``previous``: the cache this one replaces (after a list); its waiters
    are all woken. Use from the event loop's thread only (the reflector's).
    """

    def __init__(self, objects=(), previous: dict | None = None):
        super().__init__(objects, previous)
        self._waiters: dict[str, set[asyncio.Future]] = {}
        if isinstance(previous, ChangeNotifyingObjects):
            previous.wake_all()

    def next_change(self, key: str) -> asyncio.Future:
        """A future of the running loop, done (result None) when the object at ``key`` is next stored or removed,
        or when this cache is replaced by a new list. Cancel it to stop waiting; it is then forgotten."""
        future = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(key, set()).add(future)
        future.add_done_callback(lambda done: self._forget(key, done))
        return future

    def wake_all(self) -> None:
        """Wake every waiter, whatever its key (the cache is being replaced)."""
        for key in list(self._waiters):
            self._wake(key)

    def _forget(self, key: str, future: asyncio.Future) -> None:
        waiters = self._waiters.get(key)
        if waiters is not None:
            waiters.discard(future)
            if not waiters:
                del self._waiters[key]

    def _wake(self, key: str) -> None:
        for future in self._waiters.pop(key, ()):
            if not future.done():
                future.set_result(None)

    def __setitem__(self, key: str, obj: dict) -> None:
        super().__setitem__(key, obj)
        if self._waiters:
            self._wake(key)

    def __delitem__(self, key: str) -> None:
        super().__delitem__(key)
        if self._waiters:
            self._wake(key)

    def pop(self, key, *default):
        found = super().pop(key, *default)
        if self._waiters:
            self._wake(key)
        return found


class ChangeNotifyingReflector(InterningReflector):
    """Mixin for a kubespawner ``ResourceReflector``: its cache is a :class:`ChangeNotifyingObjects`."""

    objects_class = ChangeNotifyingObjects
