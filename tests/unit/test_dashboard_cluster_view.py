"""The Cluster view's data as a viewer sees it (views/cluster.py's pure parts), and its settings; plain dicts.

Covers: an admin sees every holder's name; a team lead sees the names of the users they may read and for the rest
a label of each person's own, "user A", "user B" (no user, server or object name), the same in the holdings, the
per-GPU readings, the top users and the idle list; the header counts GPU cards, MIG slices and time-sliced shares
apart; the Top users sparklines share one scale, which the page prints; a Pod that is not a workspace is named to admins only; totals and pools add up the nodes; without
Prometheus readings the GPU readings and the idle list are None (unknown), with its error sentence kept;
a GPU's past holder's series (what ``avg_over_time`` returns too) never overrides the current holder's; the
Cluster view's settings reject bad values naming the setting; the page's template groups nodes by pool, names only
whom the viewer may read, and says why the GPU readings are missing.
"""

from __future__ import annotations

import pytest
from traitlets import TraitError
from traitlets.config import Config

from tests.unit.test_dashboard_cluster import NOW, POOL, launcher, node, pod, pool_by_label, run, series, vmi
from workspacespawner.dashboard.access import Grant, Viewer
from workspacespawner.dashboard.app import templates
from workspacespawner.dashboard.cluster import idle_workspaces, node_views, pool_views, top_users
from workspacespawner.dashboard.settings import dashboard_settings
from workspacespawner.dashboard.views.cluster import ClusterReadings, cluster_data, sparkline_top, sparklines
from workspacespawner.gpu.metrics import UTIL, join_gpus

ADMIN = Viewer("root", admin=True)
LEAD = Viewer("lea", groups=frozenset({"lab"}), read=Grant(groups=frozenset({"lab"})), cluster=True,
              members={"lab": frozenset({"lea", "ann"})})


def readings(*, prometheus: bool = True, error: str | None = None) -> ClusterReadings:
    bob = vmi("bob-gpu", "bob", "gpu", gpus=2)
    ann, other = pod("jupyter-ann", "ann", gpus=1), pod("miner", gpus=1)
    compute = [ann, bob, launcher("virt-launcher-bob-gpu-q", bob, gpus=2), other]
    nodes = [node("gpu-1", labels={POOL: "lab"}), node("gpu-2", gpus=4, allocatable=3, labels={POOL: "lab"}), node("cpu-1", gpus=0)]
    views = node_views(nodes, compute, pool_of=pool_by_label)
    stats = join_gpus({UTIL: [series(UTIL, 0, 1, pod_name="jupyter-ann"), series(UTIL, 1, 0, pod_name="virt-launcher-bob-gpu-q"),
                              series(UTIL, 2, 0, pod_name="virt-launcher-bob-gpu-q"), series(UTIL, 3, 99, pod_name="miner")]},
                      [p for p in compute if p.get("kind") == "Pod"], [bob]) if prometheus else None
    users = top_users(views, {"ann": [run("ann", 1, NOW, None)], "bob": [run("bob", 2, NOW, None)]}, NOW)
    idle = idle_workspaces(views, stats, threshold=5)
    return ClusterReadings(views, pool_views(views), stats, users, idle, error)


def data(viewer: Viewer, **kwargs) -> dict:
    return cluster_data(viewer, readings(**kwargs), prometheus_url="http://prom:9090", threshold=5, window_seconds=3600)


def holdings(found: dict) -> list[tuple]:
    return sorted(((h["user"], h["server"], h["kind"], h["name"], h["gpus"], h["hidden"])
                   for n in found["nodes"] for h in n["holdings"]), key=lambda t: (t[0] or "", t[2]))


def test_an_admin_sees_every_name():
    found = data(ADMIN)
    assert holdings(found) == [(None, None, "other", "miner", 1, False), ("ann", "", "container", "jupyter-ann", 1, False),
                               ("bob", "gpu", "vm", "bob-gpu", 2, False)]
    assert [(u["user"], u["gpus_now"]) for u in found["top_users"]] == [("bob", 2), ("ann", 1)]
    assert sorted(w["user"] for w in found["idle"]) == ["ann", "bob"]


def test_a_team_lead_sees_the_teams_names_and_another_user_for_the_rest():
    found = data(LEAD)
    assert holdings(found) == [(None, None, "other", None, 1, True), (None, None, "vm", None, 2, True),
                               ("ann", "", "container", "jupyter-ann", 1, False)]
    readings_ = {g["gpu"]: g["holder"] for n in found["nodes"] for g in n["gpu_readings"] or []}
    assert readings_[0] == {"user": "ann", "server": "", "kind": "container", "hidden": False, "alias": None}
    assert readings_[1] == readings_[2] == {"user": None, "server": None, "kind": "vm", "hidden": True, "alias": "user A"}
    assert readings_[3] == {"user": None, "server": None, "kind": "other", "hidden": True, "alias": None}
    assert [(u["user"], u["hidden"], u["gpus_now"]) for u in found["top_users"]] == [(None, True, 2), ("ann", False, 1)]
    assert sorted((w["user"] or "", w["hidden"]) for w in found["idle"]) == [("", True), ("ann", False)]
    assert "bob" not in str(found) and "miner" not in str(found)
    assert all("bob" not in svg for pair in sparklines(found).values() for svg in pair)


def test_totals_and_pools_add_up_the_nodes():
    found = data(ADMIN)
    gpus = {n["name"]: n["gpus"] for n in found["nodes"]}
    assert gpus["gpu-1"]["held"] == 4 and gpus["gpu-1"]["free"] == 4
    assert gpus["gpu-2"]["unhealthy"] == 1 and gpus["gpu-2"]["free"] == 3
    assert found["totals"]["gpus"] == {"cards": 12, "mig_slices": 0, "shares": 0, "capacity": 12, "allocatable": 11,
                                       "held": 4, "free": 7, "unhealthy": 1, "unusable": 0}
    assert [(p["name"], p["gpus"]["free"]) for p in found["pools"]] == [("lab", 7), (None, 0)]


def test_without_prometheus_readings_gpus_and_idle_are_unknown():
    found = data(ADMIN, prometheus=False, error="Prometheus at http://prom:9090 did not answer: refused")
    assert found["idle"] is None and all(n["gpu_readings"] is None for n in found["nodes"])
    assert found["prometheus"] == {"url": "http://prom:9090", "error": "Prometheus at http://prom:9090 did not answer: refused"}
    assert holdings(found)  # the cluster part stays


def test_a_past_holders_series_never_overrides_the_current_holder():
    ann = pod("jupyter-ann", "ann", gpus=1)
    for order in (1, -1):
        averaged = [series(UTIL, 0, 0, pod_name="jupyter-gone"), series(UTIL, 0, 0), series(UTIL, 0, 88, pod_name="jupyter-ann")]
        (stat,) = join_gpus({UTIL: averaged[::order]}, [ann], [])
        assert (stat.util, stat.holder.user) == (88, "ann")
    (free,) = join_gpus({UTIL: [series(UTIL, 0, 50, pod_name="jupyter-gone"), series(UTIL, 0, 3)]}, [], [])
    assert (free.util, free.pod, free.holder) == (3, "", None)


@pytest.mark.parametrize(("name", "value"), [("gpu_pool_label", "not a label!"), ("idle_gpu_threshold", 150),
                                             ("idle_gpu_threshold", -1), ("idle_gpu_window", 30), ("prometheus_timeout", 0)])
def test_bad_cluster_settings_are_refused_naming_them(name, value):
    config = Config()
    setattr(config.WorkspacesDashboard, name, value)
    with pytest.raises(TraitError, match=f"WorkspacesDashboard.{name} .*{value!r}"):
        dashboard_settings(config)


def test_cluster_settings_have_working_defaults():
    settings = dashboard_settings(Config())
    idle = settings.gpu_idle()
    assert (settings.pool_of(), settings.prometheus(), idle.utilisation_threshold, idle.gpu_idle_timeout, settings.prometheus_timeout) == (
        None, None, 5.0, 3600.0, 10.0)


def render(viewer: Viewer, found: dict) -> str:
    return templates().get_template("cluster.html").render(
        viewer=viewer, nav=[], prefix="/services/workspaces/", hub_prefix="/hub/", xsrf_form_html=lambda: "",
        static_url=lambda path: f"/static/{path}", title="Cluster", data=found, sparklines=sparklines(found),
        sparkline_top=sparkline_top(found))


def test_the_page_groups_nodes_by_pool_and_names_only_whom_the_viewer_may_read():
    html = render(LEAD, data(LEAD))
    assert html.index("Pool lab") < html.index('data-node="gpu-1"') < html.index('data-node="gpu-2"')
    assert html.index("Pool (no pool)") < html.index('data-node="cpu-1"')
    assert "bob" not in html and "miner" not in html and 'data-field="alias">user A<' in html
    assert 'data-user="ann"' in html
    admin = render(ADMIN, data(ADMIN))
    assert 'data-user="bob"' in admin and "miner" in admin


def test_the_page_without_prometheus_says_why_and_keeps_the_nodes():
    found = data(ADMIN, prometheus=False, error="Prometheus at http://prom:9090 did not answer: refused")
    html = render(ADMIN, found)
    assert "Prometheus at http://prom:9090 did not answer: refused" in html and 'data-node="gpu-1"' in html
    assert "tr class=\"cluster-gpu\"" not in html and 'data-field="idle-unknown"' in html


def test_two_hidden_people_get_two_labels_the_same_everywhere():
    """Two people the lead may not read are "user A" and "user B" (in name order), never both "another user"."""
    compute = [pod("jupyter-bob", "bob", gpus=1), pod("jupyter-cy", "cy", gpus=2), pod("jupyter-ann", "ann", gpus=1)]
    views = node_views([node("gpu-1")], compute)
    stats = join_gpus({UTIL: [series(UTIL, 0, 0, pod_name="jupyter-bob"), series(UTIL, 1, 0, pod_name="jupyter-cy")]},
                      compute, [])
    users = top_users(views, {"cy": [run("cy", 2, NOW, None)]}, NOW)
    found = cluster_data(LEAD, ClusterReadings(views, [], stats, users, idle_workspaces(views, stats, threshold=5)),
                         prometheus_url="http://prom:9090", threshold=5, window_seconds=3600)
    labels = {h["alias"] for h in found["nodes"][0]["holdings"] if h["hidden"]}
    assert labels == {"user A", "user B"}
    top = {u["gpus_now"]: u["alias"] for u in found["top_users"] if u["hidden"]}
    assert top == {2: "user B", 1: "user A"}  # bob (1 GPU) is A, cy (2 GPUs) is B: the same as in the holdings
    assert {g["holder"]["alias"] for g in found["nodes"][0]["gpu_readings"]} == {"user A", "user B"}
    assert sorted(w["alias"] for w in found["idle"]) == ["user A", "user B"]
    html = render(LEAD, found)
    assert "user A" in html and "user B" in html and "bob" not in html and "cy<" not in html


def test_the_header_counts_cards_mig_slices_and_shares_apart():
    """A MIG A100 (7 × 1g.10gb slices), a T4 time-sliced 4 ways and a node of 8 whole A100s: 10 cards, not 19 GPUs."""
    mig = node("mig-1", gpus=0, labels={"nvidia.com/gpu.count": "1"})
    for part in ("capacity", "allocatable"):
        mig["status"][part].update({"nvidia.com/mig-1g.10gb": "7"})
    shared = node("t4-1", gpus=0, labels={"nvidia.com/gpu.replicas": "4"})
    for part in ("capacity", "allocatable"):
        shared["status"][part].update({"nvidia.com/gpu.shared": "4"})
    views = node_views([mig, shared, node("gpu-1")], [])
    found = cluster_data(ADMIN, ClusterReadings(views, [], None, [], None), prometheus_url=None, threshold=5,
                         window_seconds=3600)
    gpus = found["totals"]["gpus"]
    assert (gpus["cards"], gpus["mig_slices"], gpus["shares"], gpus["capacity"]) == (10, 7, 4, 19)
    assert {n["name"]: n["gpus"]["cards"] for n in found["nodes"]} == {"mig-1": 1, "t4-1": 1, "gpu-1": 8}
    html = render(ADMIN, found)
    figures = html[html.index("data-totals"):html.index("</dl>", html.index("data-totals"))]
    assert "<dt>GPU cards</dt><dd data-field=\"cards\">10<" in figures
    assert "<dt>MIG slices</dt><dd data-field=\"mig_slices\">7<" in figures
    assert "<dt>Time-sliced shares</dt><dd data-field=\"shares\">4<" in figures
    assert "<dt>GPUs</dt>" not in figures  # no sum of cards, slices and shares as if they were GPUs
    assert 'data-field="capacity">19<' in html  # that sum is said to be units a workspace takes


def test_the_top_users_sparklines_share_one_printed_scale():
    found = data(ADMIN)
    top = sparkline_top(found)
    assert top == max(1.0, *(v for u in found["top_users"] for _d, v in u["days_30"]))
    html = render(ADMIN, found)
    assert f'data-field="sparkline-top">{top:g}<' in html
    for seven, thirty in sparklines(found).values():  # every line scaled to the same top: the same value, the same height
        for svg in (seven, thirty):
            assert "polyline" in svg
    lines = [pair[1] for pair in sparklines(found).values()]
    heights = [float(line.split('points="')[1].split('"')[0].split()[-1].split(",")[1]) for line in lines]
    lasts = [u["days_30"][-1][1] for u in found["top_users"]]
    for height, last in zip(heights, lasts, strict=True):
        assert height == pytest.approx(32 - 2 - last / top * 28, abs=0.06)
