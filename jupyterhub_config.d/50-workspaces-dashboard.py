# The Workspaces dashboard (/services/workspaces/): each user's workspaces, card-hours
# and disks; the cluster's GPUs for team leads and admins; reports for admins.
# The hub starts it as a managed service (`workspacespawner dashboard -f <this hub's
# config>`) and logs users in through its OAuth. Its settings go here, before
# configure_hub(c), which makes the service, its custom scopes and the roles
# (every user: their own; each team group: the team's; the service: the hub API).
from workspacespawner.dashboard.traits import configure_hub

# Members of these JupyterHub groups see each other's workspaces and the Cluster view.
c.WorkspacesDashboard.team_groups = []  # e.g. ["research"]
# Department -> its JupyterHub groups, for the Reports view.
c.WorkspacesDashboard.departments = {}  # e.g. {"Physics": ["students", "research"]}
# GPU utilisation and disk fill from Prometheus (dcgm-exporter, kubelet); None: without them.
c.WorkspacesDashboard.prometheus_url = None  # e.g. "http://prometheus-server.monitoring:9090"
c.WorkspacesDashboard.port = 10101  # on 127.0.0.1, where the proxy reaches it
# The Cluster view: a node label naming a team's node pool (None: no pools), and when a GPU workspace counts as
# idle (every GPU under idle_gpu_threshold % over idle_gpu_window seconds; needs Prometheus).
c.WorkspacesDashboard.gpu_pool_label = None  # e.g. "example.org/gpu-pool"
c.WorkspacesDashboard.idle_gpu_threshold = 5.0
c.WorkspacesDashboard.idle_gpu_window = 3600
c.WorkspacesDashboard.prometheus_timeout = 10.0  # seconds

configure_hub(c)
