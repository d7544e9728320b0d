"""Shared watch caches of our PersistentVolumeClaims, VirtualMachines, VirtualMachineInstances, DataVolumes and VMI Events.

One reflector per (kind, namespace) for all users, as kubespawner keeps one
for pods: ``poll()``, progress and start/stop waits read the cache instead
of asking the API server per user. Reflectors are kubespawner's
:class:`~kubespawner.reflector.ResourceReflector` (list, then watch, with
resourceVersion resume and backoff), selecting our objects by the
``app.kubernetes.io/managed-by`` label.

Why a subclass: ``ResourceReflector`` calls ``getattr(api,
list_method_name)(namespace=..., label_selector=..., ...)``, both to list
and (through ``kubernetes_asyncio.watch.Watch``) to watch, and has no way to
pass the ``group``, ``version`` and ``plural`` that ``CustomObjectsApi.
list_namespaced_custom_object`` needs. :class:`CustomObjectReflector` hands
it a small adapter with those three bound; the watch protocol and the cache
(``resources``, keyed ``namespace/name``, values the raw JSON dicts) are
kubespawner's, unchanged.

Our caches intern their strings (:mod:`workspacespawner.k8s.interning`):
the claims, VMs, VMIs and DataVolumes of hundreds of users repeat the same
keys and values, kept once each; ``WorkspaceSpawner`` starts kubespawner's
Pod and Event reflectors as interning subclasses too
(:data:`INTERNING_REFLECTORS`). The caches of objects a user owns (claims,
VMs, VMIs, DataVolumes, Pods) also wake whoever waits for an object's next
version (:mod:`workspacespawner.k8s.changes`). A read of one user's objects
or one Pod's Events is a pass over the namespace's cache: an index by owner
and by involved object bought nothing measurable at 300 and 1,000
simultaneous starts (``benchmarks/burst.py``), and went.

Every one of them (kubespawner's Pod and Event reflectors too, as the
interning subclasses ``WorkspaceSpawner`` starts) runs the watch loop of
:mod:`workspacespawner.k8s.watchloop`: it never gives up, retries at most
every few seconds, and lists again at once after a 410 Gone, so its cache is
fresh within seconds of an API server outage ending. Should a reflector's
task end all the same, the next :func:`shared_reflector` call starts a new
one (:func:`alive`); ``WorkspaceSpawner`` does the same for kubespawner's own
Pod and Event reflectors, and never exits the process for it.
"""

from __future__ import annotations

import asyncio
import logging

from kubespawner import KubeSpawner
from kubespawner.reflector import NamespacedResourceReflector
from kubespawner.spawner import EventReflector, PodReflector
from traitlets import Any, Unicode

from workspacespawner.core import names
from workspacespawner.k8s.changes import ChangeNotifyingReflector
from workspacespawner.k8s.events import events_involving
from workspacespawner.k8s.interning import InterningReflector
from workspacespawner.k8s.kinds import POD, VMI
from workspacespawner.k8s.objects import counted_once, launched_vmi
from workspacespawner.k8s.watchloop import RecoveringReflector

log = logging.getLogger("workspacespawner")


class _BoundCustomObjectsApi:
    """``CustomObjectsApi.list_namespaced_custom_object`` with group, version and plural fixed."""

    def __init__(self, api, group: str, version: str, plural: str):
        self.api = api
        self.api_client = api.api_client
        self.group, self.version, self.plural = group, version, plural

    async def list_namespaced_custom_object(self, namespace: str, **kwargs):
        # No reST return type in this docstring: Watch then hands back plain dicts.
        return await self.api.list_namespaced_custom_object(self.group, self.version, namespace, self.plural, **kwargs)


class CustomObjectReflector(RecoveringReflector, ChangeNotifyingReflector, NamespacedResourceReflector):
    """A kubespawner reflector for one custom resource (``group``/``version``/``plural``) in one namespace.

    ``custom_api``: the ``CustomObjectsApi`` to use (default: kubespawner's
    shared client).
    """

    api_group_name = Unicode("CustomObjectsApi")
    list_method_name = Unicode("list_namespaced_custom_object")
    group = Unicode()
    version = Unicode()
    plural = Unicode()
    custom_api = Any(None, allow_none=True)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.api = _BoundCustomObjectsApi(self.custom_api or self.api, self.group, self.version, self.plural)


class VirtualMachineReflector(CustomObjectReflector):
    """``kubevirt.io/v1`` VirtualMachines."""

    kind = "virtualmachines"
    group = "kubevirt.io"
    version = "v1"
    plural = "virtualmachines"


class VirtualMachineInstanceReflector(CustomObjectReflector):
    """``kubevirt.io/v1`` VirtualMachineInstances (the running guests)."""

    kind = "virtualmachineinstances"
    group = "kubevirt.io"
    version = "v1"
    plural = "virtualmachineinstances"


class DataVolumeReflector(CustomObjectReflector):
    """``cdi.kubevirt.io/v1beta1`` DataVolumes (root disks)."""

    kind = "datavolumes"
    group = "cdi.kubevirt.io"
    version = "v1beta1"
    plural = "datavolumes"


class PersistentVolumeClaimReflector(RecoveringReflector, ChangeNotifyingReflector, NamespacedResourceReflector):
    """core/v1 PersistentVolumeClaims of ours (homes, root-disk PVCs, scratch and shared tiers) in one namespace.

    ``core_api``: the ``CoreV1Api`` to use (default: kubespawner's shared client).
    """

    kind = "persistentvolumeclaims"
    list_method_name = Unicode("list_namespaced_persistent_volume_claim")
    core_api = Any(None, allow_none=True)

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("labels", dict(MANAGED_LABELS))
        super().__init__(*args, **kwargs)
        if self.core_api is not None:
            self.api = self.core_api


class VMIEventReflector(RecoveringReflector, InterningReflector, NamespacedResourceReflector):
    """core/v1 Events about VirtualMachineInstances (scheduling, scale-up, boot), for progress; its cache interned.

    ``core_api``: the ``CoreV1Api`` to use (default: kubespawner's shared client).
    """

    kind = "events"
    #: Its key in the registry: kubespawner's own Pod-event reflector is ``("events", namespace)``.
    registry_name = "vmi-events"
    core_api = Any(None, allow_none=True)

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("fields", {"involvedObject.kind": "VirtualMachineInstance"})
        super().__init__(*args, **kwargs)
        if self.core_api is not None:
            self.api = self.core_api

    def events_for(self, name: str, uid: str | None = None) -> list[dict]:
        """The cached Events of VMI ``name`` (of that ``uid`` when given), oldest first."""
        found = [e for e in events_involving(self.resources, name) if uid is None or e["involvedObject"].get("uid") == uid]
        return sorted(found, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or e["metadata"].get("creationTimestamp") or "")


class InterningPodReflector(RecoveringReflector, ChangeNotifyingReflector, PodReflector):
    """kubespawner's Pod reflector, its cache interned (every user's Pod repeats the same keys, image, labels and
    volumes, about half of the ~30 KB each Pod takes in the hub)."""


class InterningEventReflector(RecoveringReflector, InterningReflector, EventReflector):
    """kubespawner's Pod-Event reflector, its cache interned."""


#: What ``WorkspaceSpawner`` starts in place of kubespawner's own reflector classes (same watch, same registry key).
INTERNING_REFLECTORS = {PodReflector: InterningPodReflector, EventReflector: InterningEventReflector}


#: Seconds one watch request of ours lasts before the API server ends it (``timeoutSeconds``), after which the
#: reflector lists its kind again and watches anew. kubespawner's reflectors ask for 10 s; each restart builds a
#: new API client (kubernetes_asyncio's ``Watch``, with its own TLS context) and a full list, and most of our kinds
#: are quiet for minutes (a hub with no VM profiles has no VM, VMI or DataVolume at all). Under the reflector's
#: 60 s network timeout, so a quiet watch ends by the server's word and never by a timeout; a busy one still
#: restarts after kubespawner's ``restart_seconds`` (30 s).
WATCH_SECONDS = 50


#: Only our objects: VMs, their VMIs (template labels) and DataVolumes all carry it.
MANAGED_LABELS = {names.MANAGED_BY_LABEL: names.MANAGED_BY}

#: The one watch registry of the process: kubespawner's own (``KubeSpawner.reflectors``, keyed by
#: ``(kind, namespace)``), which holds its Pod and Event reflectors next to ours.
_reflectors: dict[tuple[str, str], NamespacedResourceReflector] = KubeSpawner.reflectors


def _key(reflector_class, namespace: str) -> tuple[str, str]:
    return (getattr(reflector_class, "registry_name", None) or reflector_class.kind, namespace)


def alive(reflector) -> bool:
    """Whether a reflector's watch still runs: not one whose watch gave up (kubespawner's ends after ~50 s of errors) or ended.

    A reflector not started yet counts as alive (its start is under way).
    The cache of a reflector that is not alive is frozen: it must be
    replaced, never read.
    """
    task = reflector.watch_task
    return not (task is not None and task.done())


def _usable(reflector, loop) -> bool:
    return getattr(reflector, "_loop", None) is loop and alive(reflector)


async def shared_reflector(reflector_class: type[NamespacedResourceReflector], namespace: str, **kwargs):
    """The running reflector of ``reflector_class`` for ``namespace``, started on first use and shared.

    ``kwargs`` go to the reflector on creation (``custom_api``/``core_api``,
    ``labels``; custom-object reflectors default to :data:`MANAGED_LABELS`;
    ``timeout_seconds`` defaults to :data:`WATCH_SECONDS`).
    Returns once its first list has loaded. A reflector whose watch gave up,
    or that belongs to another event loop, is replaced.
    """
    loop = asyncio.get_running_loop()
    key = _key(reflector_class, namespace)
    reflector = _reflectors.get(key)
    if reflector is not None and _usable(reflector, loop):
        await reflector.first_load_future
        return reflector
    if issubclass(reflector_class, CustomObjectReflector):
        kwargs.setdefault("labels", dict(MANAGED_LABELS))
    kwargs.setdefault("log", log)
    kwargs.setdefault("timeout_seconds", WATCH_SECONDS)
    reflector = reflector_class(namespace=namespace, on_failure=lambda: log.error("Watch of %s in %s gave up", key[0], namespace), **kwargs)
    reflector._loop = loop
    previous, _reflectors[key] = _reflectors.get(key), reflector
    try:
        await reflector.start()
    except Exception:
        if _reflectors.get(key) is reflector:
            del _reflectors[key]
        raise
    if previous is not None and getattr(previous, "_loop", None) is loop:
        await previous.stop()
    return reflector


def running_reflector(reflector_class: type[NamespacedResourceReflector], namespace: str):
    """The shared reflector of ``reflector_class`` for ``namespace`` if one was started in this event loop, else None."""
    reflector = _reflectors.get(_key(reflector_class, namespace))
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    return reflector if isinstance(reflector, reflector_class) and getattr(reflector, "_loop", None) is loop else None


def pod_reflector(namespace: str):
    """kubespawner's Pod reflector of ``namespace`` (registered as ``("pods", namespace)``), or None."""
    return _reflectors.get(("pods", namespace))


def shared_reflectors(reflector_class: type[NamespacedResourceReflector]) -> list:
    """The running shared reflectors of ``reflector_class``, one per namespace (empty before any was started)."""
    return [r for (name, namespace), r in list(_reflectors.items()) if (name, namespace) == _key(reflector_class, namespace) and isinstance(r, reflector_class)]


async def stop_all() -> None:
    """Stop every shared reflector of ours in the running event loop (hub shutdown, tests); kubespawner's stay its own."""
    loop = asyncio.get_running_loop()
    for key, reflector in list(_reflectors.items()):
        if getattr(reflector, "_loop", None) is loop and isinstance(reflector, (CustomObjectReflector, VMIEventReflector, PersistentVolumeClaimReflector)):
            del _reflectors[key]
            await reflector.stop()


def compute_objects() -> list[dict] | None:
    """Every Pod (kubespawner's reflectors) and VMI (ours) the watch caches hold, as the API's JSON with ``kind`` set;
    None until each cache has loaded, or when one gave up (a frozen cache is no answer).

    A cached object came from a list or from a watch event: kube-apiserver
    leaves ``kind`` off the items of a list of Pods (built-in lists carry no
    per-item type meta) but not off a watch event's object, so the kind is
    set here from the cache it was read from (a shallow copy; the caches are
    kubespawner's and stay as the API sent them).

    A VM workspace is in both caches on a real cluster: kubespawner's Pod
    reflector selects ``component=singleuser-server``, which KubeVirt
    copies from the VMI onto its virt-launcher Pod. The Pod is left out
    while its VMI is cached (:func:`~workspacespawner.k8s.objects.counted_once`),
    so every reader counts the workspace once.
    """
    caches = [(POD.kind, r) for (name, _ns), r in list(_reflectors.items()) if name == "pods"]
    caches += [(VMI.kind, r) for r in shared_reflectors(VirtualMachineInstanceReflector)]
    if not caches or not all(r.first_load_future.done() and alive(r) for _kind, r in caches):
        return None
    return counted_once([{**obj, "kind": kind} for kind, cache in caches for obj in list(cache.resources.values())])


def launcher_of(vmi: dict | None) -> dict | None:
    """The virt-launcher Pod of ``vmi`` (:func:`cached_launcher`) while the VMI waits for a node
    (``Pending``/``Scheduling``: kube-scheduler writes on the Pod first); None otherwise, or when not cached."""
    if ((vmi or {}).get("status") or {}).get("phase", "Pending") not in ("Pending", "Scheduling"):
        return None
    return cached_launcher(vmi)


def cached_launcher(vmi: dict | None) -> dict | None:
    """The virt-launcher Pod of ``vmi`` (by its ``kubevirt.io/created-by`` label) from the shared Pod caches; None
    when not cached. A scan of the namespace's cached Pods: call it while a start waits, not for every poll."""
    meta = (vmi or {}).get("metadata") or {}
    if not meta.get("uid"):
        return None
    for (name, namespace), reflector in list(_reflectors.items()):
        if name != "pods" or namespace not in (None, meta.get("namespace")):
            continue
        for pod in list(reflector.resources.values()):
            if launched_vmi(pod) == meta["uid"]:
                return pod
    return None


def pods_and_vmis() -> tuple[list[dict], list[dict]] | None:
    """Every Pod (virt-launcher Pods included) and VMI the watch caches hold, ``kind`` set: ``(pods, vmis)``; None
    until each cache has loaded, or when one gave up.

    Unlike :func:`compute_objects`, a VM's virt-launcher Pod is kept: a GPU's
    metrics name the Pod the device is allocated to, which for a VM is its
    virt-launcher Pod (:func:`~workspacespawner.gpu.metrics.holders` joins it to the VMI).
    """
    pods = [r for (name, _ns), r in list(_reflectors.items()) if name == "pods"]
    vmis = shared_reflectors(VirtualMachineInstanceReflector)
    if not pods or not all(r.first_load_future.done() and alive(r) for r in pods + vmis):
        return None
    return ([{**obj, "kind": POD.kind} for r in pods for obj in list(r.resources.values())],
            [{**obj, "kind": VMI.kind} for r in vmis for obj in list(r.resources.values())])
