"""Schema data the local cluster validates custom resources against.

``kubevirt-openapi.trimmed.json`` and ``cdi-openapi.trimmed.json`` are the
definitions reachable from the served KubeVirt and CDI kinds, extracted from
the upstream OpenAPI v2 specs by :mod:`.trim`; ``snapshot-openapi.json`` is a
hand-written definition of ``snapshot.storage.k8s.io/v1`` VolumeSnapshot.
README.md in this folder gives the source, commit and licence of each.
"""
