"""The Workspaces dashboard (issue #18): a hub-managed JupyterHub service at ``/services/workspaces/``.

``workspacespawner dashboard`` runs it (:func:`.command.main`, then :func:`.app.run`). A user sees
their own workspaces and card-hours, a team lead their team's, an admin
everyone's (:mod:`.access`); views read the cluster from the service's own
watch caches (:mod:`.watchcache`), the ledger and the audit log
(:mod:`.context`). A view module lists its routes in :mod:`.views`.
"""
