"""virt-api's VM subresources on the real control plane, as an aggregated API server.

KubeVirt's virt-api serves ``subresources.kubevirt.io`` behind kube-apiserver's
aggregator (APIService ``v1.subresources.kubevirt.io``); so does
:class:`VirtApi`, on 127.0.0.1:

* the APIService names an ``ExternalName`` Service ``kubevirt/virt-api``
  whose external name is ``localhost`` (Endpoints may not point at loopback
  addresses, and the plane runs with ``--enable-aggregator-routing=false``,
  so the aggregator dials the Service's name and port), with ``caBundle``
  the cluster CA that signed our serving certificate for
  ``virt-api.kubevirt.svc`` (the name the aggregator checks);
* the aggregator authenticates to us with the front-proxy client
  certificate (``front-proxy-client``, signed by the front-proxy CA) and
  names the user in ``X-Remote-User``: a request without that certificate
  gets 401;
* ``GET /apis/subresources.kubevirt.io/v1`` lists the subresources (as
  virt-api's APIResourceList does), and
  ``PUT .../namespaces/{ns}/virtualmachines/{name}/start|stop|restart``
  answers as KubeVirt v1.4.1's ``pkg/virt-api/rest/subresource.go``: the
  decision is :func:`~..vmactions.plan_vm_action`, the embedded cluster's
  own, made here through this agent's :class:`~..client.Client`.

Test infrastructure: not imported by the product.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import ssl

import tornado.httpserver
import tornado.web

from ..errors import ApiError
from ..kinds import VM_ACTIONS
from ..ports import free_port
from ..vmactions import vm_action_through

log = logging.getLogger(__name__)

GROUP, VERSION = "subresources.kubevirt.io", "v1"
NAMESPACE, SERVICE = "kubevirt", "virt-api"
PREFIX = f"/apis/{GROUP}/{VERSION}"
ALLOWED_PROXY_NAMES = ("front-proxy-client",)


def resource_list() -> dict:
    """The APIResourceList of ``subresources.kubevirt.io/v1`` (the VM actions served here)."""
    resources = [
        {"name": f"virtualmachines/{action}", "singularName": "", "namespaced": True, "kind": "VirtualMachine", "verbs": ["update"]}
        for action in VM_ACTIONS
    ]
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{GROUP}/{VERSION}", "resources": resources}


def group_list() -> dict:
    gv = {"groupVersion": f"{GROUP}/{VERSION}", "version": VERSION}
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [{"name": GROUP, "versions": [gv], "preferredVersion": gv}],
    }


class _Handler(tornado.web.RequestHandler):
    def initialize(self, api: VirtApi):
        self.api = api

    def prepare(self):
        cert = self.request.get_ssl_certificate() or {}
        names = [value for rdn in cert.get("subject", ()) for key, value in rdn if key == "commonName"]
        if not any(n in ALLOWED_PROXY_NAMES for n in names):
            self.send_error_status(ApiError(401, "Unauthorized", "Unauthorized"))

    def send_json(self, body: dict, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(body))

    def send_error_status(self, error: ApiError) -> None:
        self.send_json(error.status(), error.code)

    def write_error(self, status_code, **kwargs):
        self.send_json(ApiError(status_code, "InternalError", self._reason).status(), status_code)


class _Discovery(_Handler):
    def get(self):
        self.send_json(resource_list())


class _Groups(_Handler):
    def get(self):
        self.send_json(group_list())


class _Health(_Handler):
    def prepare(self):  # probes come without the proxy's certificate
        pass

    def get(self):
        self.set_header("Content-Type", "text/plain")
        self.finish("ok")


class _Action(_Handler):
    async def put(self, namespace: str, name: str, action: str):
        try:
            body = json.loads(self.request.body) if self.request.body else None
        except ValueError as e:
            self.send_error_status(ApiError(400, "BadRequest", f"Can not unmarshal Request body to struct, error: {e}"))
            return
        try:
            await vm_action_through(self.api.client, namespace, name, action, body)
        except ApiError as e:
            self.send_error_status(e)
            return
        log.info("virt-api: %s %s/%s for %s", action, namespace, name, self.request.headers.get("X-Remote-User"))
        self.set_status(202)
        self.finish()


class _NotFound(_Handler):
    def prepare(self):
        super().prepare()
        if not self._finished:
            self.send_error_status(ApiError(404, "NotFound", "the server could not find the requested resource"))


class VirtApi:
    """The agent ``virtapi`` of :class:`~.agents.PlaneAgents` (see the module docstring).

    ``cluster`` is the PlaneAgents (its ``plane`` for certificates and the
    registration, ``client_for("virtapi")`` for reads and writes). ``port``
    is chosen on start (a free one on 127.0.0.1).
    """

    name = "virtapi"
    watches = (("kubevirt.io", "v1", "virtualmachines"), ("kubevirt.io", "v1", "virtualmachineinstances"))

    def __init__(self, cluster):
        self.cluster = cluster
        self.plane = cluster.plane
        self.client = cluster.client_for(self.name)
        self.port = 0
        self._server = None

    def _ssl(self) -> ssl.SSLContext:
        pki = self.plane.pki
        crt, key = pki.serving("virt-api", (f"{SERVICE}.{NAMESPACE}.svc", "localhost"))
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.path("front-proxy-ca.crt")))
        ctx.load_cert_chain(str(crt), str(key))
        ctx.verify_mode = ssl.CERT_OPTIONAL
        return ctx

    async def start(self) -> None:
        """Cache VMs and VMIs, listen on 127.0.0.1, register the Service and APIService, wait until Available."""
        await self.client.watch(self.watches)
        app = tornado.web.Application(
            [
                (r"/healthz|/readyz|/livez", _Health, {"api": self}),
                (r"/apis/?", _Groups, {"api": self}),
                (rf"{PREFIX}/?", _Discovery, {"api": self}),
                (rf"{PREFIX}/namespaces/([^/]+)/virtualmachines/([^/]+)/([a-z]+)", _Action, {"api": self}),
                (r".*", _NotFound, {"api": self}),
            ]
        )
        self.port = free_port()
        self._server = tornado.httpserver.HTTPServer(app, ssl_options=self._ssl())
        self._server.listen(self.port, address="127.0.0.1")
        await asyncio.to_thread(register, self.plane, self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            await self._server.close_all_connections()
            self._server = None


def register(plane, port: int, timeout: float = 60.0) -> None:
    """The namespace ``kubevirt``, the ExternalName Service ``virt-api`` (localhost:``port``) and the
    APIService ``v1.subresources.kubevirt.io`` naming it; waits until the aggregator reports it Available."""
    import time


    plane.create_or_replace("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    plane.create_or_replace(
        f"/api/v1/namespaces/{NAMESPACE}/services",
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": SERVICE, "namespace": NAMESPACE, "labels": {"kubevirt.io": "virt-api"}},
            "spec": {"type": "ExternalName", "externalName": "localhost", "ports": [{"port": port, "protocol": "TCP"}]},
        },
    )
    name = f"{VERSION}.{GROUP}"
    plane.create_or_replace(
        "/apis/apiregistration.k8s.io/v1/apiservices",
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": name, "labels": {"kubevirt.io": "virt-api-aggregator"}},
            "spec": {
                "group": GROUP,
                "version": VERSION,
                "groupPriorityMinimum": 1000,
                "versionPriority": 15,
                "service": {"namespace": NAMESPACE, "name": SERVICE, "port": port},
                "caBundle": base64.b64encode(plane.pki.path("ca.crt").read_bytes()).decode(),
            },
        },
    )
    plane.wait_condition(f"/apis/apiregistration.k8s.io/v1/apiservices/{name}", "Available", time.monotonic() + timeout)
