"""Watch responses: a store Watch streamed to one HTTP client as newline-delimited JSON.

Mirrors the API server's watch handler
(https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes):
a 200 response with chunked transfer, one ``{"type": ..., "object": ...}``
per line, flushed per event; ``resourceVersion`` resumes after that version,
and a version older than the kept history is answered inside the stream with
an ``ERROR`` event carrying a 410 ``Expired`` Status; ``timeoutSeconds``
ends the stream (default 1800 s, the API server's minimum request timeout);
``allowWatchBookmarks=true`` adds periodic ``BOOKMARK`` events and one just
before a timeout closes the stream. For ``as=Table`` watches every object is
a one-row Table, column definitions only in the first.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable
from dataclasses import dataclass

from tornado.iostream import StreamClosedError

from . import errors
from .errors import ApiError
from .store import BOOKMARK, ERROR

#: How the API server spells true in a boolean query parameter (Go's strconv.ParseBool).
TRUE_WORDS = frozenset({"1", "t", "T", "true", "True", "TRUE"})

#: The API server's default watch length when the client sets no timeoutSeconds (--min-request-timeout).
DEFAULT_TIMEOUT = 1800.0


@dataclass(frozen=True)
class WatchOptions:
    """The watch's query parameters; ``timeout`` in seconds."""

    namespace: str | None
    resource_version: str | None
    label_selector: str | None
    field_selector: str | None
    timeout: float
    bookmarks: bool


def watch_options(query: Callable[[str], str | None], namespace: str | None, name: str | None) -> WatchOptions:
    """Read a watch's options from ``query(param)``; a watch on one object (``.../{name}?watch=true``) selects it by ``metadata.name``."""
    field_selector = query("fieldSelector")
    if name is not None:
        field_selector = ",".join(filter(None, [f"metadata.name={name}", field_selector]))
    timeout = query("timeoutSeconds")
    try:
        seconds = float(timeout or 0)
    except ValueError:
        raise errors.bad_request(f"invalid timeoutSeconds: {timeout}") from None
    return WatchOptions(
        namespace=namespace,
        resource_version=query("resourceVersion"),
        label_selector=query("labelSelector"),
        field_selector=field_selector,
        timeout=seconds if seconds > 0 else DEFAULT_TIMEOUT,
        bookmarks=query("allowWatchBookmarks") in TRUE_WORDS,
    )


class WatchStream:
    """One watch response on ``handler`` (a tornado RequestHandler).

    ``to_table(obj, headers)`` turns an object into a Table for ``as=Table``
    watches (None: send objects as they are). Call :meth:`close` when the
    client goes away; the store Watch is closed with it, whatever happens.
    """

    def __init__(self, handler, kind, options: WatchOptions, to_table=None):
        self.handler = handler
        self.kind = kind
        self.options = options
        self.to_table = to_table
        self.watch = None
        self.closed = False
        self._headers_pending = to_table is not None

    def close(self) -> None:
        self.closed = True
        if self.watch is not None:
            self.watch.close()

    async def run(self, store, bookmark_interval: float) -> None:
        """Stream until the timeout, the client leaving, or the cluster stopping."""
        try:
            await self._run(store, bookmark_interval)
        except StreamClosedError:
            pass
        finally:
            self.close()

    async def _run(self, store, bookmark_interval: float) -> None:
        o = self.options
        try:
            self.watch = store.watch(self.kind, o.namespace, o.resource_version, o.label_selector, o.field_selector)
        except ApiError as e:
            if e.code != 410:
                raise
            self._start()
            await self._send(ERROR, e.status())
            return
        if self.closed:
            return
        self._start()
        await self.handler.flush()
        await self._pump(bookmark_interval)

    def _start(self) -> None:
        self.handler.set_status(200)
        self.handler.set_header("Content-Type", "application/json")

    async def _pump(self, bookmark_interval: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.options.timeout
        interval = bookmark_interval if self.options.bookmarks else math.inf
        next_bookmark = loop.time() + interval
        while True:
            now = loop.time()
            if now >= deadline and not self.watch.closed:
                if self.options.bookmarks:
                    self.watch.bookmark()
                self.watch.close()
            elif now >= next_bookmark:
                self.watch.bookmark()
                next_bookmark = now + interval
            wait = None if self.watch.closed else min(deadline, next_bookmark) - now
            try:
                event_type, obj = await asyncio.wait_for(anext(self.watch), wait)
            except TimeoutError:
                continue
            except StopAsyncIteration:
                return
            await self._send(event_type, obj)

    async def _send(self, event_type: str, obj: dict) -> None:
        if self.to_table is not None and event_type not in (BOOKMARK, ERROR):
            obj = self.to_table(obj, self._headers_pending)
            self._headers_pending = False
        self.handler.write(json.dumps({"type": event_type, "object": obj}) + "\n")
        await self.handler.flush()
