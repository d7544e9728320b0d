"""The real-control-plane tier's fixtures (localcluster.realplane.fixtures), shared with the local cluster's own
real-plane tests: skipped unless ``WORKSPACESPAWNER_CONTROL_PLANE=real`` and ``WORKSPACESPAWNER_K8S_BIN`` are set."""

from localcluster.realplane.fixtures import (  # noqa: F401 (fixtures, found by name)
    _no_proxy,
    api,
    cluster_api,
    cluster_namespace,
    k8s_bin,
    kubectl,
    kubevirt_bin,
    kubevirt_plane,
    kueue_dir,
    namespace,
    ns,
    plane,
    probe,
    realcluster,
)
