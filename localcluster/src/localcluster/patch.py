"""PATCH bodies applied as the Kubernetes API server applies them.

``apply_patch(obj, body, content_type, kind)`` returns the patched copy of
``obj`` (``obj`` itself is never modified) for the four patch types of
``PATCH /api/v1/.../{name}`` (``k8s.io/apiserver/pkg/endpoints/handlers/patch.go``):

``application/merge-patch+json``
    JSON Merge Patch, RFC 7386: objects merge recursively, ``null`` deletes a
    key, anything else (lists included) replaces. The body must be a JSON
    object; anything else is 400 BadRequest.

``application/json-patch+json``
    JSON Patch, RFC 6902, applied by the ``jsonpatch`` library. A body that is
    not a list of operation objects is 400 BadRequest (``DecodePatch``); an
    operation that fails (a ``test`` that does not hold, ``remove``/``replace``
    of a missing path, an unknown ``op``) is 422 Invalid with the generic
    "the server rejected our request due to an error in our request" message
    and empty details, exactly as the API server answers. More than 10000
    operations is 413, as the API server caps them.

``application/strategic-merge-patch+json``
    Strategic merge patch (``k8s.io/apimachinery/pkg/util/strategicpatch``,
    ``StrategicMergeMapPatch``), accepted only for built-in kinds
    (``Kind.strategic_merge``); custom resources answer 415 as on a real
    cluster. The merge is driven by the ``x-kubernetes-patch-strategy`` and
    ``x-kubernetes-patch-merge-key`` markers of kubernetes-validate's strict
    JSON schema for the kind (the same Go struct tags the API server reads):

    * maps merge recursively; ``null`` deletes a key;
    * lists whose strategy is ``merge`` with a merge key (``containers``,
      ``env``, ``volumes``, ``ports`` ...) merge element-wise by that key;
      merge lists without a key (``finalizers``) are a set union; every other
      list is replaced;
    * list order follows the API server: ``$setElementOrder/<list>`` first,
      then the order of the patch list, then the live order. Without
      ``$setElementOrder`` an element new to the list therefore lands *before*
      the live elements that follow no patched element (adding container
      ``b`` to ``[a]`` gives ``[b, a]``, as ``kubectl patch`` shows);
    * ``{"$patch": "delete", <key>: v}`` in a merge list removes that element,
      ``{"$patch": "replace"}`` in a merge list replaces the whole list with the
      other elements; ``"$patch": "replace"`` in a map replaces the map,
      ``"$patch": "delete"`` in a map empties it;
    * ``$retainKeys: [...]`` drops the keys of the live map not listed;
    * ``$deleteFromPrimitiveList/<list>: [...]`` removes those values from a
      list of scalars.

    Where the live object has no value (or a value of another JSON type) the
    patch value is taken as is, with ``null`` members dropped and directive
    members removed (``removeDirectives``). Malformed patches (missing merge
    key, bad directive) are 400 BadRequest; a list of lists is 422, as the
    API server classifies them.

``application/apply-patch+yaml``
    Server-side apply is not implemented: 415 UnsupportedMediaType listing the
    other types, as a kube-apiserver without server-side apply answers (so
    ``kubectl apply --server-side`` and a kubernetes_asyncio apply patch fail
    at once, whether or not the object exists, and nothing is written).
    ``kubectl apply`` without ``--server-side`` sends strategic-merge (built-in
    kinds) or merge (custom resources) patches, which are served. Why not a
    partial apply: see "Differences from a real API server" in the local
    cluster's README.

Checks that patches do not rename objects (``metadata.name``, ``namespace``,
``uid``), resourceVersion preconditions and validation of the result are the
caller's.
"""

from __future__ import annotations

import copy
import json
from functools import cache, lru_cache
from pathlib import Path

import jsonpatch
import jsonpointer

from . import errors
from .kinds import Kind
from .version import KUBERNETES_VERSION

__all__ = [
    "APPLY_PATCH",
    "JSON_PATCH",
    "MERGE_PATCH",
    "STRATEGIC_MERGE_PATCH",
    "apply_patch",
    "json_patch",
    "merge_patch",
    "strategic_merge_patch",
]

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

#: The API server refuses JSON patches with more operations than this (413).
MAX_JSON_PATCH_OPERATIONS = 10000

#: kubernetes-validate schema version whose metadata drives strategic merge: the local cluster's release.
SCHEMA_VERSION = KUBERNETES_VERSION

_DIRECTIVE = "$patch"
_RETAIN_KEYS = "$retainKeys"
_SET_ELEMENT_ORDER = "$setElementOrder/"
_DELETE_FROM_PRIMITIVE_LIST = "$deleteFromPrimitiveList/"


def apply_patch(obj: dict, patch_body, content_type: str, kind: Kind) -> dict:
    """Return ``obj`` with ``patch_body`` applied; never mutates ``obj``.

    ``patch_body`` is the request body, raw (``bytes``/``str`` of JSON) or
    already decoded. ``content_type`` may carry parameters (``; charset=utf-8``).
    """
    media_type = (content_type or "").split(";", 1)[0].strip().lower()
    if media_type == STRATEGIC_MERGE_PATCH and not kind.strategic_merge:
        raise errors.unsupported_media_type(content_type, kind.strategic_merge)
    if media_type not in (MERGE_PATCH, JSON_PATCH, STRATEGIC_MERGE_PATCH):
        # server-side apply (APPLY_PATCH) included: see the module docstring
        raise errors.unsupported_media_type(content_type, kind.strategic_merge)
    body = _decode(patch_body)
    if media_type == JSON_PATCH:
        return json_patch(obj, body)
    if media_type == MERGE_PATCH:
        return merge_patch(obj, body)
    return strategic_merge_patch(obj, body, kind)


def _decode(body):
    if isinstance(body, (bytes, bytearray, memoryview)):
        body = bytes(body).decode("utf-8", errors="replace")
    if isinstance(body, str):
        try:
            return json.loads(body)
        except ValueError as exc:
            raise errors.bad_request(f"error decoding patch: {exc}") from None
    return body


# --- RFC 7386 merge patch -------------------------------------------------------


def merge_patch(obj: dict, patch) -> dict:
    """RFC 7386 JSON Merge Patch of ``obj``; the patch must be a JSON object."""
    if not isinstance(patch, dict):
        raise errors.bad_request("merge patch body must be a JSON object")
    return _merge(copy.deepcopy(obj), patch)


def _merge(target, patch):
    # RFC 7386 section 2, MergePatch(Target, Patch).
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if not isinstance(target, dict):
        target = {}
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = _merge(target.get(key), value)
    return target


# --- RFC 6902 JSON patch ----------------------------------------------------------


def _patch_not_applied() -> errors.ApiError:
    # NewGenericServerResponse(422, ...): generic message, no causes.
    return errors.ApiError(422, "Invalid", "the server rejected our request due to an error in our request")


def json_patch(obj: dict, operations) -> dict:
    """RFC 6902 JSON Patch of ``obj`` (400 for a malformed body, 422 when an operation fails)."""
    if not isinstance(operations, list) or not all(isinstance(op, dict) for op in operations):
        raise errors.bad_request("json patch body must be a JSON array of operation objects")
    if len(operations) > MAX_JSON_PATCH_OPERATIONS:
        raise errors.ApiError(
            413,
            "RequestEntityTooLarge",
            f"The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, "
            f"got {len(operations)}",
        )
    try:
        patched = jsonpatch.JsonPatch(operations).apply(obj, in_place=False)
    except (
        jsonpatch.JsonPatchException,
        jsonpointer.JsonPointerException,
        AttributeError,
        IndexError,
        KeyError,
        TypeError,
        ValueError,
    ) as exc:
        raise _patch_not_applied() from exc
    if not isinstance(patched, dict):
        raise _patch_not_applied()
    return patched


# --- schema metadata for strategic merge ------------------------------------------


def _schema_dir() -> Path:
    import kubernetes_validate

    root = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    wanted = root / f"v{SCHEMA_VERSION}-local-strict"
    if wanted.is_dir():
        return wanted

    def version(path: Path) -> tuple[int, ...]:
        return tuple(int(p) for p in path.name[1:].split("-")[0].split(".") if p.isdigit())

    strict = sorted(root.glob("v*-local-strict"), key=version)
    if not strict:
        raise FileNotFoundError(f"no strict schemas under {root}")
    return strict[-1]


@lru_cache(maxsize=1)
def _definitions() -> dict:
    """The ``$defs`` of kubernetes-validate's ``_definitions.json``, loaded once."""
    with open(_schema_dir() / "_definitions.json", encoding="utf-8") as fh:
        return json.load(fh)["$defs"]


@cache
def _root_definition(group: str, version: str, kind: str) -> str | None:
    """The definition name carrying ``x-kubernetes-group-version-kind`` for this kind."""
    for name, definition in _definitions().items():
        for gvk in definition.get("x-kubernetes-group-version-kind", ()):
            if (gvk.get("group", ""), gvk.get("version"), gvk.get("kind")) == (group, version, kind):
                return name
    return None


def _resolve(node) -> dict:
    """Follow ``$ref`` (``#/$defs/<name>`` or ``/api/_definitions.json#/$defs/<name>``) lazily."""
    seen = 0
    while isinstance(node, dict) and "$ref" in node and seen < 64:
        node = _definitions().get(node["$ref"].rsplit("/", 1)[-1], {})
        seen += 1
    return node if isinstance(node, dict) else {}


class _Field:
    """Patch metadata of one field: its strategy, merge key and (unresolved) schema."""

    __slots__ = ("merge_key", "schema", "strategy")

    def __init__(self, schema: dict | None):
        self.schema = schema or {}
        strategies = [s.strip() for s in str(self.schema.get("x-kubernetes-patch-strategy", "")).split(",")]
        # "retainKeys" only tells clients to send $retainKeys; the server honours the directive.
        others = [s for s in strategies if s and s != "retainKeys"]
        self.strategy = others[0] if others else ""
        self.merge_key = self.schema.get("x-kubernetes-patch-merge-key", "")

    def value_schema(self) -> dict:
        return _resolve(self.schema)

    def item_schema(self) -> dict:
        return _resolve(self.value_schema().get("items"))


def _field(schema: dict, key: str) -> _Field:
    """``LookupPatchMetadataForStruct``/``ForSlice``: a property, or a map's value schema."""
    properties = schema.get("properties") or {}
    if key in properties:
        return _Field(properties[key])
    additional = schema.get("additionalProperties")
    if isinstance(additional, dict):
        return _Field(additional)
    return _Field(None)


def _kind_schema(kind: Kind) -> dict:
    if kind.schema != "kubernetes":
        return {}
    name = _root_definition(kind.group, kind.version, kind.kind)
    return _definitions().get(name, {}) if name else {}


# --- strategic merge patch ----------------------------------------------------------


def strategic_merge_patch(obj: dict, patch, kind: Kind) -> dict:
    """Strategic merge ``patch`` into a copy of ``obj`` using ``kind``'s schema metadata."""
    if not isinstance(patch, dict):
        raise errors.bad_request("strategic merge patch body must be a JSON object")
    return _merge_map(copy.deepcopy(obj), copy.deepcopy(patch), _kind_schema(kind))


def _is_directive_key(key: str) -> bool:
    prefixed = (_SET_ELEMENT_ORDER, _DELETE_FROM_PRIMITIVE_LIST)
    return key in (_DIRECTIVE, _RETAIN_KEYS) or key.startswith(prefixed)


def _take(value):
    """A patch value stored as is: nulls in maps dropped, directives removed.

    Returns ``(value, keep)``; a map carrying ``$patch`` is dropped entirely
    (``discardNullValuesFromPatch`` + ``removeDirectives``).
    """
    if isinstance(value, dict):
        if _DIRECTIVE in value:
            return None, False
        out = {}
        for key, member in value.items():
            if member is None or _is_directive_key(key):
                continue
            member, keep = _take(member)
            if keep:
                out[key] = member
        return out, True
    if isinstance(value, list):
        out = []
        for member in value:
            member, keep = _take(member)
            if keep:
                out.append(member)
        return out, True
    return value, True


def _json_type(value) -> str:
    if isinstance(value, dict):
        return "map"
    if isinstance(value, list):
        return "list"
    return "scalar"


def _merge_map(original: dict | None, patch: dict, schema: dict) -> dict:
    """``mergeMap``: merge ``patch`` into ``original`` (both owned, mutated)."""
    if _DIRECTIVE in patch:
        directive = patch[_DIRECTIVE]
        if directive == "replace":
            value, _ = _take({k: v for k, v in patch.items() if k != _DIRECTIVE})
            return value
        if directive == "delete":
            return {}
        raise errors.bad_request(f"Unknown patch type: {directive} in map: {patch}")
    if original is None:
        original = {}

    _apply_retain_keys(original, patch)
    _apply_set_element_order(original, patch, schema)

    for key, patch_value in list(patch.items()):
        delete_list = False
        if key.startswith(_DELETE_FROM_PRIMITIVE_LIST):
            key = _directive_target(key, _DELETE_FROM_PRIMITIVE_LIST)
            delete_list = True
        if patch_value is None:
            original.pop(key, None)
            continue
        if key not in original or _json_type(original[key]) != _json_type(patch_value):
            if delete_list:
                continue
            value, keep = _take(patch_value)
            if keep:
                original[key] = value
            else:
                original.pop(key, None)
            continue
        current = original[key]
        if isinstance(current, dict):
            field = _field(schema, key)
            if field.strategy == "replace":
                original[key], _ = _take(patch_value)
            else:
                original[key] = _merge_map(current, patch_value, field.value_schema())
        elif isinstance(current, list):
            original[key] = _merge_list_field(current, patch_value, _field(schema, key), delete_list)
        else:
            original[key] = patch_value
    return original


def _directive_target(key: str, prefix: str) -> str:
    target = key[len(prefix) :]
    if not target:
        if prefix == _SET_ELEMENT_ORDER:
            raise errors.bad_request("invalid patch format of setElementOrder list")
        raise errors.bad_request("invalid patch format of primitive list")
    return target


def _apply_retain_keys(original: dict, patch: dict) -> None:
    """``$retainKeys``: drop live keys not listed; every patched key must be listed."""
    if _RETAIN_KEYS not in patch:
        return
    retain = patch.pop(_RETAIN_KEYS)
    if not isinstance(retain, list):
        raise errors.bad_request("invalid patch format of retainKeys")
    keep = {k for k in retain if isinstance(k, str)}
    for key, value in patch.items():
        if value is None or key.startswith((_DELETE_FROM_PRIMITIVE_LIST, _SET_ELEMENT_ORDER)):
            continue
        if key not in keep:
            raise errors.bad_request("invalid patch format of retainKeys")
    for key in list(original):
        if key not in keep:
            del original[key]


def _merge_list_field(original: list, patch: list, field: _Field, delete_list: bool) -> list:
    """``mergeSliceHandler``: merge lists merge (and delete lists delete); others are replaced."""
    if field.strategy == "merge" or delete_list:
        return _merge_list(original, patch, field.item_schema(), field.merge_key, delete_list)
    value, _ = _take(patch)
    return value


def _identity(value):
    """A hashable identity for a JSON value with Go's equality (``1 == 1.0``, ``true != 1``)."""
    if isinstance(value, bool) or value is None:
        return ("literal", value)
    if isinstance(value, (int, float)):
        return ("number", float(value))
    if isinstance(value, str):
        return ("string", value)
    return ("json", json.dumps(value, sort_keys=True))


def _element_kind(*lists: list) -> str | None:
    """``sliceElementType``: ``map`` or ``scalar``; mixed element types are an error."""
    kinds = set()
    for items in lists:
        for item in items:
            if isinstance(item, list):
                raise errors.ApiError(422, "Invalid", "lists of lists are not supported")
            if isinstance(item, dict):
                kinds.add("map")
            elif isinstance(item, bool):
                kinds.add("bool")
            elif isinstance(item, (int, float)):
                kinds.add("number")
            else:
                kinds.add(type(item).__name__)
    if len(kinds) > 1:
        raise errors.bad_request(f"list element types are not identical: {list(lists)}")
    if not kinds:
        return None
    return "map" if kinds == {"map"} else "scalar"


def _merge_value(item: dict, merge_key: str):
    if merge_key not in item:
        raise errors.bad_request(f"map: {item} does not contain declared merge key: {merge_key}")
    return _identity(item[merge_key])


def _merge_list(original: list, patch: list, item_schema: dict, merge_key: str, delete_list: bool) -> list:
    """``mergeSlice``: union of scalars, merge of maps by ``merge_key``, then order."""
    if not original and not patch:
        return original
    element = _element_kind(original, patch)
    if element != "map":
        if delete_list:
            doomed = {_identity(v) for v in patch}
            return [v for v in original if _identity(v) not in doomed]
        merged, seen = [], set()
        for value in original + patch:
            if _identity(value) not in seen:
                seen.add(_identity(value))
                merged.append(value)
        merge_key = ""
    else:
        if not merge_key:
            raise errors.bad_request("cannot merge lists without merge key")
        original, patch = _special_elements(original, patch, merge_key)
        merged = _merge_by_key(original, patch, merge_key, item_schema)
    patch_items, server_only = _partition(merged, patch, merge_key)
    return _normalize_order(patch_items, server_only, patch, original, merge_key)


def _special_elements(original: list, patch: list, merge_key: str) -> tuple[list, list]:
    """``mergeSliceWithSpecialElements``: apply ``$patch: delete``/``replace`` elements."""
    plain, replace = [], False
    for item in patch:
        if _DIRECTIVE not in item:
            plain.append(item)
            continue
        directive = item[_DIRECTIVE]
        if directive == "delete":
            doomed = _merge_value(item, merge_key)
            original = [o for o in original if not (merge_key in o and _identity(o[merge_key]) == doomed)]
        elif directive == "replace":
            replace = True
        elif directive == "merge":
            raise errors.bad_request("merging lists cannot yet be specified in the patch")
        else:
            raise errors.bad_request(f"Unknown patch type: {directive} in map: {item}")
    if replace:
        kept, _ = _take(plain)
        return kept, []
    return original, plain


def _merge_by_key(original: list, patch: list, merge_key: str, item_schema: dict) -> list:
    """``mergeSliceWithoutSpecialElements``: merge matching elements, append new ones."""
    merged = list(original)
    for item in patch:
        wanted = _merge_value(item, merge_key)
        for i, current in enumerate(merged):
            if isinstance(current, dict) and merge_key in current and _identity(current[merge_key]) == wanted:
                merged[i] = _merge_map(current, item, item_schema)
                break
        else:
            value, keep = _take(item)
            if keep:
                merged.append(value)
    return merged


def _key_of(item, merge_key: str):
    if merge_key:
        return _merge_value(item, merge_key)
    return _identity(item)


def _partition(merged: list, by: list, merge_key: str) -> tuple[list, list]:
    """Split ``merged`` into items present in ``by`` and server-only items."""
    present = set()
    for item in by:
        if merge_key and not isinstance(item, dict):
            raise errors.bad_request(f"invalid element in list: {item!r}")
        if merge_key and merge_key not in item:
            continue  # e.g. a {"$patch": "replace"} marker
        present.add(_key_of(item, merge_key))
    inside, outside = [], []
    for item in merged:
        (inside if _key_of(item, merge_key) in present else outside).append(item)
    return inside, outside


def _normalize_order(
    patch_items: list, server_only: list, patch_order: list, server_order: list, merge_key: str
) -> list:
    """``normalizeElementOrder``: patch items in patch order, server-only items in
    live order, then interleaved: a server-only item goes first only when both
    it and the next patch item are in the live list and it came earlier there.
    """

    def positions(order: list) -> dict:
        out = {}
        for i, item in enumerate(order):
            if merge_key and not (isinstance(item, dict) and merge_key in item):
                continue
            out.setdefault(_key_of(item, merge_key), i)
        return out

    patch_pos, server_pos = positions(patch_order), positions(server_order)
    patch_items = sorted(patch_items, key=lambda it: patch_pos.get(_key_of(it, merge_key), len(patch_pos)))
    server_only = sorted(server_only, key=lambda it: server_pos.get(_key_of(it, merge_key), len(server_pos)))
    out, i, j = [], 0, 0
    while i < len(server_only) and j < len(patch_items):
        left = server_pos.get(_key_of(server_only[i], merge_key))
        right = server_pos.get(_key_of(patch_items[j], merge_key))
        if left is not None and right is not None and left < right:
            out.append(server_only[i])
            i += 1
        else:
            out.append(patch_items[j])
            j += 1
    return out + server_only[i:] + patch_items[j:]


def _apply_set_element_order(original: dict, patch: dict, schema: dict) -> None:
    """``mergePatchIntoOriginal``: merge each list named by ``$setElementOrder/<list>``
    and order it: the directive's order, then the live order for the rest."""
    for key in [k for k in patch if k.startswith(_SET_ELEMENT_ORDER)]:
        order = patch.pop(key)
        name = _directive_target(key, _SET_ELEMENT_ORDER)
        if not isinstance(order, list):
            raise errors.bad_request("invalid patch format of setElementOrder list")
        field = _field(schema, name)
        live, patched = original.get(name), patch.get(name)
        if live is not None and not isinstance(live, list):
            raise errors.bad_request(f"invalid value for {name}: expected a list")
        if patched is not None and not isinstance(patched, list):
            raise errors.bad_request(f"invalid value for {name}: expected a list")
        _check_order(patched or [], order, field.merge_key)
        if live is not None and patched is None:
            merged = live
        elif live is None and patched is not None:
            merged, _ = _take(patched)
        elif live is not None:
            merged = _merge_list_field(live, patched, field, False)
        else:
            continue
        merge_key = field.merge_key if _element_kind(merged) == "map" else ""
        inside, outside = _partition(merged, order, merge_key)
        original[name] = _normalize_order(inside, outside, order, live or [], merge_key)
        patch.pop(name, None)


def _check_order(patch_list: list, order: list, merge_key: str) -> None:
    """``validatePatchWithSetOrderList``: patch items appear in the order list, in that order."""
    items = [
        item
        for item in patch_list
        if not (isinstance(item, dict) and _DIRECTIVE in item)
    ]
    if not items or not order:
        return
    j = 0
    for wanted in order:
        if j >= len(items):
            break
        if merge_key:
            if not isinstance(wanted, dict) or not isinstance(items[j], dict):
                raise errors.bad_request("invalid patch format of setElementOrder list")
            same = _merge_value(items[j], merge_key) == _merge_value(wanted, merge_key)
        else:
            same = _identity(items[j]) == _identity(wanted)
        if same:
            j += 1
    if j < len(items):
        raise errors.bad_request(
            f"the order in patch list:\n{patch_list}\n doesn't match $setElementOrder list:\n{order}"
        )
