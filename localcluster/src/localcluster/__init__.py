"""A Kubernetes API server on loopback with the controllers of a small GPU cluster.

The embedded cluster of ``workspacespawner demo`` and of the test suite; see
:class:`~localcluster.cluster.LocalCluster`. Nothing here
imports from the spawner side, and the spawner imports nothing from here.

The controllers (node agent, provisioner, snapshots, CDI, KubeVirt's
virt-controller, scheduler, service proxy) read and write through one
client interface, :mod:`.client`: the embedded store here, or any API
server through kubernetes_asyncio (informer caches by list+watch, writes to
the API). So the same controllers also run as ordinary API clients of the
real control plane (``--control-plane real``, :mod:`.realplane.agents`),
next to kube-scheduler and kube-controller-manager, with virt-api's VM
subresources served behind its aggregator (:mod:`.realplane.virtapi`).
"""

from .cluster import ClusterThread, LocalCluster

__all__ = ["ClusterThread", "LocalCluster"]
