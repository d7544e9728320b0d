"""A component with fixed listen ports, run in a network namespace of its own and joined to the plane by relays.

Some components listen on ports their code fixes: CDI's ``cdi-apiserver``
serves on ``0.0.0.0:8443`` and ``cdi-controller``'s controller-runtime
manager serves metrics on ``:8080``, with no flag to move them. Two planes on
one machine (CI's test workers, a demo beside a test run) would fight over
those ports, and the component would listen on every address of the machine.
In its own network namespace (``unshare --net``, which holds only a loopback
device) each copy has the ports to itself and reaches nothing.

The namespace is joined to the plane through Unix sockets, which a network
namespace does not separate (they are files):

* ``dial``: the component dials the plane's kube-apiserver at
  ``127.0.0.1:<port>``, the address in its kubeconfig. Inside, :func:`main`
  listens on that same port and relays each connection to a Unix socket;
  outside, the plane's :class:`Relay` takes it from that socket to the real
  ``127.0.0.1:<port>``.
* ``serve``: the API server calls the component (its webhooks, its
  aggregated API). Inside, :func:`main` listens on a Unix socket and relays
  to the component's fixed port; outside, a :class:`Relay` listens on a free
  port of the machine and relays to that socket. The plane names that port in
  the webhook configurations.

Some components also read files at paths their code fixes (cdi-controller
its token keys under ``/var/run/cdi/token/keys``, where its Deployment
mounts a Secret). ``bind`` gives such a component a folder of the plane's
own at that path, in a mount namespace of its own (``unshare --mount``,
private propagation): nothing of the machine's changes, and two planes do not
see each other's files.

:func:`isolated` gives the command line: ``unshare --net`` running this
module (``python -m localcluster.realplane.netns``), which brings the
loopback device up, starts the inside relays, runs the component as its
child, passes on SIGTERM and SIGINT, and exits with the component's code.
It needs the right to make a network namespace (root, or a user namespace);
:func:`available` says whether this machine grants it.

Test infrastructure: not imported by the product.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import logging
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

log = logging.getLogger(__name__)

#: Bytes read from one side of a relayed connection at a time.
CHUNK = 65536
#: ioctl numbers and the flag that bring a network device up (linux/sockios.h, linux/if.h).
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1


def available() -> bool:
    """Whether this process may run a command in a new network namespace."""
    try:
        done = subprocess.run(["unshare", "--net", "true"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def isolated(command: Sequence[str], *, dial: dict[int, Path], serve: dict[int, Path],
             bind: dict[str, Path] | None = None) -> list[str]:
    """The command line that runs ``command`` in a network namespace of its own.

    ``dial``: ports of 127.0.0.1 outside that the component dials, each with
    the Unix socket a :class:`Relay` outside serves for it; ``serve``: the
    component's own ports, each with the Unix socket to serve them on;
    ``bind``: folders the component sees at other paths (``{path inside:
    folder outside}``, in a mount namespace of its own; the path must exist).
    """
    args = ["unshare", "--net", *(["--mount"] if bind else []), sys.executable, "-m", "localcluster.realplane.netns"]
    args += [f"--dial={port}={path}" for port, path in dial.items()]
    args += [f"--serve={port}={path}" for port, path in serve.items()]
    args += [f"--bind={inside}={outside}" for inside, outside in (bind or {}).items()]
    return [*args, "--", *command]


#: The longest path a Unix socket may have (``sun_path`` holds 108 bytes with its terminating NUL).
MAX_SOCKET_PATH = 107
#: Room left for a socket's own name in :func:`sockets_dir` (``cdi-apiserver-serve.sock`` and the like).
SOCKET_NAME_ROOM = 32


def sockets_dir(plane) -> Path:
    """The folder of ``plane``'s relay sockets (made on first use): ``sockets`` in its state folder, or, where that
    path leaves too little room for a socket's name (a deep state folder), a folder of its own in the temporary
    folder named by a hash of the state folder's path, so that two planes never share one."""
    state = Path(plane.state_dir).resolve()
    folder = state / "sockets"
    if len(os.fsencode(folder)) + 1 + SOCKET_NAME_ROOM > MAX_SOCKET_PATH:
        digest = hashlib.sha256(os.fsencode(state)).hexdigest()[:16]
        folder = Path(tempfile.gettempdir()) / f"localcluster-sockets-{digest}"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def apiserver_dial(plane, component: str) -> tuple[int, Path, Relay]:
    """A started :class:`Relay` by which ``component`` inside its namespace dials ``plane``'s kube-apiserver:
    ``(the API server's port, the relay's Unix socket, the relay)``, for :func:`isolated`'s ``dial``."""
    port = plane.ports["apiserver"]
    path = sockets_dir(plane) / f"{component}-dial.sock"
    return port, path, Relay(path, port).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(CHUNK):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


class Relay:
    """Accepts connections on ``listen`` and joins each to a new connection to ``target``, in threads.

    Each address is a Unix socket's :class:`~pathlib.Path` or a port of
    127.0.0.1 (an ``int``; ``0`` picks a free one, :attr:`port` tells which).
    A connection ``target`` refuses is closed at once, as the target's own
    refusal would be.
    """

    def __init__(self, listen: Path | int, target: Path | int):
        self.target = target
        if isinstance(listen, Path):
            listen.unlink(missing_ok=True)
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.bind(str(listen))
        else:
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.sock.bind(("127.0.0.1", listen))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1] if not isinstance(listen, Path) else None
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name=f"relay-{listen}", daemon=True)

    def start(self) -> Relay:
        self._thread.start()
        return self

    def _connect(self) -> socket.socket:
        if isinstance(self.target, Path):
            out = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            out.connect(str(self.target))
        else:
            out = socket.create_connection(("127.0.0.1", self.target), timeout=10)
            out.settimeout(None)
        return out

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._join, args=(conn,), daemon=True).start()

    def _join(self, conn: socket.socket) -> None:
        try:
            out = self._connect()
        except OSError as e:
            log.debug("relay to %s refused: %s", self.target, e)
            conn.close()
            return
        back = threading.Thread(target=_pump, args=(out, conn), daemon=True)
        back.start()
        _pump(conn, out)
        back.join()
        conn.close()
        out.close()

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


def loopback_up() -> None:
    """Bring the namespace's loopback device up (a new network namespace starts with it down)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(s, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | IFF_UP))


def _pair(text: str) -> tuple[int, Path]:
    port, _, path = text.partition("=")
    return int(port), Path(path)


def _die_with_parent() -> None:  # runs in the child, between fork and exec
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: the component ends with us


def main(argv: Sequence[str] | None = None) -> int:
    """Inside the namespace: loopback up, the relays, then the component until it exits (module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m localcluster.realplane.netns")
    parser.add_argument("--dial", type=_pair, action="append", default=[])
    parser.add_argument("--serve", type=_pair, action="append", default=[])
    parser.add_argument("--bind", type=lambda text: text.split("=", 1), action="append", default=[])
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command to run")
    loopback_up()
    for inside, outside in args.bind:  # only in the mount namespace isolated() asked unshare for
        subprocess.run(["mount", "--bind", outside, inside], check=True)
    relays = [Relay(port, path).start() for port, path in args.dial]
    relays += [Relay(path, port).start() for port, path in args.serve]
    child = subprocess.Popen(command, preexec_fn=_die_with_parent)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda number, _frame: child.send_signal(number))
    code = child.wait()
    for relay in relays:
        relay.close()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
