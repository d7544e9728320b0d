"""Watch caches with an index: the keys of the objects that share a value (an owner, an involved object), kept with
every list and watch event, so a read of one user's or one Pod's objects is not a pass over the whole namespace.

The shared caches hold a whole namespace; a read per start that passes
over all of it makes a class that starts at once quadratic. An
:class:`IndexedObjects` subclass names what it indexes by
(:meth:`~IndexedObjects.index_of`); :mod:`.ownerindex` indexes by owner
label, :mod:`.eventindex` Events by the object they are about.
"""

from __future__ import annotations

from workspacespawner.k8s.interning import InterningObjects


class IndexedObjects(InterningObjects):
    """An interning cache (``{"namespace/name": object}``) that also knows the keys of each value of
    :meth:`index_of`, in the cache's own order (a list's order; a new key last; a changed object keeps its place
    unless its value changed, as a dict keeps a key's place).

    kubespawner's reflector changes its cache by ``cache[key] = obj`` and
    ``cache.pop(key, None)`` and replaces it after a list (the reflector's
    validator builds a new one); those, and ``del``, keep the index.
    """

    @staticmethod
    def index_of(obj) -> str | None:
        """The value ``obj`` is indexed under, or None for none (the subclass's)."""
        raise NotImplementedError

    def __init__(self, objects=(), previous: dict | None = None):
        super().__init__(objects, previous)
        self._keys_of: dict[str, dict[str, None]] = {}
        for key, obj in self.items():
            self._index(key, obj)

    def _index(self, key: str, obj) -> None:
        value = self.index_of(obj)
        if value is not None:
            self._keys_of.setdefault(value, {})[key] = None

    def _unindex(self, key: str, obj) -> None:
        value = self.index_of(obj)
        keys = self._keys_of.get(value) if value is not None else None
        if keys is not None:
            keys.pop(key, None)
            if not keys:
                del self._keys_of[value]

    def __setitem__(self, key: str, obj: dict) -> None:
        old = self.get(key)
        if old is not None and self.index_of(old) != self.index_of(obj):
            self._unindex(key, old)
        super().__setitem__(key, obj)
        self._index(key, self[key])

    def __delitem__(self, key: str) -> None:
        self._unindex(key, self.get(key))
        super().__delitem__(key)

    def pop(self, key, *default):
        self._unindex(key, self.get(key))
        return super().pop(key, *default)

    def keys_of(self, value: str) -> list[str]:
        """The keys of the cached objects indexed under ``value``, in the cache's order."""
        return list(self._keys_of.get(value, ()))
