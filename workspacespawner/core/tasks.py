"""Background tasks that are kept alive until they finish.

asyncio keeps only a weak reference to a task, so a task nobody holds can
be collected mid-run (a stop carrying on after a failed start, an enforcer
pass). :class:`BackgroundTasks` holds each until it is done and logs its
failure.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Coroutine, Iterable
from typing import TypeVar

T = TypeVar("T")

log = logging.getLogger("workspacespawner")


async def with_helpers(main: Awaitable[T], helpers: Iterable[Awaitable], *, then: int | None = None) -> T:
    """Await ``main`` with ``helpers`` running beside it, and return its value.

    The first helper to fail ends it with that failure (one that ends well
    leaves ``main`` going); once ``main`` has returned, the helper at index
    ``then`` (None: none) is awaited before its value is returned: a wait
    whose end the start needs (a GPU queue's wait opens the start's run).
    Whatever still runs is cancelled on the way out.
    """
    first = asyncio.ensure_future(main)
    tasks = [asyncio.ensure_future(helper) for helper in helpers]
    try:
        pending = {first, *tasks}
        while not first.done():
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done - {first}:
                if task.exception() is not None:
                    raise task.exception()
        value = await first
        if then is not None:
            await tasks[then]
        return value
    finally:
        for task in (first, *tasks):
            task.cancel()


class BackgroundTasks:
    """A set of running tasks, each held until it finishes (one per hub process, in its services)."""

    def __init__(self):
        self._tasks: set[asyncio.Task] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    def spawn(self, coroutine: Coroutine, *, name: str) -> asyncio.Task:
        """Run ``coroutine`` as a task named ``name``, held here until done; a failure is logged, not raised."""
        task = asyncio.ensure_future(coroutine)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("Background task %s failed: %s", task.get_name(), task.exception(), exc_info=task.exception())

    async def close(self) -> None:
        """Cancel what still runs and wait for it to end."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class PeriodicPass:
    """A pass run over and over on the event loop, :meth:`interval` seconds apart, as one named task.

    Subclasses define ``async tick()`` (one pass), ``interval()`` (seconds
    to the next) and ``name`` (the task's name); :meth:`failed` logs a pass
    that raised (override it to say more), and the next pass runs anyway.
    """

    name = "workspacespawner-pass"
    task: asyncio.Task | None = None

    async def tick(self):
        raise NotImplementedError

    def interval(self) -> float:
        raise NotImplementedError

    def failed(self, error: Exception) -> None:
        """A pass raised ``error``: logged with its traceback."""
        log.error("Pass %s failed: %s", self.name, error, exc_info=error)

    async def run_forever(self) -> None:
        """Pass after pass, :meth:`interval` seconds apart."""
        while True:
            try:
                await self.tick()
            except Exception as e:
                self.failed(e)
            await asyncio.sleep(self.interval())

    def start(self) -> asyncio.Task:
        """Run :meth:`run_forever` as a task of the running event loop (once)."""
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self.run_forever(), name=self.name)
        return self.task

    async def close(self) -> None:
        """Cancel the task and wait for it."""
        if self.task is not None:
            self.task.cancel()
            try:
                await self.task
            except asyncio.CancelledError:
                pass
            self.task = None
