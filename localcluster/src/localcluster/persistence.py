"""Keeping the local cluster's objects across restarts: ``state_dir/objects.json``, etcd's part.

With ``LocalCluster(persist=True)`` the store's objects are loaded from
``state_dir/objects.json`` when the cluster starts (before the API server
listens and the controllers start) and saved there when it stops, and also
a couple of seconds after writes while it runs: the save is debounced (one
per ``interval`` however many writes came), the objects are taken on the
event loop (the store never changes a stored object in place, so no copy is
needed) and written off it, to a temporary file renamed over the old one,
so a crash leaves the last complete save.

What comes back is what a cluster whose nodes restarted still has: every
object keeps its uid, resourceVersion (the counter continues past the
highest), creationTimestamp and status; PVCs stay bound to their PVs, whose
data directories (``state_dir/volumes``) were never removed; Services keep
their clusterIPs. Running compute does not come back: Pods,
VirtualMachineInstances and Events are not saved (nor objects owned only by
them, as the garbage collector would remove those). VirtualMachines with
``runStrategy: Always`` start again through the VM controller, as after a
real cluster restart.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import tempfile
import threading
from pathlib import Path

from .kinds import Kind

log = logging.getLogger("localcluster")

#: The file, in the cluster's state directory.
STATE_FILE = "objects.json"

#: (group, plural) of the kinds that stand for running compute, or its history: never saved.
NOT_SAVED = frozenset({("", "pods"), ("kubevirt.io", "virtualmachineinstances"), ("", "events")})


def saved(kind: Kind) -> bool:
    """Whether objects of ``kind`` are saved and restored."""
    return (kind.group, kind.plural) not in NOT_SAVED


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same directory, flushed and renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class Persistence:
    """Loads a store from ``path`` and keeps saving it there (see the module docstring)."""

    def __init__(self, store, path: Path, interval: float = 2.0):
        self.store = store
        self.path = Path(path)
        self.interval = interval
        self.saves = 0
        self._dirty = False
        self._task: asyncio.Task | None = None
        self._lock = threading.Lock()
        self._taken = 0  # snapshots taken
        self._on_disk = 0  # the newest snapshot written

    def load(self) -> int:
        """Restore the saved objects into the store (none if there is no file yet); returns how many."""
        if not self.path.exists():
            return 0
        count = self.store.restore(json.loads(self.path.read_text()), saved)
        log.info("local cluster: %d objects restored from %s", count, self.path)
        return count

    def start(self) -> None:
        """Save a little after every write to a saved kind from now on."""
        self.store.on_write(self._written)

    def _written(self, kind: Kind) -> None:
        if not saved(kind):
            return
        self._dirty = True
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._save_later(), name="localcluster-save")

    async def _save_later(self) -> None:
        while self._dirty:
            await asyncio.sleep(self.interval)
            await self.save()

    async def save(self) -> None:
        """Save now: the objects as they are on the loop, written on a worker thread."""
        self._dirty = False
        self._taken += 1
        state = self.store.dump(saved)
        try:
            await asyncio.to_thread(self._write, self._taken, state)
        except (OSError, RuntimeError, ValueError):
            self._dirty = True  # the next write (or the final save) tries again
            log.exception("local cluster: cannot save %s", self.path)

    def _write(self, number: int, state: dict) -> None:
        """Write snapshot ``number``, unless a newer one is on disk already (a cancelled save finishing late)."""
        with self._lock:
            if number < self._on_disk:
                return
            write_atomically(self.path, json.dumps(state, separators=(",", ":")))
            self._on_disk = number
            self.saves += 1

    async def stop(self) -> None:
        """The cluster stops: no more debounced saves, one last one."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        await self.save()
