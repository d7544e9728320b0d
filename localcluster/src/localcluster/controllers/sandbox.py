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

Without root (a laptop's demo), the sandbox makes a user namespace too, in
which the caller's user is root: the same mounts, with two differences the
kernel asks for. A mount namespace of one's own may not overlay ``/``
itself (its submounts are locked), so ``/`` is a tmpfs holding one overlay
per top-level directory of ``lower`` (upper and work directories of the
same names; a directory that cannot be overlaid is bound read-only), and
the overlays keep their metadata in ``user.`` extended attributes
(``userxattr``). A new top-level entry of ``/`` then lives only as long as
the sandbox.

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

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWPID, CLONE_NEWUSER = 0x00020000, 0x04000000, 0x20000000, 0x10000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
#: statvfs(3) flags of a mount, as the mount(2) flags a read-only remount must keep (the kernel refuses to
#: clear them on a mount a user namespace inherited, and should not clear them on any).
KEPT_FLAGS = {
    os.ST_NOSUID: MS_NOSUID, os.ST_NODEV: MS_NODEV, os.ST_NOEXEC: MS_NOEXEC,
    os.ST_NOATIME: MS_NOATIME, os.ST_NODIRATIME: MS_NODIRATIME, os.ST_RELATIME: MS_RELATIME,
}
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
        kept = os.statvfs(target).f_flag
        flags = sum(flag for st, flag in KEPT_FLAGS.items() if kept & st)
        mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | flags)


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


def is_whiteout(path: str) -> bool:
    """Whether ``path`` is an overlayfs whiteout (a character device 0:0): the lower entry is deleted."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return (st.st_mode & 0o170000) == 0o020000 and st.st_rdev == 0


def overlay_each_top_directory(root: str, lower: str, upper: str, work: str) -> None:
    """Without root: ``root`` a tmpfs with one overlay per top-level entry of ``lower`` and ``upper``.

    A directory of ``lower`` is overlaid with ``upper``'s of the same name
    (created); one that cannot be (its mount has locked submounts) is bound
    read-only; a symlink is copied; an entry only ``upper`` has is bound as
    it is; a whiteout at the top of ``upper`` hides its entry.
    """
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    names = sorted(set(os.listdir(lower)) | set(os.listdir(upper)))
    for name in names:
        source, above, target = os.path.join(lower, name), os.path.join(upper, name), os.path.join(root, name)
        if is_whiteout(above):
            continue
        if os.path.islink(above) or (not os.path.lexists(above) and os.path.islink(source)):
            os.symlink(os.readlink(above if os.path.islink(above) else source), target)
        elif os.path.isdir(source) and "/" + name not in OWN_MOUNTS:
            os.makedirs(above, exist_ok=True)
            os.makedirs(os.path.join(work, name), exist_ok=True)
            os.makedirs(target)
            options = f"lowerdir={source},upperdir={above},workdir={os.path.join(work, name)},userxattr"
            try:
                mount("overlay", target, "overlay", 0, options)
            except SetupError:
                bind(source, target, read_only=True, recursive=True)
        elif os.path.isdir(source):
            os.makedirs(target)
        elif os.path.lexists(above) or os.path.isfile(source):
            bind(above if os.path.lexists(above) else source, target, read_only=not os.path.lexists(above))


def build_root(spec: dict, rootless: bool = False) -> None:
    """The sandbox's filesystem at ``spec["root"]``, then made ``/`` (see the module docstring).

    ``rootless``: inside a user namespace of the caller's (see the module
    docstring): ``/`` of per-directory overlays, mounts bound recursively.
    """
    root = spec["root"]
    carried = [p for p in host_mounts() if not (p + "/").startswith(root.rstrip("/") + "/") and not root.startswith(p + "/")]
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    if rootless:
        overlay_each_top_directory(root, spec["lower"], spec["upper"], spec["work"])
    else:
        mount("overlay", root, "overlay", 0, f"lowerdir={spec['lower']},upperdir={spec['upper']},workdir={spec['work']}")
    for point in carried:
        if os.path.isdir(point) or os.path.isfile(point):
            bind(point, inside(root, point), read_only=True, recursive=rootless)
    mount("proc", inside(root, "/proc"), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    bind("/sys", inside(root, "/sys"), read_only=True, recursive=rootless)
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
    rootless = os.geteuid() != 0
    if spec["mode"] == "join":
        target = _namespace_init(spec["pid"])
        namespaces = ("user", "uts", "pid", "mnt") if rootless else ("uts", "pid", "mnt")
        fds = [os.open(f"/proc/{target}/ns/{ns}", os.O_RDONLY) for ns in namespaces]
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
    if rootless:
        become_root_of_a_user_namespace()
    else:
        _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWPID), "unshare")
    init = os.fork()
    if init == 0:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        try:
            build_root(spec, rootless)
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


def become_root_of_a_user_namespace() -> None:
    """Unshare user, mount, UTS and PID namespaces; the caller's user and group are root in the new user namespace."""
    uid, gid = os.geteuid(), os.getegid()
    _check(_libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWPID), "unshare (user namespace)")
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


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
