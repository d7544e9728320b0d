"""One client for probing an API server's semantics, embedded or real.

:class:`Probe` wraps a kubernetes_asyncio ``ApiClient`` (from a kubeconfig)
with :meth:`Probe.call`, a raw request answering ``(status code, parsed
JSON body)`` for any path, verb and content type, so a test can send the
same request to :mod:`localcluster` and to a real
kube-apiserver and compare the answers (``tests/cluster/realplane``).
"""

from __future__ import annotations

import asyncio
import json
import time
from urllib.parse import urlencode


class Probe:
    """Raw requests through ``api`` (a kubernetes_asyncio ``ApiClient``); ``plane`` is ``"embedded"`` or ``"real"``.

    ``kubeconfig`` is the file ``api`` was made from (for kubectl), if known.
    """

    def __init__(self, api, plane: str, kubeconfig: str | None = None):
        self.api = api
        self.plane = plane
        self.kubeconfig = kubeconfig
        self._resources: dict[str, dict[str, dict] | None] = {}

    @property
    def real(self) -> bool:
        return self.plane == "real"

    async def call(self, method: str, path: str, body=None, *, content_type: str = "application/json", query=None):
        """Send one request; returns ``(status, body)``, the body parsed from JSON (a Status on errors)."""
        from kubernetes_asyncio.client import ApiException

        if query:
            path = f"{path}?{urlencode(query)}"
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        try:
            response = await self.api.call_api(
                path,
                method,
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
                _preload_content=False,
            )
        except ApiException as e:
            return e.status, json.loads(e.body) if e.body else None
        text = await response.text()
        return response.status, json.loads(text) if text else None

    async def ok(self, method: str, path: str, body=None, **kwargs):
        """:meth:`call` that must answer 2xx; returns the body."""
        status, answer = await self.call(method, path, body, **kwargs)
        assert 200 <= status < 300, (method, path, status, answer)
        return answer

    async def collection_path(self, obj: dict, namespace: str) -> str | None:
        """Where ``obj``'s kind is created (``/apis/{g}/{v}[/namespaces/{ns}]/{plural}``), from discovery; None if not served."""
        api_version = obj["apiVersion"]
        if api_version not in self._resources:
            prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            status, doc = await self.call("GET", prefix)
            self._resources[api_version] = (
                {r["kind"]: r for r in doc["resources"] if "/" not in r["name"]} if status == 200 else None
            )
        resource = (self._resources[api_version] or {}).get(obj["kind"])
        if resource is None:
            return None
        prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        where = f"/namespaces/{namespace}" if resource["namespaced"] else ""
        return f"{prefix}{where}/{resource['name']}"

    async def gone(self, path: str) -> bool:
        """Whether GET ``path`` answers 404."""
        return (await self.call("GET", path))[0] == 404


async def eventually(probe, timeout: float = 60.0, interval: float = 0.2, what: str = "condition"):
    """Await ``probe()`` until it returns something true (returned); AssertionError after ``timeout`` seconds.

    For effects a real control plane's controllers bring about some time
    after the request (garbage collection, namespace removal); the embedded
    cluster mostly has them done when the request answers.
    """
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = await probe()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"{what} not met after {timeout}s (last: {last!r})")
