# Idle GPUs given back (c.GPUIdle.*): a GPU server that shows no activity for
# gpu_idle_timeout seconds is warned on the hub's home page and, gpu_idle_grace
# seconds later, stopped with its disks kept, when Prometheus shows its GPUs'
# utilisation stayed under utilisation_threshold percent the whole time (an
# open browser tab keeps reporting activity; only the GPU tells). Without
# Prometheus (prometheus_url) idle servers are only warned unless
# stop_without_prometheus is set. These are also what the Workspaces
# dashboard calls an idle GPU and the Prometheus it asks (50-workspaces-dashboard.py).
# The hub reaches its REST API with the quota service's token (40-quota.py).
c.GPUIdle.gpu_idle_timeout = 3600  # seconds; 0 turns it off
c.GPUIdle.gpu_idle_grace = 1800  # seconds from the warning to the stop
c.GPUIdle.utilisation_threshold = 5  # percent (dcgm-exporter's DCGM_FI_DEV_GPU_UTIL)
# dcgm-exporter's and the kubelets' metrics; None: without them
c.GPUIdle.prometheus_url = None  # e.g. "http://prometheus-server.monitoring:9090"
c.GPUIdle.stop_without_prometheus = False
c.GPUIdle.exempt_groups = ["research"]  # the team shares its pool's GPUs and agrees among itself
c.GPUIdle.exempt_profiles = []
