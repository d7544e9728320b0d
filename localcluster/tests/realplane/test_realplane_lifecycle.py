"""The RealControlPlane launcher's process handling: a failing start stops
the children already started (no orphans), a clean stop leaves no process,
and the state folder holds the admin kubeconfig and logs, and
``workspacespawner localcluster --control-plane real`` serves a working
KUBECONFIG until SIGTERM.

Runs only with WORKSPACESPAWNER_CONTROL_PLANE=real and WORKSPACESPAWNER_K8S_BIN.
"""

from __future__ import annotations

import os

import pytest


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie counts as gone
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_failed_start_leaves_no_orphans(k8s_bin, tmp_path):
    from localcluster.realplane import ControlPlaneError, RealControlPlane

    plane = RealControlPlane(tmp_path / "bad", k8s_bin, extra_apiserver_args=["--no-such-flag=1"])
    seen: dict[str, int] = {}
    orig = plane._spawn

    def spy(name, args):
        p = orig(name, args)
        seen[name] = p.pid
        return p

    plane._spawn = spy
    with pytest.raises(ControlPlaneError, match="apiserver exited"):
        plane.start()
    assert set(seen) == {"etcd", "apiserver"}
    assert not [n for n, pid in seen.items() if alive(pid)]


def test_clean_stop_leaves_no_process(k8s_bin, tmp_path):
    from localcluster.realplane import RealControlPlane

    with RealControlPlane(tmp_path / "plane", k8s_bin) as plane:
        pids = plane.pids()
        assert set(pids) == {"etcd", "apiserver", "controller-manager", "scheduler"}
        assert all(alive(p) for p in pids.values())
        assert plane.kubeconfig.exists()
        assert (plane.state_dir / "logs" / "apiserver.log").stat().st_size > 0
        assert (plane.state_dir / "pki" / "sa.key").stat().st_mode & 0o077 == 0
    assert not [n for n, pid in pids.items() if alive(pid)]


def test_localcluster_control_plane_real_cli(k8s_bin, kubectl, tmp_path):
    """``workspacespawner localcluster --control-plane real`` prints a working
    KUBECONFIG and stops its children on SIGTERM."""
    import signal
    import subprocess
    import sys
    import time

    env = dict(os.environ, WORKSPACESPAWNER_K8S_BIN=str(k8s_bin))
    # the plane's four: no KubeVirt or CDI (the command runs them when their bin folder is named or built in the
    # cache, which is empty here)
    env.pop("WORKSPACESPAWNER_KUBEVIRT_BIN", None)
    env["WORKSPACESPAWNER_CACHE"] = str(tmp_path / "empty-cache")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "localcluster",
            "--control-plane",
            "real",
            "--state-dir",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        kubeconfig = None
        deadline = time.monotonic() + 120
        lines = []
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("export KUBECONFIG="):
                kubeconfig = line.split("=", 1)[1].strip()
                break
        assert kubeconfig, "".join(lines)
        assert kubeconfig == str(tmp_path / "real" / "kubeconfig")
        res = subprocess.run(
            [kubectl, f"--kubeconfig={kubeconfig}", "get", "namespace", "kube-system", "-o", "name"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert res.stdout.strip() == "namespace/kube-system", res.stderr
        children = [
            int(p)
            for p in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        ]
        assert len(children) == 4
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        assert not [p for p in children if alive(p)]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_port_taken_between_choosing_and_binding_is_chosen_again(k8s_bin, tmp_path):
    """Another process may take a chosen port before the component binds it
    (CI's second pass runs beside the first; the kernel hands out the same
    range to outgoing connections). The start picks new ports and goes on."""
    import socket

    from localcluster.realplane import RealControlPlane

    plane = RealControlPlane(tmp_path / "plane", k8s_bin)
    taken = socket.socket()
    orig = plane._choose_ports
    chosen: list[int] = []

    def choose_then_take():
        orig()
        chosen.append(plane.ports["apiserver"])
        if len(chosen) == 1:
            taken.bind(("127.0.0.1", plane.ports["apiserver"]))
            taken.listen()

    plane._choose_ports = choose_then_take
    try:
        with plane:
            assert len(chosen) == 2 and plane.ports["apiserver"] != chosen[0]
            assert "address already in use" in (plane.state_dir / "logs" / "apiserver.log").read_text()
    finally:
        taken.close()
