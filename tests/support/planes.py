"""The two control planes the hub-level tests run on: the embedded cluster, and the real one.

A test module opts in by building its cluster on the ``control_plane``
fixture (see ``tests/conftest.py``): every test of it then runs once per
plane, ``embedded`` always, ``real`` when ``WORKSPACESPAWNER_CONTROL_PLANE=real``
and ``WORKSPACESPAWNER_K8S_BIN`` name the binaries tools/k8s/build.sh built
(skipped otherwise); with ``WORKSPACESPAWNER_KUBEVIRT_BIN`` too (CI sets it),
the real plane runs KubeVirt's own virt-api and virt-controller and CDI's own
cdi-apiserver and cdi-controller (``localcluster.realplane``) in place of our
imitations (:func:`real_kubevirt_bin`). A test that needs what only the embedded cluster has
(a fault knob inside the API server, its store, a node made unreachable)
says so with ``@pytest.mark.embedded_only("why")`` and runs there only.

:func:`running` gives the cluster object tests use either way: a
``LocalCluster`` (embedded) or the real plane's ``PlaneAgents``; both have
``kubeconfig`` (admin), ``client`` (see ``localcluster.client``)
and ``controllers`` (their knobs).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Sequence

PLANES = ("embedded", "real")
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


def real_plane_bin() -> Path | None:
    """The binaries' folder when the real tier is asked for and complete, else None."""
    if os.environ.get("WORKSPACESPAWNER_CONTROL_PLANE") != "real" or not os.environ.get("WORKSPACESPAWNER_K8S_BIN"):
        return None
    bin_dir = Path(os.environ["WORKSPACESPAWNER_K8S_BIN"])
    missing = [b for b in BINARIES if not os.access(bin_dir / b, os.X_OK)]
    if missing:
        pytest.fail(f"WORKSPACESPAWNER_K8S_BIN={bin_dir} lacks {', '.join(missing)}")
    return bin_dir


def real_kubevirt_bin() -> str | None:
    """KubeVirt's and CDI's bin folder for the hub tests' real plane, or None for our imitations of their controllers.

    ``WORKSPACESPAWNER_KUBEVIRT_BIN`` (tools/kubevirt/build.sh; CI sets it):
    every module's real plane runs KubeVirt's and CDI's own components.
    ``WORKSPACESPAWNER_REAL_VIRT=imitation`` keeps ours, to tell a difference
    between them from a fault of the product.
    """
    if os.environ.get("WORKSPACESPAWNER_REAL_VIRT") == "imitation":
        return None
    return os.environ.get("WORKSPACESPAWNER_KUBEVIRT_BIN") or None


def skip_unless_real() -> Path:
    """The binaries' folder, or skip the test with the reason."""
    bin_dir = real_plane_bin()
    if bin_dir is None:
        pytest.skip("real control plane tier: set WORKSPACESPAWNER_CONTROL_PLANE=real and WORKSPACESPAWNER_K8S_BIN")
    return bin_dir


@contextlib.contextmanager
def running(plane: str, state_dir, golden: bool = False, real_golden: Sequence[tuple[str, str, Path, str]] = (), **options):
    """A started cluster on ``plane`` (``embedded`` or ``real``), stopped on exit; with ``golden``, holding
    the demo's golden image (for VM profiles); with ``real_golden``, golden images that are real disks, each
    ``(namespace, name, raw disk image file, PVC size)`` (tools/golden-image's build, which QEMU boots:
    :class:`~localcluster.guestimage.GuestImage`; :func:`tests.support.realguest.golden` gives its tuple).
    The real plane runs KubeVirt's and CDI's own
    components where their binaries are (:func:`real_kubevirt_bin`). Yields the cluster object (see the module
    docstring)."""
    from localcluster import ClusterThread

    if plane == "embedded":
        thread = ClusterThread(state_dir=state_dir, **options)
        stop = thread.stop
        cluster = thread.start()
    else:
        from localcluster.realplane.agents import RealCluster

        kubevirt_bin = real_kubevirt_bin()
        real = RealCluster(state_dir, skip_unless_real(), kubevirt_bin=kubevirt_bin, **options).start()
        thread, stop, cluster = real.thread, real.stop, real.agents
    try:
        if golden:
            from localcluster.goldenimage import make_golden_image

            from workspacespawner.demo import GOLDEN_FILES, GOLDEN_IMAGE

            thread.call(make_golden_image, *GOLDEN_IMAGE, GOLDEN_FILES, timeout=120)
        for namespace, name, disk, size in real_golden:
            from localcluster.goldenimage import make_golden_image

            thread.call(lambda c, namespace=namespace, name=name, disk=disk, size=size: make_golden_image(
                c, namespace, name, {}, size=size, disk_image=disk), timeout=120)
        yield cluster
    finally:
        stop()



def hub_settings(cluster) -> tuple[str, int]:
    """``(extra hub config, start_timeout seconds)`` for a hub on ``cluster``'s plane.

    The real plane's VM starts take more hops (three agents' caches, an
    aggregated API call, a clone by CDI): a start timeout of 150 s instead of
    60, and a longer slow-spawn window (15 s, under the proxy's 20 s request
    timeout), so that a quick failure still answers the spawn request itself,
    long before the start timeout.
    """
    if not getattr(cluster, "real_control_plane", False):
        return "", 60
    return '\nc.JupyterHub.tornado_settings = {"slow_spawn_timeout": 15}\n', 150


def set_node_ready(cluster, node: str, ready: bool) -> None:
    """Mark ``node`` of ``cluster`` Ready, or unreachable (``Ready=Unknown`` and the unreachable taints), through
    its API server: what the embedded scheduler's knob writes, from outside the cluster's thread."""
    import asyncio

    from kubernetes_asyncio import config
    from localcluster.client import ApiServerClient
    from localcluster.controllers.refs import NODES
    from localcluster.controllers.scheduler import set_node_ready as mark

    async def run() -> None:
        api = await config.new_client_from_config(config_file=str(cluster.kubeconfig))
        client = ApiServerClient(api)
        try:
            await client.watch((NODES,))
            await mark(client, node, ready)
        finally:
            await client.close()
            await api.close()

    asyncio.run(run())
