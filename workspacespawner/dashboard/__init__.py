"""The Workspaces dashboard (issue #18): a hub-managed JupyterHub service showing workspaces, card-hours and GPUs."""
