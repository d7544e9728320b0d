"""Card-hour quotas: metered GPU time, concurrency, instance and disk limits, checked before every start.

One module, one job:

``policy``     pure decisions and card-hour arithmetic, and the package's one clock (``policy.utcnow``)
``config``     ``WorkspaceQuota``: the ``c.WorkspaceQuota.*`` settings, checked when loaded
``ledger``     the runs table (SQLAlchemy; SQLite file by default), atomic check-and-reserve
``migrations`` the ledger's schema history (alembic scripts run through alembic's API)
``service``    what the spawner calls: the ledger in a worker thread, refusals, the enforcer's start
``enforcer``   the hub's periodic pass: warn, stop GPU servers after the grace, reconcile with the cluster
``announce``   per-user messages on the hub's home page (``c.JupyterHub.template_vars``)
``hubapi``     stopping a server through the hub's REST API
``events``     Kubernetes Events about a user's quota
``metrics``    Prometheus metrics on the hub's ``/hub/metrics``
``form``       the spawn form's cost and card-hours lines
``refusal``    the exception a refused start raises
``cli``        ``workspacespawner usage``

Imports flow one way: the spawner imports ``service`` (and through it the
rest); nothing here imports the spawner.
"""
