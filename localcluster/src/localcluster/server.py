"""The local cluster's HTTP front: the Kubernetes REST API on loopback, served by tornado.

Mirrors the API server's URL layout and verbs (see
https://kubernetes.io/docs/reference/using-api/api-concepts/):
discovery (``/version``, ``/api``, ``/apis``, ...), collections and objects
under ``/api/v1`` and ``/apis/{group}/{version}`` (``namespaces/{ns}/`` for
namespaced kinds), the ``status`` subresource, watches (``?watch=true`` and
the legacy ``/watch/`` prefix) streamed as newline-delimited JSON, server-side
printing as ``Table`` for ``kubectl get``, a Pod's ``log`` (plain text,
streamed with ``follow``; see :mod:`.podlogs`), ``exec`` over WebSocket
(:mod:`.podexec`), and KubeVirt's
``subresources.kubevirt.io`` start/stop/restart. Request bodies are JSON,
YAML, or protobuf for the kinds :mod:`.protobuf` decodes; answers are JSON.
List ``limit``/``continue`` paging is the store's (:meth:`.Store.list_chunk`);
server-side apply answers 415 (see :mod:`.patch`). Failures answer with
``Status`` objects. Every request passes the cluster's fault injector first
and is recorded in its request log after.

All handlers run on the cluster's event loop and call the (synchronous,
non-blocking) store directly; a watch awaits its queue.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass

import tornado.httpserver
import tornado.netutil
import tornado.web
import yaml
from tornado.iostream import StreamClosedError

from . import discovery, errors, openapi, protobuf, tables
from .errors import ApiError
from .faults import Request
from .kinds import KUBEVIRT_SUBRESOURCE_GROUP, KUBEVIRT_SUBRESOURCE_VERSION, READ_ONLY_SUBRESOURCES, VM_ACTIONS, Kind
from .patch import JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH
from .podexec import ExecHandler
from .podlogs import LogOptions, PodLog
from .watchstream import TRUE_WORDS, WatchStream, watch_options

log = logging.getLogger("localcluster")

JSON = "application/json"
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: Patch types served; server-side apply (``application/apply-patch+yaml``) answers 415 (see :mod:`.patch`).
PATCH_TYPES = frozenset({JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH})
BODY_TYPES = frozenset({"", JSON, "application/yaml"})

#: Kinds whose registry sets ``ReturnDeletedObject``: DELETE answers with the
#: deleted object. Every other kind answers ``Status`` Success with details
#: once the object is gone (the object itself while finalizers hold it).
RETURNS_DELETED_OBJECT = frozenset(
    {
        ("", "pods"),
        ("", "persistentvolumeclaims"),
        ("", "persistentvolumes"),
        ("", "services"),
        ("", "namespaces"),
        ("", "resourcequotas"),
        ("storage.k8s.io", "storageclasses"),
    }
)

#: The options object each write verb's query parameters are validated as.
OPTIONS_KINDS = {"POST": "CreateOptions", "PUT": "UpdateOptions", "PATCH": "PatchOptions", "DELETE": "DeleteOptions"}

#: Status reasons for errors tornado raises itself (unknown routes, methods a handler lacks).
HTTP_REASONS = {
    400: "BadRequest",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def media_type(header: str | None) -> str:
    """A Content-Type header without its parameters (``application/json; charset=utf-8`` -> ``application/json``)."""
    return (header or "").split(";", 1)[0].strip().lower()


def table_version(accept: str | None) -> str | None:
    """``meta.k8s.io/v1`` (or ``v1beta1``) when the Accept header asks for ``as=Table``, else None."""
    for media_range in (accept or "").split(","):
        params = dict(p.strip().split("=", 1) for p in media_range.split(";")[1:] if "=" in p)
        if params.get("as") == "Table" and params.get("g") == "meta.k8s.io" and params.get("v") in ("v1", "v1beta1"):
            return f"meta.k8s.io/{params['v']}"
    return None


def list_items(kind: Kind, items: list[dict]) -> list[dict]:
    """A list's items as kube-apiserver encodes them: without ``kind``/``apiVersion`` for a built-in kind (typed
    lists leave each item's TypeMeta empty), unchanged for a custom resource (unstructured items keep theirs)."""
    if not kind.built_in:
        return items
    return [{key: value for key, value in item.items() if key not in ("kind", "apiVersion")} for item in items]


def resource_not_found() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource")


def method_not_allowed() -> ApiError:
    return errors.method_not_allowed("the server does not allow this method on the requested resource")


@dataclass(frozen=True)
class Target:
    """What a resource URL names: a kind, maybe a namespace, an object name, a subresource."""

    kind: Kind
    namespace: str | None
    name: str | None
    subresource: str | None
    watch_prefix: bool

    @property
    def is_collection(self) -> bool:
        return self.name is None


def parse_target(store, group: str, version: str, rest: str) -> Target:
    """Resolve the part of a resource URL after ``/api/v1/`` or ``/apis/{g}/{v}/``.

    Shapes: ``[watch/]{plural}[/{name}[/{sub}]]`` for cluster-scoped kinds (and
    namespaced kinds across all namespaces, collection only),
    ``[watch/]namespaces/{ns}/{plural}[/{name}[/{sub}]]`` for namespaced ones,
    ``namespaces/{name}/status`` for a Namespace's own status.
    """
    segments = rest.rstrip("/").split("/")
    watch_prefix = segments[0] == "watch"
    if watch_prefix:
        segments = segments[1:]
    if not segments or "" in segments:
        raise resource_not_found()
    namespace = None
    if segments[0] == "namespaces" and len(segments) >= 3 and segments[2:] not in (["status"], ["finalize"]):
        namespace, segments = segments[1], segments[2:]
    plural, *more = segments
    kind = store.kind(group, version, plural)
    if len(more) > 2 or (namespace is not None and not kind.namespaced):
        raise resource_not_found()
    if more and kind.namespaced and namespace is None:
        raise resource_not_found()
    name = more[0] if more else None
    sub = more[1] if len(more) > 1 else None
    if sub is not None and sub not in kind.subresources:
        raise resource_not_found()
    return Target(kind, namespace, name, sub, watch_prefix)


def single_object(target: Target) -> Target:
    """``target`` if it names one object or its status (PUT, PATCH); 405 for a collection or a read-only subresource."""
    if target.is_collection or target.subresource in READ_ONLY_SUBRESOURCES:
        raise method_not_allowed()
    return target


def writable_collection(target: Target) -> Target:
    """``target`` if it is a collection that takes POST and DELETE: 405 for an object, or a namespaced kind across all namespaces."""
    if not target.is_collection or (target.kind.namespaced and target.namespace is None):
        raise method_not_allowed()
    return target


class BaseHandler(tornado.web.RequestHandler):
    """Fault injection before, request recording after, and Status bodies for every error."""

    def initialize(self, cluster) -> None:
        self.cluster = cluster
        self.store = cluster.store
        self.body = None

    @property
    def content_type(self) -> str:
        return media_type(self.request.headers.get("Content-Type"))

    def query(self, name: str, default: str | None = None) -> str | None:
        return self.get_query_argument(name, default)

    async def prepare(self) -> None:
        fault = self.cluster.faults.match(self.request.method, self.request.path)
        if fault is not None:
            if fault.delay:
                await asyncio.sleep(fault.delay)
            if fault.status is not None:
                raise ApiError(fault.status, fault.reason, fault.message)
        if self.request.method in WRITE_METHODS and self.request.body:
            # a body of a type not served is not decoded: the handler answers 415 for it
            if self.content_type in BODY_TYPES or self.content_type in PATCH_TYPES:
                self.body = self._parse_body()
            elif self.content_type == protobuf.MEDIA_TYPE:
                self.body = self._parse_protobuf()
            else:
                self.body = self.request.body.decode(errors="replace")

    def _parse_protobuf(self):
        """A protobuf object of a kind :mod:`.protobuf` decodes, as a dict; else the raw bytes (415 later)."""
        try:
            return protobuf.decode(self.request.body)
        except (protobuf.Unsupported, UnicodeDecodeError):
            return self.request.body

    def _parse_body(self):
        try:
            if self.content_type == "application/yaml":
                return yaml.safe_load(self.request.body)
            return json.loads(self.request.body)
        except (ValueError, yaml.YAMLError) as e:
            raise errors.bad_request(f"the request body could not be decoded: {e}") from None

    def finish(self, chunk=None):
        """Record the request before the last bytes go out, so a client that saw the answer finds it in the log."""
        if not self._finished:
            query = {k: self.get_query_argument(k) for k in self.request.query_arguments}
            self.cluster.requests.append(
                Request(self.request.method, self.request.path, query, self.content_type, self.get_status(), self.body)
            )
        return super().finish(chunk)

    def send_json(self, body, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", JSON)
        self.finish(json.dumps(body))

    def write_error(self, status_code: int, **kwargs) -> None:
        error = kwargs.get("exc_info", (None, None))[1]
        if not isinstance(error, ApiError):
            message = getattr(error, "log_message", None) or str(error or "") or "internal error"
            error = ApiError(status_code, HTTP_REASONS.get(status_code, "InternalError"), message)
            if status_code == 405:
                error = method_not_allowed()
        self.set_status(error.code)
        self.set_header("Content-Type", JSON)
        self.finish(json.dumps(error.status()))

    def log_exception(self, typ, value, tb) -> None:
        if isinstance(value, (ApiError, tornado.web.HTTPError)):
            log.debug("%s %s: %s", self.request.method, self.request.path, value)
        else:
            super().log_exception(typ, value, tb)


class NotFoundHandler(BaseHandler):
    """Any path the API server does not serve: 404 NotFound Status."""

    async def prepare(self) -> None:
        await super().prepare()
        raise resource_not_found()


class TextHandler(BaseHandler):
    """``/healthz``, ``/livez``, ``/readyz``: plain ``ok``."""

    def get(self) -> None:
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.finish("ok")


class DiscoveryHandler(BaseHandler):
    """A discovery document (``document(handler, *path_args)``), always plain JSON.

    Clients asking for aggregated discovery (``as=APIGroupDiscoveryList``)
    see ``application/json`` and fall back to these documents.
    """

    def initialize(self, cluster, document) -> None:
        super().initialize(cluster)
        self.document = document

    def get(self, *args) -> None:
        self.send_json(self.document(self, *args))


class OpenAPIV2Handler(BaseHandler):
    """``/openapi/v2``: the definition-less Swagger document, as protobuf when asked (see :mod:`.openapi`)."""

    def get(self) -> None:
        if "protobuf" in (self.request.headers.get("Accept") or ""):
            self.set_header("Content-Type", openapi.V2_PROTOBUF)
            self.finish(openapi.v2_protobuf())
        else:
            self.send_json(openapi.v2_document())


class ResourceHandler(BaseHandler):
    """Collections, objects and their status under ``/api/v1`` and ``/apis/{group}/{version}``."""

    def initialize(self, cluster, group: str | None = None) -> None:
        super().initialize(cluster)
        self.fixed_group = group
        self._stream = None

    def compute_etag(self) -> None:
        """No ETag/304 on objects and lists: the API server sends none for them."""
        return None

    def target(self, group, version, rest) -> Target:
        """The request's Target; ``/watch/`` paths take GET only."""
        group = self.fixed_group if self.fixed_group is not None else group
        target = parse_target(self.store, group, version, rest)
        if target.watch_prefix and self.request.method != "GET":
            raise method_not_allowed()
        return target

    @property
    def dry_run(self) -> bool:
        """``?dryRun=All`` (or, on DELETE, ``dryRun: ["All"]`` in the DeleteOptions body)."""
        value = self.query("dryRun")
        if value is None and self.request.method == "DELETE" and isinstance(self.body, dict):
            value = "All" if "All" in (self.body.get("dryRun") or []) else None
        if value not in (None, "All"):
            raise errors.invalid_option(
                OPTIONS_KINDS.get(self.request.method, "CreateOptions"),
                "dryRun",
                f'Unsupported value: ["{value}"]: supported values: "All"',
            )
        return value == "All"

    def send_object(self, target: Target, obj: dict) -> None:
        """The object, or a one-row Table when the client asked for server-side printing."""
        api_version = table_version(self.request.headers.get("Accept"))
        if api_version:
            obj = self.table([obj], target, api_version, obj["metadata"].get("resourceVersion", ""))
        self.send_json(obj)

    def table(self, objects, target: Target, api_version: str, resource_version: str, headers: bool = True) -> dict:
        return tables.table(
            target.kind.kind,
            objects,
            self.store.clock(),
            resource_version=resource_version,
            include_object=self.query("includeObject", "Metadata"),
            api_version=api_version,
            headers=headers,
        )

    # -- GET -----------------------------------------------------------------

    async def get(self, group=None, version=None, rest="") -> None:
        target = self.target(group, version, rest)
        if target.subresource == "log" and not target.watch_prefix:
            await self.pod_log(target)
        elif target.watch_prefix or self.query("watch") in TRUE_WORDS:
            await self.watch(target)
        elif target.is_collection:
            self.list(target)
        else:
            self.send_object(target, self.store.get(target.kind, target.namespace, target.name))

    def list(self, target: Target) -> None:
        """A list, one page of it with ``limit`` (``continue`` for the next one; see :meth:`.Store.list_chunk`)."""
        kind = target.kind
        resource_version, token = self.query("resourceVersion"), self.query("continue")
        if token and resource_version not in (None, ""):
            raise errors.bad_request("specifying resource version is not allowed when using continue")
        items, meta = self.store.list_chunk(
            kind,
            target.namespace,
            self.query("labelSelector"),
            self.query("fieldSelector"),
            # resourceVersion=0 is served from the watch cache, which does not page
            limit=None if resource_version == "0" else self.query("limit"),
            continue_token=token,
        )
        api_version = table_version(self.request.headers.get("Accept"))
        if api_version:
            table = self.table(items, target, api_version, meta["resourceVersion"])
            table["metadata"].update(meta)
            self.send_json(table)
            return
        self.send_json({"kind": f"{kind.kind}List", "apiVersion": kind.api_version, "metadata": meta, "items": list_items(kind, items)})

    async def watch(self, target: Target) -> None:
        options = watch_options(self.query, target.namespace, target.name)
        api_version = table_version(self.request.headers.get("Accept"))
        to_table = None
        if api_version:
            def to_table(obj, headers):
                return self.table([obj], target, api_version, "", headers=headers)
        self._stream = WatchStream(self, target.kind, options, to_table)
        await self._stream.run(self.store, self.cluster.bookmark_interval)

    async def pod_log(self, target: Target) -> None:
        """``pods/{name}/log``: the container's output as text; with ``follow``, new lines as they come."""
        pod = self.store.get(target.kind, target.namespace, target.name)
        self._stream = log = PodLog(self.cluster, pod, LogOptions.parse(self.query))
        self.set_header("Content-Type", "text/plain")
        try:
            self.write(log.first())
            if log.queue is not None:
                await self.flush()
                while (line := await log.next()) is not None:
                    self.write(line)
                    await self.flush()
        except StreamClosedError:
            pass
        finally:
            log.close()

    def on_connection_close(self) -> None:
        if self._stream is not None:
            self._stream.close()

    # -- writes --------------------------------------------------------------

    def post(self, group=None, version=None, rest="") -> None:
        target = writable_collection(self.target(group, version, rest))
        self._check_body_type()
        created = self.store.create(target.kind, target.namespace, self.body, dry_run=self.dry_run)
        self.send_json(created, 201)

    def put(self, group=None, version=None, rest="") -> None:
        target = single_object(self.target(group, version, rest))
        self._check_body_type()
        replaced = self.store.replace(
            target.kind, target.namespace, target.name, self.body, subresource=target.subresource, dry_run=self.dry_run
        )
        self.send_json(replaced)

    def patch(self, group=None, version=None, rest="") -> None:
        target = single_object(self.target(group, version, rest))
        if self.content_type not in PATCH_TYPES or (
            self.content_type == STRATEGIC_MERGE_PATCH and not target.kind.strategic_merge
        ):
            raise errors.unsupported_media_type(self.content_type, target.kind.strategic_merge)
        patched = self.store.patch(
            target.kind,
            target.namespace,
            target.name,
            self.body,
            self.content_type,
            subresource=target.subresource,
            dry_run=self.dry_run,
        )
        self.send_json(patched)

    def delete(self, group=None, version=None, rest="") -> None:
        target = self.target(group, version, rest)
        if target.is_collection:
            self.delete_collection(writable_collection(target))
        elif target.subresource is not None:
            raise method_not_allowed()
        else:
            self.delete_object(target)

    def _check_body_type(self) -> None:
        if self.content_type == protobuf.MEDIA_TYPE and isinstance(self.body, dict):
            return  # decoded (see prepare)
        if self.content_type not in BODY_TYPES:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f'the body of the request was in an unknown format - accepted media types include: application/json, application/yaml (got "{self.content_type}")',
            )

    def delete_options(self) -> dict:
        """DeleteOptions from the body, overridden by query parameters, as the API server merges them."""
        options = dict(self.body) if isinstance(self.body, dict) else {}
        for name in ("propagationPolicy", "gracePeriodSeconds"):
            if self.query(name) is not None:
                options[name] = self.query(name)
        if options.get("orphanDependents") is True and "propagationPolicy" not in options:
            options["propagationPolicy"] = "Orphan"
        grace = options.get("gracePeriodSeconds")
        try:
            options["gracePeriodSeconds"] = None if grace is None else int(grace)
        except (TypeError, ValueError):
            raise errors.bad_request(f"invalid gracePeriodSeconds: {grace}") from None
        return options

    def delete_object(self, target: Target) -> None:
        kind, options, dry_run = target.kind, self.delete_options(), self.dry_run
        result = self.store.delete(
            kind,
            target.namespace,
            target.name,
            propagation_policy=options.get("propagationPolicy"),
            grace_period_seconds=options["gracePeriodSeconds"],
            preconditions=options.get("preconditions"),
            dry_run=dry_run,
        )
        if (kind.group, kind.plural) in RETURNS_DELETED_OBJECT or (not dry_run and self._exists(target)):
            self.send_json(result)
            return
        meta = result["metadata"]
        details = {"name": meta["name"], "group": kind.group, "kind": kind.plural, "uid": meta.get("uid")}
        self.send_json({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})

    def _exists(self, target: Target) -> bool:
        try:
            self.store.get(target.kind, target.namespace, target.name)
        except ApiError:
            return False
        return True

    def delete_collection(self, target: Target) -> None:
        kind = target.kind
        deleted = self.store.delete_collection(
            kind, target.namespace, self.query("labelSelector"), self.query("fieldSelector")
        )
        rv = str(self.store.resource_version)
        self.send_json(
            {"kind": f"{kind.kind}List", "apiVersion": kind.api_version, "metadata": {"resourceVersion": rv},
             "items": list_items(kind, deleted)}
        )


class VMActionHandler(BaseHandler):
    """KubeVirt's ``PUT .../virtualmachines/{name}/start|stop|restart``: 202 Accepted with an empty body, as virt-api answers."""

    def put(self, namespace: str, name: str, action: str) -> None:
        from .vmactions import vm_action

        vm_action(self.store, namespace, name, action, self.body if isinstance(self.body, dict) else None)
        self.set_status(202)
        self.finish()


# -- discovery documents, one per route -----------------------------------------


def _version(handler, *args) -> dict:
    return discovery.version_info()


def _api(handler, *args) -> dict:
    return discovery.api_versions(handler.request.host)


def _apis(handler, *args) -> dict:
    return discovery.api_group_list(handler.store.kinds)


def _api_group(handler, group) -> dict:
    return discovery.api_group(handler.store.kinds, group)


def _core_resources(handler, *args) -> dict:
    return discovery.api_resource_list(handler.store.kinds, "", "v1")


def _group_resources(handler, group, version) -> dict:
    return discovery.api_resource_list(handler.store.kinds, group, version)


def _openapi_root(handler, *args) -> dict:
    return openapi.root(handler.store.kinds)


def _openapi_document(handler, group, version) -> dict:
    doc = openapi.document(handler.store.kinds, group or "", version)
    if doc is None:
        raise resource_not_found()
    return doc


def make_app(cluster) -> tornado.web.Application:
    """The tornado application serving ``cluster``'s API."""
    ctx = {"cluster": cluster}
    vm_actions = "|".join(VM_ACTIONS)
    subresources = f"/apis/{KUBEVIRT_SUBRESOURCE_GROUP.replace('.', '[.]')}/{KUBEVIRT_SUBRESOURCE_VERSION}"
    routes = [
        (r"/(?:healthz|livez|readyz)/?", TextHandler, ctx),
        (r"/version/?", DiscoveryHandler, {**ctx, "document": _version}),
        (r"/api/?", DiscoveryHandler, {**ctx, "document": _api}),
        (r"/apis/?", DiscoveryHandler, {**ctx, "document": _apis}),
        (r"/openapi/v2/?", OpenAPIV2Handler, ctx),
        (r"/openapi/v3/?", DiscoveryHandler, {**ctx, "document": _openapi_root}),
        (r"/openapi/v3/api()/(v1)/?", DiscoveryHandler, {**ctx, "document": _openapi_document}),
        (r"/openapi/v3/apis/([^/]+)/([^/]+)/?", DiscoveryHandler, {**ctx, "document": _openapi_document}),
        (r"/api/v1/?", DiscoveryHandler, {**ctx, "document": _core_resources}),
        (r"/apis/([^/]+)/?", DiscoveryHandler, {**ctx, "document": _api_group}),
        (r"/apis/([^/]+)/([^/]+)/?", DiscoveryHandler, {**ctx, "document": _group_resources}),
        (rf"{subresources}/namespaces/([^/]+)/virtualmachines/([^/]+)/({vm_actions})/?", VMActionHandler, ctx),
        (r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/exec/?", ExecHandler, ctx),
        (r"/api/(?P<version>v1)/(?P<rest>.+)", ResourceHandler, {**ctx, "group": ""}),
        (r"/apis/(?P<group>[^/]+)/(?P<version>[^/]+)/(?P<rest>.+)", ResourceHandler, ctx),
    ]
    return tornado.web.Application(
        routes,
        default_handler_class=NotFoundHandler,
        default_handler_args=ctx,
        log_function=_log_request,
        compress_response=False,
    )


def _log_request(handler: tornado.web.RequestHandler) -> None:
    request = handler.request
    log.debug("%s %s %d %.1fms", request.method, request.uri, handler.get_status(), 1000.0 * request.request_time())


async def serve(cluster, host: str, port: int) -> tuple[tornado.httpserver.HTTPServer, int]:
    """Listen on ``host:port`` (port 0: a free port) and serve ``cluster``; returns the server and the bound port."""
    sockets = tornado.netutil.bind_sockets(port, address=host)
    server = tornado.httpserver.HTTPServer(make_app(cluster), idle_connection_timeout=3600)
    server.add_sockets(sockets)
    return server, sockets[0].getsockname()[1]
