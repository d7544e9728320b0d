"""workspacespawner: a JupyterHub spawner for persistent GPU workspaces on Kubernetes.

``WorkspaceSpawner`` is imported lazily, so that the admin commands and the
dashboard, which import this package, never load kubespawner or JupyterHub.
"""

__all__ = ["WorkspaceSpawner"]
__version__ = "0.1.0"


def __getattr__(name):
    if name == "WorkspaceSpawner":
        from workspacespawner.spawner import WorkspaceSpawner

        return WorkspaceSpawner
    raise AttributeError(f"module 'workspacespawner' has no attribute {name!r}")
