"""Decoding Kubernetes' protobuf request bodies (:mod:`localcluster.protobuf`).

The bodies are built here field by field from the ``generated.proto`` field
numbers; ``localcluster/tests/realplane/test_api_semantics.py`` has kubectl send
real ones to both planes.
"""

from __future__ import annotations

import pytest

from localcluster import protobuf


def varint(n: int) -> bytes:
    out = b""
    while True:
        byte, n = n & 0x7F, n >> 7
        out += bytes([byte | (0x80 if n else 0)])
        if not n:
            return out


def field(number: int, value) -> bytes:
    if isinstance(value, bool):
        return varint(number << 3) + varint(int(value))
    data = value.encode() if isinstance(value, str) else value
    return varint(number << 3 | 2) + varint(len(data)) + data


def entry(number: int, key: str, value) -> bytes:
    return field(number, field(1, key) + field(2, value))


def envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    return protobuf.MAGIC + field(1, field(1, api_version) + field(2, kind)) + field(2, raw)


def test_secret_with_metadata_maps_and_bytes():
    meta = field(1, "token") + field(2, "") + field(3, "jhub") + entry(11, "app", "hub") + field(14, "example.com/x")
    raw = field(1, meta) + entry(2, "a", b"\x00b") + field(3, "Opaque") + entry(4, "c", "d") + field(5, True)
    assert protobuf.decode(envelope("v1", "Secret", raw)) == {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "token", "namespace": "jhub", "labels": {"app": "hub"}, "finalizers": ["example.com/x"]},
        "data": {"a": "AGI="},
        "type": "Opaque",
        "stringData": {"c": "d"},
        "immutable": True,
    }


def test_service_account_with_repeated_messages():
    raw = field(1, field(1, "robot")) + field(3, field(1, "pull")) + field(3, field(1, "pull2"))
    assert protobuf.decode(envelope("v1", "ServiceAccount", raw))["imagePullSecrets"] == [{"name": "pull"}, {"name": "pull2"}]


@pytest.mark.parametrize(
    "body",
    [
        b'{"kind": "Secret"}',  # no magic
        envelope("apps/v1", "Deployment", b""),  # a kind without a table
        protobuf.MAGIC + b"\x0a\xff",  # truncated
    ],
)
def test_what_it_cannot_decode_is_unsupported(body):
    with pytest.raises(protobuf.Unsupported):
        protobuf.decode(body)
