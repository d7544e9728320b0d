"""Weighted card-hours through a real JupyterHub on a local cluster of two GPU types. Covers:
a profile naming no GPU type reserved at the most it may cost, then priced
once at placement at the weight of the node it landed on (a V100 at 0.5,
not the A100's 1.0), with the product recorded on its run and its
card-hours counted at that weight to its stop; the spawn page showing that
profile's cost as a range over the types the cluster has and a profile
naming its type at its own weight; ``/hub/metrics`` carrying the raw
unit-hours and the running units per resource and product.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from localcluster.controllers.scheduler import GPU_TAINT

from tests.support import planes
from tests.support.hubharness import Hub, config_pieces, login
from tests.support.paths import REPO
from workspacespawner.quota.ledger import Ledger
from workspacespawner.quota.policy import CLOSED

A100, V100 = "NVIDIA-A100-SXM4-80GB", "Tesla-V100-SXM2-16GB"
NODES = [
    {"name": "cpu-node-1", "cpu": "16", "memory": "64Gi", "gpus": 0},
    {"name": "a100-node", "cpu": "32", "memory": "256Gi", "gpus": 1, "gpu_product": A100, "taints": [GPU_TAINT]},
    {"name": "v100-node", "cpu": "32", "memory": "256Gi", "gpus": 2, "gpu_product": V100, "taints": [GPU_TAINT]},
]


@pytest.fixture(scope="module")
def cluster(control_plane, tmp_path_factory):
    with planes.running(control_plane, tmp_path_factory.mktemp("cluster"), nodes=NODES) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def hub(cluster, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("hub")
    config = f"import sys\nsys.path.insert(0, {str(REPO)!r})\n" + config_pieces("10-workspace-spawner.py")
    config += f"""
c.JupyterHub.spawner_class = "workspace"
c.WorkspaceQuota.ledger_url = {ledger_url(workdir)!r}
c.WorkspaceQuota.card_hours_per_month = 100
c.WorkspaceQuota.enforce_interval = 1
c.GPUEconomy.card_hour_weights = {{"nvidia.com/gpu": {{{A100!r}: 1.0, {V100!r}: 0.5}}}}
gpu = {{"extra_resource_limits": {{"nvidia.com/gpu": 2}}, "cpu_limit": 2, "mem_limit": "4G"}}
c.KubeSpawner.profile_list = [
    {{"display_name": "CPU", "slug": "cpu", "default": True, "kubespawner_override": {{"cpu_limit": 1, "mem_limit": "2G"}}}},
    {{"display_name": "Two GPUs, any type", "slug": "any-2gpu", "kubespawner_override": gpu}},
    {{"display_name": "One A100", "slug": "a100", "kubespawner_override": {{
        "extra_resource_limits": {{"nvidia.com/gpu": 1}}, "node_selector": {{"nvidia.com/gpu.product": {A100!r}}}}}}},
]
"""
    plane_config, start_timeout = planes.hub_settings(cluster)
    hub = Hub(workdir, cluster.kubeconfig, config + plane_config, start_timeout=start_timeout)
    hub.start()
    yield hub
    hub.stop()


def ledger_url(workdir) -> str:
    """The hub's ledger: a SQLite file in its folder."""
    return f"sqlite:///{workdir / 'ledger.sqlite'}"


def the_run(hub: Hub, user: str):
    """``user``'s one run in the hub's ledger (whatever its month)."""
    ledger = Ledger(ledger_url(hub.workdir))
    try:
        [run] = ledger.runs_of(user, (datetime(2000, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC)))
        return run, ledger.usage(user, (run.started - timedelta(days=1), run.started + timedelta(days=1)),
                                 run.stopped or run.started).card_hours
    finally:
        ledger.dispose()


def test_the_spawn_page_shows_what_each_profile_costs(hub):
    hub.create_user("cat")
    page = login(hub, "cat").get(f"{hub.url}/hub/spawn").text
    assert "Costs from 1 to 2 card-hours per hour, depending on the GPU it gets" in page, page
    assert "Costs 1 card-hour per hour" in page  # the A100 profile names its type
    assert "3 of 3 GPUs free now" in page  # a profile naming no type draws on every type together


def test_a_start_naming_no_type_is_priced_at_the_node_it_landed_on(hub):
    hub.create_user("vic")
    hub.start_server("vic", {"profile": "any-2gpu"})  # only the V100 node has 2 GPUs
    run, _ = the_run(hub, "vic")
    assert (run.gpus, run.gpu_resource, run.gpu_product, run.weight) == (2, "nvidia.com/gpu", V100, 0.5), run
    # the enforcer's next pass (every second here) refreshes the gauges
    assert _wait_for_metric(hub, f'workspacespawner_running_gpu_units{{product="{V100}",resource="nvidia.com/gpu"}} 2.0')
    assert f'workspacespawner_gpu_hours{{product="{V100}",resource="nvidia.com/gpu"}}' in hub.api("GET", "/../metrics").text
    hub.stop_server("vic")
    run, used = the_run(hub, "vic")
    assert run.state == CLOSED and (run.gpu_product, run.weight) == (V100, 0.5)
    assert used == pytest.approx(2 * 0.5 * (run.stopped - run.started).total_seconds() / 3600)


def _wait_for_metric(hub: Hub, line: str, timeout: float = 10) -> bool:
    """Whether ``line`` shows on ``/hub/metrics`` within ``timeout`` seconds (the enforcer refreshes the gauges each pass)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if line in hub.api("GET", "/../metrics").text:
            return True
        time.sleep(0.5)
    return False
