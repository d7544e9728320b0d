"""The steps of one start, as the spawn page's progress bar shows them.

Our own steps (home volume ready, team folders, root disk cloning...) and
the Events of this start's Pod or VMI in plain words
(:func:`workspacespawner.k8s.events.describe_event`), in order, each shown
once. The bar climbs the milestone ladder
(:data:`workspacespawner.core.milestones.LADDER`): a step or Event that
reaches a milestone moves it up to its rung, anything else leaves it where
it is; it never goes back and never reaches 100 (JupyterHub's own last step).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime

from workspacespawner.core.milestones import Milestone, event_milestone, percent
from workspacespawner.k8s.events import events_since


class StartSteps:
    """The messages of the current start; :meth:`stream` is ``Spawner.progress()``'s body.

    ``started``: when the current start began (UTC); Events older than that
    belong to an earlier start or stop and are not shown. ``said``: the
    steps of this start, in order, each a message and the bar's percentage
    it reaches (None: the bar stays).
    """

    def __init__(self):
        self.said: list[tuple[str, float | None]] = []
        self.started = datetime.now(UTC)
        self._changed: asyncio.Event | None = None

    def reset(self) -> None:
        """A new start begins (call inside the event loop)."""
        self.said = []
        self.started = datetime.now(UTC)
        self._changed = None  # made by the first stream(): a start nobody watches (a REST API spawn) needs none

    def say(self, message: str, milestone: Milestone | None = None, *, part: float = 1.0) -> None:
        """Add a step: ``message`` in plain words; ``milestone`` when it reaches one, ``part`` (0-1) of the way
        (a :class:`~workspacespawner.core.milestones.Say`)."""
        self.said.append((message, None if milestone is None else percent(milestone, part)))
        if self._changed is not None:
            self._changed.set()

    async def stream(self, *, finished: Callable[[], bool], compute_events: Callable[[], list[dict]], describe) -> AsyncIterator[dict]:
        """Progress dicts (``progress``, ``message``, and ``raw_event`` for Events) until ``finished()``; waits ≤ 1 s per round.

        ``progress``: the bar's percentage (int, 0-99), the highest rung
        reached so far. ``compute_events()``: the Events of the workspace's
        Pod or VMI (core/v1 dicts, from the watch caches); each one of this
        start is shown once (by uid), oldest first; ``describe(event)``: its
        message.
        """
        if self._changed is None:
            self._changed = asyncio.Event()
        sent_steps = 0
        shown: set[str] = set()
        bar = 0.0
        while True:
            done = finished()
            new = [({"message": message}, at) for message, at in self.said[sent_steps:]]
            sent_steps += len(new)
            for event in events_since(compute_events(), self.started):
                uid = (event.get("metadata") or {}).get("uid") or id(event)
                if uid not in shown:
                    shown.add(uid)
                    reached = event_milestone(event)
                    at = None if reached is None else percent(reached)
                    new.append(({"message": describe(event), "raw_event": event}, at))
            for item, at in new:
                bar = max(bar, at or 0)
                yield {"progress": int(bar), **item}
            if done:
                return
            changed = self._changed = self._changed or asyncio.Event()  # a reset() meanwhile dropped it
            changed.clear()
            try:
                await asyncio.wait_for(changed.wait(), timeout=1)
            except TimeoutError:
                pass
