"""The node agent's sandbox for a user who is not root (a laptop's demo): a user namespace, the same filesystem.

The sandbox script (``localcluster/controllers/sandbox.py``) is run as an
unprivileged user (``nobody`` when the tests run as root, else the tests'
own user) with ``/`` as its lower layer, as the node agent runs a Pod's
container: the command sees its home at ``/home/jovyan`` (writable), a
read-only team folder answering EROFS, its writes to ``/opt`` landing in
the upper layer and not on the host, its own hostname and PID namespace.
A guest-style sandbox (no command, stays up) is joined by a second
command, as a VM's units and ``kubectl exec`` join one, which sees the
first one's files. Needs Linux with unprivileged user namespaces (skipped
elsewhere, an error under ``$CI``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from localcluster.controllers import sandbox

NOBODY = 65534

PROBE = textwrap.dedent(
    """
    import errno, json, os, socket
    seen = {"pid": os.getpid(), "hostname": socket.gethostname(), "cwd": os.getcwd()}
    for path in ("/home/jovyan/mine.txt", "/shared/team/new.txt", "/opt/sandboxed-write.txt"):
        try:
            with open(path, "w") as f:
                f.write("x")
            seen[path] = "written"
        except OSError as e:
            seen[path] = errno.errorcode[e.errno]
    seen["team"] = open("/shared/team/course.txt").read()
    print(json.dumps(seen))
    """
)


def world_usable(path: str) -> bool:
    """Whether every folder above ``path`` lets others through and ``path`` lets them run it."""
    parts = Path(path).resolve().parents
    return all(p.stat().st_mode & stat.S_IXOTH for p in parts) and bool(Path(path).stat().st_mode & stat.S_IXOTH)


@pytest.fixture
def as_user(tmp_path_factory):
    """(run(spec) -> CompletedProcess-like Popen args, work folder): the sandbox script as an unprivileged user."""
    if not sys.platform.startswith("linux"):
        pytest.skip("sandboxes are Linux namespaces")
    pythons = [p for p in (sys.executable, shutil.which("python3"), "/usr/bin/python3") if p and os.path.exists(p)]
    python = next((p for p in pythons if world_usable(p)), None) if os.geteuid() == 0 else sys.executable
    if python is None:
        pytest.skip("no Python that an unprivileged user may run")
    work = Path(tempfile.mkdtemp(prefix="sandbox-without-root-"))
    script = work / "sandbox.py"
    shutil.copy(sandbox.__file__, script)  # the checkout may sit where others cannot read
    user = {"user": NOBODY, "group": NOBODY, "extra_groups": []} if os.geteuid() == 0 else {}

    def popen(spec: dict, name: str, **kwargs) -> subprocess.Popen:
        path = work / f"{name}.json"
        path.write_text(json.dumps(spec))
        for p in (work, path, *[q for q in work.rglob("*")]):
            if user:
                os.chown(p, NOBODY, NOBODY, follow_symlinks=False)
        return subprocess.Popen([python, "-I", "-S", str(script), str(path)], cwd=work, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **user, **kwargs)

    yield popen, work
    shutil.rmtree(work, ignore_errors=True)


def unavailable(output: str) -> None:
    """Skip (fail under $CI) when this machine allows no unprivileged user namespace."""
    if "unshare (user namespace)" in output:
        reason = f"no unprivileged user namespaces here: {output.strip()}"
        if os.environ.get("CI"):
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)


def layers(work: Path, name: str) -> dict:
    for folder in ("root", "upper", "work"):
        (work / name / folder).mkdir(parents=True)
    return {"root": str(work / name / "root"), "lower": "/", "upper": str(work / name / "upper"), "work": str(work / name / "work")}


def test_a_container_sandbox_without_root(as_user):
    popen, work = as_user
    (work / "home").mkdir()
    (work / "team").mkdir()
    (work / "team" / "course.txt").write_text("read me")
    spec = {
        "mode": "run", **layers(work, "pod"), "hostname": "jupyter-ann",
        "binds": [{"source": str(work / "home"), "target": "/home/jovyan", "readOnly": False},
                  {"source": str(work / "team"), "target": "/shared/team", "readOnly": True}],
        "argv": ["python3", "-c", PROBE], "env": {"PATH": os.environ["PATH"], "HOME": "/home/jovyan"},
        "cwd": "/home/jovyan",
    }
    proc = popen(spec, "pod")
    output, _ = proc.communicate(timeout=60)
    unavailable(output)
    assert proc.returncode == 0, output
    seen = json.loads(output.strip().splitlines()[-1])
    assert seen["/home/jovyan/mine.txt"] == "written" and (work / "home" / "mine.txt").read_text() == "x"
    assert seen["/shared/team/new.txt"] == "EROFS" and seen["team"] == "read me"
    assert seen["/opt/sandboxed-write.txt"] == "written"
    assert (work / "pod" / "upper" / "opt" / "sandboxed-write.txt").read_text() == "x"  # on the writable layer
    assert not Path("/opt/sandboxed-write.txt").exists()  # not on the host
    assert (seen["hostname"], seen["cwd"]) == ("jupyter-ann", "/home/jovyan")
    assert seen["pid"] <= 3  # a PID namespace of its own: init, then the command


def test_a_guest_sandbox_without_root_is_joined(as_user):
    popen, work = as_user
    spec = {"mode": "run", **layers(work, "guest"), "hostname": "vm-ann", "binds": [], "argv": None, "env": {}, "cwd": "/"}
    guest = popen(spec, "guest", start_new_session=True)  # its process group: the agent signals the group
    try:
        first = guest.stdout.readline()
        if sandbox.READY not in first:
            guest.wait(30)
            unavailable(first + guest.stdout.read())
            pytest.fail(f"the guest's sandbox did not come up: {first}")
        write = {"mode": "join", "pid": guest.pid, "argv": ["sh", "-c", "echo kept > /etc/motd-test && hostname"],
                 "env": {"PATH": "/usr/bin:/bin"}, "cwd": "/"}
        unit = popen(write, "unit")
        output, _ = unit.communicate(timeout=60)
        assert (unit.returncode, output.strip()) == (0, "vm-ann"), output
        look = {"mode": "join", "pid": guest.pid, "argv": ["cat", "/etc/motd-test"], "env": {"PATH": "/usr/bin:/bin"}, "cwd": "/"}
        exec_ = popen(look, "exec")
        output, _ = exec_.communicate(timeout=60)
        assert (exec_.returncode, output) == (0, "kept\n")
        assert (work / "guest" / "upper" / "etc" / "motd-test").read_text() == "kept\n"  # the root disk
        assert not Path("/etc/motd-test").exists()
    finally:
        os.killpg(guest.pid, signal.SIGTERM)
        guest.wait(30)
