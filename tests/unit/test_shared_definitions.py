"""One definition each of the Prometheus URL, an idle GPU and a node's team pool, shared by the hub and the dashboard.

Covers, each with a configuration where the two former definitions
disagreed: the dashboard asks the Prometheus of ``c.GPUIdle.prometheus_url``
(it used to ask only its own ``prometheus_url``), the deprecated dashboard
copy applying to both with a warning; the Cluster view flags a GPU idle
exactly when the hub's idle-GPU pass does (its highest utilisation over
``gpu_idle_timeout`` under ``utilisation_threshold``: the dashboard used to
average over its own window, flagging a GPU that peaked at 40 % as idle);
the Cluster view groups nodes by ``c.TeamGPUPools.pools``, the pools the
spawner places workspaces on (it used to read its own node label).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from traitlets.config import Config

from tests.unit.test_dashboard_cluster import node, pod, series
from workspacespawner.config import traittypes
from workspacespawner.config.gpueconomy import GPUEconomy
from workspacespawner.config.teampools import TeamGPUPools, pool_of_node
from workspacespawner.dashboard.settings import dashboard_settings
from workspacespawner.dashboard.views import cluster as cluster_view
from workspacespawner.gpu.metrics import UTIL
from workspacespawner.idle.activity import read_utilisation
from workspacespawner.idle.decision import ACTIVE, GPUServer, Policy, decide
from workspacespawner.idle.settings import GPUIdle
from workspacespawner.k8s.kinds import NODE, POD, VMI

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
PROM = "http://prometheus.monitoring:9090"
POOLS = {"vision": {"groups": ["vision-lab"], "node_selector": {"example.org/team-pool": "vision-a100"}}}


class PeakyPrometheus:
    """A Prometheus where ann's GPU 0 averaged 2 % over any window but peaked at 40 %; it records what was asked."""

    asked: list[str] = []

    def __init__(self, url, timeout=None):
        self.url = url

    async def query(self, promql: str):
        PeakyPrometheus.asked.append(self.url)
        value = 40.0 if "max_over_time" in promql else 2.0
        return [series(UTIL, 0, value, pod_name="jupyter-ann")]


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    PeakyPrometheus.asked = []
    traittypes.said.clear()
    monkeypatch.setattr(cluster_view, "PrometheusClient", PeakyPrometheus)


def context(config: Config):
    nodes = [node("gpu-1", labels={"example.org/team-pool": "vision-a100"}), node("gpu-2")]
    pods = [pod("jupyter-ann", "ann", gpus=1)]

    async def objects(kind):
        return {NODE: nodes, POD: pods, VMI: []}[kind]

    return SimpleNamespace(settings=dashboard_settings(config), caches=SimpleNamespace(objects=objects), now=lambda: NOW,
                           quota=SimpleNamespace(timezone="UTC"), ledger=None, economy=GPUEconomy(), gpu_queues={})


async def test_the_dashboard_asks_the_idle_passes_prometheus():
    config = Config()
    config.GPUIdle.prometheus_url = PROM
    assert GPUIdle(config=config).prometheus() == dashboard_settings(config).prometheus() == PROM
    await cluster_view.read_cluster(context(config))
    assert set(PeakyPrometheus.asked) == {PROM}


def test_the_dashboards_own_url_is_a_deprecated_alias_for_both(caplog):
    config = Config()
    config.WorkspacesDashboard.prometheus_url = "http://old:9090/"
    with caplog.at_level(logging.WARNING):
        assert GPUIdle(config=config).prometheus() == dashboard_settings(config).prometheus() == "http://old:9090"
    [warning] = [r.getMessage() for r in caplog.records if "deprecated" in r.getMessage()]
    assert warning == ("WorkspacesDashboard.prometheus_url is deprecated; use c.GPUIdle.prometheus_url "
                       "(the dashboard and the idle-GPU pass share it)")
    config.GPUIdle.prometheus_url = PROM  # the new setting wins over the old one
    assert GPUIdle(config=config).prometheus() == dashboard_settings(config).prometheus() == PROM


async def test_the_cluster_view_calls_idle_what_the_idle_pass_calls_idle():
    config = Config()
    config.GPUIdle.prometheus_url = PROM
    pods = [pod("jupyter-ann", "ann", gpus=1)]
    gpu_idle = GPUIdle(config=config)
    utilisation = await read_utilisation(PeakyPrometheus(PROM), pods, [], window_seconds=gpu_idle.gpu_idle_timeout)
    server = GPUServer(user="ann", server="", profile="gpu", display="GPU", groups=frozenset(), gpus=1,
                       started=datetime(2026, 12, 1, tzinfo=UTC), last_activity=None, gpu_util=utilisation[("ann", "")])
    assert decide(server, Policy.of(gpu_idle), NOW).action == ACTIVE  # it peaked at 40 %: the pass keeps it
    readings = await cluster_view.read_cluster(context(config))
    assert readings.idle == []  # so does the Cluster view (it flagged it idle on its 2 % average)

    config.GPUIdle.utilisation_threshold = 50.0  # now both call it idle
    readings = await cluster_view.read_cluster(context(config))
    assert [(w.holding.user, w.max_util) for w in readings.idle] == [("ann", 40.0)]


def test_the_dashboards_idle_settings_are_deprecated_aliases():
    config = Config()
    config.WorkspacesDashboard.idle_gpu_threshold = 20.0
    config.WorkspacesDashboard.idle_gpu_window = 600
    idle = dashboard_settings(config).gpu_idle()
    assert (idle.utilisation_threshold, idle.gpu_idle_timeout) == (20.0, 600.0)
    assert (GPUIdle(config=config).utilisation_threshold, GPUIdle(config=config).gpu_idle_timeout) == (20.0, 600.0)


async def test_the_cluster_view_groups_nodes_by_the_spawners_team_pools():
    config = Config()
    config.TeamGPUPools.pools = POOLS
    settings = dashboard_settings(config)
    vision_node = node("gpu-1", labels={"example.org/team-pool": "vision-a100"})
    assert settings.pool_of()(vision_node) == pool_of_node(vision_node, TeamGPUPools(config=config).all()) == "vision"
    readings = await cluster_view.read_cluster(context(config))
    assert [(p.name, p.nodes) for p in readings.pools] == [("vision", ("gpu-1",)), (None, ("gpu-2",))]


def test_without_team_pools_the_deprecated_pool_label_still_groups(caplog):
    config = Config()
    config.WorkspacesDashboard.gpu_pool_label = "example.org/team-pool"
    with caplog.at_level(logging.WARNING):
        pool_of = dashboard_settings(config).pool_of()
    assert pool_of(node("gpu-1", labels={"example.org/team-pool": "vision-a100"})) == "vision-a100"
    assert any("gpu_pool_label is deprecated; use c.TeamGPUPools.pools" in r.getMessage() for r in caplog.records)
