"""A Kubernetes API server on loopback with the controllers of a small GPU cluster.

The embedded cluster of ``workspacespawner demo`` and of the test suite; see
:class:`~workspacespawner.localcluster.cluster.LocalCluster`. Nothing here
imports from the spawner side, and the spawner imports nothing from here.
"""

from .cluster import ClusterThread, LocalCluster

__all__ = ["ClusterThread", "LocalCluster"]
