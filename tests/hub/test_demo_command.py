"""``workspacespawner demo`` as a person runs it: ports, a second instance, the URL, cleaning up.

Covers: a busy port (public, proxy API or hub) named with its option before
anything starts, every busy port in one refusal, and the same port given twice;
Ctrl-C while npm installs the proxy ends the demo and npm; the whole demo in a process
of its own with every port picked free: the URL printed only once the hub
answers there; a second demo in the same folder refusing at once, naming the
first's PID, and changing nothing (the first keeps its kubeconfig, proxy and
hub); the hub killed under the demo: the demo exits non-zero and leaves no
proxy, no hub and no port behind; with ``--control-plane real`` (the real
tier with KubeVirt's and CDI's own components), a VM workspace started and
stopped through the hub as kubectl shows it, and virt-api's webhook live.
"""

from __future__ import annotations

import html
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from localcluster.codeserver import code_server_bin
from localcluster.testing import qemu_processes, real_guest_skip_reason

from tests.support import planes
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


def test_the_demo_on_the_real_control_plane_runs_a_vm_workspace_on_kubevirt_and_cdi(tmp_path):
    """#39's "done when": ``workspacespawner demo --control-plane real`` starts Kubernetes' own servers with KubeVirt's
    and CDI's own controllers; a user's VM workspace started and stopped through the hub is a VirtualMachine whose
    VMI the real virt-controller made (with its virt-launcher Pod) and whose root DataVolume the real cdi-controller
    cloned; the stop leaves the VM, the DataVolume and the PVCs; virt-api's webhook refuses a VM with a typo."""
    planes.skip_unless_real()
    if planes.real_kubevirt_bin() is None:
        pytest.skip("KubeVirt's and CDI's own components: set WORKSPACESPAWNER_KUBEVIRT_BIN (tools/kubevirt/build.sh)")
    state = tmp_path / "demo"
    command = [sys.executable, "-m", "workspacespawner.cli", "demo", "--state-dir", str(state), "--proxy", "python",
               "--prometheus", "off", "--control-plane", "real",
               "--port", "0", "--proxy-api-port", "0", "--hub-port", "0", "--dashboard-port", "0"]
    log = tmp_path / "demo.log"
    demo = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log.open("w"), text=True,
                            env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=tmp_path)
    try:
        url = read_url(demo, timeout=300)
        kubeconfig = next(line.split("KUBECONFIG=", 1)[1].strip() for line in demo.stdout if "KUBECONFIG=" in line)
        plane = [" ".join(Path(f"/proc/{pid}/cmdline").read_text().split("\0")) for pid in descendants(demo.pid)]
        for program in ("kube-apiserver", "virt-controller", "virt-api", "cdi-controller", "cdi-apiserver"):
            assert any(f"/{program} " in f"{line} " for line in plane), (program, plane)

        def kubectl(*args: str, check: bool = True) -> subprocess.CompletedProcess:
            done = subprocess.run(["kubectl", "--kubeconfig", kubeconfig, *args], capture_output=True, text=True, timeout=60)
            assert done.returncode == 0 or not check, done.stderr
            return done

        session = requests.Session()
        session.get(f"{url}/hub/login", timeout=30)
        login = {"username": "ann", "password": "x", "_xsrf": session.cookies.get("_xsrf")}
        form = session.post(f"{url}/hub/login", data=login, timeout=30)  # on to the spawn form
        action = html.unescape(re.search(r'action="(/hub/spawn\?_xsrf=[^"]+)"', form.text).group(1))
        assert session.post(url + action, data={"profile": "ubuntu-vm"}, timeout=60).ok
        xsrf = {"X-XSRFToken": session.cookies.get("_xsrf", path="/hub/")}  # what the hub's pages send with the cookie

        def server() -> dict:
            return session.get(f"{url}/hub/api/user", headers=xsrf, timeout=30).json()["servers"].get("") or {}

        deadline = time.monotonic() + 600  # where QEMU and the golden image are there, a real guest's boot under TCG
        while not server().get("ready"):
            assert time.monotonic() < deadline, f"the VM server did not start:\n{log.read_text()[-4000:]}"
            time.sleep(2)
        assert session.get(f"{url}/user/ann/lab", timeout=60).status_code == 200  # the proxy reaches the guest's IDE
        if real_guest_skip_reason() is None:  # QEMU and the golden image are there: the JupyterLab VM is a real guest
            assert qemu_processes("default_ws-ann"), log.read_text()[-4000:]
        running = kubectl("get", "vm,vmi,dv,pvc,pods", "-o", "name").stdout.split()
        assert {"virtualmachine.kubevirt.io/ws-ann", "virtualmachineinstance.kubevirt.io/ws-ann",
                "datavolume.cdi.kubevirt.io/ws-ann-root", "persistentvolumeclaim/ws-ann-root",
                "persistentvolumeclaim/home-ann"} <= set(running), running
        [launcher] = [name for name in running if name.startswith("pod/virt-launcher-ws-ann-")]
        owner = kubectl("get", launcher, "-o", "jsonpath={.metadata.ownerReferences[0].kind}").stdout
        assert owner == "VirtualMachineInstance"
        cloned = kubectl("get", "events", "--field-selector", "involvedObject.name=ws-ann-root", "-o",
                         "jsonpath={.items[*].source.component}").stdout
        assert "datavolume-pvc-clone-controller" in cloned or "clone-populator" in cloned, cloned

        r = session.delete(f"{url}/hub/api/users/ann/server", headers=xsrf, timeout=120)
        assert r.status_code in (202, 204), r.text
        deadline = time.monotonic() + 120
        while "virtualmachineinstance.kubevirt.io/ws-ann" in kubectl("get", "vmi", "-o", "name").stdout:
            assert time.monotonic() < deadline, "the VMI is still there after the stop"
            time.sleep(1)
        stopped = kubectl("get", "vm,vmi,dv,pvc,pods", "-o", "name").stdout.split()
        assert {"virtualmachine.kubevirt.io/ws-ann", "datavolume.cdi.kubevirt.io/ws-ann-root",
                "persistentvolumeclaim/ws-ann-root", "persistentvolumeclaim/home-ann"} <= set(stopped), stopped
        assert kubectl("get", "vm", "ws-ann", "-o", "jsonpath={.status.printableStatus}").stdout == "Stopped"

        typo = kubectl("get", "vm", "ws-ann", "-o", "json").stdout.replace('"runStrategy": "Halted"', '"runStrategy": "Haltd"')
        (tmp_path / "typo.json").write_text(typo.replace('"name": "ws-ann"', '"name": "ws-typo"', 1))
        refused = kubectl("create", "-f", str(tmp_path / "typo.json"), check=False)
        # virt-api's validating webhook, in KubeVirt's words (the CRD's schema takes any string there)
        assert refused.returncode != 0 and "spec.runStrategy: Invalid RunStrategy (Haltd)" in refused.stderr, refused.stderr
    finally:
        if demo.poll() is None:
            demo.send_signal(signal.SIGINT)
            demo.wait(120)


def descendants(pid: int) -> list[int]:
    """Every process under ``pid``, whichever of its threads started it."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (int(c) for c in (task / "children").read_text().split()):
            found += [child, *descendants(child)]
    return found
