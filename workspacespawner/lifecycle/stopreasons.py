"""Why a server was stopped, when the hub stopped it on its own: said before the stop, recorded on its ``Stopped`` phase.

A stop the hub decides (the idle-GPU pass, the quota enforcer) goes through
JupyterHub's REST API like a user's, so the spawner's ``stop`` cannot tell
them apart. The deciding pass says the reason first (:meth:`StopReasons.say`);
once the workspace is observed ``Stopped``, the lifecycle takes it
(:meth:`StopReasons.take`) and records it with the phase (reason word and
message in the lifecycle annotation), where the dashboard and the admin
see it. A reason nobody took within ``ttl`` seconds (the stop failed, or
the hub restarted) is forgotten: it never labels a later, ordinary stop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class StopReason:
    """``reason``: a fixed word (``idle-gpu``, ``card-hours``); ``message``: one sentence for the user and the admin."""

    reason: str
    message: str
    said_at: float


class StopReasons:
    """``{(user, server): StopReason}`` for one hub process (``server`` ``""``: the default server).

    ``ttl``: seconds a reason waits to be taken; ``clock``: monotonic seconds (tests pass their own).
    """

    def __init__(self, *, ttl: float = 600.0, clock: Callable[[], float] = time.monotonic):
        self.ttl = ttl
        self.clock = clock
        self._waiting: dict[tuple[str, str], StopReason] = {}

    def say(self, user: str, server: str, reason: str, message: str) -> None:
        """The hub is about to stop ``user``'s ``server`` for ``reason`` (a word) with ``message`` (a sentence)."""
        self._waiting[(user, server)] = StopReason(reason, message, self.clock())

    def take(self, user: str, server: str) -> StopReason | None:
        """The reason said for this server's stop (removed), or None when none was said within ``ttl``."""
        said = self._waiting.pop((user, server), None)
        return said if said is not None and self.clock() - said.said_at <= self.ttl else None


#: The hub process's stop reasons (the passes say, the spawners take).
STOP_REASONS = StopReasons()
