"""The real code-server's heartbeat file, read as the idle-GPU pass's workspace extension reads it.

Starts the code-server the local cluster's Pods run (tools/code-server/install.sh)
on a loopback port with its own ``XDG_DATA_HOME`` and checks what
:mod:`workspacespawner.idle.activity` states from its source: ``/healthz``
writes no heartbeat, a page request writes ``$XDG_DATA_HOME/code-server/heartbeat``,
and :func:`workspacespawner.idle.serverext.record_heartbeat` puts that
time into jupyter-server's ``..._last_activity`` setting.
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
from datetime import UTC, datetime

import pytest
from localcluster.ports import free_port

from tests.support.codeserver import real_bin
from workspacespawner.idle import serverext


def get(url: str) -> int:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.status


@pytest.fixture
def code_server(tmp_path):
    bin_dir = real_bin()
    port = free_port()
    data = tmp_path / "data"
    env = {**os.environ, "HOME": str(tmp_path), "XDG_DATA_HOME": str(data), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    proc = subprocess.Popen(
        [str(bin_dir / "code-server"), "--auth", "none", "--bind-addr", f"127.0.0.1:{port}",
         "--disable-telemetry", "--disable-update-check", str(tmp_path)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):  # until it listens (a bounded wait, not a timed assertion)
            try:
                get(f"{url}/healthz")
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail(f"code-server exited with {proc.returncode}")
                time.sleep(0.1)
        yield url, serverext.heartbeat_path({"HOME": str(tmp_path), "XDG_DATA_HOME": str(data)})
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_healthz_writes_no_heartbeat_and_a_request_does(code_server):
    url, beat = code_server
    assert get(f"{url}/healthz") == 200
    assert not beat.exists()
    before = datetime.now(UTC).replace(microsecond=0)
    assert get(f"{url}/") == 200
    for _ in range(300):  # beat() writes without awaiting the file: wait for it, bounded
        if beat.exists():
            break
        time.sleep(0.1)
    settings: dict = {}
    recorded = serverext.record_heartbeat(settings, beat)
    assert recorded is not None and recorded >= before
    assert settings[serverext.SETTING] == recorded
