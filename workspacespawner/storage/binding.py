"""The volume claims a workspace mounts, bound within a deadline: a claim that never binds is named, not waited out.

A start whose claim never binds (a StorageClass whose provisioner does not
act, kubeflow#336) would otherwise hang until ``start_timeout`` with a
message naming neither the claim nor its class. :func:`wait_bound` watches
each claim of a start and raises a :class:`WorkspaceError` (503,
``reason="volume-binding"``) naming the claim, its class and the claim's
last Event:

- a claim that does not exist fails at once (``reason="volume-missing"``,
  409);
- a Pending claim of a class that binds ``Immediate`` (or of no class, or
  a class the hub may not read) must be Bound within ``deadline`` seconds
  of the start of the wait;
- a Pending claim of a ``WaitForFirstConsumer`` class binds only after
  the scheduler chose a node for the workspace: its clock starts when it
  carries ``volume.kubernetes.io/selected-node`` (a workspace that fits no
  node is the scheduler's refusal, reported on its own);
- while other starts of the hub see claims of the same class become Bound,
  the deadline moves on with them: the provisioner is working through a
  queue (a class's worth of new homes at once), which is not one that
  never acts.

API followed: core/v1 PersistentVolumeClaim (watched by name, field
selector ``metadata.name``, or the hub's PVC watch cache), core/v1 Events (``involvedObject``), and
``storage.k8s.io/v1`` StorageClass ``volumeBindingMode`` (immutable, so
read once per class and process).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.rest import ApiException

from workspacespawner.core.errors import WorkspaceError
from workspacespawner.k8s.owned import call, call_json

log = logging.getLogger("workspacespawner")

SELECTED_NODE_ANNOTATION = "volume.kubernetes.io/selected-node"
WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"

#: StorageClass name -> volumeBindingMode ("" when unknown), per process: the field is immutable.
_binding_modes: dict[str, str] = {}


#: StorageClass name -> the read of it under way, which simultaneous starts share (one read per class and process).
_reading: dict[str, asyncio.Future] = {}


async def binding_mode(core_api, storage_class: str | None) -> str:
    """The ``volumeBindingMode`` of ``storage_class`` (``""``: no class, none such, or no RBAC to read classes).

    Read once per class and process; starts that ask while the read is under
    way wait for it. A class that cannot be read is asked again next time.
    """
    if not storage_class:
        return ""
    if storage_class in _binding_modes:
        return _binding_modes[storage_class]
    reading = _reading.get(storage_class)
    if reading is None or reading.get_loop() is not asyncio.get_running_loop():
        reading = _reading[storage_class] = asyncio.ensure_future(_read_mode(core_api, storage_class))
        reading.add_done_callback(lambda _done: _reading.pop(storage_class, None))
    return await asyncio.shield(reading)


async def _read_mode(core_api, storage_class: str) -> str:
    try:
        found = await call(client.StorageV1Api(core_api.api_client).read_storage_class, storage_class)
    except ApiException as e:
        if e.status not in (403, 404):
            raise
        return ""
    _binding_modes[storage_class] = found.volume_binding_mode or "Immediate"
    return _binding_modes[storage_class]


def _on_the_clock(pvc: dict, mode: str) -> bool:
    """Whether a Pending claim should be binding now: always, except WaitForFirstConsumer before a node was chosen."""
    annotations = (pvc.get("metadata") or {}).get("annotations") or {}
    return mode != WAIT_FOR_FIRST_CONSUMER or bool(annotations.get(SELECTED_NODE_ANNOTATION))


async def last_event(core_api, namespace: str, claim: str) -> str:
    """``"Reason: message"`` of the claim's most recent Event, or ``""``."""
    selector = f"involvedObject.kind=PersistentVolumeClaim,involvedObject.name={claim}"
    try:
        found = await call(core_api.list_namespaced_event, namespace, field_selector=selector)
    except ApiException:
        return ""

    def when(event):
        return str(event.last_timestamp or event.event_time or event.metadata.creation_timestamp or "")

    events = sorted(found.items or [], key=when)
    return f"{events[-1].reason}: {events[-1].message}" if events else ""


#: StorageClass name ("" for none) -> the event-loop time a start's wait in this process last saw a claim of that
#: class become Bound. A claim's deadline runs from the later of when it should bind and that moment: a provisioner
#: working through a queue (300 students' new homes at once, each claim waiting its turn) is not one that never acts.
_class_bound_at: dict[str, float] = {}

#: Seconds a wait on the PVC watch cache sleeps at most before it looks at the claim again. It wakes sooner, at
#: each new version of the claim the watch stores (``changed``); without that, or when the cache's watch gave up
#: (its replacement's events wake nobody), it looks this often. No request is made either way.
CACHE_INTERVAL = 1.0
#: The same when each new version of the claim wakes the wait: a look now and then in case that watch gave up.
CACHE_RECHECK = 15.0

#: ``peek(claim)``: the claim as a watch cache holds it, or None when no cache knows it (see ``Kube.peek``).
Peek = Callable[[str], "dict | None"]
#: ``changed(claim)``: a future done at the claim's next version in that cache, or None (see ``CachedKube.next_change``).
Changed = Callable[[str], "asyncio.Future | None"]


async def _next_cached_version(claim: str, changed: Changed | None) -> None:
    """Sleep until the watch cache stores ``claim`` anew (at most :data:`CACHE_RECHECK` s), or :data:`CACHE_INTERVAL` s."""
    change = changed(claim) if changed is not None else None
    if change is None:
        await asyncio.sleep(CACHE_INTERVAL)
        return
    try:
        await asyncio.wait_for(change, CACHE_RECHECK)
    except TimeoutError:
        pass


async def wait_claim_bound(core_api, *, namespace: str, claim: str, deadline: float, peek: Peek | None = None,
                           changed: Changed | None = None) -> None:
    """Return once claim ``claim`` is Bound; WorkspaceError when it is missing, or not Bound ``deadline`` seconds after it should bind.

    Should bind: from the start of the wait, or for a ``WaitForFirstConsumer``
    class from when the scheduler chose a node. While other starts of this
    hub see claims of the same StorageClass become Bound, the provisioner is
    at work and the deadline moves on: it is ``deadline`` seconds after the
    later of the two (:data:`_class_bound_at`).

    With ``peek``, a claim the hub's PVC watch holds is read and followed
    there (no request at all): looked at again when ``changed`` says the
    watch stored a new version of it, else every :data:`CACHE_INTERVAL`
    seconds. Any other claim is read, then watched by name.
    """
    def cached() -> dict | None:
        return peek(claim) if peek is not None else None

    pvc = in_cache = cached()
    if pvc is None:
        try:
            pvc = await call_json(core_api.read_namespaced_persistent_volume_claim, claim, namespace)
        except ApiException as e:
            if e.status != 404:
                raise
            raise WorkspaceError(
                f"Your server cannot start: the volume claim {claim!r} it mounts does not exist. "
                "Nothing was started; please ask an administrator.",
                reason="volume-missing",
                status_code=409,
            ) from None
    storage_class = (pvc.get("spec") or {}).get("storageClassName")
    mode = await binding_mode(core_api, storage_class)
    loop = asyncio.get_running_loop()
    due = None  # the loop time by which the claim must be Bound, once it should be binding
    waited = False
    while True:
        if in_cache is not None:  # as the cache holds it now: a wait below is for a version after this one
            in_cache = cached()
            pvc = in_cache or pvc
        if (pvc.get("status") or {}).get("phase") == "Bound":
            if waited:
                _class_bound_at[storage_class or ""] = loop.time()
            return
        if due is None and _on_the_clock(pvc, mode):
            due = loop.time() + deadline
        if due is not None:
            due = max(due, _class_bound_at.get(storage_class or "", -deadline) + deadline)  # its class is being bound
            if loop.time() >= due:
                break
        waited = True
        try:
            async with asyncio.timeout_at(due):
                if in_cache is not None:
                    await _next_cached_version(claim, changed)
                else:
                    pvc = await _next_version(core_api, namespace, claim, pvc["metadata"].get("resourceVersion")) or pvc
        except TimeoutError:
            continue  # due, unless it is Bound now or another claim of its class was bound meanwhile: decided at the top
    event = await last_event(core_api, namespace, claim)
    raise WorkspaceError(
        f"Your server could not start: its volume claim {claim!r} (storage class {storage_class or 'none'!r}) "
        f"was not bound within {deadline:g} seconds."
        + (f" Last event: {event}" if event else " There was no event about it.")
        + " Please ask an administrator; your disks were not changed.",
        reason="volume-binding",
        status_code=503,
    )


async def _next_version(core_api, namespace: str, claim: str, resource_version: str | None) -> dict | None:
    """The claim after its next change (watched from ``resource_version``); None when the watch ended without one."""
    stream = watch.Watch()
    try:
        async for event in stream.stream(
            core_api.list_namespaced_persistent_volume_claim, namespace, field_selector=f"metadata.name={claim}",
            resource_version=resource_version, timeout_seconds=60,
        ):
            if event["type"] in ("ADDED", "MODIFIED"):
                return core_api.api_client.sanitize_for_serialization(event["object"])
    except ApiException as e:
        if e.status != 410:
            raise
        return await call_json(core_api.read_namespaced_persistent_volume_claim, claim, namespace)
    finally:
        stream.stop()
    return None


async def wait_bound(core_api, *, namespace: str, claims: list[str], deadline: float, peek: Peek | None = None,
                     changed: Changed | None = None) -> None:
    """:func:`wait_claim_bound` for every claim at once; the first refusal is raised and the other waits cancelled."""
    tasks = [
        asyncio.ensure_future(wait_claim_bound(core_api, namespace=namespace, claim=claim, deadline=deadline, peek=peek,
                                               changed=changed))
        for claim in dict.fromkeys(claims)
    ]
    try:
        for finished in asyncio.as_completed(tasks):
            await finished
    finally:
        for task in tasks:
            task.cancel()
