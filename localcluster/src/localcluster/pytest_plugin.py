"""pytest fixtures for tests against the local cluster, loaded in any suite that has this distribution installed.

A cluster on a loopback port with its state in the test's ``tmp_path``, its
kubeconfig, and clients for it. Importing this module needs no kubeconfig and
no network; the cluster starts only when a test asks for it. ``cluster_thread``
takes the cluster's options through indirect parametrization::

    @pytest.mark.parametrize("cluster_thread", [{"controllers": ()}], indirect=True)

and every fixture built on it (``cluster``, ``kubeconfig``, ``api``,
``sync_api``, ``raw``) follows. A suite's own ``conftest.py`` may override any
of them by name.
"""

from __future__ import annotations

import pytest


@pytest.fixture
def cluster_thread(request, tmp_path):
    """A started :class:`~localcluster.cluster.ClusterThread` with its state in ``tmp_path``; options from
    ``request.param``."""
    from localcluster import ClusterThread

    options = dict(getattr(request, "param", None) or {})
    thread = ClusterThread(state_dir=tmp_path / "cluster", **options)
    thread.start()
    try:
        yield thread
    finally:
        thread.stop()


@pytest.fixture
def cluster(cluster_thread):
    """The running :class:`~localcluster.cluster.LocalCluster` (its store, faults and request log)."""
    return cluster_thread.cluster


@pytest.fixture
def kubeconfig(cluster) -> str:
    """Path of the kubeconfig pointing at the cluster."""
    return str(cluster.kubeconfig)


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
    """A synchronous ``kubernetes`` ``ApiClient`` for the cluster, closed after the test (needs ``kubernetes``)."""
    import kubernetes

    api_client = kubernetes.config.new_client_from_config(config_file=kubeconfig)
    try:
        yield api_client
    finally:
        api_client.close()


@pytest.fixture
async def raw(cluster):
    """A :class:`~localcluster.testing.RawClient` for the cluster's URL."""
    from localcluster.testing import RawClient

    client = RawClient(cluster.url)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="module")
def module_cluster_thread(tmp_path_factory):
    """A started :class:`~localcluster.cluster.ClusterThread` for one test module; ``.cluster`` is its cluster."""
    from localcluster import ClusterThread

    thread = ClusterThread(state_dir=tmp_path_factory.mktemp("cluster"))
    thread.start()
    yield thread
    thread.stop()


@pytest.fixture(scope="module")
def module_cluster(module_cluster_thread):
    """The local cluster of :func:`module_cluster_thread`."""
    return module_cluster_thread.cluster
