"""``workspacespawner dashboard`` binds its address before anything slow, so the hub's first request waits instead of
being refused: JupyterHub 5.5 gives a managed service ten one-second tries, and the service's imports, the hub's
config and its caches' first lists took longer than that on CI's busy machine (the hub then exits with "Cannot
connect to workspaces service managed").

The command here loads a config that takes 4 s and names a kubeconfig that is not there: the port takes connections
while the config loads, and the command then exits 1 with one sentence, closing them.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time

from tests.support.hubharness import free_port


def test_the_port_takes_connections_while_the_config_loads_and_closes_them_on_a_failed_start(tmp_path):
    config = tmp_path / "jupyterhub_config.py"
    config.write_text("import time\ntime.sleep(4)\n")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "workspacespawner", "dashboard", "-f", str(config), "--ip", "127.0.0.1",
         "--port", str(port), "--kubeconfig", str(tmp_path / "missing-kubeconfig")],
        stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 3
        while True:
            try:
                conn = socket.create_connection(("127.0.0.1", port), timeout=1)
                break
            except ConnectionRefusedError:
                assert time.monotonic() < deadline, "the port was not bound while the config loaded"
                assert proc.poll() is None, proc.stderr.read()
                time.sleep(0.1)
        with conn:
            assert proc.poll() is None, "the config had not loaded yet"
            conn.settimeout(60)
            conn.sendall(b"GET / HTTP/1.0\r\n\r\n")
            try:  # the failed start closes the waiting connection (a reset: the request was never read)
                assert conn.recv(100) == b""
            except ConnectionResetError:
                pass
        assert proc.wait(timeout=60) == 1
        err = proc.stderr.read()
        last = err.strip().splitlines()[-1]
        assert last.startswith("workspacespawner: ") and "missing-kubeconfig" in last and "Traceback" not in err, err
    finally:
        proc.kill()
        proc.wait()


def test_an_address_in_use_is_one_sentence_naming_it(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "workspacespawner", "dashboard", "--ip", "127.0.0.1", "--port",
                            str(port)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 1
    assert r.stderr.startswith(f"workspacespawner: cannot listen on 127.0.0.1:{port}") and "Traceback" not in r.stderr, r.stderr
