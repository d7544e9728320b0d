"""What the node agent keeps for each Pod or VM guest it runs.

:class:`Workload` is the shape :class:`~.kubelet.PodRuntime` and
:class:`~.virthandler.GuestRuntime` share: which object and node it is, its
directory under the cluster's state, the task running it, and the three
moves the agent makes on it: :meth:`~Workload.run` once the object is placed
on a node, :meth:`~Workload.retire` once it is deleted, and
:meth:`~Workload.finish` for a deleted object that never ran here.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from ..events import record_event


class Workload:
    """One Pod or guest on a node: identity, node, directory, task and status writes."""

    #: The component its Events come from.
    component = ""

    def __init__(self, agent, obj: dict, directory: Path):
        self.agent = agent
        self.store = agent.store
        self.obj = obj
        meta = obj["metadata"]
        self.uid, self.namespace, self.name = meta["uid"], meta["namespace"], meta["name"]
        self.node = self.node_of(obj)
        self.dir = Path(directory) / self.uid
        self.ip: str | None = None
        self.terminating = False
        self.task: asyncio.Task | None = None

    @staticmethod
    def node_of(obj: dict) -> str | None:
        """The node the object is placed on, or None."""
        raise NotImplementedError

    @staticmethod
    def startable(obj: dict) -> bool:
        """Whether a placed object with no runtime yet should be started."""
        raise NotImplementedError

    @staticmethod
    def finish(agent, obj: dict) -> None:
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

    def event(self, reason: str, message: str, *, warning: bool = False) -> None:
        """Report an Event about the object (not while the node is unreachable)."""
        if not self.agent.node_ready(self.node):
            return
        record_event(self.store, self.obj, reason, message, type="Warning" if warning else "Normal", component=self.component)

    def publish(self) -> None:
        """Write the object's status as things stand (skipped while the node is unreachable)."""
        self.agent.write_status(self)
