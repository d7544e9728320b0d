"""The Kubernetes API calls one workspace's start or stop made, from the API server's request log.

The shared watches (kubespawner's Pod and Event reflectors, ours of PVCs,
VMs, VMIs, DataVolumes and VMI Events) serve every user at once: their
watch streams and the lists they make when a watch restarts are not a
start's calls, and would land in any window at random. Everything else is
counted: the calls a start or stop makes for its own workspace.
"""

from __future__ import annotations

#: The selectors the shared watches list and watch with (one per kind and namespace, for all users).
SHARED_LABEL_SELECTORS = frozenset({"component=singleuser-server", "app.kubernetes.io/managed-by=workspacespawner"})


def shared_watch_request(request) -> bool:
    """Whether ``request`` (a :class:`~localcluster.faults.Request`) is a shared watch's own."""
    query = request.query
    if query.get("watch") in ("true", "1"):
        return True
    if request.method != "GET":
        return False
    return query.get("labelSelector") in SHARED_LABEL_SELECTORS or query.get("fieldSelector", "").startswith("involvedObject.kind=")


def workspace_calls(records) -> list[tuple[str, str]]:
    """``(method, path)`` of each recorded request that is not a shared watch's, in order."""
    return [(r.method, r.path) for r in records if not shared_watch_request(r)]
