"""One worker thread per process for every database call made from async code.

The ledger and the audit log are synchronous SQLAlchemy; the hub's event
loop must never wait on them (a call may wait for a lock or the network).
Async code runs them with ``await executor.run(fn, *args)`` on a
:class:`DatabaseExecutor`: one thread, so calls run one at a time in the
order they were made, and SQLite sees a single writer from this process.

:func:`process_executor` is the process's executor, which ledgers and audit
logs use unless handed another. :meth:`DatabaseExecutor.shutdown` waits for
the queued calls and stops the thread; a later :meth:`~DatabaseExecutor.run`
starts a new one, so whoever shuts the shared executor down (the quota
service when it closes, a test) does not break the next user.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from concurrent.futures import Future, ThreadPoolExecutor

#: The worker thread's name prefix (what a thread dump shows).
THREAD_NAME = "workspacespawner-db"


class DatabaseExecutor:
    """A single worker thread for blocking database calls (see the module docstring); safe to share between threads."""

    def __init__(self, name: str = THREAD_NAME):
        self.name = name
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    def submit(self, fn, /, *args, **kwargs) -> Future:
        """Queue ``fn(*args, **kwargs)`` on the worker thread (in the caller's context variables); its Future."""
        context = contextvars.copy_context()
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self.name)
            return self._pool.submit(context.run, fn, *args, **kwargs)

    async def run(self, fn, /, *args, **kwargs):
        """``fn(*args, **kwargs)`` on the worker thread, awaited; its result or its exception."""
        return await asyncio.wrap_future(self.submit(fn, *args, **kwargs))

    def shutdown(self, wait: bool = True) -> None:
        """Stop the worker thread once the queued calls have run (``wait``: block until then). Idempotent."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=wait)


_PROCESS_EXECUTOR = DatabaseExecutor()


def process_executor() -> DatabaseExecutor:
    """The process's :class:`DatabaseExecutor`, shared by every ledger and audit log not handed another."""
    return _PROCESS_EXECUTOR
