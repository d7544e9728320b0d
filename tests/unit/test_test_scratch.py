"""The suite's disk: a test module's temporary folders go once it passed, and stay for a look when it failed.

One CI run's clusters, hubs and real guests' disks came to about 50 GB under pytest's base temporary folder; the
machine ran out of space half-way (tests/support/scratch.py).
"""

from tests.support.paths import REPO

pytest_plugins = ["pytester"]

MODULE = """
import pytest

@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    path = tmp_path_factory.mktemp("cluster")
    (path / "disk.img").write_bytes(b"x" * 4096)
    yield path
    assert (path / "disk.img").exists(), "the folder went while its fixture was still up"

def test_one(cluster, tmp_path):
    (tmp_path / "mine").write_text("x")

def test_two(cluster):
    assert {OUTCOME}
"""


CONFTEST = """
import pytest

@pytest.fixture(scope="session")
def plane(tmp_path_factory):
    path = tmp_path_factory.mktemp("plane")
    yield path
    assert path.exists(), "the session's folder went while the session ran"
"""

LATE = """
import pytest

@pytest.fixture(scope="module")
def on_plane(request):
    return request.getfixturevalue("plane")  # the session's fixture, first asked for by a module's

def test_{n}(on_plane):
    assert on_plane.exists()
"""


def _run(pytester, monkeypatch, outcome: bool):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_a_late=LATE.format(n="a"), test_z_late=LATE.format(n="z"))
    pytester.makepyfile(test_module=MODULE.replace("{OUTCOME}", repr(outcome)))
    pytester.makepyfile(test_other="def test_other(tmp_path):\n    (tmp_path / 'x').write_text('x')\n")
    # setup.cfg's own settings: the plugin and tmp_path_retention_policy
    pytester.makeini("[pytest]\naddopts = -p tests.support.scratch\ntmp_path_retention_policy = failed\n")
    base = pytester.path / "base"
    result = pytester.runpytest_subprocess(f"--basetemp={base}", "-p", "no:cacheprovider")
    return result, base


def test_a_passing_modules_folders_go_its_module_fixtures_first_and_the_sessions_stay(pytester, monkeypatch):
    result, base = _run(pytester, monkeypatch, True)
    result.assert_outcomes(passed=5)
    assert sorted(p.name for p in base.iterdir() if not p.is_symlink()) == ["plane0"]


def test_a_failing_modules_folders_stay_for_a_look(pytester, monkeypatch):
    result, base = _run(pytester, monkeypatch, False)
    result.assert_outcomes(passed=4, failed=1)
    kept = sorted(p.name for p in base.iterdir() if not p.is_symlink())
    assert kept == ["cluster0", "plane0"], kept  # test_one passed: its tmp_path went (tmp_path_retention_policy)
    assert (base / "cluster0" / "disk.img").exists()


def test_the_suite_runs_with_the_plugin(pytestconfig):
    assert pytestconfig.pluginmanager.has_plugin("tests.support.scratch")
    assert pytestconfig.getini("tmp_path_retention_policy") == "failed"
