"""Which kubeconfig the admin commands use (admin/common.kubeconfig_of): ``--kubeconfig``, else ``$KUBECONFIG``, else
the demo's local cluster's when ``-f`` names the config ``workspacespawner demo`` wrote; another config finds none.
The demo's own config text and state layout are the ones the commands look for."""

from __future__ import annotations

from argparse import Namespace

import pytest

from workspacespawner.admin import common
from workspacespawner.demo import config_dir, demo_config


@pytest.fixture
def demo_state(tmp_path, monkeypatch):
    """A demo state directory as ``workspacespawner demo`` leaves it: its config and its cluster's kubeconfig."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    (tmp_path / "jupyterhub_config.py").write_text(demo_config(tmp_path, config_dir(), port=8000))
    (tmp_path / "cluster").mkdir()
    (tmp_path / "cluster" / "kubeconfig").write_text("apiVersion: v1\nkind: Config\n")
    return tmp_path


def args(config=None, kubeconfig=None) -> Namespace:
    return Namespace(config=None if config is None else str(config), kubeconfig=kubeconfig)


def test_the_demos_config_finds_the_demos_kubeconfig(demo_state):
    found = common.kubeconfig_of(args(demo_state / "jupyterhub_config.py"))
    assert found == str(demo_state / "cluster" / "kubeconfig")


def test_an_explicit_kubeconfig_or_KUBECONFIG_wins(demo_state, monkeypatch):
    assert common.kubeconfig_of(args(demo_state / "jupyterhub_config.py", "/etc/k.yaml")) == "/etc/k.yaml"
    monkeypatch.setenv("KUBECONFIG", "/srv/k.yaml")
    assert common.kubeconfig_of(args(demo_state / "jupyterhub_config.py")) is None  # kube_client reads $KUBECONFIG


def test_another_config_or_none_finds_no_demo_kubeconfig(demo_state):
    other = demo_state / "site_config.py"
    other.write_text("c.KubeSpawner.namespace = 'jhub'\n")  # next to a cluster/kubeconfig, but not the demo's
    assert common.kubeconfig_of(args(other)) is None
    assert common.kubeconfig_of(args()) is None
    assert common.kubeconfig_of(args(demo_state / "missing.py")) is None
    (demo_state / "cluster" / "kubeconfig").unlink()
    assert common.kubeconfig_of(args(demo_state / "jupyterhub_config.py")) is None
