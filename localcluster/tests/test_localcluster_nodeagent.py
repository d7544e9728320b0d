"""The local cluster's node agent: Pods and VM guests run as local processes.

Covers: a pod's own 127.10.x.y address (``0.0.0.0`` rewritten) answering
HTTP, two pods on the same port at once, the container environment (a
Secret key, ConfigMap ``envFrom``, ``fieldRef``, ``$(VAR)``, nothing leaked
from the host), a PVC-backed home written by one pod and read by the next
after the first is deleted, graceful deletion (SIGTERM honoured, SIGKILL
after the grace period, deletion confirmed), crash loops
(``CrashLoopBackOff``) and completion phases, a failing image
(``ErrImagePull``/``ImagePullBackOff``, then recovery), a NotReady node that
leaves deletions unfinished, and a VMI guest booted from cloud-init (a
systemd unit with an EnvironmentFile, enabled with ``systemctl enable
--now``, a user whose home is a disk mounted by virtio serial) that serves
HTTP on its address, keeps what it wrote on its root disk into a second
boot of the same instance (runcmd not run again, the enabled unit started,
``write_files`` with frequency ``always`` bringing a fresh setting), and is
shut down with its finalizer lifted; a guest that fails to boot. Without a
cluster: path mapping and bind rewriting, the address pool, systemd unit
and environment-file parsing (systemd's quoting and escapes, ``%``
specifiers, ``$$`` and ``${VAR}``/``$VAR`` in ExecStart), and cloud-init's
per-instance semantics.

Every test checks that no process it started outlives the cluster (no
process is left with its working directory in the test's directory).
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import json
import os
import time
import urllib.request

import pytest
from localcluster.controllers.guest import (
    GuestBoot,
    expand_exec_argv,
    parse_environment_file,
    parse_unit,
    systemctl_command,
)
from localcluster.controllers.runtime import AddressPool, Filesystem, translate
from localcluster.errors import ApiError
from localcluster.testing import wait_for
from localcluster.volumes import DISK_IMAGE, claim_path

from localcluster import LocalCluster

NS = "default"
POD_NETWORK = ipaddress.ip_network("127.10.0.0/16")
SERVE = ["python", "-m", "http.server", "--bind", "0.0.0.0", "8888"]
PROBE = {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1}
PORTS = [{"name": "http", "containerPort": 8888}]
CONTROLLERS = ("storage", "scheduler", "nodeagent")


def kind(store, plural: str, group: str = "", version: str = "v1"):
    return store.kind(group, version, plural)


def get(store, plural: str, name: str, group: str = "", version: str = "v1") -> dict | None:
    try:
        return store.get(kind(store, plural, group, version), NS, name)
    except ApiError:
        return None


def make_pod(name: str, args: list[str], *, restart: str = "Always", **container) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": 5,
            "containers": [{"name": "main", "image": "quay.io/jupyter/base-notebook:2024-05-27", "args": args, **container}],
        },
    }


def create(store, obj: dict) -> dict:
    return store.create(store.kind_of(obj["apiVersion"], obj["kind"]), NS, obj)


def phase_of(store, name: str, plural: str = "pods", group: str = "", version: str = "v1") -> str | None:
    obj = get(store, plural, name, group, version)
    return (obj.get("status") or {}).get("phase") if obj else None


def is_ready(obj: dict | None) -> bool:
    conditions = (obj or {}).get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


async def running_pod(store, name: str, timeout: float = 10.0) -> dict:
    """Wait until pod ``name`` is Running and Ready; returns it."""
    return await wait_for(lambda: (pod := get(store, "pods", name)) and is_ready(pod) and pod, timeout)


def container_state(store, name: str) -> dict:
    statuses = (get(store, "pods", name) or {}).get("status", {}).get("containerStatuses") or [{}]
    return statuses[0]


def pids_of(obj: dict) -> list[int]:
    statuses = obj["status"].get("containerStatuses") or []
    return [int(s["containerID"].rsplit("/", 1)[1]) for s in statuses if s.get("containerID")]


def processes_under(path) -> list[int]:
    """Live processes whose working directory lies under ``path``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if cwd.startswith(str(path)) and alive(int(pid)):
            found.append(int(pid))
    return found


@pytest.fixture(autouse=True)
def no_orphans(tmp_path):
    """Every test ends with no process left running in its cluster's directories."""
    yield
    assert processes_under(tmp_path) == []


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def log_of(cluster, obj: dict, name: str | None = None) -> str:
    path = cluster.controllers["nodeagent"].log_path(obj, name)
    return path.read_text() if path.exists() else ""


def reasons(store, name: str) -> list[str]:
    events, _ = store.list(kind(store, "events"), NS)
    events.sort(key=lambda e: int(e["metadata"]["resourceVersion"]))
    return [e["reason"] for e in events if e["involvedObject"]["name"] == name]


async def http_get(url: str) -> str:
    def fetch():
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=5) as response:
            return response.read().decode()

    return await asyncio.to_thread(fetch)


def make_pvc(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }


async def test_pods_get_their_own_address_and_serve_http(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=CONTROLLERS) as cluster:
        store = cluster.store
        for name in ("web-a", "web-b"):
            create(store, make_pod(name, SERVE, readinessProbe=PROBE, ports=PORTS))
        pods = [await running_pod(store, name) for name in ("web-a", "web-b")]
        ips = [pod["status"]["podIP"] for pod in pods]
        assert len(set(ips)) == 2
        for pod, ip in zip(pods, ips, strict=True):
            assert ipaddress.ip_address(ip) in POD_NETWORK
            assert pod["status"]["podIPs"] == [{"ip": ip}]
            assert pod["status"]["phase"] == "Running"
            status = pod["status"]["containerStatuses"][0]
            assert status["ready"] and status["started"] and "running" in status["state"]
            assert status["containerID"].startswith("localcluster://")
            assert "Directory listing" in await http_get(f"http://{ip}:8888/")
        assert reasons(store, "web-a")[-4:] == ["Pulling", "Pulled", "Created", "Started"]
        pids = [pid for pod in pods for pid in pids_of(pod)]
        assert all(alive(pid) for pid in pids)
    assert not any(alive(pid) for pid in pids)


async def test_container_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("HOST_ONLY_SECRET", "must-not-leak")
    async with LocalCluster(state_dir=tmp_path, controllers=CONTROLLERS) as cluster:
        store = cluster.store
        create(store, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "token"},
                       "data": {"api-token": base64.b64encode(b"s3cret").decode()}})
        create(store, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {"COLOR": "blue"}})
        pod = make_pod(
            "env",
            ["python", "-c", "import json, os; print(json.dumps(dict(os.environ)))"],
            restart="Never",
            env=[
                {"name": "JUPYTERHUB_API_TOKEN", "valueFrom": {"secretKeyRef": {"name": "token", "key": "api-token"}}},
                {"name": "MY_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "MY_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "JUPYTERHUB_SERVICE_URL", "value": "http://0.0.0.0:8888/user/ann/"},
                {"name": "GREETING", "value": "hello $(MY_NAME) in $(COLOR)"},
            ],
            envFrom=[{"configMapRef": {"name": "settings"}}],
        )
        create(store, pod)
        await wait_for(lambda: phase_of(store, "env") == "Succeeded")
        pod = get(store, "pods", "env")
        env = json.loads(log_of(cluster, pod).strip().splitlines()[-1])
        ip = pod["status"]["podIP"]
    assert env["JUPYTERHUB_API_TOKEN"] == "s3cret"
    assert env["MY_POD_IP"] == ip and env["MY_NAME"] == "env"
    assert env["JUPYTERHUB_SERVICE_URL"] == f"http://{ip}:8888/user/ann/"
    assert env["GREETING"] == "hello env in blue"
    assert "HOST_ONLY_SECRET" not in env
    assert {"PATH", "LANG", "HOME", "HOSTNAME"} <= set(env)


@pytest.mark.parametrize("isolation", [True, False], ids=["sandbox", "mapped"])
async def test_home_volume_outlives_the_pod(tmp_path, isolation):
    write = "import os; open(os.path.join(os.environ['HOME'], 'notes.txt'), 'w').write('kept'); print(os.getcwd())"
    read = "import os; print(open('/home/jovyan/notes.txt'.replace('/home/jovyan', os.environ['HOME'])).read())"
    if isolation:
        read = "print(open('/home/jovyan/notes.txt').read())"  # the real path, nothing rewritten
    home = {"volumeMounts": [{"name": "home", "mountPath": "/home/jovyan"}], "env": [{"name": "HOME", "value": "/home/jovyan"}]}
    volumes = [{"name": "home", "persistentVolumeClaim": {"claimName": "claim-ann"}}]
    async with LocalCluster(state_dir=tmp_path, controllers=CONTROLLERS) as cluster:
        agent = cluster.controllers["nodeagent"]
        if isolation and not agent.isolation:
            pytest.skip("this host cannot sandbox (needs Linux, and root or user namespaces)")
        agent.isolation = isolation
        store = cluster.store
        create(store, make_pvc("claim-ann"))
        first = make_pod("writer", ["python", "-c", write], restart="Never", **home)
        first["spec"]["volumes"] = volumes
        create(store, first)
        await wait_for(lambda: phase_of(store, "writer") == "Succeeded")
        first = get(store, "pods", "writer")
        data_dir = claim_path(cluster, NS, "claim-ann")
        assert (data_dir / "notes.txt").read_text() == "kept"
        # cwd: the home volume
        assert log_of(cluster, first).strip() == ("/home/jovyan" if isolation else str(data_dir))
        if not isolation:
            link = tmp_path / "pods" / first["metadata"]["uid"] / "root" / "home" / "jovyan"
            assert link.is_symlink() and link.resolve() == data_dir.resolve()
        store.delete(kind(store, "pods"), NS, "writer")
        await wait_for(lambda: get(store, "pods", "writer") is None)
        second = make_pod("reader", ["python", "-c", read], restart="Never", **home)
        second["spec"]["volumes"] = volumes
        create(store, second)
        await wait_for(lambda: phase_of(store, "reader") == "Succeeded")
        assert log_of(cluster, get(store, "pods", "reader")).strip() == "kept"


async def test_graceful_deletion_then_sigkill(tmp_path):
    polite = "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: (print('bye', flush=True), sys.exit(0))); print('up', flush=True); time.sleep(60)"
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
    async with LocalCluster(state_dir=tmp_path, controllers=CONTROLLERS) as cluster:
        store = cluster.store
        pod = make_pod("two", ["python", "-c", polite])
        pod["spec"]["containers"].append({"name": "stubborn", "image": "busybox:1.36", "args": ["python", "-c", stubborn]})
        create(store, pod)
        pod = await running_pod(store, "two")
        # both handlers are in place before the deletion (a sandboxed Python takes longer to get there)
        await wait_for(lambda: "up" in log_of(cluster, pod) and "up" in log_of(cluster, pod, "stubborn"))
        pids = pids_of(pod)
        began = time.monotonic()
        store.delete(kind(store, "pods"), NS, "two", grace_period_seconds=1)
        assert get(store, "pods", "two")["metadata"]["deletionTimestamp"]
        await wait_for(lambda: get(store, "pods", "two") is None)
        took = time.monotonic() - began
        assert 0.9 < took < 5
        assert not any(alive(pid) for pid in pids)
        assert "bye" in log_of(cluster, pod)
        assert reasons(store, "two").count("Killing") == 2
        assert pod["status"]["podIP"] not in cluster.controllers["nodeagent"].addresses


async def test_crash_loop_and_completion(tmp_path):
    crash = ["python", "-c", "import sys; print('boom'); sys.exit(3)"]
    async with LocalCluster(state_dir=tmp_path, controllers=CONTROLLERS) as cluster:
        store = cluster.store
        cluster.controllers["nodeagent"].restart_backoff = 0.2
        create(store, make_pod("crash", crash))
        create(store, make_pod("fails", crash, restart="Never"))
        create(store, make_pod("done", ["python", "-c", "pass"], restart="OnFailure"))
        await wait_for(lambda: container_state(store, "crash").get("state", {}).get("waiting", {}).get("reason") == "CrashLoopBackOff")
        status = container_state(store, "crash")
        assert status["restartCount"] >= 1 and not status["ready"]
        assert status["lastState"]["terminated"]["exitCode"] == 3
        assert status["lastState"]["terminated"]["reason"] == "Error"
        assert "back-off" in status["state"]["waiting"]["message"]
        assert phase_of(store, "crash") == "Running"
        assert "BackOff" in reasons(store, "crash")
        assert "boom" in log_of(cluster, get(store, "pods", "crash"))
        await wait_for(lambda: phase_of(store, "fails") == "Failed")
        assert container_state(store, "fails")["state"]["terminated"]["exitCode"] == 3
        await wait_for(lambda: phase_of(store, "done") == "Succeeded")
        assert container_state(store, "done")["state"]["terminated"]["reason"] == "Completed"


async def test_failing_image_then_recovery(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=CONTROLLERS) as cluster:
        store = cluster.store
        agent = cluster.controllers["nodeagent"]
        agent.restart_backoff = 0.2
        agent.failing_images.add("registry.example/missing:1")
        create(store, make_pod("pull", SERVE, image="registry.example/missing:1"))

        def waiting_reason():
            return container_state(store, "pull").get("state", {}).get("waiting", {}).get("reason")

        await wait_for(lambda: waiting_reason() == "ErrImagePull")
        await wait_for(lambda: waiting_reason() == "ImagePullBackOff")
        assert phase_of(store, "pull") == "Pending"
        events, _ = store.list(kind(store, "events"), NS)
        assert any(e["reason"] == "Failed" and e["type"] == "Warning" and "ErrImagePull" in e["message"] for e in events)
        agent.failing_images.clear()
        await running_pod(store, "pull")


async def test_not_ready_node_does_not_finish_deletions(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=CONTROLLERS) as cluster:
        store = cluster.store
        create(store, make_pod("stuck", SERVE))
        pod = await running_pod(store, "stuck")
        node = pod["spec"]["nodeName"]
        await cluster.controllers["scheduler"].set_node_ready(node, False)
        store.delete(kind(store, "pods"), NS, "stuck")
        await asyncio.sleep(0.5)
        assert get(store, "pods", "stuck")["metadata"]["deletionTimestamp"]
        assert all(alive(pid) for pid in pids_of(pod))
        await cluster.controllers["scheduler"].set_node_ready(node, True)
        await wait_for(lambda: get(store, "pods", "stuck") is None)
        assert not any(alive(pid) for pid in pids_of(pod))


# -- VM guests --------------------------------------------------------------------

SERVER_SCRIPT = """\
import http.server, os
with open("boots.txt", "a") as f:
    f.write("boot\\n")
open(os.path.join(os.environ["HOME"], "seen.txt"), "w").write("home")
boots = open("boots.txt").read().count("boot")
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
        self.wfile.write(f"boots={boots} greeting={os.environ['GREETING']}".encode())
http.server.HTTPServer((os.environ["BIND"], int(os.environ["PORT"])), Handler).serve_forever()
"""

UNIT = """\
[Unit]
Description=the notebook server
[Service]
User=jovyan
Environment="GREETING=from the unit" BIND=127.0.0.1
EnvironmentFile=/etc/app.env
WorkingDirectory=/var/lib/app
ExecStart=/usr/bin/python3 /opt/app/serve.py
Restart=always
[Install]
WantedBy=multi-user.target
"""



def user_data(greeting: str) -> str:
    """A #cloud-config like the spawner's: the env file rewritten on every boot, the unit enabled on the first."""
    env_file = f"BIND=0.0.0.0\nPORT=8888\nGREETING='{greeting}'\n".encode()
    return "#cloud-config\n" + json.dumps(
        {
            "cloud_init_modules": ["bootcmd", ["write_files", "always"], "mounts", "users_groups"],
            "users": ["default", {"name": "jovyan", "uid": 1000, "homedir": "/home/jovyan"}],
            "write_files": [
                {"path": "/opt/app/serve.py", "content": SERVER_SCRIPT, "permissions": "0755"},
                {"path": "/etc/app.env", "content": base64.b64encode(env_file).decode(), "encoding": "b64"},
                {"path": "/etc/systemd/system/app.service", "content": UNIT},
                {"path": "/var/lib/app/.keep", "content": ""},
            ],
            "fs_setup": [{"label": "home", "filesystem": "ext4", "device": "/dev/disk/by-id/virtio-home-disk"}],
            "mounts": [["/dev/disk/by-id/virtio-home-disk", "/home/jovyan", "auto", "defaults,nofail"]],
            "runcmd": ["mkdir -p /var/lib/app", "systemctl daemon-reload", "systemctl enable --now app.service"],
        }
    )


def make_vmi(name: str, *, firmware_uuid: str) -> dict:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": name, "labels": {"kubevirt.io/domain": "ws"}, "finalizers": ["foregroundDeleteVirtualMachine"]},
        "spec": {
            "terminationGracePeriodSeconds": 5,
            "readinessProbe": {"tcpSocket": {"port": 8888}, "periodSeconds": 1},
            "domain": {
                "firmware": {"uuid": firmware_uuid},
                "resources": {"requests": {"memory": "1Gi"}},
                "devices": {
                    "disks": [
                        {"name": "root", "disk": {"bus": "virtio"}},
                        {"name": "cloudinit", "disk": {"bus": "virtio"}},
                        {"name": "home", "disk": {"bus": "virtio"}, "serial": "home-disk"},
                    ],
                    "interfaces": [{"name": "default", "masquerade": {}}],
                },
            },
            "networks": [{"name": "default", "pod": {}}],
            "volumes": [
                {"name": "root", "persistentVolumeClaim": {"claimName": "rootdisk"}},
                {"name": "cloudinit", "cloudInitNoCloud": {"secretRef": {"name": "ws-cloudinit"}}},
                {"name": "home", "persistentVolumeClaim": {"claimName": "home"}},
            ],
        },
    }


def schedule(store, vmi: dict) -> None:
    """Play virt-controller: hand the new VMI to the scheduler."""
    created = create(store, vmi)
    created["status"] = {"phase": "Scheduling"}
    store.replace(kind(store, "virtualmachineinstances", "kubevirt.io"), NS, created["metadata"]["name"], created, subresource="status")


async def boot(store, name: str, firmware_uuid: str) -> dict:
    schedule(store, make_vmi(name, firmware_uuid=firmware_uuid))
    return await wait_for(lambda: is_ready(vmi := get(store, "virtualmachineinstances", name, "kubevirt.io")) and vmi)


async def test_vm_guest_from_cloud_init_keeps_its_root_disk(tmp_path):
    firmware = "5d307ca9-b3ef-428c-8861-06e72d69f223"
    async with LocalCluster(state_dir=tmp_path, controllers=CONTROLLERS) as cluster:
        store = cluster.store
        for claim in ("rootdisk", "home"):
            create(store, make_pvc(claim))
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ws-cloudinit"}, "stringData": {"userdata": user_data("hello guest")}}
        create(store, secret)
        vmi = await boot(store, "ws-1", firmware)
        assert vmi["status"]["phase"] == "Running"
        ip = vmi["status"]["interfaces"][0]["ipAddress"]
        assert ipaddress.ip_address(ip) in POD_NETWORK
        assert await http_get(f"http://{ip}:8888/") == "boots=1 greeting=hello guest"
        # Filesystem-mode claims attached as disks: each disk is the image disk.img in its claim, not the claim's files.
        rootfs, home = claim_path(cluster, NS, "rootdisk") / DISK_IMAGE, claim_path(cluster, NS, "home") / DISK_IMAGE
        assert (rootfs / "var/lib/app/boots.txt").read_text() == "boot\n"
        assert (home / "seen.txt").read_text() == "home"
        assert sorted(p.name for p in claim_path(cluster, NS, "home").iterdir()) == [DISK_IMAGE]
        assert (rootfs / "etc/systemd/system/multi-user.target.wants/app.service").is_symlink()
        unit_log = cluster.controllers["nodeagent"].log_path(vmi, "app.service")
        guest_pids = processes_under(rootfs) + processes_under(tmp_path / "vmis")  # mapped: cwd on the disk; sandboxed: beside it
        assert guest_pids

        store.delete(kind(store, "virtualmachineinstances", "kubevirt.io"), NS, "ws-1")
        await wait_for(lambda: get(store, "virtualmachineinstances", "ws-1", "kubevirt.io") is None)
        assert not any(alive(pid) for pid in guest_pids)
        assert unit_log.exists()

        secret["stringData"]["userdata"] = user_data("fresh token")  # per start, as the spawner writes it
        store.replace(kind(store, "secrets"), NS, "ws-cloudinit", secret)
        vmi = await boot(store, "ws-2", firmware)
        ip = vmi["status"]["interfaces"][0]["ipAddress"]
        assert await http_get(f"http://{ip}:8888/") == "boots=2 greeting=fresh token"
        console = log_of(cluster, vmi)
        assert "seen before" in console and "runcmd" not in console

        cluster.controllers["nodeagent"].fail_guest.add("ws-3")
        schedule(store, make_vmi("ws-3", firmware_uuid=firmware))
        await wait_for(lambda: phase_of(store, "ws-3", "virtualmachineinstances", "kubevirt.io") == "Failed")




# -- the pieces, without a cluster ------------------------------------------------


def test_filesystem_maps_paths_and_binds(tmp_path):
    home = tmp_path / "pv"
    fs = Filesystem(tmp_path / "root", {"/home/jovyan": home, "/home/jovyan/.ssh": tmp_path / "secret"})
    fs.root.mkdir()
    fs.link_mounts()
    assert (fs.root / "home" / "jovyan").is_symlink()
    assert not (home / ".ssh").exists()  # a nested mount is not linked into the outer volume
    assert fs.map("/home/jovyan/work/a.ipynb") == home / "work" / "a.ipynb"
    assert fs.map("/home/jovyan/.ssh/id") == tmp_path / "secret" / "id"
    assert fs.map("/srv/../etc/x") == fs.root / "etc" / "x"
    assert translate("--notebook-dir=/home/jovyan/work", fs, "127.10.0.7") == f"--notebook-dir={home}/work"
    assert translate("http://0.0.0.0:8888/user/ann/", fs, "127.10.0.7") == "http://127.10.0.7:8888/user/ann/"
    assert translate("/user/ann/", fs, "127.10.0.7") == "/user/ann/"


def test_address_pool():
    pool = AddressPool()
    first, second = pool.allocate("a"), pool.allocate("b")
    assert first != second and pool.allocate("a") == first
    assert all(ipaddress.ip_address(ip) in POD_NETWORK for ip in (first, second))
    pool.release(first)
    assert first not in pool and second in pool


def test_systemd_unit_and_environment_file():
    unit = parse_unit("ide", "[Service]\nExecStart=-/usr/bin/env 'a b' c\nEnvironment=\"A=1 2\" B=3\nEnvironmentFile=-/etc/x.env\n"
                      "Restart=on-failure\nRestartSec=500ms\n[Install]\nWantedBy=multi-user.target\n")
    assert unit.name == "ide.service" and unit.exec_start == ["/usr/bin/env", "a b", "c"]
    assert unit.environment == {"A": "1 2", "B": "3"} and unit.environment_files == [("/etc/x.env", True)]
    assert (unit.restart, unit.restart_sec, unit.wanted_by) == ("OnFailure", 0.5, ["multi-user.target"])
    env = parse_environment_file("# comment\nTOKEN='a$b c'\nQUOTED=\"it's \\\"q\\\"\"\nPLAIN=x y\nexport SHELLISH=1\n")
    assert env == {"TOKEN": "a$b c", "QUOTED": 'it\'s "q"', "PLAIN": "x y"}  # "export SHELLISH" is no variable name
    assert systemctl_command("sudo systemctl enable --now ide") == ("enable", ["ide.service"], {"--now"})
    assert systemctl_command(["mkdir", "-p", "/x"]) is None


def test_environment_file_quoting_as_systemd_reads_it():
    text = (
        'DQ="a \\"q\\" \\\\ \\` \\$HOME \\n \\x"\n'  # DQ="a \"q\" \\ \` \$HOME \n \x"
        "SQ='$HOME \\\" \\n'\n"  # SQ='$HOME \" \n'
        "  SPACED  =  value with  spaces   \n"
        "JOINED=one\\\n  two\n"  # a backslash before the line break joins the next line
        'MIXED="a b"\'c d\'e\n'
        "; a comment\n# another\nEMPTY=\nLAST=1\nLAST=2"
    )
    assert parse_environment_file(text) == {
        "DQ": 'a "q" \\ ` $HOME \\n \\x',  # the backslash goes before " \\ ` $ only
        "SQ": '$HOME \\" \\n',
        "SPACED": "value with  spaces",
        "JOINED": "one  two",
        "MIXED": "a bc de",
        "EMPTY": "",
        "LAST": "2",
    }


def test_exec_start_specifiers_and_variables_as_systemd_expands_them():
    unit = parse_unit(
        "ide@ann",
        "[Service]\nEnvironment=WHO=%i\nExecStart=/bin/run 100%% %n %p \"$$HOME\" $$VAR ${WHO} x${WHO}y $ARGS a$WHO ${NONE} $NONE\n",
    )
    assert unit.environment == {"WHO": "ann"}
    assert unit.exec_start == ["/bin/run", "100%", "ide@ann.service", "ide", "$$HOME", "$$VAR", "${WHO}", "x${WHO}y",
                               "$ARGS", "a$WHO", "${NONE}", "$NONE"]
    env = {**unit.environment, "ARGS": "--a 'b c'", "HOME": "/home/ann"}
    assert expand_exec_argv(unit.exec_start, env) == [
        "/bin/run", "100%", "ide@ann.service", "ide", "$HOME", "$VAR", "ann", "xanny", "--a", "b c", "a$WHO", "",
    ]


def test_guest_boot_runs_per_instance_modules_once(tmp_path):
    serial = "home-of-a-rather-long-user-name"  # virtio keeps the first 20 characters
    rootfs, home = tmp_path / "root", tmp_path / "home"
    rootfs.mkdir()
    home.mkdir()
    unit = "[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n"
    config = "#cloud-config\n" + json.dumps({
        "write_files": [{"path": "/etc/systemd/system/ide.service", "content": unit}],
        "mounts": [[f"/dev/disk/by-id/virtio-{serial}", "/home/ann"]],
        "runcmd": ["systemctl enable --now ide"],
    })
    devices = {f"/dev/disk/by-id/virtio-{serial[:20]}": home}

    def boot(instance_id: str) -> tuple[GuestBoot, str]:
        console: list[str] = []
        return GuestBoot(rootfs, config, instance_id, devices, console.append).run(), "\n".join(console)

    first, console = boot("instance-1")
    assert first.mounts == {"/home/ann": home} and first.units == ["ide.service"]
    assert "write_files /etc/systemd/system/ide.service" in console
    again, console = boot("instance-1")
    assert again.mounts == {"/home/ann": home} and again.units == ["ide.service"]  # enabled on the first boot
    assert "write_files" not in console and "runcmd" not in console
    (rootfs / "etc/systemd/system/multi-user.target.wants/ide.service").unlink()
    assert boot("instance-1")[0].units == []
    assert boot("instance-2")[0].units == ["ide.service"]  # a new instance runs runcmd again
