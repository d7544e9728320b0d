"""LocalCluster: the API server, its store and its controllers, started and stopped as one.

Runs either on the caller's event loop (``await cluster.start()``) or on a
thread of its own (:class:`ClusterThread`), which is what tests and the demo
use so that synchronous clients (the ``kubernetes`` package, ``kubectl`` in a
subprocess) can talk to it while the test's own loop is busy. With
``persist`` its objects outlive it (see :mod:`.persistence`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
import threading
from pathlib import Path

from .attacher import Attacher
from .client import EmbeddedClient
from .faults import FaultInjector, RequestLog
from .kinds import KINDS
from .kubeconfig import write_kubeconfig
from .persistence import STATE_FILE, Persistence
from .store import Store
from .validation import Validator

log = logging.getLogger("localcluster")


class LocalCluster:
    """A Kubernetes API server on loopback with the controllers of a small GPU cluster.

    ``state_dir`` keeps the kubeconfig, PersistentVolume directories and
    process logs (a temporary folder when None). ``port`` 0 picks a free
    port. ``controllers`` names the controllers to run (default: all of
    :data:`CONTROLLERS`); each stays reachable as ``cluster.controllers[name]``
    so tests can switch it off or slow it down; ``cluster.attacher`` (see
    :mod:`.attacher`) records which Pods and VMIs use each claim. ``nodes`` is a list of
    ``{"name", "cpu", "memory", "gpus", "gpu_product", "labels", "taints"}`` dicts, plus the GPU
    kinds of :mod:`.controllers.gpunodes` (``gpu_replicas``, ``gpu_shared_name``, ``gpu_resources``,
    ``mig_gpus``; see :mod:`.controllers.scheduler`, whose ``ECONOMY_NODES`` mixes them); None gives the default demo nodes (a
    CPU node and an 8-GPU node tainted ``nvidia.com/gpu=present:NoSchedule``).
    ``history`` is how many change events the store keeps for watch resume
    (older resourceVersions answer 410 Expired); ``bookmark_interval`` the
    seconds between BOOKMARK events on watches that allow them. ``persist``
    keeps the objects in ``state_dir/objects.json`` across restarts: loaded
    on start, saved while running and on stop (see :mod:`.persistence`;
    Pods, VMIs and Events do not come back).
    """

    def __init__(
        self,
        state_dir: str | os.PathLike | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        controllers: tuple[str, ...] | None = None,
        nodes: list[dict] | None = None,
        volume_binding_mode: str = "Immediate",
        history: int = 2000,
        bookmark_interval: float = 5.0,
        persist: bool = False,
    ):
        self._tmp = None
        if state_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="localcluster-")
            state_dir = self._tmp.name
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.host = host
        self.port = port
        self.nodes = nodes
        self.volume_binding_mode = volume_binding_mode
        self.store = Store(KINDS, Validator(KINDS), history=history)
        #: what the controllers read and write through (see :mod:`.client`)
        self.client = EmbeddedClient(self.store)
        self.bookmark_interval = bookmark_interval
        self.faults = FaultInjector()
        self.requests = RequestLog()
        self.attacher = Attacher(lambda: self.store.clock())
        self.controller_names = controllers
        self.controllers: dict = {}
        self.kubeconfig: Path = self.state_dir / "kubeconfig"
        self.persistence = Persistence(self.store, self.state_dir / STATE_FILE) if persist else None
        self._server = None
        self.url = ""

    async def start(self) -> LocalCluster:
        """Load the saved objects (with ``persist``), listen, write the kubeconfig, start the controllers. Returns self."""
        from .server import serve

        if self.persistence is not None:
            self.persistence.load()
            self.persistence.start()
        self._server, self.port = await serve(self, self.host, self.port)
        self.url = f"http://{self.host}:{self.port}"
        write_kubeconfig(self.kubeconfig, self.url)
        if self.controller_names != ():
            from .controllers import CONTROLLERS

            names = self.controller_names if self.controller_names is not None else tuple(CONTROLLERS)
            for name in names:
                self.controllers[name] = CONTROLLERS[name](self)
        for controller in self.controllers.values():
            await controller.start()
        log.info("local cluster at %s, kubeconfig %s", self.url, self.kubeconfig)
        return self

    async def stop(self) -> None:
        """Stop the controllers (the node agent ends its processes), then the server; with ``persist``, save last."""
        for controller in reversed(list(self.controllers.values())):
            await controller.stop()
        if self._server is not None:
            self._server.stop()
            await self._server.close_all_connections()
            self._server = None
        if self.persistence is not None:
            await self.persistence.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    async def __aenter__(self) -> LocalCluster:
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.stop()


class ClusterThread:
    """Runs a :class:`LocalCluster` on its own thread and event loop.

    ``call(fn, *args)`` runs ``fn(cluster, *args)`` on the cluster's loop and
    returns its result (awaiting it if it is a coroutine): the way for tests
    to reach into the store or flip a controller knob safely. ``cluster``
    is any object with ``start()``/``stop()`` coroutines (the real plane's
    :class:`~.realplane.agents.PlaneAgents`); without it, a
    ``LocalCluster(**kwargs)``.
    """

    def __init__(self, cluster=None, **kwargs):
        self.cluster = cluster if cluster is not None else LocalCluster(**kwargs)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="localcluster", daemon=True)

    def start(self) -> LocalCluster:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.cluster.start(), self.loop).result(timeout=60)
        return self.cluster

    def call(self, fn, *args, timeout: float = 30):
        async def run():
            result = fn(self.cluster, *args)
            if asyncio.iscoroutine(result):
                result = await result
            return result

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout=timeout)

    async def acall(self, fn, *args):
        """Like :meth:`call`, awaited from another event loop without blocking it."""

        async def run():
            result = fn(self.cluster, *args)
            if asyncio.iscoroutine(result):
                result = await result
            return result

        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(run(), self.loop))

    def stop(self) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self.cluster.stop(), self.loop).result(timeout=60)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)
            self.loop.close()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
