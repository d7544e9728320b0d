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
  are not counted.
* **one consumer per ReadWriteOnce disk**: from the cluster's attacher
  (:mod:`workspacespawner.localcluster.attacher`), no ReadWriteOnce or
  ReadWriteOncePod claim ever had two Pods or VMIs using it at once, on one
  node or two (the attacher lets two Pods of one node share an RWO volume,
  as Kubernetes does; the workspace must not). ``shared`` names claims
  allowed to be shared anyway (none of ours should be).

:func:`violations` returns the findings as plain sentences, for tests that
want to expect one.
"""

from __future__ import annotations

import re

_DISK_PATH = re.compile(r"/namespaces/(?P<ns>[^/]+)/(?P<plural>persistentvolumeclaims|datavolumes)(?:/(?P<name>[^/]+))?$")
_EXCLUSIVE = {"ReadWriteOnce", "ReadWriteOncePod"}


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


def _access_modes(cluster, namespace: str, name: str) -> set[str] | None:
    store = cluster.store
    kind = store.kind("", "v1", "persistentvolumeclaims")
    for pvc in store.objects(kind):
        meta = pvc["metadata"]
        if meta["namespace"] == namespace and meta["name"] == name:
            return set((pvc.get("status") or {}).get("accessModes") or pvc["spec"].get("accessModes") or [])
    return None


def violations(cluster, *, purged=(), shared=()) -> list[str]:
    """What breaks the invariants on ``cluster`` (see the module docstring), as sentences; empty when all hold."""
    found = []
    for plural, namespace, name in disk_deletes(cluster):
        if name is None:
            found.append(f"a collection of {plural} in {namespace} was deleted")
        elif name not in purged:
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


def assert_invariants(cluster, *, purged=(), shared=()) -> None:
    """Fail with every finding of :func:`violations` when any invariant is broken.

    ``cluster`` is the :class:`~workspacespawner.localcluster.LocalCluster`
    (for a :class:`~workspacespawner.localcluster.cluster.ClusterThread`,
    its ``.cluster``); ``purged`` the disk names the test purged (or let
    retention purge) on purpose; ``shared`` claim names allowed more than one
    consumer at once.
    """
    found = violations(cluster, purged=set(purged), shared=set(shared))
    assert not found, "invariants broken:\n  " + "\n  ".join(found)
