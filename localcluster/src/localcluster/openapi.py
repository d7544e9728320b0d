"""A minimal OpenAPI v3 discovery: operations and their query parameters, no schemas.

kubectl (1.27+) reads ``/openapi/v3`` before ``apply``/``create``/``edit`` to
learn whether the server validates fields itself (a ``fieldValidation``
query parameter on the kind's PATCH operation); if it cannot tell, it
validates client-side against the full ``/openapi/v2`` schema and refuses to
write when that is missing. The local cluster validates every write against
the real schemas, so it says so here: ``/openapi/v3`` lists one document per
group version (``{"paths": {"api/v1": {"serverRelativeURL": ...}}}``), and
each document lists the kind's collection and object paths with their
operations, ``x-kubernetes-action`` and ``x-kubernetes-group-version-kind``
extensions and query parameters, as the API server's own documents do.
Schemas (``components``) are left empty, so clients that want them
(``kubectl explain``, openapi-driven strategic merge) fall back to what they
have built in. ``/openapi/v2`` is not served (404), which every client
tolerates once v3 answers.
"""

from __future__ import annotations

from .kinds import Kind
from .version import GIT_VERSION, MAJOR, MINOR, PATCH

_WRITE_PARAMS = ("dryRun", "fieldManager", "fieldValidation", "pretty")
_LIST_PARAMS = (
    "allowWatchBookmarks",
    "continue",
    "fieldSelector",
    "labelSelector",
    "limit",
    "resourceVersion",
    "resourceVersionMatch",
    "sendInitialEvents",
    "timeoutSeconds",
    "watch",
    "pretty",
)
_DELETE_PARAMS = ("dryRun", "gracePeriodSeconds", "propagationPolicy", "pretty")

#: (path kind, HTTP method) -> (x-kubernetes-action, query parameters); path kind is "collection" or "object".
_OPERATIONS = {
    ("collection", "get"): ("list", _LIST_PARAMS),
    ("collection", "post"): ("post", _WRITE_PARAMS),
    ("collection", "delete"): ("deletecollection", _DELETE_PARAMS + ("labelSelector", "fieldSelector")),
    ("object", "get"): ("get", ("pretty",)),
    ("object", "put"): ("put", _WRITE_PARAMS),
    ("object", "patch"): ("patch", _WRITE_PARAMS + ("force",)),
    ("object", "delete"): ("delete", _DELETE_PARAMS),
}


#: The Content-Type of the protobuf form of ``/openapi/v2`` (clients ask with ``...spec.v2@v1.0+protobuf``).
V2_PROTOBUF = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"


def v2_document() -> dict:
    """``GET /openapi/v2`` (JSON): a valid Swagger 2.0 document without paths or definitions."""
    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": GIT_VERSION},
        "paths": {},
        "definitions": {},
    }


def _length_delimited(field_number: int, payload: bytes) -> bytes:
    """One protobuf field of wire type 2 (string or message): tag, varint length, bytes."""
    out = bytearray([field_number << 3 | 2])
    n = len(payload)
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out) + payload


def v2_protobuf() -> bytes:
    """:func:`v2_document` as gnostic's ``openapi.v2.Document`` protobuf (swagger = 1, info = 2 {title = 1, version = 2})."""
    doc = v2_document()
    info = _length_delimited(1, doc["info"]["title"].encode()) + _length_delimited(2, doc["info"]["version"].encode())
    return _length_delimited(1, doc["swagger"].encode()) + _length_delimited(2, info)


def gv_path(group: str, version: str) -> str:
    """The key of a group version in the v3 root: ``api/v1`` or ``apis/{group}/{version}``."""
    return f"apis/{group}/{version}" if group else f"api/{version}"


def root(kinds) -> dict:
    """``GET /openapi/v3``: where each group version's document lives."""
    paths = {}
    for kind in kinds:
        key = gv_path(kind.group, kind.version)
        paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={MAJOR}{MINOR}{PATCH}"}
    return {"paths": paths}


def _operation(kind: Kind, action: str, params: tuple[str, ...]) -> dict:
    return {
        "operationId": f"{action}{kind.kind}",
        "parameters": [{"name": p, "in": "query", "schema": {"type": "string"}, "uniqueItems": True} for p in params],
        "responses": {"200": {"description": "OK"}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": kind.group, "version": kind.version, "kind": kind.kind},
    }


def _paths(kind: Kind) -> dict:
    prefix = f"/{gv_path(kind.group, kind.version)}"
    scope = f"{prefix}/namespaces/{{namespace}}" if kind.namespaced else prefix
    urls = {"collection": f"{scope}/{kind.plural}", "object": f"{scope}/{kind.plural}/{{name}}"}
    out: dict[str, dict] = {}
    for (shape, method), (action, params) in _OPERATIONS.items():
        out.setdefault(urls[shape], {})[method] = _operation(kind, action, params)
    return out


def document(kinds, group: str, version: str) -> dict | None:
    """``GET /openapi/v3/api/v1`` or ``/openapi/v3/apis/{group}/{version}``; None for a group version not served."""
    served = [k for k in kinds if (k.group, k.version) == (group, version)]
    if not served:
        return None
    paths: dict[str, dict] = {}
    for kind in served:
        paths.update(_paths(kind))
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": GIT_VERSION},
        "paths": paths,
        "components": {"schemas": {}},
    }
