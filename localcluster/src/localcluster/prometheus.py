"""A Prometheus server on a loopback port for the demo and the tests: Debian's ``prometheus`` package, our config.

:func:`config_text` writes the ``prometheus.yml`` (pure): one scrape job per
target URL, ``honor_labels`` (dcgm-exporter's ``pod``/``namespace`` labels
and the kubelet's ``namespace`` are kept as the exporters set them, as the
GPU operator's ServiceMonitor keeps them), and for a job that needs it a
bearer token read from a file (JupyterHub's ``/hub/metrics`` wants a token
with the ``read:metrics`` scope).

:class:`PrometheusServer` runs the program (``/usr/bin/prometheus``, else
``prometheus`` on ``PATH``; :func:`find_program`) with its storage and log in
a folder of the caller's, its web port a free one of its own (never the
package's 9090, which a system service may hold). The server gets SIGTERM
when the process that started it dies (Linux ``PR_SET_PDEATHSIG``), so a
killed demo or test leaves no Prometheus behind. Everything here is async:
the waits never block the event loop that may be serving the targets.

Imports nothing of the product: the demo and the tests use it alike.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import logging
import os
import shutil
import signal
import sys
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from tornado.httpclient import AsyncHTTPClient, HTTPClientError

from .ports import free_port

log = logging.getLogger("localcluster.prometheus")

#: Where Debian's ``prometheus`` package puts the server.
PROGRAM = "/usr/bin/prometheus"
#: What to tell someone who has no Prometheus.
INSTALL_HINT = "install Debian's prometheus package (sudo apt-get install prometheus)"


class Unavailable(Exception):
    """No Prometheus program here (the message says how to get one)."""


class NotReady(Exception):
    """The server exited, or was not ready (with its targets up) in time; the message ends with its log's tail."""


@dataclass(frozen=True)
class Target:
    """One scrape job: ``url`` of its metrics page (``http://127.0.0.1:8081/hub/metrics``) and, when the page needs one,
    ``bearer_token_file``, a file holding the token Prometheus sends (``Authorization: Bearer ...``)."""

    url: str
    bearer_token_file: Path | None = None


def find_program() -> str | None:
    """The Prometheus server's path: :data:`PROGRAM` when it exists, else ``prometheus`` on ``PATH``; None without one."""
    return PROGRAM if os.path.exists(PROGRAM) else shutil.which("prometheus")


def _seconds(value: float) -> str:
    """Prometheus's duration text for ``value`` seconds: whole milliseconds (``5s``, ``1500ms``)."""
    millis = round(value * 1000)
    return f"{millis // 1000}s" if millis % 1000 == 0 else f"{millis}ms"


def config_text(targets: dict[str, str | Target], interval: float = 5.0) -> str:
    """The ``prometheus.yml`` scraping ``targets`` (``{job name: metrics URL or Target}``) every ``interval`` seconds.

    The scrape timeout is the interval (Prometheus refuses a longer one).
    JSON, which is YAML: no YAML writer needed. Raises ValueError for an
    interval under 1 ms, a job name repeated, or a URL without host.
    """
    if interval < 0.001:
        raise ValueError(f"interval must be at least 0.001 seconds, not {interval!r}")
    jobs = []
    for job, target in targets.items():
        target = target if isinstance(target, Target) else Target(target)
        parts = urlsplit(target.url)
        if not parts.netloc:
            raise ValueError(f"the target of job {job!r} is not a URL with a host: {target.url!r}")
        scrape = {
            "job_name": job,
            "scheme": parts.scheme or "http",
            "metrics_path": parts.path or "/metrics",
            "honor_labels": True,
            "static_configs": [{"targets": [parts.netloc]}],
        }
        if target.bearer_token_file is not None:
            scrape["authorization"] = {"type": "Bearer", "credentials_file": str(target.bearer_token_file)}
        jobs.append(scrape)
    seconds = _seconds(interval)
    return json.dumps({"global": {"scrape_interval": seconds, "evaluation_interval": seconds, "scrape_timeout": seconds},
                       "scrape_configs": jobs}, indent=1)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child, between fork and exec
    """Ask Linux to send the child SIGTERM when the thread that started it dies (no Prometheus left behind)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG


class PrometheusServer:
    """One Prometheus process scraping ``targets`` (see :func:`config_text`), its files under ``workdir``.

    ``workdir``: a folder of the caller's (made if missing), which gets
    ``prometheus.yml``, ``prometheus.log`` and ``data/`` (the storage; kept
    between runs, so a restarted demo keeps its history). ``port``: the web
    port on 127.0.0.1, 0 for a free one. ``interval``: seconds between
    scrapes. ``program``: the server's path (default :func:`find_program`).
    :attr:`url` is the base URL (``http://127.0.0.1:<port>``) once
    :meth:`start` returns. Raises :class:`Unavailable` without a program.
    """

    def __init__(self, targets: dict[str, str | Target], workdir: Path, *, port: int = 0, interval: float = 5.0,
                 program: str | None = None):
        self.program = program or find_program()
        if not self.program:
            raise Unavailable(f"Prometheus is not installed: {INSTALL_HINT}")
        self.targets = dict(targets)
        self.workdir = Path(workdir)
        self.interval = interval
        self.port = port
        self.url: str | None = None
        self.log_path = self.workdir / "prometheus.log"
        self.process: asyncio.subprocess.Process | None = None

    async def start(self) -> str:
        """Write the config and start the server; its base URL. Does not wait for it (see :meth:`wait_ready`)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "prometheus.yml"
        config.write_text(config_text(self.targets, self.interval))
        port = self.port or free_port()
        with open(self.log_path, "ab") as out:
            self.process = await asyncio.create_subprocess_exec(
                self.program, f"--config.file={config}", f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=asyncio.subprocess.STDOUT,
                preexec_fn=_die_with_parent,
            )
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    def log_tail(self, chars: int = 2000) -> str:
        """The end of the server's log (``""`` when there is none yet)."""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    async def _get(self, http: AsyncHTTPClient, path: str):
        """``(status, JSON or None)`` of ``GET <url><path>``; ``(0, None)`` when nobody answers."""
        try:
            response = await http.fetch(f"{self.url}{path}", raise_error=False, request_timeout=5)
        except (HTTPClientError, OSError):
            return 0, None
        try:
            return response.code, json.loads(response.body or b"null")
        except ValueError:
            return response.code, None

    async def targets_up(self, http: AsyncHTTPClient | None = None) -> set[str]:
        """The job names whose targets were last scraped ``up`` (from ``/api/v1/targets``; empty when it does not answer)."""
        client = http or AsyncHTTPClient()
        _code, answer = await self._get(client, "/api/v1/targets?state=active")
        data = answer.get("data") if isinstance(answer, dict) else None
        active = (data or {}).get("activeTargets") or []
        return {t.get("labels", {}).get("job") for t in active if t.get("health") == "up"}

    async def wait_ready(self, timeout: float = 60.0, jobs: set[str] | None = None) -> None:
        """Return once ``/-/ready`` answers 200 and every job in ``jobs`` (default: none) has been scraped up.

        Prometheus has no event to wait for, so this asks every 0.2 s.
        Raises :class:`NotReady` (with the log's tail) when the server
        exits first or ``timeout`` seconds pass.
        """
        if self.process is None:
            raise NotReady("Prometheus was not started")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        http = AsyncHTTPClient(force_instance=True)
        try:
            while True:
                code, _ = await self._get(http, "/-/ready")
                if code == 200 and (not jobs or jobs <= await self.targets_up(http)):
                    return
                if self.process.returncode is not None:
                    raise NotReady(f"Prometheus exited with code {self.process.returncode}: {self.log_tail()}")
                if loop.time() > deadline:
                    raise NotReady(f"Prometheus was not ready with {sorted(jobs or ())} up in {timeout:g} s: "
                                   f"{self.log_tail()}")
                with suppress(TimeoutError):
                    await asyncio.wait_for(self.process.wait(), 0.2)
        finally:
            http.close()

    async def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the server (it flushes its storage), SIGKILL after ``timeout`` seconds. Nothing if not running."""
        process, self.process = self.process, None
        if process is None or process.returncode is not None:
            return
        with suppress(ProcessLookupError):
            process.terminate()
        try:
            await asyncio.wait_for(process.wait(), timeout)
        except TimeoutError:
            log.warning("Prometheus did not stop in %g s; killing it", timeout)
            with suppress(ProcessLookupError):
                process.kill()
            await process.wait()
