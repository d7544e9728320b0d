"""An async client of Prometheus's HTTP query API (``/api/v1/query``, ``/api/v1/query_range``).

Requests go through tornado's ``AsyncHTTPClient``: nothing blocks the
event loop. Every failure (refused connection, timeout, an HTTP error, a
PromQL error Prometheus reports, an answer that is not JSON) is raised as
:class:`PrometheusError`, naming the URL asked and what Prometheus said.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlencode

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest


class PrometheusError(Exception):
    """A query that did not give an answer: ``url`` asked, ``error`` Prometheus's (or the transport's) words."""

    def __init__(self, url: str, error: str):
        super().__init__(f"Prometheus at {url}: {error}")
        self.url = url
        self.error = error


@dataclass(frozen=True)
class Sample:
    """One series of an instant vector: its ``labels`` (``__name__`` included when kept) and ``value`` (float)."""

    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class Series:
    """One series of a range query: ``labels`` and ``points``, ``[(unix seconds, value), ...]`` oldest first."""

    labels: dict[str, str]
    points: list[tuple[float, float]]


def _seconds(moment: datetime | float) -> float:
    return moment.timestamp() if isinstance(moment, datetime) else float(moment)


def _float(text) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


class PrometheusClient:
    """Queries one Prometheus server.

    ``url``: its base URL (``http://prometheus.monitoring:9090``; a path
    prefix such as ``/prometheus`` is kept). ``timeout``: seconds a query
    may take, also passed to Prometheus as its own query timeout.
    ``http``: the ``AsyncHTTPClient`` to use (default: tornado's shared one).
    """

    def __init__(self, url: str, *, timeout: float = 10.0, http: AsyncHTTPClient | None = None):
        if timeout <= 0:
            raise ValueError(f"timeout must be more than 0 seconds, not {timeout!r}")
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.http = http

    async def _get(self, path: str, params: dict[str, str]) -> dict:
        """The ``data`` of Prometheus's answer to ``GET path?params``; :class:`PrometheusError` otherwise."""
        url = f"{self.url}{path}?{urlencode({**params, 'timeout': f'{self.timeout:g}s'})}"
        request = HTTPRequest(url, method="GET", connect_timeout=self.timeout, request_timeout=self.timeout)
        http = self.http or AsyncHTTPClient()
        try:
            response = await http.fetch(request, raise_error=False)
        except HTTPClientError as e:  # a timeout (HTTP 599) is raised even with raise_error=False
            raise PrometheusError(url, str(e)) from e
        except OSError as e:
            raise PrometheusError(url, f"cannot connect: {e}") from e
        if response.code == 599:
            raise PrometheusError(url, f"no answer: {response.error}")
        try:
            body = json.loads(response.body or b"null")
        except ValueError as e:
            raise PrometheusError(url, f"HTTP {response.code}, not a JSON answer") from e
        if not isinstance(body, dict) or body.get("status") != "success":
            error = body.get("error") if isinstance(body, dict) else None
            kind = body.get("errorType") if isinstance(body, dict) else None
            raise PrometheusError(url, f"HTTP {response.code}: {kind or 'error'}: {error or 'no error given'}")
        return body.get("data") or {}

    async def query(self, promql: str, at: datetime | float | None = None) -> list[Sample]:
        """The instant vector ``promql`` evaluates to (at ``at``, default now): ``[Sample, ...]``.

        A scalar or string result comes back as one Sample without labels.
        Raises :class:`PrometheusError`.
        """
        params = {"query": promql}
        if at is not None:
            params["time"] = f"{_seconds(at):.3f}"
        data = await self._get("/api/v1/query", params)
        result = data.get("result")
        if data.get("resultType") in ("scalar", "string"):
            return [Sample({}, _float(result[1]))]
        return [Sample(dict(item.get("metric") or {}), _float((item.get("value") or [0, "NaN"])[1])) for item in result or []]

    async def query_range(self, promql: str, start: datetime | float, end: datetime | float, step: float) -> list[Series]:
        """The range vector of ``promql`` from ``start`` to ``end`` every ``step`` seconds: ``[Series, ...]``.

        Raises :class:`PrometheusError` (also for ``step`` <= 0, as Prometheus does).
        """
        params = {"query": promql, "start": f"{_seconds(start):.3f}", "end": f"{_seconds(end):.3f}", "step": f"{step:g}"}
        data = await self._get("/api/v1/query_range", params)
        return [
            Series(dict(item.get("metric") or {}), [(float(t), _float(v)) for t, v in item.get("values") or []])
            for item in data.get("result") or []
        ]
