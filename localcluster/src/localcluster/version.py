"""The one Kubernetes release the local cluster plays.

Everything that depends on the release reads it from here: ``/version`` and
the OpenAPI documents, the Nodes' kubelet and kube-proxy versions, the
built-in schemas writes are validated against (kubernetes-validate's
``v{KUBERNETES_VERSION}-local-strict``, or the newest older one installed)
and behaviour that changed between releases (see ``Kind.generation`` in
:mod:`.kinds`). Changing the release is changing this module.
"""

from __future__ import annotations

#: The Kubernetes release (``major.minor.patch``): the one the real control plane
#: tier builds (``tools/k8s/versions.env``), so both tiers report the same
#: ``/version`` (zero-to-jupyterhub 4.x needs 1.32 or newer).
KUBERNETES_VERSION = "1.34.4"
MAJOR, MINOR, PATCH = KUBERNETES_VERSION.split(".")

#: ``v1.34.4``: ``gitVersion`` of ``/version``, a Node's ``kubeletVersion``.
GIT_VERSION = f"v{KUBERNETES_VERSION}"

#: When and with what that release was built, as its ``/version`` reports it.
BUILD_DATE = "2026-02-10T00:00:00Z"
GO_VERSION = "go1.24.12"


def at_least(major: int, minor: int) -> bool:
    """Whether the local cluster's release is ``major.minor`` or newer."""
    return (int(MAJOR), int(MINOR)) >= (major, minor)
