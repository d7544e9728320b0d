"""Team GPU pools through a real JupyterHub on the local cluster (both control planes).

Covers: a member's spawn page shows the pool's profile with its free GPUs and
who holds them (from the shared caches), a non-member's page does not show
it and a non-member's start of it (a tampered form, or the REST API) is
refused with 403 before anything is made; a member's start lands on the
pool's node; a second member's start of the full pool is refused with the
numbers and who holds the pool; a profile preferring cheaper GPUs names no
preference when the only cheaper GPUs are a team pool's; every card says
which node pool it runs on (#38 item 8).
"""

from __future__ import annotations

import html

import kubernetes
import pytest
from localcluster.controllers.scheduler import DEFAULT_NODES, GPU_TAINT

from tests.support import planes
from tests.support.hubharness import Hub, config_pieces, login
from workspacespawner.core import names

POOL_LABEL = "example.org/team-pool"
VISION_TAINT = {"key": POOL_LABEL, "value": "vision", "effect": "NoSchedule"}
NODES = [*DEFAULT_NODES, {"name": "vision-1", "cpu": "32", "memory": "128Gi", "gpus": 2, "gpu_product": "Tesla-V100-SXM2-16GB",
                          "labels": {POOL_LABEL: "vision"}, "taints": [GPU_TAINT, VISION_TAINT]}]

POOL_CONFIG = f"""
c.TeamGPUPools.pools = {{"vision": {{"groups": ["vision-lab"], "node_selector": {{{POOL_LABEL!r}: "vision"}},
                                      "taint": {VISION_TAINT!r}}}}}
c.GPUEconomy.card_hour_weights = {{"nvidia.com/gpu": {{"Tesla-V100-SXM2-16GB": 0.5, "NVIDIA-A100-SXM4-80GB": 1.0}}}}
c.KubeSpawner.profile_list = c.KubeSpawner.profile_list + [
    {{"display_name": "Vision pool: both GPUs", "slug": "vision-pool",
      "kubespawner_override": {{"team_pool": "vision", "extra_resource_limits": {{"nvidia.com/gpu": 2}}}}}},
    {{"display_name": "One GPU, cheapest first", "slug": "cheap-gpu",
      "kubespawner_override": {{"prefer_cheaper_gpus": True, "extra_resource_limits": {{"nvidia.com/gpu": 1}}}}}},
]
"""


@pytest.fixture(scope="module")
def cluster(control_plane, tmp_path_factory):
    """The default nodes and the vision pool's node, on the module's control plane."""
    with planes.running(control_plane, tmp_path_factory.mktemp("cluster"), nodes=NODES) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def hub(cluster, tmp_path_factory):
    """A hub with the sample profiles, the vision pool and its profile, and a cheaper-first profile."""
    config = config_pieces("10-workspace-spawner.py", "20-profiles.py") + POOL_CONFIG + config_pieces("90-check-config.py")
    extra, timeout = planes.hub_settings(cluster)
    hub = Hub(tmp_path_factory.mktemp("hub"), cluster.kubeconfig, config + extra, start_timeout=timeout).start()
    yield hub
    hub.stop()


def user_pods(cluster, user: str) -> list:
    """``user``'s Pods, read from the API server (by the owner label)."""
    with kubernetes.config.new_client_from_config(str(cluster.kubeconfig)) as client:
        return kubernetes.client.CoreV1Api(client).list_namespaced_pod(
            "default", label_selector=names.owner_selector(user)).items


def spawn_page(hub, user: str) -> str:
    r = login(hub, user).get(f"{hub.url}/hub/spawn", timeout=30)
    assert r.status_code == 200, r.text
    return html.unescape(r.text)


def test_a_non_member_never_sees_the_pool_and_is_refused_403(hub, cluster):
    hub.create_user("student", groups=("students",))
    page = spawn_page(hub, "student")
    assert "Vision pool: both GPUs" not in page and 'value="vision-pool"' not in page
    session = login(hub, "student")
    r = session.post(f"{hub.url}/hub/spawn", data={"profile": "vision-pool", "_xsrf": session.cookies.get("_xsrf")},
                     timeout=60)
    assert r.status_code == 403, r.text
    assert "team GPU pool 'vision'" in html.unescape(r.text)
    r = hub.spawn("student", {"profile": "vision-pool"})
    assert r.status_code == 403, r.text
    assert user_pods(cluster, "student") == []


def test_a_member_sees_the_pool_lands_there_and_the_next_member_is_told_who_holds_it(hub, cluster):
    hub.create_user("ann", groups=("vision-lab",))
    hub.create_user("bob", groups=("vision-lab",))
    assert "Your team's pool 'vision': 2 of 2 GPUs free." in spawn_page(hub, "ann")
    hub.start_server("ann", {"profile": "vision-pool"})
    pod, = user_pods(cluster, "ann")
    assert pod.spec.node_name == "vision-1"
    assert pod.spec.node_selector[POOL_LABEL] == "vision"
    assert "Your team's pool 'vision': 0 of 2 GPUs free; held by ann (2)." in spawn_page(hub, "bob")
    r = hub.spawn("bob", {"profile": "vision-pool"})
    assert r.status_code == 503, r.text
    message = r.json()["message"]
    assert message == ("All 2 GPUs are in use right now; this profile needs 2 GPUs. Your team's pool 'vision': "
                       "0 of 2 GPUs free; held by ann (2). Ask them, or try again later."), message
    hub.stop_server("ann")


def test_a_cheaper_first_profile_names_only_gpu_types_it_can_get(hub):
    """The V100s here are the vision pool's, out of this profile's reach, and A100 is the one type left: the card
    names no preference (#38 item 13; tests/browser/test_browser_student_pages.py has the demo's three types)."""
    hub.create_user("cy")
    page = spawn_page(hub, "cy")
    assert "One GPU, cheapest first" in page and "Prefers older GPUs" not in page



def test_every_card_says_which_node_pool_it_runs_on(hub):
    """On a site with a team pool, a member tells the pool's card from the shared ones without reading the config."""
    import re

    hub.create_user("dana", groups=("vision-lab",))
    page = html.unescape(spawn_page(hub, "dana"))
    cards = dict(re.findall(r'data-slug="([^"]+)">(.*?)</label>', page, re.S))
    assert "Runs on your team's pool 'vision': nodes only its members use." in cards["vision-pool"]
    assert "Runs on the shared GPU nodes everyone uses, not on a team's pool." in cards["jupyterlab-1gpu"]
    assert "Runs on the shared nodes, CPU-only ones first." in cards["jupyterlab-cpu"]
    assert all("Runs on" in text for text in cards.values()), [slug for slug, text in cards.items() if "Runs on" not in text]
