# The Workspaces dashboard (/services/workspaces/): each user's workspaces, card-hours
# and disks; the cluster's GPUs for team leads and admins; reports for admins.
# The hub starts it as a managed service (`workspacespawner dashboard -f <this hub's
# config>`) and logs users in through its OAuth. Its settings go here, before
# configure_hub(c), which makes the service, its custom scopes and the roles
# (every user: their own; each team group: the team's; the service: the hub API).
from workspacespawner.dashboard.settings import configure_hub

# Members of these JupyterHub groups see each other's workspaces and the Cluster view.
c.WorkspacesDashboard.team_groups = []  # e.g. ["research"]
# Department -> its JupyterHub groups, for the Reports view.
c.WorkspacesDashboard.departments = {}  # e.g. {"Physics": ["students", "research"]}
c.WorkspacesDashboard.port = 10101  # on 127.0.0.1, where the proxy reaches it
# GPU utilisation and disk fill come from the hub's Prometheus (c.GPUIdle.prometheus_url); the Cluster
# view flags the GPUs the hub's idle-GPU pass calls idle (c.GPUIdle, 45-gpu-idle.py) and groups nodes by
# the team pools of c.TeamGPUPools.pools.
c.WorkspacesDashboard.prometheus_timeout = 10.0  # seconds

configure_hub(c)
