"""List paging: ``limit`` and the ``continue`` token, as kube-apiserver's storage layer encodes them.

A token is base64url (no padding) of ``{"v": "meta.k8s.io/v1", "rv": <list
resourceVersion>, "start": "<key after the last item>"}``, the shape of
k8s.io/apiserver ``pkg/storage/continue.go``; the key here is
``namespace/name\\x00`` (``name\\x00`` for cluster-scoped kinds). Clients treat
it as opaque. ``rv`` -1 (from an expired list's 410) continues at the
current state.
"""

from __future__ import annotations

import base64
import json

from . import errors

TOKEN_VERSION = "meta.k8s.io/v1"

#: The 410's message when the list a token continues is older than the kept history.
INCONSISTENT_CONTINUE = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new list "
    "without the continue parameter, or use the continue token in this response to retrieve the remainder of the "
    "results. Continuing with the provided token results in an inconsistent list - objects that were created, "
    "modified, or deleted between the time the first chunk was returned and now may show up in the list."
)


def key_of(namespace: str, name: str) -> str:
    """The start key of the page after the object ``namespace/name`` (``namespace`` "" for cluster-scoped)."""
    return (f"{namespace}/{name}" if namespace else name) + "\x00"


def split_key(key: str) -> tuple[str, str]:
    """``(namespace, name)`` of a key made by :func:`key_of` (the trailing NUL removed)."""
    key = key.rstrip("\x00")
    namespace, _, name = key.rpartition("/")
    return namespace, name


def encode(key: str, resource_version: int) -> str:
    """A continue token for the list at ``resource_version`` resuming at ``key``."""
    raw = json.dumps({"v": TOKEN_VERSION, "rv": resource_version, "start": key}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode(token: str) -> tuple[str, int]:
    """``(start key, resourceVersion)`` of a token; 400 BadRequest worded as kube-apiserver's for a bad one."""
    invalid = "invalid continue token: continue key is not valid"
    try:
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (ValueError, TypeError) as e:
        raise errors.bad_request(f"{invalid}: {e}") from None
    if not isinstance(data, dict):
        raise errors.bad_request(invalid)
    if data.get("v") != TOKEN_VERSION:
        raise errors.bad_request(f"{invalid}: server does not recognize this encoded version {data.get('v')}")
    rv, start = data.get("rv"), data.get("start")
    if not isinstance(rv, int) or rv == 0:
        raise errors.bad_request(f"{invalid}: incorrect encoded start resourceVersion (version {TOKEN_VERSION})")
    if not isinstance(start, str) or not start:
        raise errors.bad_request(f"{invalid}: encoded start key empty (version {TOKEN_VERSION})")
    return start, rv


def parse_limit(value) -> int | None:
    """The ``limit`` query parameter: a positive count, or None (0, negative or absent: no limit)."""
    if value in (None, ""):
        return None
    try:
        limit = int(value)
    except (TypeError, ValueError):
        raise errors.bad_request(f'strconv.ParseInt: parsing "{value}": invalid syntax') from None
    return limit if limit > 0 else None
