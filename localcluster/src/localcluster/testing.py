"""Helpers for tests that run against the local cluster: a wait with a deadline, the store's objects, raw HTTP.

Used by the local cluster's own tests and by any suite that installs it (the
fixtures are in :mod:`localcluster.pytest_plugin`).
"""

from __future__ import annotations

import asyncio
import time


async def wait_for(predicate, timeout: float = 5, interval: float = 0.02):
    """Await until ``predicate()`` is truthy and return its value; fail after ``timeout`` seconds.

    A wait with a deadline, not a timed assertion: the cluster's controllers
    run on the same event loop, so each step yields to them.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s: {getattr(predicate, '__name__', predicate)}")
        await asyncio.sleep(interval)


def get_object(cluster, key: tuple[str, str, str], name: str, namespace: str | None = "default") -> dict | None:
    """A copy of the stored object of kind ``key`` (group, version, plural), or None."""
    from localcluster.errors import ApiError

    try:
        return cluster.store.get(cluster.store.kind(*key), namespace, name)
    except ApiError:
        return None


def create_object(cluster, key: tuple[str, str, str], body: dict, namespace: str | None = "default") -> dict:
    """Create ``body`` as kind ``key`` through the store (validated like a client's write)."""
    return cluster.store.create(cluster.store.kind(*key), namespace, body)


def events_for(cluster, name: str, reason: str | None = None) -> list[dict]:
    """The Events about objects called ``name`` (with ``reason``, if given)."""
    store = cluster.store
    return [
        e for e in store.objects(store.kind("", "v1", "events"))
        if e["involvedObject"]["name"] == name and (reason is None or e["reason"] == reason)
    ]


class RawClient:
    """Plain HTTP against the cluster, for what typed clients cannot send or show (bad bodies, headers, raw Status)."""

    def __init__(self, url: str):
        from tornado.httpclient import AsyncHTTPClient

        self.url = url
        self.http = AsyncHTTPClient(force_instance=True)

    async def request(self, method: str, path: str, body=None, *, content_type: str = "application/json", headers=None):
        """Send a request; returns ``(status code, parsed JSON body or text, response headers)``."""
        import json

        if body is not None and not isinstance(body, (str, bytes)):
            body = json.dumps(body)
        all_headers = {"Content-Type": content_type, **(headers or {})}
        response = await self.http.fetch(
            self.url + path,
            method=method,
            body=body,
            headers=all_headers,
            raise_error=False,
            allow_nonstandard_methods=True,
            request_timeout=30,
        )
        text = response.body.decode() if response.body else ""
        try:
            parsed = json.loads(text) if text else None
        except ValueError:
            parsed = text
        return response.code, parsed, response.headers

    async def watch(self, path: str, *, headers=None):
        """GET a watch URL to its end; returns ``(status code, list of events, response headers)``."""
        import json

        response = await self.http.fetch(self.url + path, headers=headers, raise_error=False, request_timeout=30)
        events = [json.loads(line) for line in response.body.decode().splitlines() if line]
        return response.code, events, response.headers

    def close(self) -> None:
        self.http.close()
