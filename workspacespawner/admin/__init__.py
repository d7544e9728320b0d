"""The admin commands of ``workspacespawner``: ``audit``, ``retention``, ``disk``, ``fence``, ``storage``.

Each reads the hub's own ``jupyterhub_config.py`` (``-f``, loaded as
JupyterHub loads it) for the namespace, the lifecycle settings and the
database, and talks to Kubernetes through a kubeconfig (``--kubeconfig``,
``$KUBECONFIG``, ``~/.kube/config``) or, inside the hub's Pod, the in-cluster
service account. Shared plumbing is in :mod:`.common`.
"""
