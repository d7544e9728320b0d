"""The design's invariants, checked on a local cluster after a test has done its worst.

Any test that runs a hub or the lifecycle against a :class:`LocalCluster`
can end with::

    from tests.support.invariants import assert_invariants

    assert_invariants(cluster)                      # nothing was purged
    assert_invariants(cluster, purged={"home-u"})   # the test purged home-u on purpose

so a new fault case costs a few lines: do the thing, then assert. What is
checked (DESIGN.md, Invariants 1 and 2-3):

* **no disk deleted except by a purge**: the cluster's request log
  (``cluster.requests``) holds no successful DELETE of a
  PersistentVolumeClaim or CDI DataVolume (one by name, or a collection)
  other than those named in ``purged``. Claims the cluster deletes itself
  (a Pod's generic ephemeral volume, with its owner) never reach the API and
  are not counted. A pool disk (created labelled ``workspacespawner.io/disk:
  pool``, nobody's) that no start claimed may be retired, by a DELETE with
  ``uid`` and ``resourceVersion`` preconditions; once claimed it is a user's
  disk like any other.
* **one consumer per ReadWriteOnce disk**: from the cluster's attacher
  (:mod:`localcluster.attacher`), no ReadWriteOnce or
  ReadWriteOncePod claim ever had two Pods or VMIs using it at once, on one
  node or two (the attacher lets two Pods of one node share an RWO volume,
  as Kubernetes does; the workspace must not). ``shared`` names claims
  allowed to be shared anyway (none of ours should be).

Given the hub's quota ``ledger`` (a :class:`~workspacespawner.quota.ledger.Ledger`):

* **every second of GPU compute inside an open run**: each Pod or VMI
  with GPUs (from the Pod or VirtualMachine the API accepted, in the
  request log) used its disks, by the attacher's history, only while a run
  of its ``(user, server)`` with GPUs was open (opened before the attach,
  closed, if at all, after the detach; :data:`SLACK` for the clocks of two
  threads);
* **no open run without compute once reconciled**: within
  ``reconciled_within`` seconds every open run has a Pod or VMI of its
  ``(user, server)`` in the cluster.

And ``next_start``: a callable that starts (and stops) the user's server
again, run last; whatever it raises fails the check.

:func:`violations` returns the findings as plain sentences, for tests that
want to expect one.
"""

from __future__ import annotations

import datetime
import re
import time

import sqlalchemy as sa

from workspacespawner.core import names
from workspacespawner.quota.ledger import runs as RUNS
from workspacespawner.quota.policy import OPEN

_DISK_PATH = re.compile(r"/namespaces/(?P<ns>[^/]+)/(?P<plural>persistentvolumeclaims|datavolumes)(?:/(?P<name>[^/]+))?$")
_EXCLUSIVE = {"ReadWriteOnce", "ReadWriteOncePod"}
_COMPUTE_PATH = re.compile(r"/namespaces/(?P<ns>[^/]+)/(?P<plural>pods|virtualmachines)(?:/(?P<name>[^/]+))?$")
#: How far apart two threads' clocks may put one moment (the cluster's attacher and the hub's ledger).
SLACK = datetime.timedelta(seconds=1)


def disk_deletes(cluster) -> list[tuple[str, str, str | None]]:
    """Successful DELETEs of PVCs and DataVolumes in the request log: ``(plural, namespace, name or None for a collection)``."""
    found = []
    for request in cluster.requests.records:
        if request.method != "DELETE" or not 200 <= request.status < 300:
            continue
        match = _DISK_PATH.search(request.path)
        if match:
            found.append((match["plural"], match["ns"], match["name"]))
    return found


def _labels_set_by(operations) -> dict | None:
    """The labels a JSON Patch (a list of operations) replaces whole, or None."""
    if not isinstance(operations, list):
        return None
    return next((op.get("value") for op in operations if op.get("path") == "/metadata/labels" and op.get("op") == "replace"), None)


def retired_pool_disks(cluster) -> set[tuple[str, str]]:
    """``(namespace, name)`` of the pool disks deleted while still nobody's, each with ``uid`` and ``resourceVersion``
    preconditions (from the request log): created as pool disks, never relabelled by a claim."""
    created, claimed, retired = set(), set(), set()
    for request in cluster.requests.records:
        match = _DISK_PATH.search(request.path)
        if not match or match["plural"] != "datavolumes" or not 200 <= request.status < 300:
            continue
        body = request.body or {}
        if request.method == "POST":
            labels = (body.get("metadata") or {}).get("labels") or {}
            if labels.get(names.DISK_LABEL) == names.POOL_DISK and names.OWNER_LABEL not in labels:
                created.add((match["ns"], body["metadata"]["name"]))
        elif request.method == "PATCH" and match["name"]:
            labels = _labels_set_by(body)
            if labels is not None and labels.get(names.DISK_LABEL) != names.POOL_DISK:
                claimed.add((match["ns"], match["name"]))
        elif request.method == "DELETE" and match["name"]:
            preconditions = body.get("preconditions") or {} if isinstance(body, dict) else {}
            if preconditions.get("uid") and preconditions.get("resourceVersion"):
                retired.add((match["ns"], match["name"]))
    return (created - claimed) & retired


def cluster_objects(cluster, group: str, version: str, plural: str) -> list[dict]:
    """Every object of a kind on ``cluster``: from the embedded store, or listed from a real plane's API server."""
    store = getattr(cluster, "store", None)
    if store is not None:
        return store.objects(store.kind(group, version, plural))
    import json

    import kubernetes

    api = kubernetes.config.new_client_from_config(str(cluster.kubeconfig))
    try:
        if group:
            listed = kubernetes.client.CustomObjectsApi(api).list_cluster_custom_object(group, version, plural)
        else:
            singular = {"pods": "pod", "persistentvolumeclaims": "persistent_volume_claim"}[plural]
            core = kubernetes.client.CoreV1Api(api)
            listed = json.loads(getattr(core, f"list_{singular}_for_all_namespaces")(_preload_content=False).data)
    finally:
        api.close()
    return listed.get("items") or []


def _access_modes(cluster, namespace: str, name: str) -> set[str] | None:
    for pvc in cluster_objects(cluster, "", "v1", "persistentvolumeclaims"):
        meta = pvc["metadata"]
        if meta["namespace"] == namespace and meta["name"] == name:
            return set((pvc.get("status") or {}).get("accessModes") or pvc["spec"].get("accessModes") or [])
    return None


def violations(cluster, *, purged=(), shared=()) -> list[str]:
    """What breaks the invariants on ``cluster`` (see the module docstring), as sentences; empty when all hold."""
    found, pool = [], retired_pool_disks(cluster)
    for plural, namespace, name in disk_deletes(cluster):
        if name is None:
            found.append(f"a collection of {plural} in {namespace} was deleted")
        elif name not in purged and (namespace, name) not in pool:
            found.append(f"{plural} {namespace}/{name} was deleted outside a purge")
    attacher = cluster.attacher
    for claim, most in sorted(attacher.max_consumers().items()):
        if most < 2 or claim[1] in shared:
            continue
        modes = _access_modes(cluster, *claim)
        if modes is not None and not modes & _EXCLUSIVE:
            continue  # ReadWriteMany or ReadOnlyMany: sharing is what it is for
        for first, second in attacher.overlaps(claim):
            found.append(
                f"claim {claim[0]}/{claim[1]} ({'/'.join(sorted(modes or {'deleted'}))}) was used by "
                f"{first.kind} {first.name} on {first.node} and {second.kind} {second.name} on {second.node} at once"
            )
    return found


def _gpus(plural: str, body: dict) -> int:
    """GPUs a Pod or VirtualMachine body asks for: ``nvidia.com/gpu`` limits, or a VM's passed-through ``gpus``."""
    spec = body.get("spec") or {}
    if plural == "virtualmachines":
        domain = (((spec.get("template") or {}).get("spec") or {}).get("domain") or {})
        limits = (domain.get("resources") or {}).get("limits") or {}
        return len((domain.get("devices") or {}).get("gpus") or []) or int(limits.get("nvidia.com/gpu", 0))
    containers = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    return sum(int(((c.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu", 0)) for c in containers)


def gpu_compute(cluster) -> list[tuple[str, str, str, datetime.datetime, datetime.datetime | None]]:
    """``(consumer name, user, server, attached, detached or None)`` of every GPU Pod or VMI's use of its disks."""
    made = []  # (time accepted, name, user, server, gpus), oldest first
    for request in cluster.requests.records:
        match = _COMPUTE_PATH.search(request.path)
        if not match or request.method not in ("POST", "PUT") or not 200 <= request.status < 300 or not isinstance(request.body, dict):
            continue
        meta = request.body.get("metadata") or {}
        if match["plural"] == "virtualmachines":
            meta = ((request.body.get("spec") or {}).get("template") or {}).get("metadata") or meta
        owner = names.server_of(meta)
        name = (request.body.get("metadata") or {}).get("name") or match["name"]
        if owner:
            made.append((request.time, name, *owner, _gpus(match["plural"], request.body)))
    uses: dict[str, list] = {}
    for record in cluster.attacher.history:
        consumer = record.consumer
        spans = uses.setdefault(consumer.uid, [consumer.name, None, None])
        if record.action == "attach" and spans[1] is None:
            spans[1] = record.time
        elif record.action == "detach":
            spans[2] = record.time
    found = []
    for name, attached, detached in uses.values():
        if attached is None:
            continue
        before = [m for m in made if m[1] == name and m[0] <= attached + SLACK]
        if before and before[-1][4] > 0:
            found.append((name, before[-1][2], before[-1][3], attached, detached))
    return found


def _runs(ledger) -> list:
    with ledger.engine.connect() as conn:
        return list(conn.execute(sa.select(RUNS)))


def _aware(moment):
    return None if moment is None else (moment if moment.tzinfo else moment.replace(tzinfo=datetime.UTC))


def metering_violations(cluster, ledger) -> list[str]:
    """GPU compute outside an open run of its server (see the module docstring), as sentences."""
    found = []
    runs = [r for r in _runs(ledger) if r.gpus > 0 and r.state != "reserved"]
    for name, user, server, attached, detached in gpu_compute(cluster):
        covering = [
            r for r in runs if (r.user_name, r.server_name) == (user, server) and _aware(r.started) <= attached + SLACK
            and (r.stopped is None or (detached is not None and _aware(r.stopped) >= detached - SLACK))
        ]
        if not covering:
            theirs = [(r.state, str(r.started), str(r.stopped)) for r in runs if (r.user_name, r.server_name) == (user, server)]
            found.append(f"GPU compute {name} of {user}'s server {server!r} ran from {attached} to {detached or 'now'} "
                         f"outside an open run (its runs: {theirs})")
    return found


def open_runs_without_compute(cluster, ledger) -> list[str]:
    """Open runs whose ``(user, server)`` has no Pod or VMI in the cluster, as sentences."""
    alive = set()
    for key in (("", "v1", "pods"), ("kubevirt.io", "v1", "virtualmachineinstances")):
        alive |= {owner for obj in cluster_objects(cluster, *key) if (owner := names.server_of(obj["metadata"])) is not None}
    return [f"run {r.id} of {r.user_name}'s server {r.server_name!r} is open with no compute"
            for r in _runs(ledger) if r.state == OPEN and (r.user_name, r.server_name) not in alive]


def assert_invariants(cluster, *, purged=(), shared=(), ledger=None, reconciled_within: float = 20.0, next_start=None) -> None:
    """Fail with every finding of :func:`violations` when any invariant is broken.

    ``cluster`` is the :class:`~localcluster.LocalCluster`
    (for a :class:`~localcluster.cluster.ClusterThread`,
    its ``.cluster``), or a real plane's agents started with a fault proxy
    (tests/support/planes.py; the proxy keeps the request log); ``purged`` the disk names the test purged (or let
    retention purge) on purpose; ``shared`` claim names allowed more than one
    consumer at once; ``ledger``, ``reconciled_within`` (seconds) and
    ``next_start``: see the module docstring.
    """
    found = violations(cluster, purged=set(purged), shared=set(shared))
    if ledger is not None:
        found += metering_violations(cluster, ledger)
        deadline = time.monotonic() + reconciled_within
        while open_runs_without_compute(cluster, ledger) and time.monotonic() < deadline:
            time.sleep(0.5)
        found += open_runs_without_compute(cluster, ledger)
    assert not found, "invariants broken:\n  " + "\n  ".join(found)
    if next_start is not None:
        next_start()
