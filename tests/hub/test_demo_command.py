"""``workspacespawner demo`` as a person runs it: ports, a second instance, the URL, cleaning up.

Covers: a busy port (public, proxy API or hub) named with its option before
anything starts, every busy port in one refusal, and the same port given twice;
Ctrl-C while npm installs the proxy ends the demo and npm; the whole demo in a process
of its own with every port picked free: the URL printed only once the hub
answers there; a second demo in the same folder refusing at once, naming the
first's PID, and changing nothing (the first keeps its kubeconfig, proxy and
hub); the hub killed under the demo: the demo exits non-zero and leaves no
proxy, no hub and no port behind.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from localcluster.codeserver import code_server_bin

from tests.support.paths import REPO
from workspacespawner.demo import main as demo_main
from workspacespawner.demo import port_is_free


def listening() -> socket.socket:
    """A socket listening on a free loopback port: a program holding that port."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s


@pytest.mark.parametrize("option", ["--port", "--proxy-api-port", "--hub-port"])
def test_a_busy_port_is_named_before_anything_starts(tmp_path, capsys, option):
    state = tmp_path / "demo"
    with listening() as busy:
        port = busy.getsockname()[1]
        assert demo_main(["--state-dir", str(state), option, str(port), "--proxy", "python"]) == 1
    err = capsys.readouterr().err
    assert f"port {port} on 127.0.0.1 ({option}) is in use by another program" in err, err
    assert f"{option} 0 for a free one" in err
    assert [p.name for p in state.iterdir()] == ["demo.lock"]  # no cluster, no config, no hub database


def test_every_busy_port_is_named_at_once(tmp_path, capsys):
    """Two programs in the way: both named in one refusal, not one per try."""
    with listening() as public, listening() as hub:
        ports = public.getsockname()[1], hub.getsockname()[1]
        assert demo_main(["--state-dir", str(tmp_path / "demo"), "--port", str(ports[0]), "--hub-port", str(ports[1])]) == 1
    err = capsys.readouterr().err
    assert f"port {ports[0]} on 127.0.0.1 (--port) is in use" in err and f"port {ports[1]} on 127.0.0.1 (--hub-port) is in use" in err, err


def test_ctrl_c_during_the_npm_install_stops_the_demo_and_npm(tmp_path):
    """npm without network hangs for minutes: Ctrl-C ends the demo at once (exit 130), npm's processes with it, and
    nothing tells the person to install npm or to drop an option they never gave."""
    bin_dir, pids = tmp_path / "bin", tmp_path / "npm.pids"
    bin_dir.mkdir()
    (bin_dir / "npm").write_text(f"#!/bin/sh\nsleep 600 &\necho $$ $! > {pids}\nwait\n")
    (bin_dir / "npm").chmod(0o755)
    env = dict(os.environ, PYTHONPATH=str(REPO), PATH=f"{bin_dir}:{os.environ['PATH']}")
    command = [sys.executable, "-m", "workspacespawner.cli", "demo", "--state-dir", str(tmp_path / "demo"),
               "--prometheus", "off", "--port", "0", "--proxy-api-port", "0", "--hub-port", "0", "--dashboard-port", "0"]
    demo = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path)
    said = []
    try:
        for line in demo.stdout:
            said.append(line)
            if "Installing configurable-http-proxy" in line:
                break
        deadline = time.monotonic() + 30
        while not pids.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        demo.send_signal(signal.SIGINT)
        said += demo.stdout.readlines()
        assert demo.wait(60) == 130, "".join(said)
    finally:
        if demo.poll() is None:
            demo.kill()
    npm_pid, child_pid = (int(p) for p in pids.read_text().split())
    deadline = time.monotonic() + 10
    while (alive(npm_pid) or alive(child_pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(npm_pid) and not alive(child_pid), "npm was left running"
    text = "".join(said)
    assert "install npm" not in text and "--proxy python" not in text and "Traceback" not in text, text


def test_the_same_port_twice_is_refused(tmp_path, capsys):
    assert demo_main(["--state-dir", str(tmp_path), "--port", "18765", "--hub-port", "18765"]) == 1
    assert "port 18765 is given twice" in capsys.readouterr().err


def children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is gone, only not yet reaped


def read_url(demo: subprocess.Popen, timeout: float = 240, seen: list[str] | None = None) -> str:
    """The URL the demo prints, checking the hub answers there the moment it is printed (lines before it go to ``seen``)."""
    deadline = time.monotonic() + timeout
    for line in demo.stdout:
        if seen is not None:
            seen.append(line)
        if "JupyterHub at " in line:
            url = line.split("JupyterHub at ", 1)[1].split()[0]
            assert requests.get(f"{url}/hub/api/", timeout=5).status_code == 200
            return url
        assert time.monotonic() < deadline, "no URL printed"
    raise AssertionError(f"the demo exited ({demo.wait()}) without printing a URL")


def files_of(state: Path) -> dict[Path, int]:
    """The demo's state files and their mtimes (ns), but the databases its running hub and ledger write by themselves."""
    return {p: p.stat().st_mtime_ns for p in state.iterdir() if p.is_file() and ".sqlite" not in p.name}


def test_one_demo_per_folder_url_when_answering_and_no_child_left(tmp_path):
    state = tmp_path / "demo"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    command = [sys.executable, "-m", "workspacespawner.cli", "demo", "--state-dir", str(state), "--proxy", "python"]
    free = ["--port", "0", "--proxy-api-port", "0", "--hub-port", "0", "--dashboard-port", "0"]
    log = tmp_path / "demo.log"
    demo = subprocess.Popen([*command, *free], stdout=subprocess.PIPE, stderr=log.open("w"), text=True, env=env, cwd=tmp_path)
    try:
        said: list[str] = []
        url = read_url(demo, seen=said)
        if code_server_bin() is not None:  # code-server behind the Python proxy: the demo says it will not work
            assert any("code-server profiles will show a blank page" in line for line in said), said
        proxy_pid = int((state / "proxy.pid").read_text())
        kubeconfig = (state / "cluster" / "kubeconfig").read_text()
        # the running demo's own databases change on their own (its hub records the activity of the tokens that call
        # it, such as Prometheus's scrape of /hub/metrics every 5 s): every other file must stay as it is
        before = files_of(state)

        second = subprocess.run([*command, *free], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
        assert second.returncode == 1
        assert f"in use by another demo (process {demo.pid}," in second.stderr, second.stderr
        assert "Traceback" not in second.stderr
        assert (state / "cluster" / "kubeconfig").read_text() == kubeconfig
        assert files_of(state) == before
        assert alive(proxy_pid) and requests.get(f"{url}/hub/api/", timeout=5).status_code == 200

        [hub_pid] = [pid for pid in children(demo.pid) if "jupyterhub" in Path(f"/proc/{pid}/cmdline").read_text()]
        os.kill(hub_pid, signal.SIGKILL)  # the hub dies; its proxy would be an orphan
        assert demo.wait(90) == 1
        assert not alive(proxy_pid) and not alive(hub_pid)
        assert port_is_free(int(url.rsplit(":", 1)[1]))
        # the terminal a person watches: no line per scrape of the demo's Prometheus (every 5 s), no proxy error
        # from asking through the proxy before the hub had its route
        terminal = log.read_text()
        assert "/hub/api/" in terminal or "JupyterHub" in terminal  # the hub's log is there
        assert not [line for line in terminal.splitlines() if "200 GET" in line and "/metrics " in line], terminal[-3000:]
        assert "404 GET /hub/api/" not in terminal
    finally:
        if demo.poll() is None:
            demo.send_signal(signal.SIGINT)
            demo.wait(60)
