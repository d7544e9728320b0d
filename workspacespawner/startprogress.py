"""The steps of one start, as the spawn page's progress bar shows them.

Our own steps (home volume ready, team folders, root disk cloning...) and
the Events of this start's Pod or VMI in plain words
(:func:`workspacespawner.k8s.events.describe_event`), in order, each shown
once; the percentage only moves forward.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime

from workspacespawner.k8s.events import events_since


class StartSteps:
    """The messages of the current start; :meth:`stream` is ``Spawner.progress()``'s body.

    ``started``: when the current start began (UTC); Events older than that
    belong to an earlier start or stop and are not shown.
    """

    def __init__(self):
        self.messages: list[str] = []
        self.started = datetime.now(UTC)
        self._changed: asyncio.Event | None = None

    def reset(self) -> None:
        """A new start begins (call inside the event loop)."""
        self.messages = []
        self.started = datetime.now(UTC)
        self._changed = asyncio.Event()

    def say(self, message: str) -> None:
        """Add a step (plain words for the user)."""
        self.messages.append(message)
        if self._changed is not None:
            self._changed.set()

    async def stream(self, *, finished: Callable[[], bool], compute_events: Callable[[], list[dict]], describe) -> AsyncIterator[dict]:
        """Progress dicts (``progress``, ``message``, and ``raw_event`` for Events) until ``finished()``; waits ≤ 1 s per round.

        ``compute_events()``: the Events of the workspace's Pod or VMI (core/v1
        dicts, from the watch caches); each one of this start is shown once
        (by uid), oldest first.
        """
        if self._changed is None:
            self._changed = asyncio.Event()
        sent_steps = 0
        shown: set[str] = set()
        percent = 0.0
        while True:
            done = finished()
            new = [{"message": m} for m in self.messages[sent_steps:]]
            sent_steps += len(new)
            for event in events_since(compute_events(), self.started):
                uid = (event.get("metadata") or {}).get("uid") or id(event)
                if uid not in shown:
                    shown.add(uid)
                    new.append({"message": describe(event), "raw_event": event})
            for item in new:
                percent += (90 - percent) / 3
                yield {"progress": int(percent), **item}
            if done:
                return
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), timeout=1)
            except TimeoutError:
                pass
