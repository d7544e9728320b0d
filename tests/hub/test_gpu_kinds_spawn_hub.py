"""WorkspaceSpawner starts of GPU kinds through a real JupyterHub on the local cluster's ECONOMY_NODES, on both planes.

Covers: a profile asking for a MIG slice (``nvidia.com/mig-3g.40gb``) starts
and its Pod lands on the MIG node; with the one such slice held, a second
start is refused quickly with the sentence of
``workspacespawner.gpu.capacity.shortage`` (the scheduler's own words in
the hub's log); a profile asking for a time-sliced T4 replica by its
``-SHARED`` product starts on the T4 node.
"""

from __future__ import annotations

import kubernetes
import pytest
from localcluster.controllers.scheduler import ECONOMY_NODES

from tests.support import planes
from tests.support.hubharness import Hub, config_pieces
from workspacespawner.core import names


def profile(slug: str, resource: str, product: str | None = None) -> dict:
    """A container profile asking for one unit of ``resource`` (of ``product``, when named)."""
    override = {"workspace_kind": "container", "extra_resource_limits": {resource: 1}}
    if product:
        override["node_selector"] = {"nvidia.com/gpu.product": product}
    return {"display_name": f"JupyterLab, {slug}", "slug": slug, "kubespawner_override": override}


PROFILES = [profile("mig-3g", "nvidia.com/mig-3g.40gb"), profile("t4-shared", "nvidia.com/gpu", "Tesla-T4-SHARED"),
            {**profile("t4-all", "nvidia.com/gpu", "Tesla-T4-SHARED"), "kubespawner_override": {
                "workspace_kind": "container", "extra_resource_limits": {"nvidia.com/gpu": 4},
                "node_selector": {"nvidia.com/gpu.product": "Tesla-T4-SHARED"}}}]


@pytest.fixture(scope="module")
def cluster(control_plane, tmp_path_factory):
    with planes.running(control_plane, tmp_path_factory.mktemp("cluster"), nodes=ECONOMY_NODES) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def hub(cluster, tmp_path_factory):
    extra, start_timeout = planes.hub_settings(cluster)
    config = (config_pieces("10-workspace-spawner.py", "20-profiles.py")
              + f"\nc.KubeSpawner.profile_list = c.KubeSpawner.profile_list + {PROFILES!r}\n"
              + extra + "\n" + config_pieces("90-check-config.py") + "\n")
    hub = Hub(tmp_path_factory.mktemp("hub"), cluster.kubeconfig, config, start_timeout=start_timeout).start()
    yield hub
    hub.stop()


@pytest.fixture(scope="module")
def core(cluster):
    with kubernetes.config.new_client_from_config(str(cluster.kubeconfig)) as client:
        yield kubernetes.client.CoreV1Api(client)


def node_of(core, user: str) -> str:
    pods = core.list_namespaced_pod("default", label_selector=names.owner_selector(user)).items
    assert len(pods) == 1, pods
    return pods[0].spec.node_name


def test_a_mig_slice_profile_starts_on_the_mig_node_and_the_next_is_refused_in_numbers(hub, core):
    hub.create_user("mia")
    hub.start_server("mia", {"profile": "mig-3g"})
    assert node_of(core, "mia") == "gpu-node-mig"
    hub.create_user("max")
    r = hub.spawn("max", {"profile": "mig-3g"})
    assert r.status_code == 503, r.text
    message = r.json()["message"]
    assert message.startswith("All 1 MIG slices 3g.40gb are in use right now; this profile needs 1 MIG slice 3g.40gb. "), message
    assert "Insufficient nvidia.com/mig-3g.40gb" in hub.log(tail=None)
    hub.stop_server("mia")


def test_a_time_sliced_profile_starts_on_a_replica_of_the_t4(hub, core):
    hub.create_user("tess")
    hub.start_server("tess", {"profile": "t4-shared"})
    assert node_of(core, "tess") == "gpu-node-t4"
    # #38 item 1 for time-sliced shares: all four asked while one is held, refused with the numbers, by the T4's name
    hub.create_user("tom")
    r = hub.spawn("tom", {"profile": "t4-all"})
    assert r.status_code == 503, r.text
    message = r.json()["message"]
    assert message.startswith("Only 3 of 4 NVIDIA T4 (shared) GPUs are free right now; this profile needs 4 GPUs. "), message
    hub.stop_server("tess")
