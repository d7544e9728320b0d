"""Whether a GPU server is idle, and what to do about it: pure functions, time given by the caller.

For each GPU server of a pass, :func:`decide` weighs what the pass read
(:class:`GPUServer`) against the settings (:class:`Policy`) and the
warning given at an earlier pass, and returns an :class:`IdleVerdict`:

- ``exempt``: the user is in an exempt group or the server runs an exempt
  profile: never warned, never stopped;
- ``active``: used within ``timeout`` (or still starting);
- ``warn``: idle for ``timeout`` or longer; ``stop_at`` says when it will be
  stopped (None: it will not be, only warned);
- ``stop``: warned, and the grace is over: stop it now.

When the server was last used (``last_used``):

- GPU utilisation known (``gpu_util``: the highest of its GPUs' readings
  over the last ``timeout``) and at or above ``threshold``: now (the GPU
  works, even with no tab open);
- known and under ``threshold``: ``timeout`` ago (the GPU did nothing for
  the whole window, even if a tab kept reporting activity), but never
  before the server started;
- unknown: the newest of its start and its reported activity.

A server is stopped only if its GPUs' utilisation was read and found idle,
or ``stop_without_prometheus`` is set: a silent script started with
``nohup`` may use a GPU without any activity the hub can see.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, tzinfo

from workspacespawner.idle.settings import gpu_is_idle

EXEMPT, ACTIVE, WARN, STOP = "exempt", "active", "warn", "stop"

#: The audit log's and the ledger's reason for an idle stop.
STOP_REASON = "idle GPU"
#: The reason word an idle stop leaves on the workspace's ``Stopped`` phase (:mod:`workspacespawner.lifecycle.stopreasons`).
PHASE_REASON = "idle-gpu"


@dataclass(frozen=True)
class Policy:
    """The settings a decision needs: ``timeout`` and ``grace`` (seconds), ``threshold`` (percent; 0: utilisation
    is not used), ``stop_without_prometheus``, ``exempt_groups`` and ``exempt_profiles`` (sets of names).

    Built from :class:`~workspacespawner.idle.settings.GPUIdle` by :meth:`of`.
    """

    timeout: float
    grace: float
    threshold: float = 5.0
    stop_without_prometheus: bool = False
    exempt_groups: frozenset[str] = field(default_factory=frozenset)
    exempt_profiles: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def of(cls, settings) -> Policy:
        """The policy of a :class:`~workspacespawner.idle.settings.GPUIdle`."""
        return cls(
            timeout=settings.gpu_idle_timeout,
            grace=settings.gpu_idle_grace,
            threshold=settings.utilisation_threshold,
            stop_without_prometheus=settings.stop_without_prometheus,
            exempt_groups=frozenset(settings.exempt_groups),
            exempt_profiles=frozenset(settings.exempt_profiles),
        )


@dataclass(frozen=True)
class GPUServer:
    """One running GPU server as a pass sees it.

    ``user``, ``server`` (``""``: the default server), ``profile`` (its slug),
    ``display`` (the profile's name for people), ``groups`` (the user's
    JupyterHub groups), ``gpus`` (units held), ``started`` (aware UTC; None:
    unknown), ``last_activity`` (aware UTC, the newest activity the hub
    knows; None: none), ``gpu_util`` (percent, the highest reading of its
    GPUs over the last timeout; None: not read), ``pending`` (JupyterHub's
    pending action, ``spawn``/``stop``, None when none).
    """

    user: str
    server: str
    profile: str = ""
    display: str = ""
    groups: frozenset[str] = field(default_factory=frozenset)
    gpus: int = 1
    started: datetime | None = None
    last_activity: datetime | None = None
    gpu_util: float | None = None
    pending: str | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.user, self.server)


@dataclass(frozen=True)
class IdleVerdict:
    """What to do with one server: ``action`` (:data:`EXEMPT`, :data:`ACTIVE`, :data:`WARN`, :data:`STOP`),
    ``last_used`` (aware UTC; None when exempt), ``warned_at`` and ``stop_at`` (aware UTC; None when not warned,
    ``stop_at`` None when it will not be stopped), ``measured`` (GPU utilisation decided it)."""

    user: str
    server: str
    action: str
    last_used: datetime | None = None
    warned_at: datetime | None = None
    stop_at: datetime | None = None
    measured: bool = False

    def idle_for(self, now: datetime) -> timedelta:
        """How long the server has been idle at ``now`` (zero when active or exempt)."""
        if self.action in (EXEMPT, ACTIVE) or self.last_used is None:
            return timedelta(0)
        return max(timedelta(0), now - self.last_used)


def exempt(server: GPUServer, policy: Policy) -> bool:
    """Whether ``server`` is never warned nor stopped: its profile, or one of its user's groups, is exempt."""
    return server.profile in policy.exempt_profiles or bool(server.groups & policy.exempt_groups)


def last_used(server: GPUServer, policy: Policy, now: datetime) -> tuple[datetime, bool]:
    """When ``server`` was last used, and whether GPU utilisation decided it (see the module docstring)."""
    start = server.started or now
    if server.gpu_util is not None and policy.threshold > 0:
        if not gpu_is_idle(server.gpu_util, policy.threshold):
            return now, True
        return max(start, now - timedelta(seconds=policy.timeout)), True
    newest = max(start, server.last_activity) if server.last_activity else start
    return min(newest, now), False


def decide(server: GPUServer, policy: Policy, now: datetime, warned_at: datetime | None = None) -> IdleVerdict:
    """The :class:`IdleVerdict` of ``server`` at ``now`` (aware), given the time it was first warned (None: never).

    ``policy.timeout`` 0 makes every server :data:`ACTIVE`. A server warned
    earlier keeps its first warning time while it stays idle, so its stop
    time does not move; once used again, the warning is gone.
    """
    if exempt(server, policy):
        return IdleVerdict(server.user, server.server, EXEMPT)
    if policy.timeout <= 0 or server.pending is not None:
        return IdleVerdict(server.user, server.server, ACTIVE)
    used, measured = last_used(server, policy, now)
    if now - used < timedelta(seconds=policy.timeout):
        return IdleVerdict(server.user, server.server, ACTIVE, used, measured=measured)
    warned = warned_at if warned_at is not None and warned_at >= used else now
    may_stop = measured or policy.stop_without_prometheus
    stop_at = warned + timedelta(seconds=policy.grace) if may_stop else None
    action = STOP if stop_at is not None and now >= stop_at else WARN
    return IdleVerdict(server.user, server.server, action, used, warned, stop_at, measured)


def duration(span: timedelta) -> str:
    """``1 h 5 min``, ``40 min``, ``2 h``: a span for people, to the minute (rounded down); under a minute ``40 s``."""
    if span.total_seconds() < 60:
        return f"{max(0, int(span.total_seconds()))} s"
    minutes = int(span.total_seconds() // 60)
    hours, minutes = divmod(minutes, 60)
    if hours and minutes:
        return f"{hours} h {minutes} min"
    return f"{hours} h" if hours else f"{minutes} min"


def _named(server: str) -> str:
    return f"Your workspace '{server}'" if server else "Your workspace"


def warning_message(verdict: IdleVerdict, now: datetime, tz: tzinfo) -> str:
    """What the user reads on the home page about ``verdict`` (plain text; ``""`` unless warned or stopped).

    ``tz``: the zone the stop time is shown in (the quota's timezone).
    """
    if verdict.action not in (WARN, STOP):
        return ""
    idle = duration(verdict.idle_for(now))
    what = "used no GPU" if verdict.measured else "shown no activity"
    if verdict.action == STOP:
        return (f"{_named(verdict.server)} was stopped: it had {what} for {idle}. "
                "Its disks are kept; start it again when you need it.")
    if verdict.stop_at is None:
        return (f"{_named(verdict.server)} has {what} for {idle} while holding a GPU. "
                "Stop it when you are done to free the GPU for others (disks are kept).")
    at = verdict.stop_at.astimezone(tz)
    return (f"{_named(verdict.server)} has {what} for {idle}; it will be stopped at {at:%H:%M} "
            f"({getattr(tz, 'key', None) or at.tzname() or 'UTC'}) (disks kept) unless you use it.")
