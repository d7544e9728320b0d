"""A VM guest's boot, emulated: cloud-init NoCloud user data and systemd units on a root directory.

The guest's root filesystem is a host directory (its root disk's PVC
directory), so what boot leaves there persists across VM stops and starts,
as on a real root disk. :class:`GuestBoot` does what cloud-init and systemd
would do with a ``#cloud-config`` document, honouring cloud-init's
per-instance semantics:

* the instance id (KubeVirt passes ``spec.domain.firmware.uuid``, stable per
  VM; random when the VMI has none) is remembered on the root disk in
  ``/var/lib/cloud/data/instance-id``. ``users``, ``write_files``,
  ``mounts`` and ``runcmd`` run only on the first boot of an instance,
  unless the user data lists them (``users_groups``, ``write_files``,
  ``mounts``, ``runcmd`` or ``scripts_user``) with frequency ``always`` in
  ``cloud_init_modules``, ``cloud_config_modules`` or
  ``cloud_final_modules``; ``bootcmd`` runs on every boot. Other modules
  (``fs_setup``, ``disk_setup``, ``packages``, ...) are ignored: a disk
  here is already a directory;
* ``users`` entries become ``/etc/passwd`` lines (name, uid, ``homedir``,
  ``shell``): a unit's ``User=`` takes its ``HOME`` from there;
* ``write_files`` entries (``path``, ``content``, ``encoding`` b64/gzip,
  ``permissions``, ``append``) are written under the root;
* the init stage runs in the order of cloud-init's default
  ``cloud_init_modules``: ``bootcmd``, ``write_files``, ``mounts``, then
  ``users_groups`` (``runcmd`` comes later, after the units);
* ``mounts`` entries become ``/etc/fstab`` lines, the device as cloud-init
  writes it (a short name like ``vdb`` becomes ``/dev/vdb`` when that disk
  exists; anything else, such as a virtiofs tag, stays as written); on
  every boot each fstab line whose device is known
  (``/dev/disk/by-id/virtio-<serial>``, with the 20-character limit of
  virtio serials, ``/dev/vdX`` by disk order, or for type ``virtiofs`` the
  tag of a VMI filesystem) is mounted: the mount point inside the root
  becomes a symlink to that disk's or filesystem's directory;
* of ``runcmd`` and ``bootcmd``, only ``systemctl`` commands mean anything
  here (``enable [--now]``, ``disable [--now]``, ``start``, ``restart``,
  ``stop``); everything else is logged and skipped, since it would run on
  the host. ``enable`` links the unit into its ``WantedBy=`` target's
  ``.wants`` directory on the root disk, so it starts on later boots too.

:func:`parse_unit` reads the parts of a ``.service`` file the node agent
honours: ``ExecStart``, ``Environment``, ``EnvironmentFile``,
``WorkingDirectory``, ``User`` (for ``HOME`` only), ``Restart``,
``RestartSec`` and ``WantedBy``, with the unit specifiers ``%%``, ``%n``,
``%N``, ``%p`` and ``%i`` resolved as systemd does on loading the unit.
:func:`expand_exec_argv` expands the environment in ``ExecStart`` at start
(systemd.service "Command lines"), :func:`parse_environment_file` reads an
``EnvironmentFile=`` as systemd does (systemd.exec).
"""

from __future__ import annotations

import base64
import gzip
import logging
import re
import shlex
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .runtime import Filesystem

log = logging.getLogger("localcluster")

UNIT_DIRS = ("/etc/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system")
BOOT_TARGETS = ("multi-user.target", "default.target", "graphical.target")
INSTANCE_ID_FILE = "/var/lib/cloud/data/instance-id"
VIRTIO_SERIAL_MAX = 20
#: cloud-init's DEVICE_NAME_FILTER: the short names it turns into ``/dev/<name>`` (when such a disk exists).
DEVICE_NAME = re.compile(r"x?[shv]d[a-z][0-9]*|sr[0-9]+")
_RESTART = {"no": "Never", "always": "Always", "on-success": "Never"}


# -- systemd ----------------------------------------------------------------------


def unit_name(name: str) -> str:
    """``jupyter`` -> ``jupyter.service``; names with a unit suffix stay as they are."""
    return name if re.search(r"\.(service|target|socket|timer|mount|path)$", name) else f"{name}.service"


def _seconds(text: str) -> float:
    """A systemd time span (``5``, ``5s``, ``100ms``, ``1min``) in seconds."""
    match = re.fullmatch(r"\s*([0-9.]+)\s*(ms|s|sec|min|m)?\s*", text or "")
    if not match:
        return 0.1
    number, unit = float(match.group(1)), match.group(2) or "s"
    return number / 1000 if unit == "ms" else number * 60 if unit in ("min", "m") else number


@dataclass
class Unit:
    """What the node agent reads from a ``.service`` file."""

    name: str
    exec_start: list[str] = field(default_factory=list)
    environment: dict[str, str] = field(default_factory=dict)
    environment_files: list[tuple[str, bool]] = field(default_factory=list)  # (path, optional)
    working_directory: str | None = None
    user: str | None = None
    restart: str = "Never"
    restart_sec: float = 0.1
    wanted_by: list[str] = field(default_factory=list)


def _unit_lines(text: str):
    """(section, key, value) for each assignment, continuation lines joined."""
    section, pending = "", ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
        elif "=" in line:
            key, value = line.split("=", 1)
            yield section, key.strip(), value.strip()


def resolve_specifiers(value: str, unit: str) -> str:
    """systemd's unit specifiers in a setting of ``unit``.

    ``%%`` is ``%``; ``%n`` the unit name, ``%N`` it without its suffix,
    ``%p`` the part before ``@`` and ``%i`` the instance after it. Other
    specifiers are kept as written.
    """
    stem = unit.rsplit(".", 1)[0]
    prefix, _, instance = stem.partition("@")
    table = {"%": "%", "n": unit, "N": stem, "p": prefix, "i": instance}
    return re.sub(r"%(.)", lambda m: table.get(m.group(1), m.group(0)), value, flags=re.DOTALL)


def parse_unit(name: str, text: str) -> Unit:
    """The honoured settings of unit file ``text`` (see the module docstring)."""
    unit = Unit(unit_name(name))

    def resolved(value: str) -> str:
        return resolve_specifiers(value, unit.name)

    for section, key, value in _unit_lines(text):
        if section == "Service" and key == "ExecStart" and value:
            unit.exec_start = [resolved(word) for word in shlex.split(value.lstrip("-@+!:"))]
        elif section == "Service" and key == "Environment":
            for assignment in shlex.split(value):
                env_key, _, env_value = resolved(assignment).partition("=")
                unit.environment[env_key] = env_value
        elif section == "Service" and key == "EnvironmentFile":
            unit.environment_files.append((resolved(value.lstrip("-")), value.startswith("-")))
        elif section == "Service" and key == "WorkingDirectory":
            unit.working_directory = resolved(value)
        elif section == "Service" and key == "User":
            unit.user = resolved(value)
        elif section == "Service" and key == "Restart":
            unit.restart = _RESTART.get(value, "OnFailure")
        elif section == "Service" and key == "RestartSec":
            unit.restart_sec = _seconds(value)
        elif section == "Install" and key == "WantedBy":
            unit.wanted_by += value.split()
    return unit


#: Environment variable names systemd accepts (env_name_is_valid); assignments to others are ignored.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def guest_os_info(os_release: str) -> dict[str, str]:
    """A VMI's ``status.guestOSInfo`` (as KubeVirt's guest agent reports it) from the guest's ``/etc/os-release``."""
    fields = parse_environment_file(os_release)
    keys = {"id": "ID", "name": "NAME", "prettyName": "PRETTY_NAME", "version": "VERSION", "versionId": "VERSION_ID"}
    return {ours: fields[theirs] for ours, theirs in keys.items() if theirs in fields}


def parse_environment_file(text: str) -> dict[str, str]:
    """``KEY=VALUE`` lines as systemd reads an ``EnvironmentFile=`` (or ``/etc/os-release``).

    Blank lines and lines starting with ``#`` or ``;`` are skipped;
    whitespace around the key and value goes. Quoted parts of a value lose
    their quotes and join what follows: inside single quotes everything is
    literal; inside double quotes a backslash is dropped before ``"``,
    ``\\``, backquote and ``$`` and kept before anything else; outside
    quotes a backslash escapes the next character, and before a line break
    joins the next line. A key that is not a variable name (``export X``) is
    ignored, as systemd ignores it.
    """
    return {key: value for key, value in _env_file_assignments(text) if ENV_NAME.fullmatch(key)}


def _env_file_assignments(text: str):
    """The (key, value) pairs of ``text``, read character by character as systemd's env-file parser does."""
    newline, whitespace = "\n\r", " \t\n\r"
    state, key, value = "pre_key", "", ""
    key_end = value_end = None  # where trailing whitespace starts
    for c in text:
        if state == "pre_key":
            if c in "#;":
                state = "comment"
            elif c not in whitespace:
                state, key, key_end = "key", c, None
        elif state == "key":
            if c in newline:
                state, key = "pre_key", ""
            elif c == "=":
                state, value, value_end = "pre_value", "", None
            else:
                key_end, key = _blank_from(c, key_end, len(key)), key + c
        elif state in ("pre_value", "value") and c in newline:
            yield key[:key_end], value[:value_end] if state == "value" else value
            state, key = "pre_key", ""
        elif state == "pre_value":
            if c in "'\"\\":
                state = {"'": "single", '"': "double", "\\": "escape"}[c]
            elif c not in whitespace:
                state, value = "value", value + c
        elif state == "value":
            if c == "\\":
                state, value_end = "escape", None
            else:
                value_end, value = _blank_from(c, value_end, len(value)), value + c
        elif state == "escape":
            state, value = "value", value + (c if c not in newline else "")
        elif state == "single":
            state, value = ("pre_value", value) if c == "'" else ("single", value + c)
        elif state == "double":
            if c in '"\\':
                state = "pre_value" if c == '"' else "double_escape"
            else:
                value += c
        elif state == "double_escape":
            state = "double"
            if c in '"\\`$':
                value += c
            elif c != "\n":
                value += "\\" + c
        elif state == "comment":
            if c == "\\":
                state = "comment_escape"
            elif c in newline:
                state = "pre_key"
        elif state == "comment_escape":
            state = "pre_key" if c in newline else "comment"
    if state in ("pre_value", "value", "escape", "single", "double", "double_escape"):
        yield key[:key_end], value[:value_end] if state == "value" else value


def _blank_from(c: str, mark: int | None, length: int) -> int | None:
    """Where the trailing whitespace of a text of ``length`` characters starts once ``c`` is added to it (None: there is none)."""
    if c not in " \t\n\r":
        return None
    return length if mark is None else mark


def expand_exec_argv(argv: list[str], env: dict[str, str]) -> list[str]:
    """ExecStart's words with the unit's environment expanded, as systemd does at start.

    A word that is exactly ``$VAR`` becomes the variable's value split at
    whitespace (quotes honoured): zero or more words. Elsewhere ``${VAR}``
    becomes the value as it is (empty if unset), ``$$`` a literal ``$``, and a
    ``$VAR`` inside a longer word stays as written.
    """
    out: list[str] = []
    for word in argv:
        if word.startswith("$") and word[1:2] not in ("{", "$"):
            value = env.get(word[1:]) if ENV_NAME.fullmatch(word[1:]) else None
            if value is not None:
                try:
                    out.extend(shlex.split(value))
                except ValueError:
                    out.extend(value.split())
            continue
        out.append(re.sub(r"\$\$|\$\{([^}:]*)\}", lambda m: "$" if m.group(1) is None else env.get(m.group(1), ""), word))
    return out


def home_of(rootfs: Filesystem, user: str | None) -> str:
    """The home directory of ``user`` in the guest: its ``/etc/passwd`` entry, else ``/home/<user>`` (``/root`` for root)."""
    if user in (None, "", "root"):
        return "/root"
    passwd = rootfs.map("/etc/passwd")
    for line in passwd.read_text().splitlines() if passwd.is_file() else []:
        fields = line.split(":")
        if len(fields) >= 6 and fields[0] == user and fields[5]:
            return fields[5]
    return f"/home/{user}"


def find_unit(rootfs: Filesystem, name: str) -> Path | None:
    """The unit file for ``name`` on the guest's disk, or None."""
    for directory in UNIT_DIRS:
        path = rootfs.map(f"{directory}/{unit_name(name)}")
        if path.is_file():
            return path
    return None


# -- cloud-init -------------------------------------------------------------------


def parse_user_data(text: str) -> dict:
    """A ``#cloud-config`` document as a dict; ``{}`` for anything else (scripts, MIME, empty)."""
    if not text.lstrip().startswith("#cloud-config"):
        if text.strip():
            log.debug("guest user data is not #cloud-config: ignored")
        return {}
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as e:
        log.warning("guest user data is not valid YAML: %s", e)
        return {}
    return config if isinstance(config, dict) else {}


def _always_modules(config: dict) -> set[str]:
    names = set()
    for stage in ("cloud_init_modules", "cloud_config_modules", "cloud_final_modules"):
        for entry in config.get(stage) or []:
            if isinstance(entry, list) and len(entry) >= 2 and entry[1] in ("always", "once-per-boot"):
                names.add(str(entry[0]).replace("-", "_"))
    return names


def _file_content(entry: dict) -> bytes:
    content = entry.get("content") or ""
    data = content.encode() if isinstance(content, str) else bytes(content)
    encoding = str(entry.get("encoding") or "").lower()
    if encoding in ("b64", "base64", "gz+b64", "gzip+base64", "gz+base64", "gzip+b64"):
        data = base64.b64decode(data)
    if encoding.startswith(("gz", "gzip")):
        data = gzip.decompress(data)
    return data


def systemctl_command(command) -> tuple[str, list[str], set[str]] | None:
    """(verb, units, flags) of a ``systemctl`` command line (a string or a list); None for other commands."""
    argv = shlex.split(command) if isinstance(command, str) else [str(part) for part in command or []]
    if argv[:1] == ["sudo"]:
        argv = argv[1:]
    if not argv or Path(argv[0]).name != "systemctl":
        return None
    words = [a for a in argv[1:] if not a.startswith("-")]
    flags = {a for a in argv[1:] if a.startswith("-")}
    if not words:
        return None
    return words[0], [unit_name(u) for u in words[1:]], flags


class GuestBoot:
    """One boot of a guest: what cloud-init and systemd do to ``rootfs`` and which units end up running.

    ``devices`` maps device paths (``/dev/disk/by-id/virtio-<serial>``,
    ``/dev/vdb``) and virtiofs tags (``team-a``) to host directories; ``say`` writes a line to the guest's
    console log. After :meth:`run`, ``mounts`` maps mount points to host
    directories and ``units`` lists the units started, in order. With
    ``link_mounts`` each mount point on the disk becomes a symlink to its
    directory (for a guest whose paths are mapped; a sandboxed guest has
    them bind-mounted instead).
    """

    def __init__(
        self, rootfs: Path, user_data: str, instance_id: str | None, devices: dict[str, Path], say: Callable[[str], None],
        link_mounts: bool = True,
    ):
        self.rootfs = Path(rootfs)
        self.link_mounts = link_mounts
        self.config = parse_user_data(user_data)
        self.instance_id = instance_id or str(uuid.uuid4())
        self.devices = devices
        self.say = say
        self.mounts: dict[str, Path] = {}
        self.units: list[str] = []
        self.fs = Filesystem(self.rootfs)

    def run(self) -> GuestBoot:
        """Boot: fstab mounts, then cloud-init's init stage (bootcmd, write_files, mounts, users_groups), enabled units, runcmd."""
        id_file = self.fs.map(INSTANCE_ID_FILE)
        previous = id_file.read_text().strip() if id_file.is_file() else ""
        new_instance = previous != self.instance_id
        always = _always_modules(self.config)
        self.say(f"cloud-init: instance {self.instance_id} ({'first boot' if new_instance else 'seen before'})")
        self._mount_fstab()
        # cloud-init's init stage, in the order of its default cloud_init_modules
        self._systemctl_all(self.config.get("bootcmd"), "bootcmd")
        if new_instance or "write_files" in always:
            self._write_files(self.config.get("write_files") or [])
        if new_instance or "mounts" in always:
            self._update_fstab(self.config.get("mounts") or [])
            self._mount_fstab()
        if new_instance or "users_groups" in always:
            self._add_users(self.config.get("users") or [])
        for unit in self._enabled_units():
            self._start(unit)
        if new_instance or always & {"runcmd", "scripts_user"}:
            self._systemctl_all(self.config.get("runcmd"), "runcmd")
        id_file.parent.mkdir(parents=True, exist_ok=True)
        id_file.write_text(self.instance_id + "\n")
        return self

    # -- users_groups and write_files -----------------------------------------

    def _add_users(self, users: list) -> None:
        """Give each user (the dict entries of ``users``) a line in ``/etc/passwd``, for its home directory."""
        passwd = self.fs.map("/etc/passwd")
        lines = passwd.read_text().splitlines() if passwd.is_file() else []
        for user in users:
            if not isinstance(user, dict) or not user.get("name"):
                continue
            name = str(user["name"])
            uid = str(user.get("uid", 1000))
            entry = f"{name}:x:{uid}:{uid}::{user.get('homedir') or f'/home/{name}'}:{user.get('shell') or '/bin/sh'}"
            lines = [line for line in lines if line.split(":", 1)[0] != name] + [entry]
            self.say(f"cloud-init: users_groups {name}")
        passwd.parent.mkdir(parents=True, exist_ok=True)
        passwd.write_text("".join(f"{line}\n" for line in lines))

    def _write_files(self, entries: list) -> None:
        """Write each entry under the root; a bad entry is reported and skipped, as cloud-init does."""
        for entry in entries:
            if not isinstance(entry, dict) or not entry.get("path"):
                continue
            try:
                target = self.fs.map(str(entry["path"]))
                target.parent.mkdir(parents=True, exist_ok=True)
                data = _file_content(entry)
                with target.open("ab" if entry.get("append") else "wb") as f:
                    f.write(data)
                permissions = entry.get("permissions")
                target.chmod(int(str(permissions), 8) if permissions is not None else 0o644)
            except (OSError, ValueError) as e:
                self.say(f"cloud-init: write_files {entry['path']} failed: {e}")
                continue
            self.say(f"cloud-init: write_files {entry['path']} ({len(data)} bytes)")

    # -- mounts --------------------------------------------------------------

    def _update_fstab(self, entries: list) -> None:
        fstab = self.fs.map("/etc/fstab")
        kept = [
            line for line in (fstab.read_text().splitlines() if fstab.is_file() else [])
            if "comment=cloudconfig" not in line
        ]
        for entry in entries:
            if not isinstance(entry, list) or len(entry) < 2 or not entry[0] or not entry[1]:
                continue
            device = str(entry[0])
            if DEVICE_NAME.fullmatch(device) and f"/dev/{device}" in self.devices:
                device = f"/dev/{device}"  # cloud-init's sanitize_devname: a short name of a present disk
            fstype = entry[2] if len(entry) > 2 and entry[2] else "auto"
            options = entry[3] if len(entry) > 3 and entry[3] else "defaults,nofail"
            kept.append(f"{device}\t{entry[1]}\t{fstype}\t{options},comment=cloudconfig\t0\t2")
        fstab.parent.mkdir(parents=True, exist_ok=True)
        fstab.write_text("".join(f"{line}\n" for line in kept))

    def _device_dir(self, device: str) -> Path | None:
        if device.startswith("/dev/disk/by-id/virtio-"):
            serial = device.removeprefix("/dev/disk/by-id/virtio-")
            device = "/dev/disk/by-id/virtio-" + serial[:VIRTIO_SERIAL_MAX]
        return self.devices.get(device)

    def _mount_fstab(self) -> None:
        fstab = self.fs.map("/etc/fstab")
        if not fstab.is_file():
            return
        for line in fstab.read_text().splitlines():
            fields = line.split()
            if len(fields) < 2 or fields[0].startswith("#") or fields[1] in self.mounts:
                continue
            if len(fields) > 2 and fields[2] == "virtiofs":
                host = None if fields[0].startswith("/") else self.devices.get(fields[0])
            else:
                host = self._device_dir(fields[0])
            if host is None:
                self.say(f"mount: {fields[0]} on {fields[1]}: no such device")
                continue
            self.mounts[fields[1]] = host
            self.say(f"mount: {fields[0]} on {fields[1]}")
        self.fs = Filesystem(self.rootfs, self.mounts)
        if self.link_mounts:
            self.fs.link_mounts()

    # -- systemd -------------------------------------------------------------

    def _enabled_units(self) -> list[str]:
        found = []
        for target in BOOT_TARGETS:
            wants = self.fs.map(f"/etc/systemd/system/{target}.wants")
            if wants.is_dir():
                found += sorted(p.name for p in wants.iterdir() if p.name.endswith(".service"))
        return found

    def _start(self, unit: str) -> None:
        if find_unit(self.fs, unit) is None:
            self.say(f"systemd: Unit {unit} not found.")
        elif unit not in self.units:
            self.units.append(unit)

    def _enable(self, unit: str, enable: bool) -> None:
        path = find_unit(self.fs, unit)
        if path is None:
            self.say(f"systemd: Unit {unit} not found.")
            return
        targets = parse_unit(unit, path.read_text()).wanted_by
        if not targets:
            self.say(f"systemd: {unit} has no [Install] section: not enabled")
        for target in targets:
            link = self.fs.map(f"/etc/systemd/system/{target}.wants/{unit}")
            if enable and not link.is_symlink():
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(f"/etc/systemd/system/{unit}")
            elif not enable and link.is_symlink():
                link.unlink()

    def _systemctl_all(self, commands, stage: str) -> None:
        for command in commands or []:
            parsed = systemctl_command(command)
            if parsed is None:
                self.say(f"cloud-init: {stage}: skipped (not run on the host): {command}")
                continue
            verb, units, flags = parsed
            now = "--now" in flags
            for unit in units:
                if verb in ("enable", "disable"):
                    self._enable(unit, verb == "enable")
                if verb in ("start", "restart", "reload-or-restart") or (verb == "enable" and now):
                    self._start(unit)
                if verb == "stop" or (verb == "disable" and now):
                    self.units = [u for u in self.units if u != unit]
            self.say(f"cloud-init: {stage}: systemctl {verb} {' '.join(units)}")
