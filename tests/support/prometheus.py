"""A throw-away Prometheus server on a loopback port, scraping given targets, for tests of the GPU metrics.

A thin wrapper of :mod:`localcluster.prometheus` (the demo runs the
same server): :func:`running_prometheus` starts Debian's
``/usr/bin/prometheus`` (2.42; ``.ci/run`` installs the ``prometheus``
package) scraping the given targets every second, its storage in a
temporary folder, waits until it is ready and every target has been
scraped up, and stops it (and deletes the folder) afterwards.

Without the program it raises :class:`Unavailable`: the ``prometheus``
fixture then skips, or fails when ``$CI`` is set, so CI never skips these
tests (as :mod:`tests.support.pgserver` does for PostgreSQL).
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
from contextlib import asynccontextmanager
from pathlib import Path

from localcluster.prometheus import PROGRAM, PrometheusServer, Target, Unavailable, config_text

__all__ = ["PROGRAM", "Prometheus", "Target", "Unavailable", "config_text", "running_prometheus"]


@asynccontextmanager
async def running_prometheus(targets: dict[str, str | Target], *, interval: float = 1.0, timeout: float = 60.0):
    """Yield the base URL (``http://127.0.0.1:<port>``) of a Prometheus scraping ``targets`` (``{job: URL}``).

    Returns once the server answers ``/-/ready`` and every job's target has
    been scraped ``up``. Raises :class:`Unavailable` without the program,
    :class:`~localcluster.prometheus.NotReady` (with the server's
    log) when it exits or is not ready in ``timeout`` seconds.
    """
    server = PrometheusServer(targets, Path(tempfile.mkdtemp(prefix="prometheus-")), interval=interval)
    try:
        await server.start()
        await server.wait_ready(timeout, set(targets))
        yield server.url
    finally:
        await server.stop()
        shutil.rmtree(server.workdir, ignore_errors=True)


class Prometheus:
    """The same server for synchronous fixtures (a local cluster on its own thread, a hub in a subprocess).

    It runs on an event loop of its own, on a thread that lives as long as
    the server (the server dies with the thread that started it:
    ``PR_SET_PDEATHSIG``). Starts at once; :meth:`wait_ready` waits until
    every target was scraped up; :meth:`stop` stops it and deletes its
    folder. Raises :class:`Unavailable` without the program.
    """

    def __init__(self, targets: dict[str, str | Target], *, interval: float = 1.0):
        self.jobs = set(targets)
        self._server = PrometheusServer(targets, Path(tempfile.mkdtemp(prefix="prometheus-")), interval=interval)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="prometheus", daemon=True)
        self._thread.start()
        self.url = self._call(self._server.start())

    def _call(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Block until ``/-/ready`` answers and every target was scraped up; NotReady (with the log) otherwise."""
        self._call(self._server.wait_ready(timeout, self.jobs))

    def stop(self) -> None:
        """Stop the server, its loop and thread, and delete its folder (a second call does nothing)."""
        if self._thread.is_alive():
            self._call(self._server.stop())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()
        shutil.rmtree(self._server.workdir, ignore_errors=True)
