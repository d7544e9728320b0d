"""The demo's Prometheus, as configuration (pure, no server): what it scrapes and how the hub lets it in.

Covers: ``prometheus.yml`` (one job per target, its path and host, labels
kept as the exporter set them, a bearer token from a file only for the job
that needs one, the interval also the scrape timeout, bad input refused
naming it); the demo's three jobs (the hub's own ``/hub/metrics`` with the
token, the node agent's dcgm-exporter and kubelet pages); the token file
(mode 0600, made once, then kept); the demo's hub config with Prometheus
(the dashboard's ``prometheus_url``, a service holding that token, its role
with ``read:metrics`` only) and without (none of it). The demo's held-GPU
reading as Prometheus scrapes it: tests/hub/test_demo_prometheus.py.
"""

from __future__ import annotations

import json
import os
import stat

import pytest
from localcluster.prometheus import Target, config_text
from traitlets.config.loader import PyFileConfigLoader

from workspacespawner.demo import METRICS_SERVICE, config_dir, demo_config, metrics_token, prometheus_targets


def test_one_job_per_target_with_labels_kept_and_a_token_only_where_given(tmp_path):
    token = tmp_path / "token"
    config = json.loads(config_text({
        "hub": Target("http://127.0.0.1:8081/hub/metrics", token),
        "gpus": "http://127.0.0.1:9400/metrics",
    }, interval=5))
    assert config["global"] == {"scrape_interval": "5s", "evaluation_interval": "5s", "scrape_timeout": "5s"}
    hub, gpus = config["scrape_configs"]
    assert (hub["job_name"], hub["scheme"], hub["metrics_path"], hub["static_configs"]) == (
        "hub", "http", "/hub/metrics", [{"targets": ["127.0.0.1:8081"]}])
    assert hub["authorization"] == {"type": "Bearer", "credentials_file": str(token)}
    assert hub["honor_labels"] and gpus["honor_labels"]
    assert "authorization" not in gpus
    assert (gpus["metrics_path"], gpus["static_configs"]) == ("/metrics", [{"targets": ["127.0.0.1:9400"]}])


def test_a_fractional_interval_is_whole_milliseconds():
    assert json.loads(config_text({}, interval=1.5))["global"]["scrape_interval"] == "1500ms"


@pytest.mark.parametrize(("targets", "interval", "named"), [
    ({"x": "not-a-url"}, 5, "'not-a-url'"),
    ({"x": "http://127.0.0.1:1/m"}, 0, "0"),
])
def test_bad_input_is_refused_naming_it(targets, interval, named):
    with pytest.raises(ValueError, match=named):
        config_text(targets, interval)


def test_the_demo_scrapes_the_hub_with_its_token_and_the_node_agent(tmp_path):
    token = tmp_path / "token"
    targets = prometheus_targets(18081, "http://127.0.0.1:4321/", token)
    assert targets == {
        "jupyterhub": Target("http://127.0.0.1:18081/hub/metrics", token),
        "dcgm-exporter": Target("http://127.0.0.1:4321/metrics"),
        "kubelet": Target("http://127.0.0.1:4321/kubelet/metrics"),
    }


def test_the_token_file_is_private_made_once_and_kept(tmp_path):
    path = metrics_token(tmp_path)
    first = path.read_text().strip()
    assert len(first) == 64
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert metrics_token(tmp_path).read_text().strip() == first


def load(state, text: str):
    """The hub's config from ``text``, run in ``state`` (its start-up check makes the demo's ledger in the cwd)."""
    (state / "jupyterhub_config.py").write_text(text)
    c = PyFileConfigLoader("jupyterhub_config.py", path=str(state)).load_config()
    return c, c.JupyterHub.services.get_value([]), c.JupyterHub.load_roles.get_value([])


def test_the_hub_config_with_prometheus_names_it_and_lets_its_token_read_metrics_only(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    token = metrics_token(tmp_path)
    c, services, roles = load(tmp_path, demo_config(tmp_path, config_dir(), 8000, prometheus_url="http://127.0.0.1:9999",
                                                    metrics_token=token))
    assert c.GPUIdle.prometheus_url == "http://127.0.0.1:9999"  # the dashboard's and the idle-GPU pass's
    [service] = [s for s in services if s["name"] == METRICS_SERVICE]
    assert service["api_token"] == token.read_text().strip()
    assert "url" not in service and "command" not in service  # a token holder, nothing the hub runs or routes
    [role] = [r for r in roles if r["name"] == METRICS_SERVICE]
    assert role == {"name": METRICS_SERVICE, "scopes": ["read:metrics"], "services": [METRICS_SERVICE]}
    assert "workspaces" in {s["name"] for s in services}  # the dashboard is still there


def test_the_hub_config_keeps_successful_scrapes_out_of_the_log(tmp_path, monkeypatch):
    """A line every 5 s in the demo's terminal was all a person saw of a healthy hub; a failed scrape stays."""
    import logging

    monkeypatch.chdir(tmp_path)
    access = logging.getLogger("tornado.access")
    monkeypatch.setattr(access, "filters", list(access.filters))  # what the config adds goes with the test
    load(tmp_path, demo_config(tmp_path, config_dir(), 8000, prometheus_url="http://127.0.0.1:9999",
                               metrics_token=metrics_token(tmp_path)))

    def shown(level: int, message: str) -> bool:
        return access.filter(logging.LogRecord("tornado.access", level, __file__, 1, message, (), None))

    assert not shown(logging.INFO, "200 GET /hub/metrics (demo-prometheus@127.0.0.1) 3.10ms")
    assert shown(logging.WARNING, "403 GET /hub/metrics (@127.0.0.1) 1.20ms")
    assert shown(logging.INFO, "200 GET /hub/home (student1@127.0.0.1) 12.00ms")
    assert shown(logging.INFO, "302 GET /hub/metrics-explained (@127.0.0.1) 1.00ms")


def test_the_node_agents_scrapes_are_kept_out_of_the_demos_terminal_too():
    """The local cluster's node agent serves dcgm-exporter's /metrics and the kubelet's in the demo's own process."""
    import logging

    from workspacespawner.demo import quiet_scrapes

    def record(level: int, message: str) -> logging.LogRecord:
        return logging.LogRecord("tornado.access", level, __file__, 1, message, (), None)

    assert not quiet_scrapes(record(logging.INFO, "200 GET /kubelet/metrics (127.0.0.1) 1.06ms"))
    assert not quiet_scrapes(record(logging.INFO, "200 GET /metrics (127.0.0.1) 45.17ms"))
    assert quiet_scrapes(record(logging.ERROR, "500 GET /metrics (127.0.0.1) 2.00ms"))
    assert quiet_scrapes(record(logging.INFO, "201 POST /api/v1/namespaces/default/pods (127.0.0.1) 3.00ms"))


def test_the_hub_config_without_prometheus_has_none_of_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    c, services, roles = load(tmp_path, demo_config(tmp_path, config_dir(), 8000))
    assert "prometheus_url" not in c.GPUIdle and "prometheus_url" not in c.WorkspacesDashboard
    assert METRICS_SERVICE not in {s["name"] for s in services} | {r["name"] for r in roles}
    with pytest.raises(ValueError, match="both"):
        demo_config(tmp_path, config_dir(), 8000, prometheus_url="http://127.0.0.1:9999")

