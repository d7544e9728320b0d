"""Run one command in a filesystem of its own: the node agent's container and guest sandbox.

Run as a script, by path, with the host's Python (``python3 -I -S sandbox.py
SPEC``), so it needs nothing but the standard library. ``SPEC`` is the path
of a JSON file (read, then deleted: it holds the command's environment):

``{"mode": "run", "root": dir, "lower": dir, "upper": dir, "work": dir,
"binds": [{"source": host path, "target": path inside, "readOnly": bool}],
"hostname": str, "argv": [...] or null, "env": {...}, "cwd": path inside}``
    Make new mount, PID and UTS namespaces; mount at ``root`` an overlay of
    ``lower`` (read-only) under ``upper`` (where writes land, ``work`` its
    overlayfs work directory on the same filesystem); bind the host's other
    filesystems read-only into it, a fresh ``/proc``, the host's ``/dev``
    with a private ``/dev/shm``, ``/sys`` read-only, then every bind at its
    target (``readOnly`` ones read-only, EROFS on write); make it ``/``
    (pivot_root) and run ``argv`` there. With ``argv`` null, nothing runs:
    the sandbox prints :data:`READY` and stays up until SIGTERM (a VM's guest, which units join).
``{"mode": "join", "pid": holder pid, "argv": [...], "env": {...}, "cwd": path inside}``
    Enter the mount, UTS and PID namespaces of the sandbox whose outer
    process is ``pid`` and run ``argv`` there (a guest's unit, ``kubectl exec``).

Process tree: this process stays outside, waits, and exits with the
command's exit code (128+N for signal N, as container runtimes report).
In ``run`` mode its child is PID 1 of the new PID namespace: it reaps
orphans and ends when the command ends, which kills whatever is left in the
namespace; the mounts go with the namespace's last process. Every process
stays in the caller's process group, so signalling the group reaches the
command directly; the two helpers ignore SIGTERM, SIGINT and SIGHUP.

Errors: a setup step that fails prints ``sandbox: <what>: <error>`` and
exits with 125; a command that cannot be executed prints the runtime's
words and exits with 127 (126 when not executable).
"""

import ctypes
import json
import os
import platform
import signal
import sys

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWPID = 0x00020000, 0x04000000, 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
#: The line the sandbox prints once its filesystem is up (a guest's units may join it then).
READY = "sandbox: ready"
PR_SET_PDEATHSIG = 1
#: pivot_root has no libc wrapper everywhere: its system call number per machine.
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}
#: Host mount points not carried into the sandbox as they are (the sandbox has its own).
OWN_MOUNTS = ("/proc", "/sys", "/dev", "/tmp")

_libc = ctypes.CDLL(None, use_errno=True)


class SetupError(Exception):
    pass


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise SetupError(f"{what}: {os.strerror(errno)}")


def _bytes(text: str | None) -> bytes | None:
    return text.encode() if text is not None else None


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    """mount(2); SetupError on failure."""
    _check(_libc.mount(_bytes(source), _bytes(target), _bytes(fstype), ctypes.c_ulong(flags), _bytes(data)), f"mount {target}")


def bind(source: str, target: str, read_only: bool, recursive: bool = False) -> None:
    """Bind ``source`` at ``target`` (made first, as a directory or an empty file; a symlink there is replaced)."""
    if os.path.islink(target):
        os.unlink(target)
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    elif not os.path.lexists(target):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()
    mount(source, target, None, MS_BIND | (MS_REC if recursive else 0))
    if read_only:
        mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY)


def inside(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/"))


def host_mounts() -> list[str]:
    """The host's mount points other than ``/`` and the ones the sandbox makes itself, parents first."""
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4].replace("\\040", " ")
            if point == "/" or any(point == own or point.startswith(own + "/") for own in OWN_MOUNTS):
                continue
            if point not in points:
                points.append(point)
    return points


def build_root(spec: dict) -> None:
    """The sandbox's filesystem at ``spec["root"]``, then made ``/`` (see the module docstring)."""
    root = spec["root"]
    carried = [p for p in host_mounts() if not (p + "/").startswith(root.rstrip("/") + "/") and not root.startswith(p + "/")]
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    options = f"lowerdir={spec['lower']},upperdir={spec['upper']},workdir={spec['work']}"
    mount("overlay", root, "overlay", 0, options)
    for point in carried:
        if os.path.isdir(point) or os.path.isfile(point):
            bind(point, inside(root, point), read_only=True)
    mount("proc", inside(root, "/proc"), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    bind("/sys", inside(root, "/sys"), read_only=True)
    bind("/dev", inside(root, "/dev"), read_only=False, recursive=True)
    mount("shm", inside(root, "/dev/shm"), "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    for entry in sorted(spec.get("binds") or [], key=lambda b: b["target"].rstrip("/").count("/")):
        bind(entry["source"], inside(root, entry["target"]), bool(entry.get("readOnly")))
    os.chdir(root)
    number = PIVOT_ROOT.get(platform.machine())
    if number is None:
        raise SetupError(f"pivot_root: unknown system call number on {platform.machine()}")
    _check(_libc.syscall(number, b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", MNT_DETACH), "unmount the host root")
    os.chdir("/")
    if spec.get("hostname"):
        name = spec["hostname"].encode()
        _check(_libc.sethostname(name, len(name)), "sethostname")


def execute(spec: dict) -> None:  # never returns
    """Become the command: its working directory, environment and program (found on its PATH)."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    argv, env = spec["argv"], spec.get("env") or {}
    try:
        os.makedirs(spec.get("cwd") or "/", exist_ok=True)
        os.chdir(spec.get("cwd") or "/")
    except OSError as e:
        print(f"sandbox: working directory {spec.get('cwd')}: {e.strerror}", file=sys.stderr, flush=True)
        os._exit(125)
    try:
        os.execvpe(argv[0], argv, env)
    except PermissionError as e:
        print(f'exec: "{argv[0]}": {e.strerror}', file=sys.stderr, flush=True)
        os._exit(126)
    except OSError:
        print(f'exec: "{argv[0]}": executable file not found in $PATH', file=sys.stderr, flush=True)
        os._exit(127)


def _ignore(signum, frame) -> None:
    """Signals reach the command through its process group; the helpers only outlive it."""


def wait_for(pid: int, reap_all: bool) -> int:
    """Wait for ``pid`` (reaping any other child on the way when ``reap_all``); its exit code."""
    while True:
        try:
            found, status = os.waitpid(-1 if reap_all else pid, 0)
        except ChildProcessError:
            return 0
        if found == pid:
            return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


def main(spec: dict) -> int:
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _ignore)
    if spec["mode"] == "join":
        target = _namespace_init(spec["pid"])
        fds = [os.open(f"/proc/{target}/ns/{ns}", os.O_RDONLY) for ns in ("uts", "pid", "mnt")]
        try:
            for fd in fds:
                _check(_libc.setns(fd, 0), "setns")
        finally:
            for fd in fds:
                os.close(fd)
        child = os.fork()
        if child == 0:
            execute(spec)
        return wait_for(child, reap_all=False)
    _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWPID), "unshare")
    init = os.fork()
    if init == 0:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        try:
            build_root(spec)
        except (SetupError, OSError) as e:
            print(f"sandbox: {e}", file=sys.stderr, flush=True)
            os._exit(125)
        if spec.get("argv") is None:
            print(READY, flush=True)
            signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(0))
            while True:
                signal.pause()
        command = os.fork()
        if command == 0:
            execute(spec)
        os._exit(wait_for(command, reap_all=True))
    return wait_for(init, reap_all=False)


def _namespace_init(outer: int) -> int:
    """PID 1 of the sandbox whose outer process is ``outer``: that process's only child."""
    with open(f"/proc/{outer}/task/{outer}/children") as f:
        children = f.read().split()
    if not children:
        raise SetupError(f"sandbox {outer} has no running init")
    return int(children[0])


if __name__ == "__main__":
    try:
        with open(sys.argv[1]) as f:
            loaded = json.load(f)
        os.unlink(sys.argv[1])
        sys.exit(main(loaded))
    except (SetupError, OSError) as e:
        print(f"sandbox: {e}", file=sys.stderr, flush=True)
        sys.exit(125)
