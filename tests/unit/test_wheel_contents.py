"""The product's wheel, what a hub image installs: the spawner and its services, no local cluster, no tests.

Builds the wheel from the checkout (setuptools, no network, no dependencies)
and reads its file list and its metadata's requirements.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: What only the local cluster or the tests need: never a requirement of the hub's package.
NOT_FOR_THE_HUB = {"kubernetes-validate", "jsonschema", "jsonpatch", "yarl", "cryptography", "pytest", "playwright", "kubernetes"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    pytest.importorskip("setuptools")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(ROOT)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (built,) = out.glob("workspacespawner-*.whl")
    return zipfile.ZipFile(built)


def test_the_wheel_holds_the_product_only(wheel):
    tops = {name.split("/", 1)[0] for name in wheel.namelist() if not name.endswith("/")}
    assert "workspacespawner" in tops
    assert not {top for top in tops if top.startswith("localcluster")}, tops
    assert not [name for name in wheel.namelist() if name.startswith(("tests/", "workspacespawner/localcluster"))]
    assert "workspacespawner/spawnpage/templates/spawn.html" in wheel.namelist() or any(
        name.startswith("workspacespawner/spawnpage/templates/") for name in wheel.namelist()
    )


def test_the_wheel_requires_nothing_only_the_local_cluster_or_the_tests_need(wheel):
    (metadata,) = [name for name in wheel.namelist() if name.endswith(".dist-info/METADATA")]
    requires = [line.split(":", 1)[1].strip() for line in wheel.read(metadata).decode().splitlines()
                if line.startswith("Requires-Dist:")]
    always = {_name(r) for r in requires if "extra ==" not in r}
    assert "jupyterhub-kubespawner" in always and "kubernetes-asyncio" in always
    assert not always & NOT_FOR_THE_HUB, sorted(always & NOT_FOR_THE_HUB)


def _name(requirement: str) -> str:
    """The normalized project name at the start of a ``Requires-Dist`` value."""
    import re

    return re.split(r"[\s<>=!~;\[(]", requirement, maxsplit=1)[0].lower().replace("_", "-")
