"""What the node agent keeps for each Pod or VM guest it runs.

:class:`Workload` is the shape :class:`~.kubelet.PodRuntime` and
:class:`~.virthandler.GuestRuntime` share: which object and node it is, its
directory under the cluster's state, the task running it, and the three
moves the agent makes on it: :meth:`~Workload.run` once the object is placed
on a node, :meth:`~Workload.retire` once it is deleted, and
:meth:`~Workload.finish` for a deleted object that never ran here.

Status writes and Events leave in the order they were asked for, one at a
time, from a writer task of the workload's own (a kubelet's status manager
syncs asynchronously too): :meth:`~Workload.event` and
:meth:`~Workload.publish` may be called from any synchronous callback, and
a burst of publishes writes the status once.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import deque
from pathlib import Path

log = logging.getLogger("localcluster")


class Workload:
    """One Pod or guest on a node: identity, node, directory, task and status writes."""

    #: The component its Events come from.
    component = ""

    def __init__(self, agent, obj: dict, directory: Path):
        self.agent = agent
        self.client = agent.client
        self.obj = obj
        meta = obj["metadata"]
        self.uid, self.namespace, self.name = meta["uid"], meta["namespace"], meta["name"]
        self.node = self.node_of(obj)
        self.dir = Path(directory) / self.uid
        self.ip: str | None = None
        self.terminating = False
        self.task: asyncio.Task | None = None
        self._writes: deque = deque()
        self._writer: asyncio.Task | None = None
        self._status_queued = False

    @staticmethod
    def node_of(obj: dict) -> str | None:
        """The node the object is placed on, or None."""
        raise NotImplementedError

    @staticmethod
    def startable(obj: dict) -> bool:
        """Whether a placed object with no runtime yet should be started."""
        raise NotImplementedError

    @staticmethod
    async def finish(agent, obj: dict) -> None:
        """Let a deleted object go that has nothing running here."""
        raise NotImplementedError

    async def run(self) -> None:
        """Start and keep running (until cancelled)."""
        raise NotImplementedError

    async def stop(self, grace: float) -> None:
        """End every process: SIGTERM, then SIGKILL after ``grace`` seconds."""
        raise NotImplementedError

    async def retire(self, confirm: bool) -> None:
        """Stop for good; with ``confirm``, then let the deleted object go (unless the node is unreachable)."""
        raise NotImplementedError

    def build_status(self, current: dict) -> dict:
        """The object's status as things stand, from the ``current`` one (fields of other writers kept)."""
        raise NotImplementedError

    def event(self, reason: str, message: str, *, warning: bool = False, field_path: str | None = None) -> None:
        """Report an Event about the object (not while the node is unreachable), after the writes already asked for;
        ``field_path``: the part of it the Event is about (``involvedObject.fieldPath``)."""
        if not self.agent.node_ready(self.node):
            return
        record = self.client.record_event
        self._write(functools.partial(record, self.obj, reason, message, type="Warning" if warning else "Normal",
                                      component=self.component, field_path=field_path))

    def publish(self) -> None:
        """Write the object's status as things stand, soon (skipped while the node is unreachable)."""
        if self._status_queued:
            return  # the queued write builds the status when it runs
        self._status_queued = True

        async def write():
            self._status_queued = False
            await self.agent.write_status(self)

        self._write(write)

    def _write(self, factory) -> None:
        self._writes.append(factory)
        if self._writer is None or self._writer.done():
            self._writer = self.agent._spawn(self._drain(), f"{self.component}-writes-{self.name}")

    async def _drain(self) -> None:
        while self._writes:
            try:
                await self._writes.popleft()()
            except Exception:
                log.exception("%s: writing about %s/%s failed", self.component, self.namespace, self.name)

    async def flush(self) -> None:
        """Wait until the status writes and Events asked for so far are done."""
        while self._writer is not None and not self._writer.done():
            await asyncio.gather(self._writer, return_exceptions=True)
