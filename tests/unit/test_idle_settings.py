"""``c.GPUIdle``: defaults that work, bounds and checks naming the setting and the bad value, where Prometheus is
found (its own URL, else the Workspaces dashboard's), and when idle servers are stopped rather than only warned."""

from __future__ import annotations

import pytest
from traitlets import TraitError
from traitlets.config import Config

from workspacespawner.idle.decision import Policy
from workspacespawner.idle.settings import GPUIdle


def settings(**values) -> GPUIdle:
    config = Config()
    for name, value in values.items():
        setattr(config.GPUIdle, name, value)
    return GPUIdle(config=config)


def test_defaults_warn_after_an_hour_and_only_warn_without_prometheus():
    idle = GPUIdle()
    assert (idle.gpu_idle_timeout, idle.gpu_idle_grace, idle.utilisation_threshold, idle.interval) == (
        3600, 1800, 5, 60)
    assert idle.enabled and idle.prometheus() is None and not idle.stops()
    assert not settings(gpu_idle_timeout=0).enabled


@pytest.mark.parametrize(("name", "value", "words"), [
    ("gpu_idle_timeout", -1, "gpu_idle_timeout"),
    ("gpu_idle_grace", -5, "gpu_idle_grace"),
    ("utilisation_threshold", 101, "utilisation_threshold"),
    ("interval", 1, "interval"),
    ("prometheus_url", "prometheus:9090", "GPUIdle.prometheus_url must be an http(s) URL or None, not 'prometheus:9090'"),
    ("exempt_groups", ["research", " "], "GPUIdle.exempt_groups holds an empty name"),
])
def test_bad_values_name_the_setting(name, value, words):
    with pytest.raises(TraitError, match=words.replace("(", r"\(").replace(")", r"\)")):
        settings(**{name: value})


def test_prometheus_is_its_own_url_else_the_dashboards():
    assert settings(prometheus_url="http://prom:9090/").prometheus() == "http://prom:9090"
    config = Config()
    config.WorkspacesDashboard.prometheus_url = "http://dash-prom:9090"
    assert GPUIdle(config=config).prometheus() == "http://dash-prom:9090"
    assert GPUIdle(config=config).stops()
    assert settings(stop_without_prometheus=True).stops()


def test_the_policy_carries_the_settings():
    policy = Policy.of(settings(gpu_idle_timeout=600, exempt_profiles=["gpu-batch"], utilisation_threshold=10))
    assert (policy.timeout, policy.grace, policy.threshold, policy.exempt_profiles) == (
        600, 1800, 10, frozenset({"gpu-batch"}))
