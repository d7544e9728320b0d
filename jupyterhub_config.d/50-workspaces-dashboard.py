# The Workspaces dashboard (/services/workspaces/): each user's workspaces, card-hours
# and disks; the cluster's GPUs for team leads and admins; reports for admins.
# The hub starts it as a managed service and logs users in through its OAuth.
# Set c.WorkspacesDashboard.* (team_groups, prometheus_url, departments, port)
# before this piece loads: the roles below are made from team_groups.
#   c.WorkspacesDashboard.team_groups = ["research"]   # members see their team
import os
import sys

from workspacespawner.dashboard.traits import custom_scopes, dashboard_settings, roles, service, user_scopes


def _hub_config_file():
    """The hub's own config file, which the service reads (-f), as the hub was started with it."""
    try:
        from jupyterhub.app import JupyterHub

        if JupyterHub.initialized():
            return os.path.abspath(JupyterHub.instance().config_file)
    except Exception:  # not inside a hub (a test loading this file): no -f
        pass
    return None


_dashboard = dashboard_settings(c)
c.JupyterHub.services.append(service(_dashboard, python=sys.executable, hub_config=_hub_config_file(), cwd=os.getcwd()))
c.JupyterHub.custom_scopes.update(custom_scopes(_dashboard))
c.JupyterHub.extra_user_scopes.extend(user_scopes(_dashboard))
c.JupyterHub.load_roles.extend(roles(_dashboard))
