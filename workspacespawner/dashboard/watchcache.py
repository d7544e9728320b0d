"""The dashboard's watches: one shared reflector per kind, started once; views read their caches, never the API.

Through :mod:`workspacespawner.k8s.watches` (kubespawner's reflectors):
Nodes (cluster-wide), and in the workspaces' namespace every Pod (ours and
the virt-launcher Pods of VMs, for a node's requests), our
PersistentVolumeClaims, VirtualMachines, VirtualMachineInstances,
DataVolumes and VolumeSnapshots. Registered under the same keys the
hub's watches use, so a :class:`~workspacespawner.k8s.cachedkube.CachedKube`
in this process reads them too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from kubespawner.reflector import NamespacedResourceReflector, ResourceReflector
from traitlets import Any, Unicode

from workspacespawner.k8s import watches
from workspacespawner.k8s.kinds import DATA_VOLUME, NODE, POD, PVC, VIRTUAL_MACHINE, VMI, VOLUME_SNAPSHOT, Kind
from workspacespawner.k8s.watchloop import RecoveringReflector


class PodReflector(RecoveringReflector, NamespacedResourceReflector):
    """core/v1 Pods of one namespace, all of them (singleuser Pods and virt-launchers); ``core_api``: a ``CoreV1Api``."""

    kind = "pods"
    list_method_name = Unicode("list_namespaced_pod")
    core_api = Any(None, allow_none=True)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.core_api is not None:
            self.api = self.core_api


def _with_namespace(text: bytes, *, event: bool) -> bytes:
    """A list (``items``) or a watch event (``object``) of cluster-scoped objects with ``metadata.namespace: ""``."""
    if not text.strip():
        return text
    data = json.loads(text)
    for obj in [data.get("object") or {}] if event else data.get("items") or []:
        (obj.setdefault("metadata", {})).setdefault("namespace", "")
    return json.dumps(data).encode() + (b"\n" if event else b"")


class _Content:
    def __init__(self, content):
        self._content = content

    async def readline(self) -> bytes:
        return _with_namespace(await self._content.readline(), event=True)


class _Response:
    """An aiohttp response of the API whose objects read with an empty namespace (kubespawner keys its cache by it)."""

    def __init__(self, response):
        self._response = response
        self.content = _Content(response.content)

    def __getattr__(self, name):
        return getattr(self._response, name)

    async def read(self) -> bytes:
        return _with_namespace(await self._response.read(), event=False)


class _NodesApi:
    """``CoreV1Api.list_node`` as kubespawner's reflector can cache: its cache key is ``namespace/name``, and Nodes
    have no namespace."""

    def __init__(self, core_api):
        self.api_client = core_api.api_client
        self._core = core_api

    async def list_node(self, **kwargs):
        return _Response(await self._core.list_node(**kwargs))


class NodeReflector(RecoveringReflector, ResourceReflector):
    """core/v1 Nodes (cluster-scoped; cached under ``/<name>``); ``core_api``: a ``CoreV1Api``."""

    kind = "nodes"
    omit_namespace = True
    list_method_name = Unicode("list_node")
    core_api = Any(None, allow_none=True)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.api = _NodesApi(self.core_api or self.api)


class VolumeSnapshotReflector(watches.CustomObjectReflector):
    """``snapshot.storage.k8s.io/v1`` VolumeSnapshots of ours (the owner labels say whose)."""

    kind = "volumesnapshots"
    group = "snapshot.storage.k8s.io"
    version = "v1"
    plural = "volumesnapshots"


#: Kind -> the reflector class whose cache holds it.
REFLECTORS: dict[str, type] = {
    NODE.kind: NodeReflector,
    POD.kind: PodReflector,
    PVC.kind: watches.PersistentVolumeClaimReflector,
    VIRTUAL_MACHINE.kind: watches.VirtualMachineReflector,
    VMI.kind: watches.VirtualMachineInstanceReflector,
    DATA_VOLUME.kind: watches.DataVolumeReflector,
    VOLUME_SNAPSHOT.kind: VolumeSnapshotReflector,
}


@dataclass
class WatchCache:
    """The service's caches of ``namespace``; :meth:`start` before reading, :meth:`objects` to read.

    ``core_api``/``custom_api``: kubernetes_asyncio ``CoreV1Api`` and ``CustomObjectsApi``.
    """

    namespace: str
    core_api: object
    custom_api: object

    async def start(self) -> None:
        """Start every reflector (or join the running one) and wait for its first list; raises the API's error."""
        for kind in REFLECTORS:
            await self._reflector(kind)

    async def _reflector(self, kind: str):
        cls = REFLECTORS[kind]
        namespace = "" if cls is NodeReflector else self.namespace
        api = {"custom_api": self.custom_api} if issubclass(cls, watches.CustomObjectReflector) else {"core_api": self.core_api}
        return await watches.shared_reflector(cls, namespace, **api)

    async def objects(self, kind: Kind) -> list[dict]:
        """Every cached object of ``kind`` (the API's JSON, ``kind`` set), restarting a watch that gave up.

        Pods: all of the namespace's; Nodes: all; the others: ours only
        (the ``app.kubernetes.io/managed-by`` label).
        """
        reflector = await self._reflector(kind.kind)
        return [{**obj, "kind": kind.kind} for obj in list(reflector.resources.values())]

    async def snapshot(self) -> dict[str, list[dict]]:
        """All caches at once: kind name (``"Pod"``, ``"Node"``, ...) -> its objects (see :meth:`objects`)."""
        kinds = {k.kind: k for k in (NODE, POD, PVC, VIRTUAL_MACHINE, VMI, DATA_VOLUME, VOLUME_SNAPSHOT)}
        return {name: await self.objects(kind) for name, kind in kinds.items()}

    async def stop(self) -> None:
        """Stop the service's reflectors (at exit)."""
        for kind in REFLECTORS:
            cls = REFLECTORS[kind]
            reflector = watches.running_reflector(cls, "" if cls is NodeReflector else self.namespace)
            if reflector is not None:
                await reflector.stop()
