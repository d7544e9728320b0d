"""Shared fixtures of the product's tests: the control planes, kubespawner's clients, databases, the audit log.

The local cluster's own fixtures (``cluster_thread``, ``cluster``,
``kubeconfig``, ``api``, ``sync_api``, ``raw``, ``module_cluster``) come from
its pytest plugin, :mod:`localcluster.pytest_plugin`, loaded because the
distribution is installed. Importing this module needs no kubeconfig and no
network.
"""

from __future__ import annotations

import re

import pytest


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "embedded_only(reason): needs what only the embedded cluster has (a fault knob, its store); "
        "runs on the embedded control plane only",
    )


_REAL_PARAMETER = re.compile(r"\[(?:[^\]]*-)?real(?:-[^\]]*)?\]$")


def on_the_real_plane(nodeid: str) -> bool:
    """Whether the test ``nodeid`` runs on the real control plane (tests/support/planes.py): its ``control_plane``
    parameter is ``real``, or its module is one of the real tier's."""
    path = nodeid.split("::", 1)[0]
    return bool(_REAL_PARAMETER.search(nodeid)) or "/realplane/" in path or path.endswith("_real.py")


def pytest_xdist_make_scheduler(config, log):
    """With pytest-xdist's ``--dist loadgroup`` (what .ci/run runs): a module's tests stay on one worker, so its
    module-scoped cluster and hub start once, and every real-control-plane test goes to one worker, so one real
    plane runs at a time (each is an etcd, a kube-apiserver, a controller-manager and a scheduler).

    A scheduler of our own: xdist 3.8's ``loadgroup`` does not group under pytest 9 (its nodeid suffix is lost)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleOrRealPlane(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "real-control-plane" if on_the_real_plane(nodeid) else nodeid.split("::", 1)[0]

    return ModuleOrRealPlane(config, log)


def pytest_generate_tests(metafunc):
    """Tests built on ``control_plane`` run once per plane (tests/support/planes.py), ``embedded_only`` ones once."""
    if "control_plane" in metafunc.fixturenames:
        from tests.support.planes import PLANES

        planes = ("embedded",) if metafunc.definition.get_closest_marker("embedded_only") else PLANES
        metafunc.parametrize("control_plane", planes, indirect=True, scope="module")


@pytest.fixture(scope="module")
def control_plane(request) -> str:
    """``embedded`` or ``real`` (skipped unless the real tier is asked for): see tests/support/planes.py."""
    plane = getattr(request, "param", "embedded")
    if plane == "real":
        from tests.support.planes import skip_unless_real

        skip_unless_real()
    return plane


def _reset_kubernetes_clients() -> None:
    """Forget kubespawner's loaded config and shared clients, and kubernetes_asyncio's default configuration."""
    from kubernetes_asyncio.client import Configuration
    from kubespawner import clients

    clients.load_config.cache_clear()
    clients._client_cache.clear()
    Configuration.set_default(None)


@pytest.fixture
def kube_env(kubeconfig, monkeypatch):
    """``KUBECONFIG`` set to the cluster's kubeconfig, with kubespawner's caches reset before and after."""
    from kubernetes_asyncio.config import kube_config

    monkeypatch.setenv("KUBECONFIG", kubeconfig)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    # kubernetes_asyncio reads $KUBECONFIG once, at import
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", kubeconfig)
    _reset_kubernetes_clients()
    try:
        yield kubeconfig
    finally:
        _reset_kubernetes_clients()


@pytest.fixture
async def kube_objects(api):
    """A :class:`workspacespawner.k8s.api.Kube` (plain-dict access to every kind) on the test's cluster."""
    from kubernetes_asyncio import client

    from workspacespawner.k8s.api import Kube

    return Kube(client.CoreV1Api(api), client.CustomObjectsApi(api))


@pytest.fixture(scope="session")
def postgres_server():
    """The URL of a PostgreSQL server for this run (tests/support/pgserver.py).

    Skips without the server programs or the psycopg driver; with ``$CI``
    set that is an error instead, so CI never skips a PostgreSQL test.
    """
    import os

    from tests.support.pgserver import Unavailable, postgres_url

    try:
        with postgres_url() as url:
            yield url
    except Unavailable as e:
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL is required in CI ($CI is set): {e}", pytrace=False)
        pytest.skip(str(e))


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request, tmp_path):
    """A fresh, empty database for the ledger and audit log: a SQLite file, or a new database on ``postgres_server``."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    from tests.support.pgserver import fresh_database

    return fresh_database(request.getfixturevalue("postgres_server"), f"ledger_{abs(hash(request.node.nodeid)) % 10**8}")


@pytest.fixture
def audit_log(tmp_path):
    """An empty :class:`workspacespawner.lifecycle.audit.AuditLog` in a SQLite file of the test's own.

    tests/unit/test_audit.py runs the log itself on PostgreSQL as well.
    """
    from workspacespawner.lifecycle.audit import AuditLog

    log = AuditLog.from_url(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    yield log
    log.dispose()


@pytest.fixture(scope="module")
def golden_cluster(tmp_path_factory):
    """A local cluster on its own thread for one test module, holding the demo's golden image (for VM profiles)."""
    from localcluster.goldenimage import make_golden_image

    from localcluster import ClusterThread
    from workspacespawner.demo import GOLDEN_FILES, GOLDEN_IMAGE

    thread = ClusterThread(state_dir=tmp_path_factory.mktemp("cluster"))
    cluster = thread.start()
    thread.call(make_golden_image, *GOLDEN_IMAGE, GOLDEN_FILES)
    yield cluster
    thread.stop()
