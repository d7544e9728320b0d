"""Filesystems of their own for the node agent's processes: the host side of :mod:`.sandbox`.

On Linux, each Pod container and each VM guest runs in its own mount, PID
and UTS namespaces (see :mod:`.sandbox`; without root, in a user namespace
too, where the kernel allows unprivileged ones): its
``/`` is an overlay whose lower layer is read-only and whose upper layer
takes its writes, and every volume is bind-mounted at its real
``mountPath``. :class:`Layers` names the directories of one such root,
:func:`sandboxed` and :func:`joined` turn a command into the sandbox's
command line, and :func:`check` finds out once whether this host can do it
at all (:class:`~.nodeagent.NodeAgent` falls back to mapping paths when it
cannot, and says so once).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

from .runtime import Launch

#: The sandbox script, run by path with the host's Python (it imports nothing of this package).
SANDBOX = Path(__file__).with_name("sandbox.py")


@dataclass
class Layers:
    """One sandbox root: mounted at ``root``, ``lower`` read-only under ``upper`` (``work``: overlayfs's work directory, on ``upper``'s filesystem)."""

    root: Path
    lower: Path
    upper: Path
    work: Path

    @classmethod
    def under(cls, directory: Path, lower: Path = Path("/"), upper: Path | None = None) -> Layers:
        """Layers kept in ``directory`` (``root``, ``work`` and, unless given, ``upper``)."""
        return cls(directory / "root", lower, upper or directory / "upper", directory / "work")

    def prepare(self, fresh_upper: bool) -> None:
        """Create the directories; with ``fresh_upper`` an empty upper layer (a container's new writable layer)."""
        if fresh_upper:
            shutil.rmtree(self.upper, ignore_errors=True)
        shutil.rmtree(self.work, ignore_errors=True)
        for path in (self.root, self.upper, self.work):
            path.mkdir(parents=True, exist_ok=True)


@dataclass
class Bind:
    """A host path bind-mounted at ``target`` inside a sandbox."""

    source: Path
    target: str
    read_only: bool = False


def _command(spec: dict, path: Path) -> list[str]:
    """The sandbox's command line, its ``spec`` in the file ``path`` (owner-only: it holds the environment; the sandbox deletes it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(spec, f)
    return [sys.executable, "-I", "-S", str(SANDBOX), str(path)]


def sandboxed(launch: Launch, layers: Layers, binds: list[Bind], hostname: str, host_cwd: Path) -> Launch:
    """``launch`` (argv, env and cwd as the sandbox sees them) run in a new sandbox on ``layers``.

    ``launch.argv`` None keeps the sandbox up with nothing in it (a guest
    whose units :func:`joined` run later). The returned Launch runs on the
    host from ``host_cwd``.
    """
    spec = {
        "mode": "run",
        "root": str(layers.root),
        "lower": str(layers.lower),
        "upper": str(layers.upper),
        "work": str(layers.work),
        "hostname": hostname,
        "binds": [{"source": str(b.source), "target": b.target, "readOnly": b.read_only} for b in binds],
        "argv": launch.argv,
        "env": launch.env,
        "cwd": str(launch.cwd),
    }
    return Launch(_command(spec, layers.root.parent / "spec.json"), dict(launch.env), host_cwd)


def joined(pid: int, launch: Launch, host_cwd: Path) -> Launch:
    """``launch`` run inside the running sandbox whose outer process is ``pid``."""
    spec = {"mode": "join", "pid": pid, "argv": launch.argv, "env": launch.env, "cwd": str(launch.cwd)}
    return Launch(_command(spec, host_cwd / f"exec-{uuid.uuid4().hex}.json"), dict(launch.env), host_cwd)


async def check(scratch: Path) -> str | None:
    """Whether sandboxes work here: None if one ran, else why not (one line, for the agent to say once).

    Needs Linux (kernel overlayfs, bind mounts and namespaces) and root, or
    unprivileged user namespaces (``kernel.unprivileged_userns_clone``,
    ``user.max_user_namespaces``); ``scratch`` is a directory the trial may
    use and leaves empty.
    """
    if not sys.platform.startswith("linux"):
        return "not Linux"
    layers = Layers.under(scratch / "sandbox-check")
    layers.prepare(fresh_upper=True)
    trial = sandboxed(Launch(["true"], {"PATH": "/usr/bin:/bin"}, Path("/")), layers, [], "check", scratch)
    try:
        proc = await asyncio.create_subprocess_exec(
            *trial.argv, cwd=str(scratch), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )
        output, _ = await proc.communicate()
    except OSError as e:
        return str(e)
    finally:
        shutil.rmtree(scratch / "sandbox-check", ignore_errors=True)
    if proc.returncode != 0:
        return output.decode(errors="replace").strip().splitlines()[-1] if output.strip() else f"exit code {proc.returncode}"
    return None
