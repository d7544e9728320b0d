"""A throw-away Prometheus server on a loopback port, scraping given targets, for tests of the GPU metrics.

:func:`running_prometheus` starts Debian's ``/usr/bin/prometheus`` (2.42;
``.ci/run`` installs the ``prometheus`` package) with a generated
configuration: one job per target, a 1 second scrape interval,
``honor_labels`` (a dcgm-exporter's ``pod``/``namespace`` labels are kept
as they are, as the GPU operator's ServiceMonitor keeps them), its storage
in a temporary folder, its web port a free one of its own (never the
package's 9090, so a system service that the package may have started does
not matter). It waits until the server is ready and every target has been
scraped up, and stops the server (and deletes the folder) afterwards.

Without the program it raises :class:`Unavailable`: the ``prometheus``
fixture then skips, or fails when ``$CI`` is set, so CI never skips these
tests (as :mod:`tests.support.pgserver` does for PostgreSQL).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlsplit

PROGRAM = "/usr/bin/prometheus"


class Unavailable(Exception):
    """No Prometheus program here."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def config_text(targets: dict[str, str], interval: float = 1.0) -> str:
    """The ``prometheus.yml`` scraping ``targets`` (``{job name: metrics URL}``) every ``interval`` seconds.

    JSON, which is YAML: no YAML writer needed.
    """
    jobs = []
    for job, url in targets.items():
        parts = urlsplit(url)
        jobs.append({
            "job_name": job,
            "scheme": parts.scheme or "http",
            "metrics_path": parts.path or "/metrics",
            "honor_labels": True,
            "static_configs": [{"targets": [parts.netloc]}],
        })
    seconds = f"{interval:g}s"
    return json.dumps({"global": {"scrape_interval": seconds, "evaluation_interval": seconds,
                                  "scrape_timeout": seconds}, "scrape_configs": jobs}, indent=1)


def _get(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.loads(response.read() or b"null")
    except (urllib.error.URLError, OSError, ValueError):
        return None


def _targets_up(base: str, jobs: set[str]) -> bool:
    answer = _get(f"{base}/api/v1/targets?state=active") or {}
    active = (answer.get("data") or {}).get("activeTargets") or []
    up = {t.get("labels", {}).get("job") for t in active if t.get("health") == "up"}
    return jobs <= up


def _ready(base: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/-/ready", timeout=5) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


class Prometheus:
    """One server process (see :func:`running_prometheus`); ``url`` is its base URL."""

    def __init__(self, targets: dict[str, str], *, interval: float = 1.0):
        program = PROGRAM if os.path.exists(PROGRAM) else shutil.which("prometheus")
        if not program:
            raise Unavailable(f"{PROGRAM} is not installed (Debian package prometheus)")
        self.jobs = set(targets)
        self.workdir = Path(tempfile.mkdtemp(prefix="prometheus-"))
        config = self.workdir / "prometheus.yml"
        config.write_text(config_text(targets, interval))
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = self.workdir / "prometheus.log"
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [program, f"--config.file={config}", f"--storage.tsdb.path={self.workdir / 'data'}",
                 f"--web.listen-address=127.0.0.1:{port}"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Block until ``/-/ready`` answers and every target was scraped up; RuntimeError (with the log) otherwise."""
        deadline = time.monotonic() + timeout
        while not (_ready(self.url) and _targets_up(self.url, self.jobs)):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Prometheus did not get ready with every target up: {self.log_path.read_text()[-2000:]}")
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop the server and delete its folder."""
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)


@asynccontextmanager
async def running_prometheus(targets: dict[str, str], *, interval: float = 1.0, timeout: float = 60.0):
    """Yield the base URL (``http://127.0.0.1:<port>``) of a Prometheus scraping ``targets`` (``{job: URL}``).

    Async, as the targets are often served by the caller's own event loop:
    the waits run in a thread. Returns once the server answers ``/-/ready``
    and every job's target has been scraped ``up``. Raises
    :class:`Unavailable` without the program, RuntimeError (with the
    server's log) when it exits or is not ready in ``timeout`` seconds.
    """
    server = Prometheus(targets, interval=interval)
    try:
        await asyncio.to_thread(server.wait_ready, timeout)
        yield server.url
    finally:
        await asyncio.to_thread(server.stop)
