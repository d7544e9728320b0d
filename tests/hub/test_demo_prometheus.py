"""``workspacespawner demo`` with Prometheus: GPU metrics and disk fill end to end, and ``--prometheus off``.

Covers: the demo (a process of its own, every port free) starts Debian's
Prometheus and says where; Prometheus scrapes the hub's ``/hub/metrics``
(with the demo service's ``read:metrics`` token: the hub's own metrics
arrive) and the node agent's dcgm-exporter and kubelet pages (targets up);
alice's GPU workspace's GPU reports the demo's busy reading under her Pod,
the node's free GPUs stay idle; her My workspaces API shows her home's
used bytes equal to what the home's PersistentVolume directory holds after
the test wrote into it; with Prometheus gone the API and the page still
answer, without the fill and with a sentence saying why; the demo's
Prometheus stops with the demo, and when the demo is killed (SIGKILL).
``--prometheus off`` starts none and configures none.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import requests
from localcluster.prometheus import find_program

from tests.hub.test_demo_command import alive, children, read_url
from tests.support.hubharness import core_and_custom, login
from tests.support.paths import REPO
from workspacespawner.core import names
from workspacespawner.dashboard.views.workspaces import NO_DISK_FILL
from workspacespawner.demo import HELD_GPU

JOBS = {"jupyterhub", "dcgm-exporter", "kubelet"}
WRITTEN = 3 * 1024 * 1024


@pytest.fixture
def prometheus_required():
    """Skip without Debian's prometheus, unless $CI is set (then it is an error)."""
    if find_program() is None:
        if os.environ.get("CI"):
            pytest.fail("prometheus is required in CI ($CI is set)", pytrace=False)
        pytest.skip("prometheus is not installed (Debian package prometheus)")


def start_demo(tmp_path: Path, *more: str) -> tuple[subprocess.Popen, Path]:
    state = tmp_path / "demo"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    command = [sys.executable, "-m", "workspacespawner.cli", "demo", "--state-dir", str(state), "--proxy", "python",
               "--port", "0", "--proxy-api-port", "0", "--hub-port", "0", "--dashboard-port", "0", *more]
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env, cwd=tmp_path), state


def stop_demo(demo: subprocess.Popen) -> None:
    if demo.poll() is None:
        demo.send_signal(signal.SIGINT)
        demo.wait(90)


def prometheus_children(demo: subprocess.Popen) -> list[int]:
    return [pid for pid in children(demo.pid) if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].endswith(b"prometheus")]


def wait_until(what, timeout: float, message: str):
    """Poll ``what()`` until it gives something true (returned); AssertionError with ``message`` at the deadline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(message)


def targets_up(prometheus: str) -> set[str]:
    active = requests.get(f"{prometheus}/api/v1/targets?state=active", timeout=10).json()["data"]["activeTargets"]
    return {t["labels"]["job"] for t in active if t["health"] == "up"}


def query(prometheus: str, promql: str) -> list[dict]:
    answer = requests.get(f"{prometheus}/api/v1/query", params={"query": promql}, timeout=10).json()
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def directory_bytes(path: Path) -> int:
    return sum(os.lstat(os.path.join(root, f)).st_size for root, _dirs, files in os.walk(path) for f in files)


def home_disk(url: str, headers: dict) -> dict:
    r = requests.get(f"{url}/services/workspaces/api/workspaces", headers=headers, timeout=60)
    assert r.status_code == 200, r.text
    (server,) = r.json()["servers"]
    (disk,) = [d for d in server["disks"] if d["role"] == "home"]
    return {**disk, "note": r.json()["disk_fill_note"]}


def test_the_demo_shows_gpu_metrics_and_disk_fill_through_its_prometheus(tmp_path, prometheus_required):
    demo, state = start_demo(tmp_path)
    try:
        said: list[str] = []
        url = read_url(demo, seen=said)
        [line] = [s for s in said if s.startswith("Prometheus at ")]
        prometheus = line.split()[2]
        [prometheus_pid] = prometheus_children(demo)
        wait_until(lambda: JOBS <= targets_up(prometheus), 90, f"not every target up: {targets_up(prometheus)}")
        hub_series = wait_until(lambda: query(prometheus, 'count({job="jupyterhub",__name__=~"jupyterhub_.+"})'), 60,
                                "no jupyterhub_* series scraped from the hub")
        assert float(hub_series[0]["value"][1]) > 0

        session = login(SimpleNamespace(url=url), "alice")
        made = session.post(f"{url}/hub/api/users/alice/tokens", headers={"X-XSRFToken": session.cookies.get("_xsrf")},
                            json={"scopes": ["access:services!service=workspaces", "custom:workspaces:read!user",
                                             "read:users!user", "servers!user"], "note": "demo prometheus test"},
                            timeout=30)
        assert made.status_code == 201, made.text
        alice = {"Authorization": f"token {made.json()['token']}"}
        started = requests.post(f"{url}/hub/api/users/alice/server", json={"profile": "jupyterlab-1gpu"}, headers=alice,
                                timeout=60)
        assert started.status_code in (201, 202), started.text
        wait_until(lambda: requests.get(f"{url}/hub/api/users/alice", headers=alice, timeout=30).json()
                   .get("servers", {}).get("", {}).get("ready"), 240, "alice's server never got ready")

        with core_and_custom(SimpleNamespace(kubeconfig=state / "cluster" / "kubeconfig")) as (core, _custom):
            home = home_disk(url, alice)["name"]
            volume = core.read_namespaced_persistent_volume_claim(home, "default").spec.volume_name
            pods = core.list_namespaced_pod("default", label_selector=names.owner_selector("alice")).items
        (pod,) = [p.metadata.name for p in pods if p.status.phase == "Running"]
        directory = state / "cluster" / "volumes" / volume
        (directory / "written-by-the-test.bin").write_bytes(os.urandom(WRITTEN))

        # the kubelet's reading reaches the page a scrape later: until then it may be the one before the write
        def fill_matches():
            disk = home_disk(url, alice)
            return disk if disk["used_bytes"] == directory_bytes(directory) >= WRITTEN else None

        disk = wait_until(fill_matches, 60, f"the home's used bytes never equalled its directory's: {home_disk(url, alice)}")
        assert disk["note"] == "" and disk["used_share"] == round(disk["used_bytes"] / disk["size_bytes"], 4)

        gpus = wait_until(lambda: query(prometheus, f'DCGM_FI_DEV_GPU_UTIL{{pod="{pod}",namespace="default"}}'), 60,
                          f"no GPU reported under alice's Pod {pod}")
        assert [float(g["value"][1]) for g in gpus] == [HELD_GPU.util]
        node = gpus[0]["metric"]["Hostname"]
        free = query(prometheus, f'DCGM_FI_DEV_GPU_UTIL{{Hostname="{node}",pod=""}}')
        assert len(free) == 7 and {float(g["value"][1]) for g in free} == {0.0}

        os.kill(prometheus_pid, signal.SIGKILL)  # Prometheus gone: the page still answers, and says why
        disk = wait_until(lambda: (d := home_disk(url, alice))["note"] and d, 30, "no sentence once Prometheus was gone")
        assert (disk["note"], disk["used_bytes"], disk["used_share"]) == (NO_DISK_FILL, None, None)
        page = session.get(f"{url}/services/workspaces/", timeout=60)
        assert page.status_code == 200 and NO_DISK_FILL in page.text and "Default server" in page.text
    finally:
        stop_demo(demo)
    assert demo.returncode == 0
    assert not alive(prometheus_pid)


def test_prometheus_off_starts_none_and_configures_none(tmp_path):
    demo, state = start_demo(tmp_path, "--prometheus", "off")
    try:
        said: list[str] = []
        read_url(demo, seen=said)
        assert prometheus_children(demo) == []
        assert not any("Prometheus at" in line for line in said), said
        config = (state / "jupyterhub_config.py").read_text()
        assert "prometheus_url" not in config and "demo-prometheus" not in config
    finally:
        stop_demo(demo)
    assert demo.returncode == 0


def test_a_killed_demo_leaves_no_prometheus(tmp_path, prometheus_required):
    demo, _state = start_demo(tmp_path)
    hub_pid = None
    try:
        read_url(demo)
        [prometheus_pid] = prometheus_children(demo)
        [hub_pid] = [pid for pid in children(demo.pid) if b"jupyterhub" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        demo.kill()  # SIGKILL: no finally of the demo's runs
        demo.wait(30)
        wait_until(lambda: not alive(prometheus_pid), 30, "Prometheus outlived the killed demo")
    finally:
        stop_demo(demo)
        if hub_pid is not None:  # the hub runs in a session of its own and outlives a killed demo: stop it (and its proxy)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(hub_pid, signal.SIGTERM)
            deadline = time.monotonic() + 60
            while alive(hub_pid) and time.monotonic() < deadline:
                time.sleep(0.3)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(hub_pid, signal.SIGKILL)
