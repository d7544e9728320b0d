"""What the hub's home page shows of a user's workspaces, as data (pure).

- each server (default and named): its phase as JupyterHub knows it
  (Starting while a start is pending, Stopping while a stop is, Running when
  ready, else Stopped), the profile it runs or last ran, the GPUs it holds
  now and the card-hours it used this month;
- the quota warning that applies now: the enforcer's own message (its
  warning before it stops a server, :mod:`workspacespawner.quota.announce`),
  else a note when 10% or less of the month's card-hours are left;
- the idle-GPU warnings of their servers (:mod:`workspacespawner.idle`): one line each;
- the user's disks together, against their quota;
- the user's Retained disks (a deleted named server's, or a deleted user's
  home) with the day the purge may delete them and how to get each back:
  starting the server it served again reuses it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from workspacespawner.core import names
from workspacespawner.core.quantities import gib, parse_quantity
from workspacespawner.lifecycle.disks import phase_of, requested_bytes
from workspacespawner.lifecycle.phases import REPLACED, Phase, Status, rfc3339
from workspacespawner.quota.policy import number, when
from workspacespawner.quota.service import MonthBalance

#: The share of the month's card-hours left at or under which the home page warns (0.1: 10%).
LOW_SHARE = 0.1


@dataclass(frozen=True)
class ServerRow:
    """One server on the home page: ``name`` (``""``: the default server), ``phase`` (Starting, Running, Stopping,
    Stopped), ``profile`` (display name, ``""`` before its first start), ``gpus`` held now with their ``gpu_type``,
    ``card_hours`` used this month (None: quotas off), ``url`` (its path while running, else ``""``)."""

    name: str
    phase: str
    profile: str
    gpus: int
    gpu_type: str
    card_hours: float | None
    url: str


@dataclass(frozen=True)
class RetainedDisk:
    """A Retained disk of the user: ``name``, ``size`` (``"10 GiB"``), the ``server`` it served, ``retain_until``
    (RFC 3339) and ``how`` to get it back, in a sentence; ``title``: what it is
    (:func:`~workspacespawner.core.names.disk_title`)."""

    name: str
    size: str
    server: str
    retain_until: str
    how: str
    title: str = ""


def server_phase(active: bool, ready: bool, pending: str | None) -> str:
    """The phase the home page shows from JupyterHub's view of a server (``Spawner.active``/``ready``/``pending``)."""
    if pending == "spawn":
        return str(Phase.STARTING)
    if pending == "stop":
        return str(Phase.STOPPING)
    if ready or active:
        return str(Phase.RUNNING)
    return str(Phase.STOPPED)


def server_row(*, name: str, active: bool, ready: bool, pending: str | None, profile, url: str,
               month: MonthBalance | None, shown=str) -> ServerRow:
    """A :class:`ServerRow`; ``profile``: the server's :class:`~workspacespawner.config.profiles.ResolvedProfile`
    (None before its first start); ``month``: the user's month (None: quotas off or unreadable); ``shown``: a GPU
    type's name for people (:meth:`~workspacespawner.config.gpueconomy.GPUEconomy.display_name`)."""
    phase = server_phase(active, ready, pending)
    holds = phase != str(Phase.STOPPED) and profile is not None
    return ServerRow(
        name=name,
        phase=phase,
        profile=profile.display_name if profile is not None else "",
        gpus=profile.gpus if holds else 0,
        gpu_type=shown(profile.gpu_product or "") if holds else "",
        card_hours=round(month.card_hours_of(name), 2) if month is not None else None,
        url=url if ready else "",
    )


def quota_warning(month: MonthBalance | None, announced: str) -> str | None:
    """The warning the home page shows: the enforcer's ``announced`` message, else a low or used-up balance; None."""
    if announced:
        return announced
    if month is None or month.limits.card_hours_per_month <= 0:
        return None
    limit = month.limits.card_hours_per_month
    left = max(0.0, limit - month.usage.card_hours)
    if left <= 0:
        return (f"You have used all {number(limit)} card-hours of this month: GPU profiles cannot start until they "
                f"reset on {when(month.usage.period_end)}. CPU profiles still can.")
    if left <= LOW_SHARE * limit:
        return (f"You have {number(round(left, 2))} of your {number(limit)} card-hours left this month; "
                f"they reset on {when(month.usage.period_end)}.")
    return None


def idle_lines(notices: list[str]) -> list[str]:
    """The home page's idle-GPU lines: each server's warning or stop message (:mod:`workspacespawner.idle.notices`),
    blank ones dropped, each once."""
    return list(dict.fromkeys(text for text in notices if text))


def retained_disks(disks: list[dict]) -> list[RetainedDisk]:
    """The Retained ones of ``disks`` (the user's PVCs and DataVolumes), oldest deadline first."""
    rows = []
    for obj in disks:
        if phase_of(obj) != str(Phase.RETAINED):
            continue
        status = Status.from_object(obj)
        server = status.server if status else ""
        until = status.retain_until if status else None
        target = f"your server “{server}”" if server else "your default server"
        kept = f" until {until:%Y-%m-%d %H:%M} UTC" if until else ""
        if status is not None and status.reason == REPLACED:  # a restore or a rebuild: the server goes on with the new disk
            how = (f"A newer disk of {target} replaced it (a restore or a rebuild); it is kept{kept} in case you need "
                   "something from it, then deleted. Give it back on the Workspaces dashboard to free its space sooner.")
        else:
            how = f"Start {target} again to use it" + (f"; it is kept{kept}." if until else ".")
        rows.append(RetainedDisk(
            name=obj["metadata"]["name"],
            title=names.disk_title((obj["metadata"].get("labels") or {}).get(names.DISK_LABEL, ""), server),
            size=gib(requested_bytes(obj)),
            server=server,
            retain_until=rfc3339(until) if until else "",
            how=how,
        ))
    return sorted(rows, key=lambda r: (r.retain_until or "~", r.name))


def disk_line(disks: list[dict], limit: str | None) -> str:
    """``Your disks: 20 GiB of 50 GiB.``: what the user's disks ask for together, and the quota (``limit``, a
    quantity; None: none)."""
    sizes: dict[str, int] = {}
    for disk in sorted(disks, key=lambda d: d.get("kind") != "PersistentVolumeClaim"):  # a root disk is a PVC and a DataVolume
        sizes.setdefault(disk["metadata"]["name"], requested_bytes(disk))
    used = gib(sum(sizes.values()))
    return f"Your disks: {used} of {gib(parse_quantity(limit))}." if limit else f"Your disks: {used}."


def home_data(servers: list[ServerRow], warning: str | None, retained: list[RetainedDisk], disks: str = "") -> dict:
    """The home page endpoint's JSON body: ``{"servers": [...], "warning": str | None, "retained": [...],
    "disks": str}`` (``disks``: :func:`disk_line`)."""
    return {"servers": [asdict(s) for s in servers], "warning": warning, "retained": [asdict(r) for r in retained],
            "disks": disks}
