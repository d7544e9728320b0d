"""localcluster.realplane.netns: components with fixed ports, each in a network namespace of its own, reached and
reaching out through relays.

Two copies of one server on the same fixed port run side by side (each in its own namespace), each answers through
its own relay on a free port of the machine, and each dials a server outside at its own address. Skipped where
this machine grants no network namespace.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from localcluster.realplane import netns

pytestmark = pytest.mark.skipif(not netns.available(), reason="this machine grants no network namespace (unshare --net)")

FIXED = 18443

#: Answers GET / with its name and, at /outside, with what it read from the server outside (127.0.0.1:<port>).
SERVER = textwrap.dedent("""
    import sys, urllib.request
    from http.server import BaseHTTPRequestHandler, HTTPServer
    name, fixed, outside = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path == "/outside":
                body = urllib.request.urlopen(f"http://127.0.0.1:{outside}/", timeout=10).read()
            else:
                body = name.encode()
            self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
            self.wfile.write(body)
        def log_message(self, *args):
            pass
    HTTPServer(("0.0.0.0", fixed), H).serve_forever()
""")


@pytest.fixture
def outside():
    class Hello(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "7")
            self.end_headers()
            self.wfile.write(b"outside")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


def get(port: int, path: str = "/", timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10).read().decode()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_two_copies_on_one_fixed_port_each_reached_and_reaching_out(tmp_path, outside):
    procs, relays = [], []
    try:
        for name in ("one", "two"):
            dial_sock, serve_sock = tmp_path / f"{name}-dial.sock", tmp_path / f"{name}-serve.sock"
            relays.append(netns.Relay(dial_sock, outside).start())  # the component's dials, to the outside server
            command = netns.isolated([sys.executable, "-c", SERVER, name, str(FIXED), str(outside)],
                                     dial={outside: dial_sock}, serve={FIXED: serve_sock})
            procs.append(subprocess.Popen(command))
            deadline = time.monotonic() + 30
            while not serve_sock.exists():
                assert time.monotonic() < deadline and procs[-1].poll() is None, "the namespace never served"
                time.sleep(0.1)
            relays.append(netns.Relay(0, serve_sock).start())  # the machine's way in
        one, two = relays[1].port, relays[3].port
        assert (get(one), get(two)) == ("one", "two")
        assert get(one, "/outside") == get(two, "/outside") == "outside"
        # nothing listens on the fixed port out here: the copies have it to themselves
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", FIXED)) != 0
        children = [int(c) for p in procs for c in Path(f"/proc/{p.pid}/task/{p.pid}/children").read_text().split()]
        assert len(children) == 2
    finally:
        for p in procs:
            p.terminate()
        codes = [p.wait(30) for p in procs]
        for r in relays:
            r.close()
    assert codes == [128 + 15, 128 + 15]  # SIGTERM passed on; the component's end is the namespace's exit code
    assert not [c for c in children if Path(f"/proc/{c}").exists()]


def test_bound_folders_are_seen_inside_only(tmp_path):
    """A component reading a fixed path (cdi-controller's /var/run/cdi/token/keys) sees the plane's folder there;
    the machine's /run is left as it was, and a second copy sees its own folder."""
    seen = []
    for name in ("one", "two"):
        run = tmp_path / name / "run"
        (run / "cdi" / "token" / "keys").mkdir(parents=True)
        (run / "cdi" / "token" / "keys" / "id_rsa.pub").write_text(name)
        command = netns.isolated([sys.executable, "-c", "print(open('/var/run/cdi/token/keys/id_rsa.pub').read())"],
                                 dial={}, serve={}, bind={"/run": run})
        seen.append(subprocess.run(command, capture_output=True, text=True, timeout=30, check=True).stdout.strip())
    assert seen == ["one", "two"]
    assert not Path("/run/cdi/token/keys/id_rsa.pub").exists()


def test_a_deep_state_folder_still_gives_sockets_a_path_short_enough(tmp_path):
    """A Unix socket's path holds at most 107 bytes: a plane in a deep folder (pytest's, under xdist, was one) gets
    its sockets' folder in the temporary folder instead, one per state folder; a shallow one keeps its own."""
    from types import SimpleNamespace

    deep = [tmp_path / ("d" * 60) / name for name in ("one", "two")]
    folders = [netns.sockets_dir(SimpleNamespace(state_dir=d)) for d in deep]
    assert folders[0] != folders[1] and all(f.is_dir() for f in folders)
    for folder in folders:
        path = folder / "cdi-apiserver-serve.sock"
        assert len(str(path)) <= netns.MAX_SOCKET_PATH
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(str(path))  # what failed with "AF_UNIX path too long"
        path.unlink()
        folder.rmdir()
    shallow = Path(tempfile.mkdtemp(prefix="p", dir="/tmp"))
    try:
        assert netns.sockets_dir(SimpleNamespace(state_dir=shallow)) == shallow.resolve() / "sockets"
    finally:
        shutil.rmtree(shallow)
