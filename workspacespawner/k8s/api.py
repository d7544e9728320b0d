"""Kubernetes objects as plain dicts, for the lifecycle, retention, disk and fence modules.

One small facade over kubernetes_asyncio's ``CoreV1Api`` (core kinds) and
``CustomObjectsApi`` (CDI, KubeVirt, snapshot kinds), so those modules read,
list, create, JSON-patch and delete any kind the same way and always get the
JSON dicts the API server sends (camelCase keys). Transient errors are
retried (:func:`.owned.call`); 404 on a read, patch or delete is an answer
(None / False), every other API error propagates as ``ApiException``.

Writes to objects we own go through :meth:`Kube.patch_owned`: a JSON Patch
(RFC 6902) whose first operations ``test`` our owner labels and the owner's
exact name, so the API server applies the change only to an object that is
still ours and that user's, atomically (a failed ``test`` answers 422; see
:class:`NotOurs`).

API followed: core/v1 PersistentVolumeClaims, Pods, Services, Secrets,
Nodes; ``cdi.kubevirt.io/v1beta1`` DataVolumes and DataSources; ``kubevirt.io/v1``
VirtualMachines and VirtualMachineInstances;
``snapshot.storage.k8s.io/v1`` VolumeSnapshots. Delete bodies are
``DeleteOptions`` (``gracePeriodSeconds``, ``preconditions.uid``,
``propagationPolicy``).
"""

from __future__ import annotations

from kubernetes_asyncio.client.rest import ApiException

from workspacespawner.k8s.admission import clone_refused
from workspacespawner.k8s.kinds import Kind
from workspacespawner.k8s.objects import owner_tests, ready_condition
from workspacespawner.k8s.owned import call, call_json


class NotOurs(Exception):
    """A guarded write found the object not ours, another user's, or not in the expected state (HTTP 422 on a ``test``)."""


class Kube:
    """Plain-dict access to the kinds above through ``core_api`` (``CoreV1Api``) and ``custom_api`` (``CustomObjectsApi``)."""

    def __init__(self, core_api, custom_api):
        self.core_api = core_api
        self.custom_api = custom_api

    @staticmethod
    def _dict(kind: Kind, found: dict) -> dict:
        found.setdefault("apiVersion", kind.api_version)
        found.setdefault("kind", kind.kind)
        return found

    def _custom(self, verb: str, kind: Kind, namespace: str, *args, **kwargs):
        method = getattr(self.custom_api, f"{verb}_namespaced_custom_object")
        return call(method, kind.group, kind.version, namespace, kind.plural, *args, **kwargs)

    def _core(self, verb: str, kind: Kind, name: str, namespace: str | None, *args, **kwargs):
        """CoreV1Api's ``<verb>_namespaced_<kind>(name, namespace, ...)`` (``<verb>_<kind>(name, ...)`` for Nodes), its
        answer as JSON (:func:`~.owned.call_json`)."""
        if kind.namespaced:
            return call_json(getattr(self.core_api, f"{verb}_namespaced_{kind.core}"), name, namespace, *args, **kwargs)
        return call_json(getattr(self.core_api, f"{verb}_{kind.core}"), name, *args, **kwargs)

    async def get(self, kind: Kind, namespace: str | None, name: str, *, fresh: bool = False) -> dict | None:
        """The object, or None when it does not exist (``fresh``: read from the API server even where a cache could
        answer; this class always does, see :class:`~.cachedkube.CachedKube`)."""
        try:
            if kind.core:
                return self._dict(kind, await self._core("read", kind, name, namespace))
            return self._dict(kind, await self._custom("get", kind, namespace, name))
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def remember(self, kind: Kind, namespace: str, obj: dict | None) -> dict | None:
        """Note ``obj`` as a write of this process returned it (made outside this facade: kubespawner's client);
        returns it. Nothing to note in this class (:class:`~.cachedkube.CachedKube` reads its own writes)."""
        return obj

    def peek(self, kind: Kind, namespace: str, name: str, *, copy: bool = True) -> tuple[bool, dict | None]:
        """``(True, object or None)`` when a watch cache knows the object without a request, else ``(False, None)``
        (always, in this class; see :class:`~.cachedkube.CachedKube`). ``copy`` False: the cache's own object, for
        a caller that only reads it (a look many times a second)."""
        return False, None

    async def list(self, kind: Kind, namespace: str | None, *, labels: str | None = None, fresh: bool = False) -> list[dict]:
        """The objects of ``kind`` in ``namespace`` (None for a cluster-scoped kind: Nodes) matching the label selector
        ``labels`` (``fresh``: as for :meth:`get`)."""
        kwargs = {"label_selector": labels} if labels else {}
        if kind.core and not kind.namespaced:
            found = await call_json(getattr(self.core_api, f"list_{kind.core}"), **kwargs)
        elif kind.core:
            found = await call_json(getattr(self.core_api, f"list_namespaced_{kind.core}"), namespace, **kwargs)
        else:
            found = await self._custom("list", kind, namespace, **kwargs)
        return [self._dict(kind, item) for item in found.get("items") or []]

    def cached(self, kind: Kind, namespace: str | None, *, labels: str | None = None) -> list[dict] | None:
        """The objects of ``kind`` a live watch cache holds (``labels``: equality selectors), or None when no cache
        can tell: never an API call. This facade has no caches."""
        return None

    async def create(self, kind: Kind, namespace: str, body: dict) -> dict:
        """Create ``body``; returns the object as stored."""
        if kind.core:
            return self._dict(kind, await call_json(getattr(self.core_api, f"create_namespaced_{kind.core}"), namespace, body))
        return self._dict(kind, await self._custom("create", kind, namespace, body))

    async def patch(self, kind: Kind, namespace: str, name: str, operations: list[dict]) -> dict | None:
        """Apply a JSON Patch (a list of operations); None when the object does not exist."""
        try:
            if kind.core:
                return self._dict(kind, await self._core("patch", kind, name, namespace, operations))
            return self._dict(kind, await self._custom("patch", kind, namespace, name, operations))
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    async def patch_owned(self, kind: Kind, namespace: str, name: str, user_name: str, operations: list[dict]) -> dict | None:
        """:meth:`patch` guarded by :func:`owner_tests`; None when absent, :class:`NotOurs` when a ``test`` fails.

        CDI's clone authorization also answers 422 (the writer may not clone from the DataVolume's source namespace,
        :func:`~workspacespawner.k8s.admission.clone_refused`): that refusal is raised as it is, for the caller to
        say what was refused, not taken for a changed object."""
        try:
            return await self.patch(kind, namespace, name, owner_tests(user_name) + operations)
        except ApiException as e:
            if e.status == 422 and not clone_refused(e):
                raise NotOurs(f"{kind.kind} {namespace}/{name} is not {user_name!r}'s, or changed meanwhile") from e
            raise

    async def delete(self, kind: Kind, namespace: str, name: str, *, uid: str | None = None, grace: int | None = None,
                     resource_version: str | None = None) -> bool:
        """Delete the object (dependents in the background); False when it was already gone.

        ``uid``: delete only that object (``preconditions.uid``; 409 if it was
        replaced); ``resource_version``: only as it was at that version
        (``preconditions.resourceVersion``; 409 if it changed since).
        ``grace``: ``gracePeriodSeconds`` (0: at once, a force delete).
        """
        body: dict = {"propagationPolicy": "Background"}
        preconditions = {key: value for key, value in (("uid", uid), ("resourceVersion", resource_version)) if value}
        if preconditions:
            body["preconditions"] = preconditions
        if grace is not None:
            body["gracePeriodSeconds"] = int(grace)
        try:
            if kind.core:
                await self._core("delete", kind, name, namespace, body=body)
            else:
                await self._custom("delete", kind, namespace, name, body=body)
        except ApiException as e:
            if e.status == 404:
                return False
            raise
        return True

    async def node_ready(self, node: str | None) -> bool | None:
        """:func:`node_ready` with this facade's ``CoreV1Api``."""
        return await node_ready(self.core_api, node)

    async def nodes_ready(self, node_names) -> dict[str, bool | None]:
        """``{node: ready}`` for each distinct non-empty name (see :func:`node_ready`)."""
        return {node: await self.node_ready(node) for node in sorted({n for n in node_names if n})}


async def node_ready(core_api, node: str | None) -> bool | None:
    """Whether Node ``node``'s Ready condition is True; False for a deleted node; None when unknown.

    Unknown: no node name, no Ready condition, or no RBAC to read Nodes
    (403; ``nodes: get`` is optional). ``core_api``: a kubernetes_asyncio
    ``CoreV1Api``.
    """
    if not node:
        return None
    try:
        found = await call_json(core_api.read_node, node)
    except ApiException as e:
        if e.status == 403:
            return None
        if e.status == 404:
            return False
        raise
    return ready_condition(found)
