"""Kubernetes Events written by the local cluster's controllers (core/v1 Event).

Controllers report what a real component would (``Scheduled``,
``FailedScheduling``, ``Pulled``, ``Started``, ``ProvisioningSucceeded``,
...) so that clients reading Events, kubespawner's progress among them, see
the same stream as on a real cluster.
"""

from __future__ import annotations

import copy
import uuid

from .errors import ApiError
from .store import Store, rfc3339


def _similar_event(store: Store, kind, namespace, uid, reason, message, type, component, field_path=None) -> dict | None:
    """A stored Event about the same object (and part of it) with the same reason, message, type and source."""
    for event in store.objects(kind):
        if (
            event["metadata"].get("namespace") == namespace
            and event.get("involvedObject", {}).get("uid") == uid
            and event.get("involvedObject", {}).get("fieldPath") == field_path
            and event.get("reason") == reason
            and event.get("message") == message
            and event.get("type") == type
            and (event.get("source") or {}).get("component") == component
        ):
            return copy.deepcopy(event)
    return None


def new_event(involved: dict, reason: str, message: str, *, type: str, component: str, now: str,
              field_path: str | None = None) -> dict:
    """A new core/v1 Event about ``involved`` (a fresh name), first and last seen at ``now`` (RFC 3339); ``field_path``:
    the part of it the Event is about (a kubelet's ``spec.containers{notebook}``), as ``involvedObject.fieldPath``."""
    meta = involved["metadata"]
    namespace = meta.get("namespace") or "default"
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{meta['name']}.{uuid.uuid4().hex[:16]}",
            "namespace": namespace,
        },
        "involvedObject": {
            "apiVersion": involved.get("apiVersion"),
            "kind": involved.get("kind"),
            "name": meta["name"],
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        },
        "reason": reason,
        "message": message,
        "type": type,
        "source": {"component": component},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
        "reportingComponent": component,
        "reportingInstance": component,
    }
    if field_path:
        event["involvedObject"]["fieldPath"] = field_path
    if not meta.get("namespace"):
        event["involvedObject"].pop("namespace")
    return event


def record_event(
    store: Store,
    involved: dict,
    reason: str,
    message: str,
    *,
    type: str = "Normal",
    component: str = "localcluster",
    field_path: str | None = None,
) -> dict | None:
    """Create an Event about ``involved`` (any stored object) in its namespace.

    ``type`` is ``Normal`` or ``Warning``; ``component`` names the reporter
    (``default-scheduler``, ``kubelet``, ``virt-controller``, ...);
    ``field_path`` the part of the object (a container, as a kubelet names
    it: ``spec.initContainers{scratch-notice}``). Returns the
    Event, or None when it could not be written (the object's namespace is gone).
    As client-go's event correlator does, repeating an Event (same object,
    reason, message, type and component) updates ``count`` and
    ``lastTimestamp`` of the existing one instead of creating another.
    """
    meta = involved["metadata"]
    namespace = meta.get("namespace") or "default"
    now = rfc3339(store.clock())
    kind = store.kind("", "v1", "events")
    similar = _similar_event(store, kind, namespace, meta.get("uid"), reason, message, type, component, field_path)
    if similar is not None:
        # client-go's EventCorrelator: a repeat bumps count and lastTimestamp instead of a new Event.
        similar["count"] = int(similar.get("count") or 1) + 1
        similar["lastTimestamp"] = now
        try:
            return store.replace(kind, namespace, similar["metadata"]["name"], similar)
        except ApiError:
            return None
    event = new_event(involved, reason, message, type=type, component=component, now=now, field_path=field_path)
    try:
        return store.create(kind, namespace, event)
    except ApiError:
        return None
