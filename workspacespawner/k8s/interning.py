"""Watch caches whose objects share their strings: every key and string value interned (``sys.intern``).

A reflector's cache holds each object as the API's JSON decoded by
``json.loads``, which shares a string only within one document. Every
cached PersistentVolumeClaim therefore carries its own copies of the same
keys (``metadata``, ``storageClassName``, ...) and of the same values
(``ReadWriteOnce``, ``ceph-rbd``, ``Bound``, the label and annotation
names, the namespace): about two thirds of its memory in the hub
(``benchmarks/burst.py`` shows the hub's memory per server). Interned,
those copies are one string each for the whole cache: a home claim
decoded to ~6 KB takes ~2.5 KB.

Interned strings are freed as usual once no object refers to them
(CPython's interned strings are not immortal), so a cache that churns does
not grow the interpreter's table of them. Readers see the same JSON, equal
by value; nothing may rely on a cached object being a fresh copy (the
caches are read-only to every reader already).

What it buys, measured (``benchmarks/burst.py --without interning``, a hub
with it off beside one as shipped, in the same run; 300 simultaneous
starts, median of 2 rounds, 2026-12-06): without it / with it, the hub's
resident memory per server 1.10x (235 KB against 212), its garbage
collector's seconds 1.7x, its CPU 1.04x; readiness unchanged (1.01x).
"""

from __future__ import annotations

from sys import intern
from typing import Any

from traitlets import HasTraits, validate


def interned(value: Any, previous: Any = None) -> Any:
    """``value`` (decoded JSON: dicts, lists, strings, numbers, booleans, None) rebuilt with every dict key and
    string interned; other values are returned as they are.

    ``previous``: an older version of the same object, interned already (the
    one a watch event replaces). Each of its parts equal to ``value``'s (a
    Pod's ``spec`` across its status updates, its labels when its
    ``metadata`` changed) is kept as it is, not rebuilt: a comparison in C
    instead of a walk in Python. A part that differs is compared the same
    way one level down (dict by key; list item by position when the lengths
    agree). Equal is Python's ``==``, for which ``1``, ``1.0`` and ``true``
    are the same; an API object's schema gives each field one type, so a
    part that compares equal is the same JSON.
    """
    kind = type(value)
    if kind is dict and type(previous) is dict:
        kept = {}
        for key, item in value.items():
            before = previous.get(key, _MISSING)
            kept[intern(key)] = before if before == item else interned(item, before)
        return kept
    if kind is list and type(previous) is list and len(value) == len(previous):
        return [before if before == item else interned(item, before) for item, before in zip(value, previous)]
    return _one(value)


_MISSING = object()


def _one(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        return _dict(value)
    if kind is list:
        return _list(value)
    if kind is str:
        return intern(value)
    return value


# _dict tests each value's type inline rather than calling _one for it: most values are strings, and the call per
# value was most of the cost (a Pod, ~500 items, in ~35 µs instead of ~55 µs). Lists are few and short.
def _dict(mapping: dict) -> dict:
    rebuilt = {}
    for key, item in mapping.items():
        kind = type(item)
        if kind is str:
            item = intern(item)
        elif kind is dict:
            item = _dict(item)
        elif kind is list:
            item = _list(item)
        rebuilt[intern(key)] = item
    return rebuilt


def _list(items: list) -> list:
    return [_one(item) for item in items]


def _resource_version(obj) -> str | None:
    return ((obj or {}).get("metadata") or {}).get("resourceVersion") if isinstance(obj, dict) else None


class InterningObjects(dict):
    """A reflector's ``resources`` (``{"namespace/name": object}``) that interns every object stored in it
    (:func:`interned`), whether set one at a time (a watch event) or given at construction (a list).

    ``previous``: the cache a new list replaces. An object listed again at
    the same ``metadata.resourceVersion`` is the same object (the API
    server's promise for a resourceVersion), so the one already interned is
    kept and not interned again: kubespawner's reflector lists its whole
    kind at every watch restart (every ~10 s), and most of it is unchanged.
    An object whose version moved keeps the parts equal to its older
    version's, as a watch event does (:func:`interned`): during a class's
    start every Pod's status moves between two lists, its spec does not.
    """

    def __init__(self, objects=(), previous: dict | None = None):
        previous = previous or {}

        def kept_or_interned(key, obj):
            old = previous.get(key)
            version = _resource_version(obj)
            return old if version is not None and _resource_version(old) == version else interned(obj, old)

        super().__init__((key, kept_or_interned(key, obj)) for key, obj in dict(objects).items())

    def __setitem__(self, key: str, obj: dict) -> None:
        super().__setitem__(key, interned(obj, self.get(key)))


class InterningReflector(HasTraits):
    """Mixin for a kubespawner ``ResourceReflector``: its cache is an :class:`InterningObjects`.

    kubespawner's reflector replaces ``resources`` with a plain dict after
    every list and sets single keys from watch events; the validator turns
    each new dict into an :class:`InterningObjects` (keeping the objects
    of the cache it replaces that did not change), whose ``__setitem__``
    interns what the watch stores.
    """

    #: The class of the cache (a subclass of :class:`InterningObjects`; :mod:`.changes` adds waking on a change).
    objects_class: type[InterningObjects] = InterningObjects

    @validate("resources")
    def _interning_cache(self, proposal):
        objects = proposal["value"]
        if isinstance(objects, self.objects_class):
            return objects
        return self.objects_class(objects, previous=proposal["owner"].resources)
