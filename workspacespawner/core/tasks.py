"""Background tasks that are kept alive until they finish.

asyncio keeps only a weak reference to a task, so a task nobody holds can
be collected mid-run (a stop carrying on after a failed start, an enforcer
pass). :class:`BackgroundTasks` holds each until it is done and logs its
failure.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine

log = logging.getLogger("workspacespawner")


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
