"""Request bodies in Kubernetes' protobuf encoding, for the kinds ``kubectl create`` sends that way.

client-go's typed clients (1.32 and newer) send built-in objects as
``application/vnd.kubernetes.protobuf`` with no fallback, so ``kubectl
create namespace|configmap|secret|serviceaccount`` of a current kubectl
sends protobuf. The body is the magic ``k8s\\x00`` and a ``runtime.Unknown``
(``typeMeta`` 1: apiVersion 1, kind 2; ``raw`` 2: the object's message);
:func:`decode` turns it into the JSON-shaped dict the rest of the server
works with, for the messages in :data:`MESSAGES` (field numbers from
k8s.io/api ``core/v1/generated.proto`` and apimachinery's
``meta/v1/generated.proto``). Other kinds are not decoded (the server
answers 415 for them); answers are always JSON, which those clients accept
next. Field kinds: ``string``, ``bytes`` (base64 in JSON), ``bool``,
``int64``, ``map`` (string to string), ``bytesmap`` (string to bytes), a
message name, and ``[...]`` for repeated fields.
"""

from __future__ import annotations

import base64

MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"

_OBJECT_REFERENCE = {
    1: ("kind", "string"),
    2: ("namespace", "string"),
    3: ("name", "string"),
    4: ("uid", "string"),
    5: ("apiVersion", "string"),
    6: ("resourceVersion", "string"),
    7: ("fieldPath", "string"),
}

#: message -> {field number: (JSON name, field kind)}; objects are keyed ``apiVersion/kind``.
MESSAGES: dict[str, dict[int, tuple[str, str]]] = {
    "ObjectMeta": {
        1: ("name", "string"),
        2: ("generateName", "string"),
        3: ("namespace", "string"),
        5: ("uid", "string"),
        6: ("resourceVersion", "string"),
        7: ("generation", "int64"),
        11: ("labels", "map"),
        12: ("annotations", "map"),
        13: ("ownerReferences", "[OwnerReference]"),
        14: ("finalizers", "[string]"),
    },
    "OwnerReference": {
        1: ("kind", "string"),
        3: ("name", "string"),
        4: ("uid", "string"),
        5: ("apiVersion", "string"),
        6: ("controller", "bool"),
        7: ("blockOwnerDeletion", "bool"),
    },
    "ObjectReference": _OBJECT_REFERENCE,
    "LocalObjectReference": {1: ("name", "string")},
    "NamespaceSpec": {1: ("finalizers", "[string]")},
    "v1/Namespace": {1: ("metadata", "ObjectMeta"), 2: ("spec", "NamespaceSpec")},
    "v1/ConfigMap": {1: ("metadata", "ObjectMeta"), 2: ("data", "map"), 3: ("binaryData", "bytesmap"), 4: ("immutable", "bool")},
    "v1/Secret": {
        1: ("metadata", "ObjectMeta"),
        2: ("data", "bytesmap"),
        3: ("type", "string"),
        4: ("stringData", "map"),
        5: ("immutable", "bool"),
    },
    "v1/ServiceAccount": {
        1: ("metadata", "ObjectMeta"),
        2: ("secrets", "[ObjectReference]"),
        3: ("imagePullSecrets", "[LocalObjectReference]"),
        4: ("automountServiceAccountToken", "bool"),
    },
}


class Unsupported(ValueError):
    """Not a protobuf body this module decodes (bad framing, or a kind without a message table)."""


def _varint(data: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if i >= len(data) or shift > 63:
            raise Unsupported("truncated varint")
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i
        shift += 7


def _fields(data: bytes):
    """``(field number, wire type, value)`` of each field: ints for varints, bytes otherwise."""
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 2:
            size, i = _varint(data, i)
            value, i = data[i : i + size], i + size
            if len(value) != size:
                raise Unsupported("truncated field")
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            value, i = data[i : i + width], i + width
        else:
            raise Unsupported(f"wire type {wire}")
        yield number, wire, value


def _scalar(kind: str, wire: int, value):
    if kind == "string":
        return bytes(value).decode()
    if kind == "bytes":
        return base64.b64encode(bytes(value)).decode()
    if kind == "bool":
        return bool(value)
    if kind == "int64":
        return value - (1 << 64) if value >= 1 << 63 else value
    return message(kind, bytes(value))


def _entry(value: bytes, to_bytes: bool) -> tuple[str, str]:
    key = val = b""
    for number, _, field in _fields(value):
        if number == 1:
            key = field
        elif number == 2:
            val = field
    return bytes(key).decode(), (base64.b64encode(bytes(val)).decode() if to_bytes else bytes(val).decode())


def message(name: str, data: bytes) -> dict:
    """Decode ``data`` as the message ``name`` of :data:`MESSAGES` into a JSON-shaped dict (empty strings and zeros left out, as JSON's omitempty)."""
    table = MESSAGES.get(name)
    if table is None:
        raise Unsupported(f"no message table for {name}")
    out: dict = {}
    for number, wire, value in _fields(data):
        if number not in table:
            continue
        field, kind = table[number]
        if kind in ("map", "bytesmap"):
            key, val = _entry(value, kind == "bytesmap")
            out.setdefault(field, {})[key] = val
        elif kind.startswith("["):
            out.setdefault(field, []).append(_scalar(kind[1:-1], wire, value))
        else:
            decoded = _scalar(kind, wire, value)
            if decoded in ("", 0) and kind in ("string", "int64"):
                continue
            out[field] = decoded
    return out


def decode(body: bytes) -> dict:
    """The object in a protobuf request body, as JSON would carry it; :class:`Unsupported` if it cannot be decoded here."""
    if not body.startswith(MAGIC):
        raise Unsupported("no k8s protobuf magic")
    type_meta, raw = {}, b""
    for number, _, value in _fields(body[len(MAGIC) :]):
        if number == 1:
            type_meta = {n: bytes(v).decode() for n, _, v in _fields(bytes(value))}
        elif number == 2:
            raw = bytes(value)
    api_version, kind = type_meta.get(1, ""), type_meta.get(2, "")
    obj = message(f"{api_version}/{kind}", raw)
    return {"apiVersion": api_version, "kind": kind, **obj}
