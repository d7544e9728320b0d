"""The object store behind the local API server: etcd plus the apiserver's registry logic.

One :class:`Store` holds every object of every kind, hands out
resourceVersions from one counter (as etcd does), keeps a bounded history of
change events for watch resume (older versions answer 410 Gone, as a
compacted etcd does), can dump its objects and restore them later
(:meth:`Store.dump`, :meth:`Store.restore`, used by :mod:`.persistence`),
and applies the generic registry rules of the
Kubernetes API server: generateName, uid, creationTimestamp, generation
(for the kinds that keep one, see ``Kind.generation``), defaulting and
admission (:mod:`.defaults`), status subresources, optimistic concurrency
on resourceVersion, finalizers and deletionTimestamp (none may be added to
an object being deleted), graceful Pod deletion (due after its grace
period), list paging (:meth:`Store.list_chunk`), and two controllers of
kube-controller-manager done inside the writes that make them due: garbage
collection through ownerReferences (background, foreground and orphan
propagation; dependents of absent owners) and the namespace lifecycle
(Terminating, content deleted, then gone).

All methods run on the cluster's event loop; none of them awaits, so each
write is atomic with respect to every other request and watcher.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import uuid
from collections import deque
from collections.abc import Callable

from . import errors, paging
from .defaults import DEFAULT_SERVICE_ACCOUNT, admit_update, apply_defaults, carry_over, carry_over_status, reset_status
from .kinds import KINDS, Kind, by_key, by_kind
from .patch import apply_patch
from .selectors import FieldSelector, LabelSelector

ADDED, MODIFIED, DELETED, BOOKMARK, ERROR = "ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"

NAMESPACES = ("", "v1", "namespaces")
SERVICE_ACCOUNTS = ("", "v1", "serviceaccounts")
#: The namespaces the NamespaceLifecycle admission plugin never lets go.
IMMORTAL_NAMESPACES = frozenset({"default", "kube-system", "kube-public"})
#: The finalizer a Foreground deletion puts on the owner until its blocking dependents are gone.
FOREGROUND_FINALIZER = "foregroundDeletion"


def utcnow() -> datetime.datetime:
    """The store's clock (UTC, timezone-aware); tests may replace ``Store.clock``."""
    return datetime.datetime.now(datetime.UTC)


def rfc3339(when: datetime.datetime) -> str:
    """Kubernetes' metav1.Time wire format: seconds, UTC, ``Z`` suffix."""
    return when.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _spec_of(obj: dict) -> dict:
    """What counts as the spec for metadata.generation: everything but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "kind", "apiVersion")}


def _is_namespace(kind: Kind) -> bool:
    return kind.key == NAMESPACES


def _held(kind: Kind, obj: dict) -> bool:
    """Whether a marked object stays: metadata finalizers, or a Namespace's ``spec.finalizers`` (its content not yet gone)."""
    if obj["metadata"].get("finalizers"):
        return True
    return _is_namespace(kind) and bool((obj.get("spec") or {}).get("finalizers"))


def _refuse_new_finalizers(kind: Kind, new: dict, current: dict) -> None:
    """ValidateObjectMetaUpdate: an object being deleted may lose finalizers, never gain one (422)."""
    if not current["metadata"].get("deletionTimestamp"):
        return
    added = sorted(set(new["metadata"].get("finalizers") or []) - set(current["metadata"].get("finalizers") or []))
    if added:
        listed = ", ".join(f'"{f}"' for f in added)
        cause = {
            "field": "metadata.finalizers",
            "reason": "FieldValueForbidden",
            "message": f"Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{{listed}}}",
        }
        raise errors.invalid(kind.kind, current["metadata"]["name"], [cause], kind.group)


class Watch:
    """One watch stream: an async iterator of ``(type, object)`` events.

    Created by :meth:`Store.watch`; close it with :meth:`close` (the HTTP
    layer does when the client goes away or timeoutSeconds passes).
    """

    def __init__(self, store: Store, kind: Kind, namespace, label_selector, field_selector):
        self.store = store
        self.kind = kind
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.queue: asyncio.Queue = asyncio.Queue()
        self.closed = False

    def _visible(self, obj: dict | None) -> bool:
        if obj is None:
            return False
        meta = obj["metadata"]
        if self.namespace and meta.get("namespace") != self.namespace:
            return False
        return self.label_selector.matches(meta.get("labels")) and self.field_selector.matches(obj)

    def offer(self, event_type: str, obj: dict, old: dict | None) -> None:
        """Queue an event, translated for this watcher's selectors.

        As the watch cache does: an object that stops matching is reported
        DELETED, one that starts matching ADDED.
        """
        if self.closed:
            return
        now, before = self._visible(obj), self._visible(old)
        if event_type == MODIFIED:
            if now and not before:
                event_type = ADDED
            elif before and not now:
                event_type = DELETED
            elif not now:
                return
        elif not now:
            return
        self.queue.put_nowait((event_type, obj))

    def bookmark(self) -> None:
        """Queue a BOOKMARK carrying only the current resourceVersion."""
        if not self.closed:
            self.queue.put_nowait(
                (
                    BOOKMARK,
                    {
                        "kind": self.kind.kind,
                        "apiVersion": self.kind.api_version,
                        "metadata": {"resourceVersion": str(self.store.resource_version)},
                    },
                )
            )

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.store._watches.discard(self)
            self.queue.put_nowait(None)

    def __aiter__(self):
        return self

    async def __anext__(self):
        item = await self.queue.get()
        if item is None:
            raise StopAsyncIteration
        return item


class Store:
    """All objects of the local cluster, with the API server's write rules.

    ``kinds`` is the table of served kinds (see :mod:`.kinds`); ``validator``
    an object with ``validate(kind, obj, old)`` raising
    :class:`~.errors.ApiError` 422; ``history`` how many change events are
    kept for watch resume (older resourceVersions get 410 Gone).
    """

    def __init__(self, kinds=KINDS, validator=None, history: int = 2000):
        self.kinds = tuple(kinds)
        self._by_key = by_key(self.kinds)
        self._by_kind = by_kind(self.kinds)
        self.validator = validator
        self.resource_version = 0
        self._objects: dict[tuple, dict[tuple[str, str], dict]] = {k.key: {} for k in self.kinds}
        self._history: deque = deque(maxlen=history)
        self._watches: set[Watch] = set()
        self._hooks: list[Callable[[str, Kind, dict, dict | None], None]] = []
        self._write_listeners: list[Callable[[Kind], None]] = []
        self.clock: Callable[[], datetime.datetime] = utcnow
        self._ensure_namespace("default")
        self._ensure_namespace("kube-system")

    # -- lookup ------------------------------------------------------------

    def kind(self, group: str, version: str, plural: str) -> Kind:
        """The Kind served at /apis/{group}/{version}/{plural}; 404 if none."""
        try:
            return self._by_key[(group, version, plural)]
        except KeyError:
            raise errors.ApiError(
                404, "NotFound", f"the server could not find the requested resource ({plural})"
            ) from None

    def kind_of(self, api_version: str, kind: str) -> Kind:
        """The Kind for an object's apiVersion and kind; 400 if not served."""
        try:
            return self._by_kind[(api_version, kind)]
        except KeyError:
            raise errors.bad_request(f'no kind "{kind}" is registered for version "{api_version}"') from None

    def on_change(self, hook: Callable[[str, Kind, dict, dict | None], None]) -> None:
        """Call ``hook(event_type, kind, obj, old)`` after every write (controllers' fast path)."""
        self._hooks.append(hook)

    def on_write(self, listener: Callable[[Kind], None]) -> None:
        """Call ``listener(kind)`` after every write, without copies of the objects (the saver's cheap signal)."""
        self._write_listeners.append(listener)

    # -- reads -------------------------------------------------------------

    def _bucket(self, kind: Kind) -> dict:
        return self._objects[kind.key]

    def _check_namespace(self, kind: Kind, namespace: str | None) -> str:
        if kind.namespaced:
            if not namespace:
                raise errors.bad_request("the namespace of the provided object does not match the namespace sent on the request")
            return namespace
        return ""

    def get(self, kind: Kind, namespace: str | None, name: str) -> dict:
        """A deep copy of the stored object; 404 NotFound if there is none."""
        ns = self._check_namespace(kind, namespace)
        obj = self._bucket(kind).get((ns, name))
        if obj is None:
            raise errors.not_found(kind.plural, name, kind.group)
        return copy.deepcopy(obj)

    def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[list[dict], str]:
        """Matching objects (deep copies, sorted by namespace and name) and the list resourceVersion."""
        items, meta = self.list_chunk(kind, namespace, label_selector, field_selector)
        return items, meta["resourceVersion"]

    def list_chunk(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        *,
        limit=None,
        continue_token: str | None = None,
    ) -> tuple[list[dict], dict]:
        """One page of a list: matching objects (deep copies, by namespace and name) and the list metadata.

        ``limit`` (a positive count, as a string or int; else no limit) cuts
        the page; the metadata then carries ``continue``, a token for the
        next page (see :mod:`.paging`), and, without selectors,
        ``remainingItemCount``. A page from a token shows the objects as they
        were at the first page's ``resourceVersion``, as etcd's snapshot
        does, rebuilt from the change history; once that history no longer
        reaches back, 410 Expired with a token that continues at the current
        state (kube-apiserver's answer after an etcd compaction). A malformed
        token is 400.
        """
        limit = paging.parse_limit(limit)
        labels = LabelSelector.parse(label_selector)
        fields = FieldSelector.parse(field_selector)
        rv, after = self.resource_version, None
        objects = self._bucket(kind)
        if continue_token:
            start, rv = paging.decode(continue_token)
            after = paging.split_key(start)
            if rv == -1:
                rv = self.resource_version
            elif not self._history_reaches(rv):
                raise errors.ApiError(
                    410, "Expired", paging.INCONSISTENT_CONTINUE, metadata={"continue": paging.encode(start, -1)}
                )
            else:
                objects = self._objects_at(kind, rv)
        matching = []
        for (ns, name), obj in sorted(objects.items()):
            if (kind.namespaced and namespace and ns != namespace) or (after is not None and (ns, name) <= after):
                continue
            if labels.matches(obj["metadata"].get("labels")) and fields.matches(obj):
                matching.append(((ns, name), obj))
        meta: dict = {"resourceVersion": str(rv)}
        if limit is not None and len(matching) > limit:
            last = matching[limit - 1][0]
            meta["continue"] = paging.encode(paging.key_of(*last), rv)
            if label_selector in (None, "") and field_selector in (None, ""):
                meta["remainingItemCount"] = len(matching) - limit
            matching = matching[:limit]
        return [copy.deepcopy(obj) for _, obj in matching], meta

    def _history_reaches(self, since: int) -> bool:
        """Whether every change after resourceVersion ``since`` is still in the history."""
        oldest = self._history[0][0] if self._history else self.resource_version + 1
        return not (since < oldest - 1 and since < self.resource_version)

    def _objects_at(self, kind: Kind, rv: int) -> dict:
        """The objects of ``kind`` as they were at resourceVersion ``rv``: the current ones with later changes undone."""
        objects = dict(self._bucket(kind))
        for event_rv, key, event_type, obj, old in reversed(self._history):
            if event_rv <= rv:
                break
            if key != kind.key:
                continue
            meta = obj["metadata"]
            where = (meta.get("namespace", ""), meta["name"])
            if event_type == ADDED:
                objects.pop(where, None)
            else:
                objects[where] = old
        return objects

    # -- writes ------------------------------------------------------------

    def _next_rv(self) -> str:
        self.resource_version += 1
        return str(self.resource_version)

    def _emit(self, event_type: str, kind: Kind, obj: dict, old: dict | None) -> None:
        rv = int(obj["metadata"]["resourceVersion"])
        self._history.append((rv, kind.key, event_type, obj, old))
        for watch in list(self._watches):
            if watch.kind.key == kind.key:
                watch.offer(event_type, copy.deepcopy(obj), old)
        for hook in list(self._hooks):
            hook(event_type, kind, copy.deepcopy(obj), copy.deepcopy(old) if old else None)
        for listener in list(self._write_listeners):
            listener(kind)

    def _ensure_namespace(self, name: str) -> None:
        ns_kind = self._by_key[("", "v1", "namespaces")]
        if ("", name) in self._bucket(ns_kind):
            return
        obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        self.create(ns_kind, None, obj)

    def _ensure_default_service_account(self, namespace: str) -> None:
        """The ServiceAccount controller's part: every namespace has a ServiceAccount ``default``."""
        kind = self._by_key.get(SERVICE_ACCOUNTS)
        if kind is None or (namespace, DEFAULT_SERVICE_ACCOUNT) in self._bucket(kind):
            return
        namespace_obj = self._objects[NAMESPACES].get(("", namespace))
        if namespace_obj is None or namespace_obj["metadata"].get("deletionTimestamp"):
            return
        sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": DEFAULT_SERVICE_ACCOUNT}}
        self.create(kind, namespace, sa)

    def create(self, kind: Kind, namespace: str | None, obj: dict, *, dry_run: bool = False) -> dict:
        """Create ``obj``; 201 semantics. Returns the stored object.

        Raises 400 on a kind/namespace mismatch, 404 if the namespace does not
        exist, 409 AlreadyExists, 422 Invalid.
        """
        obj = copy.deepcopy(obj)
        if not isinstance(obj, dict):
            raise errors.bad_request("the request body must be a JSON object")
        obj.setdefault("apiVersion", kind.api_version)
        obj.setdefault("kind", kind.kind)
        if obj["apiVersion"] != kind.api_version or obj["kind"] != kind.kind:
            raise errors.bad_request(
                f"the API version in the data ({obj['apiVersion']}) does not match the expected API version ({kind.api_version})"
                if obj["apiVersion"] != kind.api_version
                else f"the kind in the data ({obj['kind']}) does not match the expected kind ({kind.kind})"
            )
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be an object")
        ns = self._check_namespace(kind, meta.get("namespace") or namespace)
        if kind.namespaced and meta.get("namespace") and namespace and meta["namespace"] != namespace:
            raise errors.bad_request("the namespace of the provided object does not match the namespace sent on the request")
        if kind.namespaced:
            meta["namespace"] = ns
            namespace_obj = self._objects[NAMESPACES].get(("", ns))
            if namespace_obj is None:
                raise errors.not_found("namespaces", ns)
            if namespace_obj["metadata"].get("deletionTimestamp"):
                raise errors.forbidden(
                    kind.plural,
                    meta.get("name") or "",
                    f"unable to create new content in namespace {ns} because it is being terminated",
                    kind.group,
                    causes=[
                        {
                            "reason": "NamespaceTerminating",
                            "message": f"namespace {ns} is being terminated",
                            "field": "metadata.namespace",
                        }
                    ],
                )
        else:
            meta.pop("namespace", None)
        if not meta.get("name"):
            if meta.get("generateName"):
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            else:
                raise errors.invalid(
                    kind.kind,
                    "",
                    [{"field": "metadata.name", "reason": "FieldValueRequired", "message": "Required value: name or generateName is required"}],
                    kind.group,
                )
        name = meta["name"]
        if (ns, name) in self._bucket(kind):
            raise errors.already_exists(kind.plural, name, kind.group)
        for server_field in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(server_field, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = rfc3339(self.clock())
        if kind.generation:
            meta["generation"] = 1
        if "status" in kind.subresources:
            reset_status(kind, obj)
        apply_defaults(kind, obj, self, creating=True)
        if self.validator is not None:
            self.validator.validate(kind, obj, None)
        if dry_run:
            return obj
        meta["resourceVersion"] = self._next_rv()
        self._bucket(kind)[(ns, name)] = obj
        self._emit(ADDED, kind, obj, None)
        created = copy.deepcopy(obj)
        if _is_namespace(kind):
            self._ensure_default_service_account(name)
        if self._owners_absent(obj):
            self.delete(kind, ns or None, name)  # the garbage collector's verdict on a dependent of absent owners
        return created

    def _stored(self, kind: Kind, namespace: str | None, name: str) -> dict:
        ns = self._check_namespace(kind, namespace)
        current = self._bucket(kind).get((ns, name))
        if current is None:
            raise errors.not_found(kind.plural, name, kind.group)
        return current

    def replace(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        obj: dict,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> dict:
        """PUT: replace the object (or its status); 409 Conflict on a stale resourceVersion."""
        if not isinstance(obj, dict):
            raise errors.bad_request("the request body must be a JSON object")
        current = self._stored(kind, namespace, name)
        meta = obj.get("metadata") or {}
        if meta.get("name") not in (None, name):
            raise errors.bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})"
            )
        want_rv = meta.get("resourceVersion")
        if want_rv and want_rv != current["metadata"]["resourceVersion"]:
            raise errors.conflict(
                kind.plural,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
                kind.group,
            )
        return self._write(kind, current, copy.deepcopy(obj), subresource, dry_run)

    def patch(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        body,
        content_type: str,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> dict:
        """PATCH with a merge, JSON or strategic-merge patch (see :mod:`.patch`)."""
        current = self._stored(kind, namespace, name)
        patched = apply_patch(copy.deepcopy(current), body, content_type, kind)
        patched_meta = patched.get("metadata") if isinstance(patched.get("metadata"), dict) else {}
        for field in ("name", "namespace"):
            if patched_meta.get(field, "") != current["metadata"].get(field, ""):
                raise errors.bad_request(
                    f"the {field} of the object ({patched_meta.get(field, '')}) does not match the {field} on the URL "
                    f"({current['metadata'].get(field, '')})"
                )
        want_rv = (patched.get("metadata") or {}).get("resourceVersion")
        if want_rv and want_rv != current["metadata"]["resourceVersion"]:
            raise errors.conflict(
                kind.plural,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
                kind.group,
            )
        return self._write(kind, current, patched, subresource, dry_run)

    def _write(self, kind: Kind, current: dict, new: dict, subresource: str | None, dry_run: bool) -> dict:
        if subresource not in (None, "status"):
            raise errors.not_found(f"{kind.plural}/{subresource}", current["metadata"]["name"], kind.group)
        if subresource == "status" and "status" not in kind.subresources:
            raise errors.not_found(f"{kind.plural}/status", current["metadata"]["name"], kind.group)
        new.setdefault("apiVersion", kind.api_version)
        new.setdefault("kind", kind.kind)
        if new["apiVersion"] != kind.api_version or new["kind"] != kind.kind:
            raise errors.bad_request(f"the object must be a {kind.api_version} {kind.kind}")
        old_meta = current["metadata"]
        if subresource == "status":
            # Only status changes through the status subresource.
            merged = copy.deepcopy(current)
            merged["status"] = new.get("status")
            if merged["status"] is None:
                merged.pop("status")
            carry_over_status(kind, merged, current)
            new = merged
        else:
            if "status" in kind.subresources:
                if "status" in current:
                    new["status"] = copy.deepcopy(current["status"])
                else:
                    new.pop("status", None)
            meta = new.setdefault("metadata", {})
            for fixed in ("uid", "creationTimestamp", "namespace", "name", "deletionTimestamp", "deletionGracePeriodSeconds"):
                if fixed in old_meta:
                    meta[fixed] = old_meta[fixed]
                else:
                    meta.pop(fixed, None)
            # Clients cannot set generation; kinds that keep one count changes outside metadata and status.
            meta.pop("generation", None)
            if "generation" in old_meta:
                meta["generation"] = old_meta["generation"]
            _refuse_new_finalizers(kind, new, current)
            carry_over(kind, new, current)
            apply_defaults(kind, new, self, creating=False)
            if kind.generation and _spec_of(new) != _spec_of(current):
                meta["generation"] = meta.get("generation", 0) + 1
        if self.validator is not None:
            self.validator.validate(kind, new, current)
        admit_update(kind, new, current, self)
        if dry_run:
            return new
        new["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        if new == current:
            return copy.deepcopy(current)  # a no-op write keeps its resourceVersion, as in Kubernetes
        new["metadata"]["resourceVersion"] = self._next_rv()
        key = (old_meta.get("namespace", ""), old_meta["name"])
        if old_meta.get("deletionTimestamp") and not _held(kind, new):
            del self._bucket(kind)[key]
            self._removed(kind, new, current)
            return copy.deepcopy(new)
        self._bucket(kind)[key] = new
        self._emit(MODIFIED, kind, new, current)
        return copy.deepcopy(new)

    def delete(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        *,
        propagation_policy: str | None = None,
        grace_period_seconds: int | None = None,
        preconditions: dict | None = None,
        dry_run: bool = False,
    ) -> dict:
        """DELETE: remove the object, or mark it with deletionTimestamp.

        An object with finalizers, and a Pod bound to a node with a grace
        period, is only marked; it goes when its finalizers are removed (or
        when the node agent confirms the Pod's containers stopped, with a
        delete of grace period 0). Dependents (ownerReferences) are deleted
        once the object is gone (``Background``, the default); ``Orphan``
        keeps them and drops their reference to it; ``Foreground`` marks the
        object with the ``foregroundDeletion`` finalizer, deletes the
        dependents at once and removes the finalizer when no dependent with
        ``blockOwnerDeletion`` is left. A Namespace turns ``Terminating``,
        its content is deleted and it goes when that is gone; creates in it
        are 403 meanwhile, and ``default``, ``kube-system`` and
        ``kube-public`` may not be deleted (403), as the NamespaceLifecycle
        admission plugin answers.
        """
        current = self._stored(kind, namespace, name)
        meta = current["metadata"]
        preconditions = preconditions or {}
        if preconditions.get("uid") and preconditions["uid"] != meta["uid"]:
            raise errors.conflict(
                kind.kind,
                name,
                f"the UID in the precondition ({preconditions['uid']}) does not match the UID in record ({meta['uid']}). "
                "The object might have been deleted and then recreated",
                kind.group,
            )
        if preconditions.get("resourceVersion") and preconditions["resourceVersion"] != meta["resourceVersion"]:
            raise errors.conflict(
                kind.kind,
                name,
                f"the ResourceVersion in the precondition ({preconditions['resourceVersion']}) does not match the "
                f"ResourceVersion in record ({meta['resourceVersion']}). The object might have been modified",
                kind.group,
            )
        if propagation_policy not in (None, "Orphan", "Background", "Foreground"):
            raise errors.invalid_option(
                "DeleteOptions",
                "propagationPolicy",
                f'Unsupported value: "{propagation_policy}": supported values: "Foreground", "Background", "Orphan", "nil"',
            )
        if _is_namespace(kind) and name in IMMORTAL_NAMESPACES:
            raise errors.forbidden(kind.plural, name, "this namespace may not be deleted")
        if dry_run:
            return copy.deepcopy(current)
        if _is_namespace(kind):
            return self._terminate_namespace(current)
        if propagation_policy == "Orphan":
            self._orphan_dependents(current)
        foreground = propagation_policy == "Foreground"
        graceful = (
            kind.kind == "Pod"
            and current.get("spec", {}).get("nodeName")
            and current.get("status", {}).get("phase") not in ("Succeeded", "Failed")
        )
        if graceful:
            if grace_period_seconds is None:
                grace_period_seconds = current["spec"].get("terminationGracePeriodSeconds", 30)
            graceful = grace_period_seconds > 0
        if meta.get("finalizers") or graceful or foreground:
            if meta.get("deletionTimestamp"):
                return copy.deepcopy(current)
            new = copy.deepcopy(current)
            grace = int(grace_period_seconds or 0) if graceful else 0
            # Graceful deletion sets the time the object is due to go; finalizers alone, now with a grace period of 0.
            new["metadata"]["deletionTimestamp"] = rfc3339(self.clock() + datetime.timedelta(seconds=grace))
            new["metadata"]["deletionGracePeriodSeconds"] = grace
            if foreground:
                new["metadata"]["finalizers"] = [*(meta.get("finalizers") or []), FOREGROUND_FINALIZER]
            if new["metadata"].get("generation", 0) > 0:
                new["metadata"]["generation"] += 1  # being marked for deletion is a new generation
            new["metadata"]["resourceVersion"] = self._next_rv()
            self._bucket(kind)[(meta.get("namespace", ""), name)] = new
            self._emit(MODIFIED, kind, new, current)
            if foreground:
                self._delete_dependents(new, "Foreground")
                self._release_foreground_owner(new["metadata"]["uid"])
            return copy.deepcopy(new)
        del self._bucket(kind)[(meta.get("namespace", ""), name)]
        gone = copy.deepcopy(current)
        gone["metadata"]["resourceVersion"] = self._next_rv()
        self._removed(kind, gone, current)
        return gone

    # -- the garbage collector and the namespace controller ------------------
    #
    # kube-controller-manager's work, done here at once, inside the write that
    # makes it due (the real controllers do it moments later).

    def _removed(self, kind: Kind, gone: dict, current: dict) -> None:
        """After an object left the store: tell watchers, collect its dependents, release owners and namespaces waiting for it."""
        self._emit(DELETED, kind, gone, current)
        self._delete_dependents(gone, None)
        for ref in gone["metadata"].get("ownerReferences") or []:
            if ref.get("blockOwnerDeletion"):
                self._release_foreground_owner(ref.get("uid"))
        namespace = gone["metadata"].get("namespace")
        if kind.namespaced and namespace:
            self._finish_namespace(namespace)

    def _dependents(self, uid: str):
        """``(kind, object)`` of every stored object with an ownerReference to ``uid``."""
        for kind in self.kinds:
            for obj in list(self._bucket(kind).values()):
                if any(ref.get("uid") == uid for ref in obj["metadata"].get("ownerReferences") or []):
                    yield kind, obj

    def _delete_dependents(self, owner: dict, propagation_policy: str | None) -> None:
        """Delete every dependent of ``owner`` not yet being deleted (Background, or Foreground below a Foreground owner)."""
        for kind, obj in list(self._dependents(owner["metadata"]["uid"])):
            meta = obj["metadata"]
            if meta.get("deletionTimestamp"):
                continue
            try:
                self.delete(kind, meta.get("namespace") or None, meta["name"], propagation_policy=propagation_policy)
            except errors.ApiError:
                pass

    def _orphan_dependents(self, owner: dict) -> None:
        """Orphan propagation: drop the ownerReference to ``owner`` from each dependent, which stays."""
        uid = owner["metadata"]["uid"]
        for kind, obj in list(self._dependents(uid)):
            new = copy.deepcopy(obj)
            refs = [ref for ref in obj["metadata"]["ownerReferences"] if ref.get("uid") != uid]
            if refs:
                new["metadata"]["ownerReferences"] = refs
            else:
                new["metadata"].pop("ownerReferences")
            try:
                self._write(kind, obj, new, None, False)
            except errors.ApiError:
                pass

    def _release_foreground_owner(self, uid: str | None) -> None:
        """Remove ``foregroundDeletion`` from the owner ``uid`` once no dependent with blockOwnerDeletion is left."""
        for kind in self.kinds:
            for owner in list(self._bucket(kind).values()):
                meta = owner["metadata"]
                if meta["uid"] != uid:
                    continue
                if FOREGROUND_FINALIZER not in (meta.get("finalizers") or []) or not meta.get("deletionTimestamp"):
                    return
                for _, dependent in self._dependents(uid):
                    if any(r.get("uid") == uid and r.get("blockOwnerDeletion") for r in dependent["metadata"]["ownerReferences"]):
                        return
                new = copy.deepcopy(owner)
                new["metadata"]["finalizers"] = [f for f in meta["finalizers"] if f != FOREGROUND_FINALIZER]
                self._write(kind, owner, new, None, False)
                return

    def _owners_absent(self, obj: dict) -> bool:
        """Whether ``obj`` has ownerReferences and every owner is verifiably gone (served kind, no object of that name and uid)."""
        refs = obj["metadata"].get("ownerReferences") or []
        if not refs:
            return False
        for ref in refs:
            try:
                owner_kind = self.kind_of(ref.get("apiVersion", ""), ref.get("kind", ""))
            except errors.ApiError:
                return False  # a kind the server does not know: the collector cannot tell, and keeps it
            ns = obj["metadata"].get("namespace", "") if owner_kind.namespaced else ""
            owner = self._bucket(owner_kind).get((ns, ref.get("name")))
            if owner is not None and owner["metadata"]["uid"] == ref.get("uid"):
                return False
        return True

    def _terminate_namespace(self, current: dict) -> dict:
        """DELETE of a Namespace: phase Terminating, then its content deleted; it goes when that is gone (:meth:`_finish_namespace`)."""
        name = current["metadata"]["name"]
        if current["metadata"].get("deletionTimestamp"):
            return copy.deepcopy(current)
        kind = self._by_key[NAMESPACES]
        new = copy.deepcopy(current)
        new["metadata"]["deletionTimestamp"] = rfc3339(self.clock())
        new.setdefault("status", {})["phase"] = "Terminating"
        new["metadata"]["resourceVersion"] = self._next_rv()
        self._bucket(kind)[("", name)] = new
        self._emit(MODIFIED, kind, new, current)
        for content_kind in self.kinds:
            if not content_kind.namespaced:
                continue
            for (ns, obj_name), obj in list(self._bucket(content_kind).items()):
                if ns == name and not obj["metadata"].get("deletionTimestamp"):
                    try:
                        self.delete(content_kind, ns, obj_name)
                    except errors.ApiError:
                        pass
        self._finish_namespace(name)
        return copy.deepcopy(new)

    def _finish_namespace(self, name: str) -> None:
        """The namespace controller's last step: a Terminating namespace with no content left loses its
        ``kubernetes`` finalizer and goes (unless metadata finalizers hold it)."""
        kind = self._by_key[NAMESPACES]
        current = self._bucket(kind).get(("", name))
        if current is None or not current["metadata"].get("deletionTimestamp") or not (current.get("spec") or {}).get("finalizers"):
            return
        for content_kind in self.kinds:
            if content_kind.namespaced and any(ns == name for ns, _ in self._bucket(content_kind)):
                return
        new = copy.deepcopy(current)
        new["spec"]["finalizers"] = []
        new["metadata"]["resourceVersion"] = self._next_rv()
        if new["metadata"].get("finalizers"):
            self._bucket(kind)[("", name)] = new
            self._emit(MODIFIED, kind, new, current)
            return
        del self._bucket(kind)[("", name)]
        self._removed(kind, new, current)

    def delete_collection(
        self,
        kind: Kind,
        namespace: str | None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[dict]:
        """DELETE on the collection: delete every matching object; returns what was deleted."""
        items, _ = self.list(kind, namespace, label_selector, field_selector)
        out = []
        for item in items:
            meta = item["metadata"]
            try:
                out.append(self.delete(kind, meta.get("namespace"), meta["name"]))
            except errors.ApiError as e:
                if e.code != 404:
                    raise
        return out

    # -- watch -------------------------------------------------------------

    def watch(
        self,
        kind: Kind,
        namespace: str | None = None,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Watch:
        """Open a watch.

        No resourceVersion (or ``"0"``): synthetic ADDED events for the
        current state, then changes. A resourceVersion: every change after
        it, then live changes; 410 Gone if the history no longer reaches
        back that far.
        """
        watch = Watch(self, kind, namespace, LabelSelector.parse(label_selector), FieldSelector.parse(field_selector))
        if resource_version in (None, "", "0"):
            items, _ = self.list(kind, namespace, label_selector, field_selector)
            for item in items:
                watch.queue.put_nowait((ADDED, item))
        else:
            try:
                since = int(resource_version)
            except ValueError:
                raise errors.bad_request(f"invalid resourceVersion: {resource_version}") from None
            if not self._history_reaches(since):
                raise errors.gone(f"too old resource version: {since} ({self.oldest_resource_version})")
            for rv, key, event_type, obj, old in self._history:
                if rv > since and key == kind.key:
                    watch.offer(event_type, copy.deepcopy(obj), old)
        self._watches.add(watch)
        return watch

    def compact(self) -> None:
        """Forget the change history, as etcd's compaction does: a watch resuming from any older resourceVersion gets 410 Gone."""
        self._history.clear()

    def close_watches(self) -> None:
        """End every open watch stream (an API server restart drops them; clients resume from their last resourceVersion)."""
        for watch in list(self._watches):
            watch.close()

    @property
    def open_watches(self) -> int:
        """How many watches are open (tests check that closed connections close theirs)."""
        return len(self._watches)

    @property
    def oldest_resource_version(self) -> int:
        """The oldest resourceVersion a watch can still resume from."""
        return (self._history[0][0] - 1) if self._history else self.resource_version

    def all_kinds(self):
        return self.kinds

    # -- saving and restoring ---------------------------------------------------

    def dump(self, keep: Callable[[Kind], bool] = lambda kind: True) -> dict:
        """The stored objects of the kinds ``keep`` accepts and the resourceVersion counter: ``{"resourceVersion", "objects"}``.

        The objects are the stored ones, not copies: the store never changes
        a stored object in place (every write stores a new one), so the
        result may be serialized later, even on another thread.
        """
        objects = [obj for kind in self.kinds if keep(kind) for obj in self._bucket(kind).values()]
        return {"resourceVersion": self.resource_version, "objects": objects}

    def restore(self, state: dict, keep: Callable[[Kind], bool] = lambda kind: True) -> int:
        """Put back objects saved by :meth:`dump` as they were (uids, resourceVersions, timestamps); returns how many.

        Objects of kinds not served, or not accepted by ``keep``, are left
        out. Then the garbage collector's rule for absent owners applies:
        an object none of whose owners came back is left out too, one with
        some owners back loses its references to the others (and gets a new
        resourceVersion). The counter continues past the highest version
        restored; the change history starts empty, so a watch from an older
        resourceVersion answers 410 Expired, one from 0 lists.
        """
        restored: dict[str, tuple[Kind, dict]] = {}
        for obj in state.get("objects") or []:
            try:
                kind = self.kind_of(obj.get("apiVersion", ""), obj.get("kind", ""))
            except errors.ApiError:
                continue
            if keep(kind):
                restored[obj["metadata"]["uid"]] = (kind, obj)
        highest = max((int(o["metadata"]["resourceVersion"]) for _, o in restored.values()), default=0)
        self.resource_version = max(self.resource_version, int(state.get("resourceVersion") or 0), highest)
        changed = True
        while changed:
            changed = False
            for uid, (kind, obj) in list(restored.items()):
                refs = obj["metadata"].get("ownerReferences") or []
                solid = [ref for ref in refs if ref.get("uid") in restored]
                if refs and not solid:
                    del restored[uid]
                    changed = True
                elif len(solid) != len(refs):
                    obj["metadata"]["ownerReferences"] = solid
                    obj["metadata"]["resourceVersion"] = self._next_rv()
        for kind, obj in restored.values():
            meta = obj["metadata"]
            self._bucket(kind)[(meta.get("namespace", ""), meta["name"])] = obj
        self._history.clear()
        for (_, name) in list(self._objects[NAMESPACES]):
            self._ensure_default_service_account(name)  # states saved before ServiceAccounts were served
        return len(restored)

    def objects(self, kind: Kind):
        """Every stored object of ``kind`` (not copies: read-only use by controllers)."""
        return list(self._bucket(kind).values())
