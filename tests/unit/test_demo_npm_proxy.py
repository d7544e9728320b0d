"""The demo's first-run install of npm's configurable-http-proxy (workspacespawner.demo.npm_proxy) on a machine
where npm cannot finish: it is stopped at its time limit, npm's processes with it, and the Python proxy is used."""

from __future__ import annotations

import asyncio
import logging
import os
import time

from workspacespawner.demo import npm_proxy

#: An npm that never finishes (no network: npm retries for minutes), with a child of its own, both PIDs written down.
HANGING_NPM = """#!/bin/sh
sleep 600 &
echo $$ $! > "{pids}"
wait
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


async def test_an_npm_install_that_hangs_is_stopped_and_the_python_proxy_used(tmp_path, monkeypatch, caplog):
    bin_dir, pids = tmp_path / "bin", tmp_path / "npm.pids"
    bin_dir.mkdir()
    (bin_dir / "npm").write_text(HANGING_NPM.format(pids=pids))
    (bin_dir / "npm").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    caplog.set_level(logging.WARNING, logger="workspacespawner.demo")
    assert await asyncio.wait_for(npm_proxy(tmp_path / "state", timeout=2), 60) is None  # a bound, not a hang
    npm_pid, child_pid = (int(p) for p in pids.read_text().split())
    deadline = time.monotonic() + 5
    while (alive(npm_pid) or alive(child_pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(npm_pid) and not alive(child_pid), "npm or a process it started was left running"
    assert "did not install configurable-http-proxy within 2 s" in caplog.text
    assert "--proxy python skips it" in caplog.text
