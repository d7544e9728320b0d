"""A throw-away Prometheus server on a loopback port, scraping given targets, for tests of the GPU metrics.

A thin wrapper of :mod:`workspacespawner.demoprometheus` (the demo runs the
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

import shutil
import tempfile
from contextlib import asynccontextmanager
from pathlib import Path

from workspacespawner.demoprometheus import PROGRAM, PrometheusServer, Target, Unavailable, config_text

__all__ = ["PROGRAM", "Target", "Unavailable", "config_text", "running_prometheus"]


@asynccontextmanager
async def running_prometheus(targets: dict[str, str | Target], *, interval: float = 1.0, timeout: float = 60.0):
    """Yield the base URL (``http://127.0.0.1:<port>``) of a Prometheus scraping ``targets`` (``{job: URL}``).

    Returns once the server answers ``/-/ready`` and every job's target has
    been scraped ``up``. Raises :class:`Unavailable` without the program,
    :class:`~workspacespawner.demoprometheus.NotReady` (with the server's
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
