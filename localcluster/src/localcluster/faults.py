"""Fault injection and request recording for the local API server.

Tests reach a real cluster's bad days through :class:`FaultInjector` (an API
server that answers 500, 429 or 409 for a while, or answers slowly) and check
what a client actually sent through :class:`RequestLog`. Both are shared
between the cluster's thread and the test's thread, so every method takes a
lock.
"""

from __future__ import annotations

import datetime
import re
import threading
from dataclasses import dataclass, field


@dataclass
class Fault:
    """One injected fault.

    ``method`` is an HTTP method (``"*"`` for any); ``pattern`` a compiled
    regex searched in the request path; ``status`` the HTTP code to answer
    with (None: only delay, then serve normally); ``reason`` and ``message``
    fill the Status body; ``delay`` is seconds to wait before answering;
    ``count`` how many more requests it applies to.
    """

    method: str
    pattern: re.Pattern
    status: int | None
    reason: str
    message: str
    delay: float
    count: int

    def applies(self, method: str, path: str) -> bool:
        return self.count > 0 and self.method in ("*", method) and bool(self.pattern.search(path))


class FaultInjector:
    """Faults the API server injects, checked before every request is handled.

    ``add("GET", r"/pods/", status=500, count=2)`` makes the next two GETs of
    a path containing ``/pods/`` answer 500 InternalError;
    ``add("*", "/virtualmachines", delay=1.5)`` delays the next matching
    request by 1.5 seconds and then serves it normally. Faults are consumed
    in the order they were added.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._faults: list[Fault] = []

    def add(
        self,
        method: str,
        path_pattern: str,
        *,
        status: int | None = None,
        reason: str = "InternalError",
        message: str = "injected fault",
        delay: float = 0.0,
        count: int = 1,
    ) -> None:
        """Inject a fault for the next ``count`` requests matching ``method`` and ``path_pattern``.

        ``delay`` is in seconds; ``status`` None means delay only.
        """
        fault = Fault(method.upper(), re.compile(path_pattern), status, reason, message, delay, count)
        with self._lock:
            self._faults.append(fault)

    def clear(self) -> None:
        """Remove every pending fault."""
        with self._lock:
            self._faults.clear()

    def match(self, method: str, path: str) -> Fault | None:
        """The first pending fault for this request, with one use consumed; None if none applies."""
        with self._lock:
            for fault in self._faults:
                if fault.applies(method.upper(), path):
                    fault.count -= 1
                    if fault.count <= 0:
                        self._faults.remove(fault)
                    return fault
        return None


@dataclass
class Request:
    """One request as the API server saw it.

    ``query`` maps each query parameter to its (last) value; ``content_type``
    is the request's Content-Type without parameters ("" when absent);
    ``status`` the HTTP status answered; ``body`` the parsed JSON body of a
    write (POST, PUT, PATCH, DELETE with a body), else None; ``time`` when
    it was answered (UTC, set by :meth:`RequestLog.append` when not given).
    """

    method: str
    path: str
    query: dict[str, str] = field(default_factory=dict)
    content_type: str = ""
    status: int = 0
    body: object = None
    time: datetime.datetime | None = None


class RequestLog:
    """Every request the API server answered, in order (``records``), recorded after the response."""

    def __init__(self):
        self._lock = threading.Lock()
        self._records: list[Request] = []

    @property
    def records(self) -> list[Request]:
        """A snapshot of the recorded requests, oldest first."""
        with self._lock:
            return list(self._records)

    def append(self, request: Request) -> None:
        if request.time is None:
            request.time = datetime.datetime.now(datetime.UTC)
        with self._lock:
            self._records.append(request)

    def clear(self) -> None:
        with self._lock:
            self._records.clear()

    def matching(self, method: str | None = None, pattern: str | None = None) -> list[Request]:
        """Recorded requests with this method (any when None) whose path matches the regex ``pattern`` (searched)."""
        regex = re.compile(pattern) if pattern else None
        return [
            r
            for r in self.records
            if (method is None or r.method == method.upper()) and (regex is None or regex.search(r.path))
        ]

    def count(self, method: str | None = None, pattern: str | None = None) -> int:
        """How many recorded requests :meth:`matching` would return."""
        return len(self.matching(method, pattern))
