"""The README and the operator's tutorial keep their promises: the two commands first in a README of at most 200
lines, a safe-name example the spawner agrees with, and prerequisites naming the KubeVirt feature gate the default
VM home needs. (The configuration reference is generated: tests/unit/test_docs_reference.py.)"""


from tests.support.paths import REPO

README = REPO / "README.md"
#: The operator's tutorial: deploying on zero-to-jupyterhub with KubeVirt and CDI.
OPERATOR = REPO / "docs" / "source" / "tutorials" / "operator-z2jh.md"


def test_readme_is_at_most_200_lines():
    assert len(README.read_text().splitlines()) <= 200, "the README is the entry point; the rest goes into docs/"


def test_readme_starts_with_demo_and_test_commands():
    block = README.read_text().split("```bash", 1)[1].split("```", 1)[0]
    commands = [line for line in block.splitlines() if line and not line.startswith("#")]
    assert commands[0].endswith("workspacespawner demo")
    assert "pytest" in commands[1]


async def test_the_safe_name_example_is_what_the_spawner_names(kube_env, tmp_path, monkeypatch):
    """The operator tutorial's ``<user>`` example: the name as JupyterHub stores it (normalized: lowercased), slugged by the spawner.

    Run from a scratch folder: the spawner's default quota ledger is a SQLite file next to the (absent) config file,
    which the hub's start-up would make; it must not land in the checkout.
    """
    monkeypatch.chdir(tmp_path)
    import re

    from jupyterhub.auth import Authenticator

    from workspacespawner.spawner import WorkspaceSpawner

    found = re.search(r"`<user>` is kubespawner's safe form of the name: `([^`]+)` gives\s+`([^`]+)`", OPERATOR.read_text())
    assert found, "the operator tutorial's safe-name example is gone"
    typed, safe = found.groups()
    spawner = WorkspaceSpawner(_mock=True)
    spawner.user.name = Authenticator().normalize_username(typed)  # what the hub does with the name typed at login
    assert spawner._expand_user_properties("home-{user_server}") == f"home-{safe}"


def test_prerequisites_name_the_feature_gate_of_the_default_vm_home():
    from workspacespawner.backends.vm.manifests import VIRTIOFS_FEATURE_GATE
    from workspacespawner.backends.vm.settings import VMTraits

    text = OPERATOR.read_text()
    prerequisites = text[text.index("## Prerequisites"):text.index("## Install")]
    assert VMTraits().vm_home_via == "virtiofs"
    assert f"`{VIRTIOFS_FEATURE_GATE}`" in prerequisites
    assert "live-migrate" in prerequisites and 'vm_home_via = "disk"' in prerequisites
    assert VIRTIOFS_FEATURE_GATE in VMTraits.class_traits()["vm_home_via"].help
