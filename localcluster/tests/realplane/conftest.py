"""The real-control-plane tier's fixtures (localcluster.realplane.fixtures): skipped unless
``WORKSPACESPAWNER_CONTROL_PLANE=real`` and ``WORKSPACESPAWNER_K8S_BIN`` name the binaries tools/k8s/build.sh built."""

from localcluster.realplane.fixtures import (  # noqa: F401 (fixtures, found by name)
    _no_proxy,
    api,
    cluster_api,
    cluster_namespace,
    k8s_bin,
    kubectl,
    kubevirt_bin,
    kubevirt_cluster,
    kubevirt_namespace,
    kubevirt_plane,
    kueue_dir,
    kueue_plane,
    namespace,
    ns,
    plane,
    probe,
    realcluster,
)
