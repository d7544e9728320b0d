"""The steps of one start, as the spawn page's progress bar shows them.

Our own steps (home volume ready, team folders, root disk cloning...) and
the Pod's Events in plain words (:func:`workspacespawner.k8s.events.describe_event`),
in order, each shown once; the percentage only moves forward.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable


class StartSteps:
    """The messages of the current start; :meth:`stream` is ``Spawner.progress()``'s body."""

    def __init__(self):
        self.messages: list[str] = []
        self._changed: asyncio.Event | None = None

    def reset(self) -> None:
        """A new start begins (call inside the event loop)."""
        self.messages = []
        self._changed = asyncio.Event()

    def say(self, message: str) -> None:
        """Add a step (plain words for the user)."""
        self.messages.append(message)
        if self._changed is not None:
            self._changed.set()

    async def stream(self, *, finished: Callable[[], bool], pod_events: Callable[[], list[dict]], describe) -> AsyncIterator[dict]:
        """Progress dicts (``progress``, ``message``, and ``raw_event`` for Events) until ``finished()``; waits ≤ 1 s per round."""
        if self._changed is None:
            self._changed = asyncio.Event()
        sent_steps = sent_events = 0
        percent = 0.0
        while True:
            done = finished()
            new = [{"message": m} for m in self.messages[sent_steps:]]
            sent_steps += len(new)
            events = pod_events()
            new += [{"message": describe(e), "raw_event": e} for e in events[sent_events:]]
            sent_events = len(events)
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
