"""The Workspaces dashboard: a hub-managed JupyterHub service showing workspaces, card-hours, the cluster and reports."""
