"""The README's admin example on the demo: ``workspacespawner disk|retention|orphans -f
.workspacespawner-demo/jupyterhub_config.py`` reach the demo's local cluster without ``KUBECONFIG`` (issue #38, item
17): the commands find the kubeconfig the demo's cluster wrote in its state directory."""

from __future__ import annotations

import pytest

from tests.support import planes
from workspacespawner.cli import main as workspacespawner
from workspacespawner.demo import config_dir, demo_config


@pytest.fixture(scope="module")
def demo_state(tmp_path_factory):
    """A demo state directory: its config, an empty hub database and its running local cluster (in ``cluster/``)."""
    from jupyterhub import orm

    state = tmp_path_factory.mktemp("demo")
    (state / "jupyterhub_config.py").write_text(demo_config(state, config_dir(), port=8000))
    orm.new_session_factory(f"sqlite:///{state / 'jupyterhub.sqlite'}")().close()
    with planes.running("embedded", state / "cluster"):
        yield state


@pytest.mark.parametrize("command", [["disk", "list"], ["retention", "list"], ["orphans"]])
def test_the_admin_commands_find_the_demos_cluster_without_KUBECONFIG(demo_state, command, monkeypatch, capsys):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(demo_state / "home"))  # no ~/.kube/config to fall back on
    monkeypatch.chdir(demo_state.parent)
    code = workspacespawner([*command, "-f", f"{demo_state.name}/jupyterhub_config.py"])  # relative, as in the README
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "kubeconfig" not in err and "KUBECONFIG" not in err
