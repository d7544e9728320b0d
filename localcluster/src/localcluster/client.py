"""The one client the local cluster's controllers use, over either control plane.

A controller (node agent, PVC provisioner, CDI, virt-controller, ...) reads
and writes the cluster through a :class:`Client`. Two implementations serve
the same controller code:

:class:`EmbeddedClient`
    the in-process :class:`~.store.Store` of the embedded API server. Reads
    are the store's own objects; writes are the store's validated writes;
    change hooks are the store's (every write, at once).
:class:`ApiServerClient`
    any Kubernetes API server (the real control plane of
    :mod:`.realplane`), through a ``kubernetes_asyncio`` ``ApiClient``.
    As controller-runtime's cached client does, reads come from informer
    caches kept by list + watch (resuming from the last resourceVersion,
    relisting on ``410 Gone``), and writes go to the API server. A write's
    answer also updates the cache at once, so a controller reads its own
    writes; the watch event that follows is then no news (an older or equal
    resourceVersion never replaces a newer cached object).

The interface, shared by both (``kind`` a :class:`~.kinds.Kind`)::

    kind(group, version, plural) -> Kind      kind_of(apiVersion, kind) -> Kind
    clock() -> aware datetime (UTC)
    get(kind, namespace, name) -> dict        a copy; ApiError 404 if absent
    await read(kind, namespace, name) -> dict a fresh GET from the server (a quorum read); 404 if absent
    objects(kind) -> list[dict]               the cached objects, read-only
    on_change(hook)                           hook(type, kind, obj, old) per change
    await watch(keys)                         caches for (group, version, plural)s, synced
    await create(kind, namespace, obj) -> dict
    await replace(kind, namespace, name, obj, subresource=None, dry_run=False) -> dict
    await delete(kind, namespace, name, grace_period_seconds=None,
                 preconditions=None, propagation_policy=None) -> dict
    await record_event(involved, reason, message, type=, component=) -> dict | None
    await close()

Reads are synchronous (a cache lookup, as controller-runtime's ``client.Get``
reads its informer), writes are awaited. Failures raise
:class:`~.errors.ApiError` with the server's code, reason and message.

Test infrastructure: imports nothing of the product.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import json
import logging
from collections.abc import Callable, Iterable

from . import errors
from .errors import ApiError
from .events import new_event, record_event
from .kinds import KINDS, Kind, by_key, by_kind
from .store import ADDED, DELETED, MODIFIED, Store, rfc3339, utcnow

log = logging.getLogger("localcluster.client")

Hook = Callable[[str, Kind, dict, "dict | None"], None]


class Client:
    """The interface (see the module docstring); subclasses implement it for one control plane."""

    def kind(self, group: str, version: str, plural: str) -> Kind:
        raise NotImplementedError

    def kind_of(self, api_version: str, kind: str) -> Kind:
        raise NotImplementedError

    def clock(self) -> datetime.datetime:
        raise NotImplementedError

    def get(self, kind: Kind, namespace: str | None, name: str) -> dict:
        raise NotImplementedError

    async def read(self, kind: Kind, namespace: str | None, name: str) -> dict:
        """The object as the API server holds it now, not as the cache last saw it (``GET``); ApiError 404 if absent.

        For decisions that must not act on a stale cache, as KubeVirt's virt-api
        reads the VirtualMachine and its VMI afresh for each subresource call.
        """
        raise NotImplementedError

    def objects(self, kind: Kind) -> list[dict]:
        raise NotImplementedError

    def on_change(self, hook: Hook) -> None:
        raise NotImplementedError

    async def watch(self, keys: Iterable[tuple[str, str, str]]) -> None:
        """Make sure the kinds ``keys`` are cached and their changes reach the hooks."""

    async def create(self, kind: Kind, namespace: str | None, obj: dict) -> dict:
        raise NotImplementedError

    async def replace(
        self, kind: Kind, namespace: str | None, name: str, obj: dict, *, subresource: str | None = None, dry_run: bool = False
    ) -> dict:
        """PUT the object (or its ``subresource``); ``dry_run`` persists nothing (``dryRun=All``)."""
        raise NotImplementedError

    async def delete(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        *,
        grace_period_seconds: int | None = None,
        preconditions: dict | None = None,
        propagation_policy: str | None = None,
    ) -> dict:
        raise NotImplementedError

    async def record_event(
        self, involved: dict, reason: str, message: str, *, type: str = "Normal", component: str = "localcluster",
        field_path: str | None = None,
    ) -> dict | None:
        """An Event about ``involved`` (see :func:`~.events.record_event`); None if it could not be written."""
        raise NotImplementedError

    async def close(self) -> None:
        """Stop the watches (if any)."""


class EmbeddedClient(Client):
    """:class:`Client` over the embedded cluster's :class:`~.store.Store` (same loop, no copies kept)."""

    def __init__(self, store: Store):
        self.store = store

    def kind(self, group, version, plural):
        return self.store.kind(group, version, plural)

    def kind_of(self, api_version, kind):
        return self.store.kind_of(api_version, kind)

    def clock(self):
        return self.store.clock()

    def get(self, kind, namespace, name):
        return self.store.get(kind, namespace, name)

    async def read(self, kind, namespace, name):
        return self.store.get(kind, namespace, name)

    def objects(self, kind):
        return self.store.objects(kind)

    def on_change(self, hook):
        self.store.on_change(hook)

    async def create(self, kind, namespace, obj):
        return self.store.create(kind, namespace, obj)

    async def replace(self, kind, namespace, name, obj, *, subresource=None, dry_run=False):
        return self.store.replace(kind, namespace, name, obj, subresource=subresource, dry_run=dry_run)

    async def delete(self, kind, namespace, name, *, grace_period_seconds=None, preconditions=None, propagation_policy=None):
        return self.store.delete(
            kind,
            namespace,
            name,
            grace_period_seconds=grace_period_seconds,
            preconditions=preconditions,
            propagation_policy=propagation_policy,
        )

    async def record_event(self, involved, reason, message, *, type="Normal", component="localcluster", field_path=None):
        return record_event(self.store, involved, reason, message, type=type, component=component, field_path=field_path)


def _path(kind: Kind, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
    base = f"/api/{kind.version}" if not kind.group else f"/apis/{kind.group}/{kind.version}"
    if kind.namespaced and namespace:
        base += f"/namespaces/{namespace}"
    base += f"/{kind.plural}"
    if name:
        base += f"/{name}"
    if subresource:
        base += f"/{subresource}"
    return base


def _api_error(e) -> ApiError:
    """A kubernetes_asyncio ApiException as the :class:`~.errors.ApiError` the controllers expect."""
    try:
        status = json.loads(e.body) if e.body else {}
    except (TypeError, ValueError):
        status = {}
    if not isinstance(status, dict):
        status = {}
    return ApiError(
        int(e.status or 0), status.get("reason") or str(e.reason), status.get("message") or str(e.body), status.get("details")
    )


#: How many deleted objects' uids an informer remembers (per kind), against late write answers.
TOMBSTONES = 4096


def _newer(obj: dict, than: dict | None) -> bool:
    """Whether ``obj`` is at least as new as ``than`` (resourceVersions compared as etcd revisions)."""
    if than is None:
        return True
    try:
        return int(obj["metadata"]["resourceVersion"]) >= int(than["metadata"]["resourceVersion"])
    except (KeyError, TypeError, ValueError):
        return True


class _Informer:
    """One kind's cache, kept by list + watch (see :class:`ApiServerClient`)."""

    def __init__(self, client: ApiServerClient, kind: Kind):
        self.client = client
        self.kind = kind
        self.items: dict[tuple[str, str], dict] = {}
        #: uid of the last object seen deleted under each key: a write's late answer must not bring it back.
        self.deleted: dict[tuple[str, str], str] = {}
        self.synced = asyncio.Event()
        self.resource_version = ""
        self.task: asyncio.Task | None = None

    @staticmethod
    def key(obj: dict) -> tuple[str, str]:
        meta = obj["metadata"]
        return meta.get("namespace") or "", meta["name"]

    def put(self, obj: dict, event_type: str | None = None, *, written: bool = False) -> None:
        """Store ``obj`` if it is news; tell the hooks (``event_type`` None: work it out).

        ``written``: ``obj`` is the answer to this client's own write, which
        may arrive after the watch reported the object deleted (another
        connection); an object already seen deleted is then not stored again.
        """
        key = self.key(obj)
        if written and self.deleted.get(key) == obj["metadata"].get("uid"):
            return
        old = self.items.get(key)
        if old is not None and not _newer(obj, old):
            return
        if old is not None and old["metadata"].get("resourceVersion") == obj["metadata"].get("resourceVersion"):
            return
        if old is not None and old["metadata"].get("uid") != obj["metadata"].get("uid") and event_type == MODIFIED:
            event_type = ADDED
        self.items[key] = obj
        self.client.emit(event_type or (MODIFIED if old is not None else ADDED), self.kind, obj, old)

    def drop(self, obj: dict) -> None:
        key = self.key(obj)
        self.deleted.pop(key, None)  # moved to the end: the oldest tombstones go first
        self.deleted[key] = obj["metadata"].get("uid")
        while len(self.deleted) > TOMBSTONES:
            del self.deleted[next(iter(self.deleted))]
        old = self.items.pop(key, None)
        if old is not None:
            self.client.emit(DELETED, self.kind, obj, old)

    async def relist(self) -> None:
        body = await self.client.request("GET", _path(self.kind))
        seen = set()
        for item in body.get("items") or []:
            item.setdefault("apiVersion", self.kind.api_version)
            item.setdefault("kind", self.kind.kind)
            seen.add(self.key(item))
            self.put(item)
        for key in [k for k in self.items if k not in seen]:
            self.drop(self.items[key])
        self.resource_version = (body.get("metadata") or {}).get("resourceVersion") or ""
        self.synced.set()

    async def run(self) -> None:
        """List, then watch from the list's resourceVersion; relist after 410 Gone or a lost stream."""
        need_list = True
        while True:
            try:
                if need_list:
                    await self.relist()
                    need_list = False
                need_list = await self._watch_once()
            except asyncio.CancelledError:
                raise
            except ApiError as e:
                if e.code == 404:
                    self.synced.set()  # not served (a CRD not installed): an empty cache, retried later
                log.debug("informer %s: %s", self.kind.plural, e)
                need_list = True
                await asyncio.sleep(1.0)
            except Exception as e:  # noqa: BLE001 - a dropped connection: resume or relist
                log.debug("informer %s: %s", self.kind.plural, e)
                await asyncio.sleep(0.5)

    async def _watch_once(self) -> bool:
        """One watch stream; True when the cache must be relisted."""
        query = [
            ("watch", "true"),
            ("resourceVersion", self.resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", "300"),
        ]
        response = await self.client.stream(_path(self.kind), query)
        try:
            async for line in response.content:
                if not line.strip():
                    continue
                event = json.loads(line)
                obj = event.get("object") or {}
                kind = event.get("type")
                if kind == "ERROR":
                    return True  # 410 Gone (or another failure): relist
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                if rv:
                    self.resource_version = rv
                if kind == "BOOKMARK":
                    continue
                obj.setdefault("apiVersion", self.kind.api_version)
                obj.setdefault("kind", self.kind.kind)
                if kind == DELETED:
                    self.drop(obj)
                else:
                    self.put(obj, kind)
        finally:
            response.release()
        return False


class ApiServerClient(Client):
    """:class:`Client` over a Kubernetes API server, from a ``kubernetes_asyncio`` ``ApiClient``.

    ``api`` is the ApiClient (its configuration carries the server, CA and
    credentials: build it from a kubeconfig with
    ``kubernetes_asyncio.config.new_client_from_config``); ``kinds`` the
    table of kinds it may read and write (default :data:`~.kinds.KINDS`
    plus Leases). Reads before :meth:`watch` has cached a kind answer 404.
    Its Events are correlated as client-go's recorder does, over the
    Events this client wrote (a repeat bumps ``count``).
    """

    def __init__(self, api, kinds=None):
        self.api = api
        self.kinds = tuple(kinds or (*KINDS, LEASES))
        self._by_key = by_key(self.kinds)
        self._by_kind = by_kind(self.kinds)
        self._informers: dict[tuple, _Informer] = {}
        self._hooks: list[Hook] = []
        self._events: dict[tuple, dict] = {}
        self._served: dict[tuple[str, str], set[str]] = {}

    # -- lookups -----------------------------------------------------------------

    def kind(self, group, version, plural):
        try:
            return self._by_key[(group, version, plural)]
        except KeyError:
            raise errors.ApiError(404, "NotFound", f"the server could not find the requested resource ({plural})") from None

    def kind_of(self, api_version, kind):
        try:
            return self._by_kind[(api_version, kind)]
        except KeyError:
            raise errors.bad_request(f'no kind "{kind}" is registered for version "{api_version}"') from None

    def clock(self):
        return utcnow()

    def get(self, kind, namespace, name):
        informer = self._informers.get(kind.key)
        obj = informer.items.get(((namespace or "") if kind.namespaced else "", name)) if informer else None
        if obj is None:
            raise errors.not_found(kind.plural, name, kind.group)
        return copy.deepcopy(obj)

    async def read(self, kind, namespace, name):
        return self._cache(kind, await self.request("GET", _path(kind, namespace, name)))

    def objects(self, kind):
        informer = self._informers.get(kind.key)
        return list(informer.items.values()) if informer else []

    def on_change(self, hook):
        self._hooks.append(hook)

    def emit(self, event_type: str, kind: Kind, obj: dict, old: dict | None) -> None:
        for hook in list(self._hooks):
            hook(event_type, kind, copy.deepcopy(obj), copy.deepcopy(old) if old else None)

    async def _discover(self, kind: Kind) -> None:
        """Which resources (and subresources) the server serves in the kind's group/version."""
        gv = (kind.group, kind.version)
        if gv in self._served:
            return
        path = f"/api/{kind.version}" if not kind.group else f"/apis/{kind.group}/{kind.version}"
        try:
            body = await self.request("GET", path)
        except ApiError:
            return  # not served (yet): asked again on the next watch
        self._served[gv] = {r.get("name") for r in body.get("resources") or []}

    def _status_path(self, kind: Kind) -> str | None:
        """``status``, or None where the server has no status subresource (KubeVirt's VMI, CDI's DataSource CRDs)."""
        served = self._served.get((kind.group, kind.version))
        return None if served is not None and f"{kind.plural}/status" not in served else "status"

    async def watch(self, keys):
        started = []
        for key in keys:
            if key not in self._informers:
                await self._discover(self.kind(*key))
                informer = self._informers[key] = _Informer(self, self.kind(*key))
                informer.task = asyncio.create_task(informer.run(), name=f"informer-{key[2]}")
            started.append(self._informers[key])
        await asyncio.gather(*(informer.synced.wait() for informer in started))

    async def close(self):
        for informer in self._informers.values():
            if informer.task is not None:
                informer.task.cancel()
        await asyncio.gather(*(i.task for i in self._informers.values() if i.task), return_exceptions=True)
        self._informers.clear()

    # -- HTTP ----------------------------------------------------------------------

    async def request(self, method: str, path: str, body=None, query=None) -> dict:
        """One API request; the answer's JSON, or ApiError."""
        from kubernetes_asyncio.client.rest import ApiException

        try:
            return await self.api.call_api(
                path,
                method,
                query_params=query or [],
                header_params={"Accept": "application/json", "Content-Type": "application/json"},
                body=body,
                response_types_map={200: "object", 201: "object", 202: "object"},
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
            )
        except ApiException as e:
            raise _api_error(e) from None

    async def stream(self, path: str, query):
        """A watch stream's raw response (lines of JSON events); ApiError if it was refused."""
        response = await self.api.call_api(
            path,
            "GET",
            query_params=query,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _preload_content=False,
        )
        if response.status != 200:
            text = await response.text()
            response.release()
            try:
                status = json.loads(text)
            except ValueError:
                status = {}
            raise ApiError(response.status, status.get("reason", ""), status.get("message", text))
        return response

    def _cache(self, kind: Kind, obj: dict) -> dict:
        informer = self._informers.get(kind.key)
        if informer is not None and obj.get("metadata", {}).get("resourceVersion"):
            obj.setdefault("apiVersion", kind.api_version)
            obj.setdefault("kind", kind.kind)
            informer.put(copy.deepcopy(obj), written=True)
        return obj

    # -- writes ----------------------------------------------------------------------

    async def create(self, kind, namespace, obj):
        return self._cache(kind, await self.request("POST", _path(kind, namespace), obj))

    async def replace(self, kind, namespace, name, obj, *, subresource=None, dry_run=False):
        if subresource == "status":
            await self._discover(kind)
            subresource = self._status_path(kind)  # without one, status is part of the object
        path = _path(kind, namespace, name, subresource)
        if dry_run:
            return await self.request("PUT", path, obj, [("dryRun", "All")])
        return self._cache(kind, await self.request("PUT", path, obj))

    async def delete(self, kind, namespace, name, *, grace_period_seconds=None, preconditions=None, propagation_policy=None):
        options = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if preconditions:
            options["preconditions"] = preconditions
        if propagation_policy:
            options["propagationPolicy"] = propagation_policy
        answer = await self.request("DELETE", _path(kind, namespace, name), options)
        if answer.get("kind") == kind.kind:
            self._cache(kind, answer)
        return answer

    async def record_event(self, involved, reason, message, *, type="Normal", component="localcluster", field_path=None):
        meta = involved["metadata"]
        namespace = meta.get("namespace") or "default"
        now = rfc3339(self.clock())
        kind = self.kind("", "v1", "events")
        key = (namespace, meta.get("uid"), field_path, reason, message, type, component)
        try:
            similar = copy.deepcopy(self._events.get(key))
            if similar is not None:
                similar["count"] = int(similar.get("count") or 1) + 1
                similar["lastTimestamp"] = now
                similar["metadata"].pop("resourceVersion", None)
                stored = await self.request("PUT", _path(kind, namespace, similar["metadata"]["name"]), similar)
            else:
                event = new_event(involved, reason, message, type=type, component=component, now=now, field_path=field_path)
                stored = await self.request("POST", _path(kind, namespace), event)
        except ApiError as e:
            log.debug("event %s about %s: %s", reason, meta.get("name"), e)
            self._events.pop(key, None)
            return None
        self._events[key] = copy.deepcopy(stored)
        return stored


#: coordination.k8s.io/v1 Lease: the node agent's heartbeats (kube-node-lease), served by real API servers.
LEASES = Kind(group="coordination.k8s.io", version="v1", kind="Lease", plural="leases", namespaced=True, schema="kubernetes")
