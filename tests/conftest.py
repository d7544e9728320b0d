"""Shared fixtures: a local cluster on a loopback port, its kubeconfig, and clients for it.

Importing this module needs no kubeconfig and no network. ``cluster_thread``
takes the cluster's options through indirect parametrization::

    @pytest.mark.parametrize("cluster_thread", [{"controllers": ()}], indirect=True)

and every fixture built on it (``cluster``, ``kubeconfig``, ``kube_env``,
``api``) follows.
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


@pytest.fixture
def cluster_thread(request, tmp_path):
    """A started :class:`ClusterThread` with its state in ``tmp_path``; options from ``request.param``."""
    from workspacespawner.localcluster import ClusterThread

    options = dict(getattr(request, "param", None) or {})
    thread = ClusterThread(state_dir=tmp_path / "cluster", **options)
    thread.start()
    try:
        yield thread
    finally:
        thread.stop()


@pytest.fixture
def cluster(cluster_thread):
    """The running :class:`LocalCluster` (its store, faults and request log)."""
    return cluster_thread.cluster


@pytest.fixture
def kubeconfig(cluster) -> str:
    """Path of the kubeconfig pointing at the cluster."""
    return str(cluster.kubeconfig)


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
async def api(kubeconfig):
    """A kubernetes_asyncio ``ApiClient`` loaded from the cluster's kubeconfig, closed after the test."""
    from kubernetes_asyncio import client, config

    configuration = client.Configuration()
    await config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    async with client.ApiClient(configuration) as api_client:
        yield api_client


@pytest.fixture
def sync_api(kubeconfig):
    """A synchronous ``kubernetes`` ``ApiClient`` for the cluster, closed after the test."""
    import kubernetes

    api_client = kubernetes.config.new_client_from_config(config_file=kubeconfig)
    try:
        yield api_client
    finally:
        api_client.close()


class RawClient:
    """Plain HTTP against the cluster, for what typed clients cannot send or show (bad bodies, headers, raw Status)."""

    def __init__(self, url: str):
        from tornado.httpclient import AsyncHTTPClient

        self.url = url
        self.http = AsyncHTTPClient(force_instance=True)

    async def request(self, method: str, path: str, body=None, *, content_type: str = "application/json", headers=None):
        """Send a request; returns ``(status code, parsed JSON body or text, response headers)``."""
        import json

        if body is not None and not isinstance(body, (str, bytes)):
            body = json.dumps(body)
        all_headers = {"Content-Type": content_type, **(headers or {})}
        response = await self.http.fetch(
            self.url + path,
            method=method,
            body=body,
            headers=all_headers,
            raise_error=False,
            allow_nonstandard_methods=True,
            request_timeout=30,
        )
        text = response.body.decode() if response.body else ""
        try:
            parsed = json.loads(text) if text else None
        except ValueError:
            parsed = text
        return response.code, parsed, response.headers

    async def watch(self, path: str, *, headers=None):
        """GET a watch URL to its end; returns ``(status code, list of events, response headers)``."""
        import json

        response = await self.http.fetch(self.url + path, headers=headers, raise_error=False, request_timeout=30)
        events = [json.loads(line) for line in response.body.decode().splitlines() if line]
        return response.code, events, response.headers

    def close(self) -> None:
        self.http.close()


@pytest.fixture
async def raw(cluster):
    """A :class:`RawClient` for the cluster's URL."""
    client = RawClient(cluster.url)
    try:
        yield client
    finally:
        client.close()


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
    """An empty :class:`workspacespawner.workspace.audit.AuditLog` in a SQLite file of the test's own.

    tests/unit/test_audit.py runs the log itself on PostgreSQL as well.
    """
    from workspacespawner.workspace.audit import AuditLog

    log = AuditLog.from_url(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    yield log
    log.dispose()


@pytest.fixture(scope="module")
def module_cluster_thread(tmp_path_factory):
    """A started :class:`ClusterThread` for one test module (no golden image); ``.cluster`` is its cluster."""
    from workspacespawner.localcluster import ClusterThread

    thread = ClusterThread(state_dir=tmp_path_factory.mktemp("cluster"))
    thread.start()
    yield thread
    thread.stop()


@pytest.fixture(scope="module")
def module_cluster(module_cluster_thread):
    """The local cluster of :func:`module_cluster_thread`."""
    return module_cluster_thread.cluster


@pytest.fixture(scope="module")
def golden_cluster(tmp_path_factory):
    """A local cluster on its own thread for one test module, holding the demo's golden image (for VM profiles)."""
    from workspacespawner.demo import GOLDEN_FILES, GOLDEN_IMAGE
    from workspacespawner.localcluster import ClusterThread
    from workspacespawner.localcluster.goldenimage import make_golden_image

    thread = ClusterThread(state_dir=tmp_path_factory.mktemp("cluster"))
    cluster = thread.start()
    thread.call(make_golden_image, *GOLDEN_IMAGE, GOLDEN_FILES)
    yield cluster
    thread.stop()
