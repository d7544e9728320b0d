"""The node agent's container runtime, without containers.

What a container runtime gives a kubelet, done with plain host processes:

* :class:`AddressPool` hands every pod and guest its own loopback address from
  ``127.10.0.0/16`` (Linux routes all of ``127/8`` to ``lo``, so a process
  can bind any of them): the "pod network".
* :class:`Filesystem` maps a workload's paths (``/home/jovyan``) onto host
  directories (a PVC's directory, a per-pod scratch root): in a sandbox
  (:mod:`.isolation`) only for the agent's own look-ups (:func:`find_inside`),
  else also to rewrite argument and environment values; :func:`translate`
  also turns ``0.0.0.0`` binds into the workload's own address.
* :class:`LocalProcess` runs one command as its own process group with its
  output kept in a :class:`LogTail`; :class:`Supervisor` keeps it running as a
  restart policy says (the kubelet's restart loop, systemd's ``Restart=``)
  and follows its readiness probe (:func:`probe_once`).

See :mod:`.nodeagent` for how a Pod or a VM guest is mapped onto these, and
for the honest limits of doing so.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import datetime
import ipaddress
import logging
import os
import posixpath
import random
import re
import shutil
import signal
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..version import MAJOR, MINOR

log = logging.getLogger("localcluster")

#: Pod and guest addresses: loopback, so processes can bind them without privileges.
POD_NETWORK = ipaddress.ip_network("127.10.0.0/16")

#: Where the host's Python environment lives: put first on every PATH, ahead of shims.
HOST_BIN = str(Path(sys.executable).parent)

_ANY_ADDRESS = "0.0.0.0"
_OPTION_VALUE = re.compile(r"^(-[^=]*=)(/.*)$")


class LaunchError(Exception):
    """A process cannot be started yet: ``reason`` is the kubelet's word for it (``CreateContainerConfigError``)."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


# -- addresses -------------------------------------------------------------------


class AddressPool:
    """Unique addresses from ``network``, never handed out twice while held.

    Allocation walks the network round-robin from a random start, so two
    local clusters on one machine rarely collide and a released address is
    not reused soon after (its sockets may linger in TIME_WAIT).
    """

    def __init__(self, network: ipaddress.IPv4Network = POD_NETWORK):
        self._base = int(network.network_address)
        self._size = network.num_addresses
        self._next = random.randrange(self._size)
        self._held: dict[str, str] = {}

    def allocate(self, owner: str) -> str:
        """A free address for ``owner`` (a uid); the same one again if ``owner`` already holds one."""
        for ip, holder in self._held.items():
            if holder == owner:
                return ip
        for _ in range(self._size):
            offset, self._next = self._next, (self._next + 1) % self._size
            if offset & 0xFF in (0, 255):
                continue
            ip = str(ipaddress.ip_address(self._base + offset))
            if ip not in self._held:
                self._held[ip] = owner
                return ip
        raise LaunchError("NetworkNotReady", "the pod network has no free address")

    def release(self, ip: str | None) -> None:
        if ip:
            self._held.pop(ip, None)

    def __contains__(self, ip: str) -> bool:
        """Whether ``ip`` is held."""
        return ip in self._held


# -- filesystem mapping -----------------------------------------------------------


class Filesystem:
    """A workload's view of paths: a root directory plus mounts, each a host directory.

    ``map("/home/jovyan/x")`` is the host path behind a path of the workload:
    the longest mount that holds it wins, anything else lands under ``root``
    (or, with a ``lower`` layer under ``root`` as an overlay has, is found
    in ``lower`` when ``root`` does not hold it: reading as the overlay would,
    whiteouts aside).
    """

    def __init__(self, root: Path, mounts: dict[str, Path] | None = None, lower: Path | None = None):
        self.root = Path(root)
        self.mounts = {self._norm(path): Path(host) for path, host in (mounts or {}).items()}
        self.lower = Path(lower) if lower is not None else None

    @staticmethod
    def _norm(path: str) -> str:
        return posixpath.normpath("/" + path.lstrip("/"))

    def mount_of(self, path: str) -> tuple[str, Path] | None:
        """The (mountPath, host dir) holding ``path``, longest first; None if no mount does."""
        path = self._norm(path)
        for mount in sorted(self.mounts, key=len, reverse=True):
            if path == mount or path.startswith(mount.rstrip("/") + "/"):
                return mount, self.mounts[mount]
        return None

    def map(self, path: str) -> Path:
        """The host path for the workload's absolute ``path``."""
        path = self._norm(path)
        found = self.mount_of(path)
        if found is None:
            upper = self.root / path.lstrip("/")
            if self.lower is not None and not os.path.lexists(upper) and os.path.lexists(self.lower / path.lstrip("/")):
                return self.lower / path.lstrip("/")
            return upper
        mount, host = found
        rest = path[len(mount):].lstrip("/")
        return host / rest if rest else host

    def maps(self, path: str) -> bool:
        """Whether ``path`` means something inside the workload: under a mount, or present in its root."""
        if not path.startswith("/") or path == "/" or "\n" in path:
            return False
        return self.mount_of(path) is not None or os.path.lexists(self.map(path))

    def link_mounts(self) -> None:
        """Make each mount visible inside ``root`` as a symlink to its host directory.

        A mount nested in another mount, or over a directory that already
        holds files, is left out (a symlink there would write into the outer
        volume or hide data); :meth:`map` resolves those paths all the same.
        """
        for mount, host in sorted(self.mounts.items()):
            if mount == "/":
                continue
            outer = self.mount_of(str(PurePosixPath(mount).parent))
            if outer is not None:
                log.debug("mount %s nests in %s: not linked in %s", mount, outer[0], self.root)
                continue
            link = self.root / mount.lstrip("/")
            link.parent.mkdir(parents=True, exist_ok=True)
            if link.is_symlink():
                link.unlink()
            elif link.is_dir():
                if any(link.iterdir()):
                    log.debug("mount %s over a non-empty directory: not linked", mount)
                    continue
                link.rmdir()
            link.symlink_to(host, target_is_directory=True)


def translate(value: str, fs: Filesystem | None, ip: str) -> str:
    """Rewrite an argument or environment value for a workload running on the host.

    ``0.0.0.0`` becomes the workload's own address ``ip``; with ``fs`` (no
    sandbox: paths must be mapped), an absolute path that means something
    inside the workload (see :meth:`Filesystem.maps`), alone or as
    ``--option=/path``, becomes its host path.
    """
    value = value.replace(_ANY_ADDRESS, ip)
    if fs is None:
        return value
    if fs.maps(value):
        return str(fs.map(value))
    option = _OPTION_VALUE.match(value)
    if option and fs.maps(option.group(2)):
        return option.group(1) + str(fs.map(option.group(2)))
    return value


def base_env(path: str | None = None) -> dict[str, str]:
    """The environment every process starts from: PATH and LANG, not the host's environment.

    ``path`` (a workload's own PATH) comes first; the host's Python
    environment and PATH follow, so commands an image would have resolve on
    the host.
    """
    parts = [p for p in (path, HOST_BIN, os.environ.get("PATH", os.defpath)) if p]
    return {"PATH": ":".join(parts), "LANG": os.environ.get("LANG") or "C.UTF-8"}


def resolve_command(argv: list[str], fs: Filesystem, env: dict[str, str], cwd: Path) -> list[str]:
    """``argv`` with its program found: inside the workload's filesystem first, then on PATH.

    Raises FileNotFoundError, worded as a container runtime words it, when
    nothing matches.
    """
    if not argv:
        raise FileNotFoundError("no command specified")
    program = argv[0]
    candidates = []
    if program.startswith("/"):
        candidates += [fs.map(program), Path(program)]
    elif "/" in program:
        candidates.append(cwd / program)
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return [str(candidate), *argv[1:]]
    found = shutil.which(PurePosixPath(program).name, path=env.get("PATH"))
    if found is None:
        raise FileNotFoundError(f'exec: "{program}": executable file not found in $PATH')
    return [found, *argv[1:]]


def find_inside(argv: list[str], fs: Filesystem, env: dict[str, str]) -> list[str]:
    """``argv`` with its program found as a sandbox will see it: a path inside, not on the host.

    ``fs`` maps the sandbox's paths to the host's (to look); an absolute
    program must exist there, a bare name is looked up on ``env["PATH"]``
    (each directory as mapped) and becomes that directory's path inside. A
    relative path with a slash is left for the sandbox to find. Raises
    FileNotFoundError, worded as a container runtime words it.
    """
    if not argv:
        raise FileNotFoundError("no command specified")
    program = argv[0]
    if program.startswith("/"):
        if fs.map(program).is_file():
            return list(argv)
    elif "/" in program:
        return list(argv)
    else:
        for directory in (env.get("PATH") or os.defpath).split(":"):
            if directory.startswith("/"):
                candidate = fs.map(posixpath.join(directory, program))
                if candidate.is_file() and os.access(candidate, os.X_OK):
                    return [posixpath.join(directory, program), *argv[1:]]
    raise FileNotFoundError(f'exec: "{program}": executable file not found in $PATH')


@dataclass
class Launch:
    """A fully resolved command: what :meth:`LocalProcess.spawn` runs."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path


# -- processes ------------------------------------------------------------------


class LogTail:
    """The last ``keep`` lines of a process's output, kept in a file.

    Lines are appended as they come; the file is cut back to the last
    ``keep`` lines whenever it has grown to twice that. With a ``previous``
    path, each run has a file of its own, as a container runtime keeps one
    log per container instance: :meth:`rotate` (called before a restart)
    moves the finished run's file there. Without one, runs follow each other
    in one file, as in a journal. While a process is writing (between
    :meth:`begin` and :meth:`end`), :meth:`follow` hands out a queue of its
    new lines, ended by None (``kubectl logs -f``).
    """

    def __init__(self, path: Path, keep: int = 200, previous: Path | None = None):
        self.path = Path(path)
        self.previous = Path(previous) if previous is not None else None
        self.keep = keep
        self.lines: deque[str] = deque(maxlen=keep)
        self._written = 0
        self.streaming = False
        self._followers: set[asyncio.Queue] = set()
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, line: str) -> None:
        line = line.rstrip("\n")
        self.lines.append(line)
        for follower in self._followers:
            follower.put_nowait(line)
        if self._written >= 2 * self.keep:
            self.path.write_text("".join(f"{kept}\n" for kept in self.lines))
            self._written = len(self.lines)
            return
        with self.path.open("a") as f:
            f.write(line + "\n")
        self._written += 1

    def text(self) -> str:
        return "\n".join(self.lines)

    def rotate(self) -> None:
        """A new run starts: keep the last run's file as ``previous`` and start an empty one (no-op without ``previous``)."""
        if self.previous is None:
            return
        if self.path.exists():
            self.path.replace(self.previous)
        self.lines.clear()
        self._written = 0

    def begin(self) -> None:
        """A process is writing here now."""
        self.streaming = True

    def end(self) -> None:
        """The process's output ended: every follower gets None."""
        self.streaming = False
        for follower in self._followers:
            follower.put_nowait(None)
        self._followers.clear()

    def follow(self) -> asyncio.Queue | None:
        """A queue receiving each new line, then None when the output ends; None if no process is writing."""
        if not self.streaming:
            return None
        queue: asyncio.Queue = asyncio.Queue()
        self._followers.add(queue)
        return queue

    def unfollow(self, queue: asyncio.Queue) -> None:
        self._followers.discard(queue)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """Ask Linux to kill the child when the thread that started it dies (no orphans after a crash)."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _load_prctl():
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl()


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


class LocalProcess:
    """One command running as its own process group, its output pumped into a :class:`LogTail`.

    Like a container, the group ends with its first process: when that one
    exits, whatever it left behind in its group is killed.
    """

    def __init__(self, proc: asyncio.subprocess.Process, output: LogTail):
        self._proc = proc
        self.pid = proc.pid
        output.begin()
        self._pump = asyncio.create_task(self._read(proc.stdout, output), name=f"pump-{proc.pid}")

    @classmethod
    async def spawn(cls, launch: Launch, output: LogTail) -> LocalProcess:
        """Start ``launch``; raises OSError (FileNotFoundError, PermissionError) if it cannot."""
        proc = await asyncio.create_subprocess_exec(
            *launch.argv,
            env=launch.env,
            cwd=str(launch.cwd),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent if _PRCTL is not None else None,
        )
        return cls(proc, output)

    @staticmethod
    async def _read(stream: asyncio.StreamReader, output: LogTail) -> None:
        pending = b""
        try:
            while chunk := await stream.read(65536):
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    output.write(line.decode(errors="replace"))
            if pending:
                output.write(pending.decode(errors="replace"))
        finally:
            output.end()

    @property
    def running(self) -> bool:
        return self._proc.returncode is None

    async def wait(self) -> int:
        """Wait for the first process to exit; returns its exit code (128+N for signal N, as runtimes report)."""
        code = await self._proc.wait()
        _signal_group(self.pid, signal.SIGKILL)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._pump), 1.0)
        return 128 - code if code < 0 else code

    async def stop(self, grace: float) -> int:
        """SIGTERM the group, SIGKILL it after ``grace`` seconds; returns the exit code."""
        if self.running:
            _signal_group(self.pid, signal.SIGTERM)
            try:
                return await asyncio.wait_for(self.wait(), max(grace, 0.0))
            except TimeoutError:
                _signal_group(self.pid, signal.SIGKILL)
        return await self.wait()


# -- readiness -------------------------------------------------------------------


def probe_port(port, ports: dict[str, int]) -> int | None:
    """A probe's or Service's port: a number, or the name of a declared port."""
    if isinstance(port, int):
        return port
    if isinstance(port, str) and port.isdigit():
        return int(port)
    return ports.get(port)


async def probe_once(probe: dict, host: str, ports: dict[str, int]) -> bool:
    """Run one readiness check (``httpGet`` 2xx/3xx, or ``tcpSocket`` connect) against ``host``.

    Other handlers (``exec``, ``grpc``) count as success: nothing here can run
    them as the kubelet would.
    """
    check = probe.get("httpGet") or probe.get("tcpSocket")
    if check is None:
        return True
    port = probe_port(check.get("port"), ports)
    if port is None:
        return False
    timeout = probe.get("timeoutSeconds") or 1
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(check.get("host") or host, port), timeout)
    except (TimeoutError, OSError):
        return False
    try:
        if "httpGet" not in probe:
            return True
        headers = "".join(f"{h['name']}: {h['value']}\r\n" for h in check.get("httpHeaders") or [])
        request = f"GET {check.get('path') or '/'} HTTP/1.0\r\nHost: {host}:{port}\r\nUser-Agent: kube-probe/{MAJOR}.{MINOR}\r\n{headers}\r\n"
        writer.write(request.encode())
        status_line = await asyncio.wait_for(reader.readline(), timeout)
        parts = status_line.split()
        return len(parts) >= 2 and parts[1].isdigit() and 200 <= int(parts[1]) < 400
    except (TimeoutError, OSError):
        return False
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()



class Readiness:
    """A readiness probe followed over time, as the kubelet's prober worker does.

    ``ready`` turns True after ``successThreshold`` successes in a row and
    False after ``failureThreshold`` failures; ``on_change()`` hears each flip.
    """

    def __init__(self, probe: dict, host: str, ports: dict[str, int], on_change: Callable[[], None]):
        self.probe = probe
        self.host = host
        self.ports = ports
        self._on_change = on_change
        self.ready = False
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self.ready = False
        self._task = asyncio.create_task(self._follow(), name=f"probe-{self.host}")

    async def stop(self) -> None:
        self.ready = False
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _follow(self) -> None:
        probe = self.probe
        need_ok, need_bad = probe.get("successThreshold") or 1, probe.get("failureThreshold") or 3
        ok = bad = 0
        await asyncio.sleep(probe.get("initialDelaySeconds") or 0)
        while True:
            if await probe_once(probe, self.host, self.ports):
                ok, bad = ok + 1, 0
            else:
                ok, bad = 0, bad + 1
            ready = self.ready
            if ok >= need_ok:
                ready = True
            elif bad >= need_bad:
                ready = False
            if ready != self.ready:
                self.ready = ready
                self._on_change()
            await asyncio.sleep(probe.get("periodSeconds") or 10)


# -- supervision -----------------------------------------------------------------

WAITING, RUNNING, EXITED, BACKOFF = "waiting", "running", "exited", "backoff"


class Supervisor:
    """Keeps one process running as a restart policy says: the kubelet's loop for one container.

    ``launch()`` builds the command: it raises :class:`LaunchError` while
    its configuration is missing (retried after ``delay(1)``) and OSError
    when the program cannot be found (a failed start, exit code 128).
    ``policy`` is ``Always``, ``OnFailure`` or ``Never``; ``delay(n)`` is the
    wait before restarting after the ``n``-th quick failure in a row (a run
    longer than ``reset_after`` seconds starts the count again);
    ``max_failures`` gives up after that many (systemd's start limit).
    ``on_change(supervisor, what)`` hears ``"waiting"``, ``"started"``,
    ``"ready"``, ``"exited"`` and ``"backoff"``. With a readiness ``probe`` (checked
    against ``host``), ``ready`` follows it; without one the process is ready
    once started.

    ``exit`` describes the last run (``exitCode``, ``reason``, ``message``,
    ``startedAt``, ``finishedAt``), ``previous`` the run before it. Each
    restart first rotates ``output`` (:meth:`LogTail.rotate`).
    """

    def __init__(
        self,
        name: str,
        launch: Callable[[], Launch],
        output: LogTail,
        *,
        policy: str,
        delay: Callable[[int], float],
        on_change: Callable[[Supervisor, str], None],
        clock: Callable[[], datetime.datetime],
        probe: dict | None = None,
        host: str = "",
        ports: dict[str, int] | None = None,
        max_failures: int | None = None,
        reset_after: float = 60.0,
    ):
        self.name = name
        self._launch = launch
        self.output = output
        self.policy = policy
        self._delay = delay
        self._on_change = on_change
        self._clock = clock
        self.max_failures = max_failures
        self.reset_after = reset_after
        self._readiness = Readiness(probe, host, ports or {}, lambda: on_change(self, "ready")) if probe else None
        self.state = WAITING
        self.reason = "ContainerCreating"
        self.message = ""
        self.process: LocalProcess | None = None
        self.started_at: datetime.datetime | None = None
        self.exit: dict | None = None
        self.previous: dict | None = None
        self.restarts = 0
        self.failures = 0
        self.backoff = 0.0
        self.runs = 0
        self.final = False

    @property
    def ready(self) -> bool:
        if self.state != RUNNING:
            return False
        return self._readiness is None or self._readiness.ready

    def wait(self, reason: str, message: str = "") -> None:
        """Show the process as waiting for ``reason`` (image pulls and the like, before :meth:`run`)."""
        self.state, self.reason, self.message = WAITING, reason, message
        self._on_change(self, "waiting")

    def _set(self, state: str, what: str) -> None:
        self.state, self.reason, self.message = state, "", ""
        self._on_change(self, what)

    async def run(self) -> dict | None:
        """Run until the policy stops restarting; returns the last exit."""
        while True:
            code = await self._attempt()
            if code is None:
                await asyncio.sleep(self._delay(1))
                continue
            quick = self.exit["finishedAt"] - self.exit["startedAt"] < datetime.timedelta(seconds=self.reset_after)
            self.failures = self.failures + 1 if quick else 1
            if not self._restarts(code):
                self.final = True
                self._set(EXITED, "exited")
                return self.exit
            self.backoff = self._delay(self.failures)
            self._set(BACKOFF, "backoff")
            await asyncio.sleep(self.backoff)
            self.previous, self.restarts = self.exit, self.restarts + 1

    def _restarts(self, code: int) -> bool:
        if self.max_failures is not None and code != 0 and self.failures >= self.max_failures:
            return False
        return self.policy == "Always" or (self.policy == "OnFailure" and code != 0)

    async def _attempt(self) -> int | None:
        """Start once and wait for the exit; None when the configuration is not there yet."""
        self.started_at = self._clock()
        try:
            launch = self._launch()
            if self.runs:
                self.output.rotate()  # a new instance: the last run's output becomes the previous one
            self.process = await LocalProcess.spawn(launch, self.output)
        except LaunchError as e:
            self.wait(e.reason, e.message)
            return None
        except OSError as e:
            self.runs += 1
            self.output.write(f"localcluster: cannot start {self.name}: {e}")
            return self._exited(128, "StartError", str(e))
        self.runs += 1
        self._set(RUNNING, "started")
        if self._readiness is not None:
            self._readiness.start()
        try:
            code = await self.process.wait()
        finally:
            if self._readiness is not None:
                await self._readiness.stop()
        return self._exited(code, "Completed" if code == 0 else "Error")

    def _exited(self, code: int, reason: str, message: str = "") -> int:
        self.exit = {"exitCode": code, "reason": reason, "startedAt": self.started_at, "finishedAt": self._clock()}
        if message:
            self.exit["message"] = message
        return code

    async def stop(self, grace: float) -> None:
        """End the process: SIGTERM, then SIGKILL after ``grace`` seconds. Cancel :meth:`run` first."""
        if self._readiness is not None:
            await self._readiness.stop()
        if self.process is not None and self.process.running:
            code = await self.process.stop(grace)
            self._exited(code, "Completed" if code == 0 else "Error")
            self.state = EXITED
