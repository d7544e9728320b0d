"""A real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler) on 127.0.0.1, from binaries built by ``tools/k8s/build.sh``.

Test infrastructure for the real-control-plane tier (issue #14); the product
reaches it only through ``workspacespawner localcluster --control-plane real``.
"""

from .plane import (
    DEFAULT_CONTROLLERS,
    DEFAULT_SERVICE_CIDR,
    ControlPlaneError,
    RealControlPlane,
    find_bin_dir,
)

CRDS_DIR = __import__("pathlib").Path(__file__).resolve().parent / "crds"

__all__ = [
    "CRDS_DIR",
    "DEFAULT_CONTROLLERS",
    "DEFAULT_SERVICE_CIDR",
    "ControlPlaneError",
    "RealControlPlane",
    "find_bin_dir",
]
