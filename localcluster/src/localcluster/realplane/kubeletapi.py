"""The kubelet's HTTPS API on the real control plane, for what kube-apiserver asks of it: container logs.

kube-apiserver serves ``pods/log`` by asking the kubelet of the Pod's node
(``GET https://<node>:<kubeletEndpoint port>/containerLogs/{namespace}/{pod}/{container}``,
with ``follow``, ``previous``, ``tailLines``, ``limitBytes``, ``timestamps``,
``sinceSeconds``) and passing its answer on; an answer that is not 200 becomes
an error of that status whose message is the kubelet's text. The node agent
(:class:`~..controllers.nodeagent.NodeAgent`) is every node's kubelet, so
:class:`KubeletApi` listens for all of them:

* on each node's ``InternalIP`` (``127.1.0.N``, loopback addresses) and one
  port taken for the plane, which the node agent writes into each Node's
  ``status.daemonEndpoints.kubeletEndpoint``; kube-apiserver dials the
  ``InternalIP`` (``--kubelet-preferred-address-types=InternalIP``);
* over TLS with a serving certificate of the plane's CA naming those
  addresses (kube-apiserver checks it: ``--kubelet-certificate-authority``),
  and only for a client certificate of that CA (kube-apiserver's
  ``apiserver-kubelet-client``), as a kubelet with x509 client
  authentication;
* the answer is the embedded API server's (:class:`~..podlogs.PodLog`, the
  kubelet's ``validateContainerLogStatus`` included), from the Pod as the
  node agent's cache holds it: the same output, the same 400 sentences.

Other kubelet endpoints (exec, attach, port-forward, metrics) answer 404.

Test infrastructure: not imported by the product.
"""

from __future__ import annotations

import logging
import ssl
from pathlib import Path

from aiohttp import web

from ..controllers.refs import PODS, get_or_none
from ..errors import ApiError
from ..podlogs import LogOptions, PodLog

log = logging.getLogger("localcluster")


class KubeletApi:
    """The kubelet API of every node of ``agent`` (the node agent; ``agent.cluster`` is the plane's agents), on
    ``addresses`` (the nodes' ``InternalIP``) and one port (:attr:`port`, chosen by :meth:`start`)."""

    def __init__(self, agent, addresses: list[str], cert: Path, key: Path, ca: Path):
        self.agent = agent
        self.addresses = addresses
        self.port = 0
        self._tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(ca))
        self._tls.load_cert_chain(str(cert), str(key))
        self._tls.verify_mode = ssl.CERT_REQUIRED
        self._runner: web.AppRunner | None = None

    async def start(self) -> KubeletApi:
        """Listen on the first address's free port, then on the same port of the others. Returns self."""
        app = web.Application()
        app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", self._container_logs)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        for address in self.addresses:
            await web.TCPSite(self._runner, address, self.port, ssl_context=self._tls).start()
            self.port = self._runner.addresses[0][1]
        log.info("kubelet API of nodes %s on port %d", ", ".join(self.addresses), self.port)
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _container_logs(self, request: web.Request) -> web.StreamResponse:
        namespace, name = request.match_info["namespace"], request.match_info["pod"]
        pod = get_or_none(self.agent.client, PODS, namespace, name)
        if pod is None:
            return web.Response(status=404, text=f'pod "{name}" not found on this node')
        query = dict(request.query, container=request.match_info["container"])
        try:
            stream = PodLog(self.agent.cluster, pod, LogOptions.parse(query.get))
        except ApiError as e:
            return web.Response(status=e.code, text=e.message)
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        try:
            await response.write(stream.first().encode())
            while (line := await stream.next()) is not None:
                await response.write(line.encode())
        except ConnectionResetError:
            pass
        finally:
            stream.close()
        return response
