"""Write the kubeconfig that points kubectl and the Kubernetes clients at the local cluster."""

from __future__ import annotations

import os
from pathlib import Path

import yaml


def kubeconfig_document(url: str, *, context: str, namespace: str, token: str) -> dict:
    """An ordinary ``kind: Config`` document: one cluster, one user with a bearer token, one context."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [{"name": context, "cluster": {"server": url}}],
        "users": [{"name": context, "user": {"token": token}}],
        "contexts": [
            {"name": context, "context": {"cluster": context, "user": context, "namespace": namespace}}
        ],
        "current-context": context,
    }


def write_kubeconfig(
    path: str | os.PathLike,
    url: str,
    *,
    context: str = "localcluster",
    namespace: str = "default",
    token: str = "localcluster",
) -> Path:
    """Write a kubeconfig for the API server at ``url`` (``http://127.0.0.1:PORT``) to ``path``, mode 0600.

    The server accepts any bearer token; one is still written so clients
    send an ``Authorization`` header as they would to a real cluster.
    Returns the path written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(
        kubeconfig_document(url, context=context, namespace=namespace, token=token), sort_keys=False
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)
    return path
