"""A Workspaces dashboard slow to start still starts with the hub.

JupyterHub 5.5 (the zero-to-jupyterhub chart 4.x's) gives a managed service ten one-second tries to answer and exits
with "Cannot connect to workspaces service managed" otherwise; CI's busy machine once took longer than that for the
service's imports and the hub's config. The service binds its address first, so the hub's request waits until the
service answers. Here the config takes 12 s to load in the service (and no time in the hub).
"""

from __future__ import annotations

from tests.hub.test_dashboard_hub import DashboardHub, dashboard_config
from tests.support import planes
from tests.support.hubharness import free_port

SLOW_IN_THE_SERVICE = """
import os, time
if os.environ.get("JUPYTERHUB_SERVICE_NAME") == "workspaces":
    time.sleep(12)
"""


def test_the_hub_starts_with_a_dashboard_whose_config_takes_12_s(tmp_path):
    with planes.running("embedded", tmp_path / "cluster") as cluster:
        config = dashboard_config(f"sqlite:///{tmp_path / 'ledger.sqlite'}") + SLOW_IN_THE_SERVICE
        hub = DashboardHub(tmp_path / "hub", cluster.kubeconfig, config, dashboard_port=free_port())
        hub.start()
        try:
            hub.wait_service()
            assert "Cannot connect to workspaces service" not in hub.log(None)
        finally:
            hub.stop()
