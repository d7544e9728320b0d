"""A small proxy in front of the real kube-apiserver that injects faults and records requests.

The embedded API server injects faults and records requests itself
(:class:`~..faults.FaultInjector`, :class:`~..faults.RequestLog`); a real
kube-apiserver cannot, so the hub-level fault tests reach it through
:class:`FaultProxy`, which gives clients the same two objects:

* a client speaks plain HTTP to ``http://127.0.0.1:PORT`` (its kubeconfig:
  :meth:`FaultProxy.write_kubeconfig`); the proxy forwards each request over
  TLS to the API server, checked against the plane's CA;
* a request carrying an ``Authorization`` header (a ServiceAccount's bearer
  token) is forwarded with it and no client certificate, so the API server
  authenticates and authorizes that identity; one without is sent with the
  admin client certificate the proxy was given;
* before forwarding, :meth:`FaultInjector.match` may delay the request and
  answer it with a ``Status`` object instead (the code, reason and message of
  the fault), as the embedded server does;
* responses, watch streams among them, are streamed back as they arrive; each
  request is recorded (method, path, query, status, JSON body of a write) once
  its response headers are known.

Upgrades (``pods/exec`` over WebSocket or SPDY) are not proxied (501).

Test infrastructure: not imported by the product.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from pathlib import Path

import aiohttp
from aiohttp import web
from yarl import URL

from ..errors import ApiError
from ..faults import FaultInjector, Request, RequestLog
from ..ports import free_port
from .plane import write_kubeconfig

log = logging.getLogger(__name__)

#: Request headers not passed on (hop-by-hop, or set again by the upstream connection).
_DROPPED_REQUEST = {"host", "connection", "keep-alive", "transfer-encoding", "te", "upgrade", "proxy-connection", "content-length"}
#: Response headers not passed back (the proxy's own framing replaces them). Content-Encoding stays: the body is
#: passed on as the API server sent it (gzip above 128 KiB), not decompressed.
_DROPPED_RESPONSE = {"connection", "keep-alive", "transfer-encoding", "content-length"}


class FaultProxy:
    """Plain-HTTP proxy on 127.0.0.1 to the API server at ``upstream`` (see the module docstring).

    ``ca_file`` is the plane's CA (PEM path); ``cert_file``/``key_file`` the
    admin client certificate for requests without credentials of their own.
    ``faults`` and ``requests`` default to fresh ones. Start and stop it on
    the event loop that serves it (:meth:`start`, :meth:`stop`).
    """

    def __init__(self, upstream: str, ca_file: Path, cert_file: Path, key_file: Path, *,
                 faults: FaultInjector | None = None, requests: RequestLog | None = None):
        self.upstream = upstream.rstrip("/")
        self.faults = faults or FaultInjector()
        self.requests = requests or RequestLog()
        self._as_admin = ssl.create_default_context(cafile=str(ca_file))
        self._as_admin.load_cert_chain(str(cert_file), str(key_file))
        self._as_caller = ssl.create_default_context(cafile=str(ca_file))
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> FaultProxy:
        """Listen on a free loopback port. Returns self."""
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=10), auto_decompress=False)
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        self.port = free_port()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        log.info("fault proxy on %s for %s", self.url, self.upstream)
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    def write_kubeconfig(self, path: Path, *, token: str | None = None) -> Path:
        """A kubeconfig for clients of the proxy (with ``token``: that bearer token, else the proxy's admin identity)."""
        user = {"token": token} if token else {}
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "realplane-proxy", "cluster": {"server": self.url}}],
            "users": [{"name": "realplane-proxy", "user": user}],
            "contexts": [{"name": "realplane-proxy", "context": {"cluster": "realplane-proxy", "user": "realplane-proxy"}}],
            "current-context": "realplane-proxy",
        }
        return write_kubeconfig(path, cfg)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("Upgrade"):
            return self._refuse(request, 501, "NotImplemented", "the fault proxy does not pass on upgraded connections")
        body = await request.read()
        fault = self.faults.match(request.method, request.path)
        if fault is not None:
            if fault.delay:
                await asyncio.sleep(fault.delay)
            if fault.status is not None:
                return self._refuse(request, fault.status, fault.reason, fault.message, body)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROPPED_REQUEST}
        context = self._as_caller if "Authorization" in request.headers else self._as_admin
        assert self._session is not None
        try:
            upstream = await self._session.request(
                request.method, URL(self.upstream + request.raw_path, encoded=True),
                headers=headers, data=body or None, ssl=context, allow_redirects=False,
                # a body sent without Content-Type stays without one (kube-apiserver reads it as JSON);
                # aiohttp would otherwise label the bytes application/octet-stream, which it refuses with 415
                skip_auto_headers=("Content-Type",),
            )
        except aiohttp.ClientError as e:
            return self._refuse(request, 502, "ServiceUnavailable", f"the fault proxy could not reach the API server: {e}", body)
        try:
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for key, value in upstream.headers.items():
                if key.lower() not in _DROPPED_RESPONSE:
                    response.headers.add(key, value)
            self._record(request, upstream.status, body)
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response
        finally:
            upstream.release()

    def _refuse(self, request: web.Request, code: int, reason: str, message: str, body: bytes = b"") -> web.Response:
        self._record(request, code, body)
        return web.Response(status=code, text=json.dumps(ApiError(code, reason, message).status()), content_type="application/json")

    def _record(self, request: web.Request, status: int, body: bytes) -> None:
        parsed = None
        if body:
            try:
                parsed = json.loads(body)
            except ValueError:
                parsed = None
        content_type = (request.headers.get("Content-Type") or "").split(";")[0].strip()
        self.requests.append(Request(request.method, request.path, dict(request.query), content_type, status, parsed))
