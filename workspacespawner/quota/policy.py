"""Quota decisions: pure functions of a request, the usage, the limits and the time.

Nothing here touches a database, the cluster or the clock of the machine
except :func:`utcnow`, the one clock of the quota package. Every other
module calls it as ``policy.utcnow()`` (never ``from .policy import
utcnow``), so a test moves time for all of them with
``monkeypatch.setattr(policy, "utcnow", lambda: moment)``.

Units: card-hours (one unit of a GPU resource held for one hour, times
the weight it was charged at: :mod:`workspacespawner.config.gpueconomy`),
GPU units (``gpus``: whole GPUs, MIG slices, time-sliced replicas, VM
devices, of one resource per run), CPU cores, Kubernetes
quantities for memory and disk (``"50Gi"``), aware datetimes (naive ones are
taken as UTC).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from workspacespawner.core.gpuresources import DEVICE, MIG, WHOLE_GPU, GPUResource, parse_gpu_resource
from workspacespawner.core.quantities import gib, parse_quantity

#: The words a refusal's ``reason`` may be (metrics label values, log words).
REASONS = ("card-hours", "concurrency", "instance-size", "disk", "ledger-down")

#: Run states in the ledger: a reservation before Running, an open run, a closed run.
RESERVED, OPEN, CLOSED = "reserved", "open", "closed"
ACTIVE_STATES = (RESERVED, OPEN)


def utcnow() -> datetime:
    """The current time, aware, in UTC: the quota package's only clock."""
    return datetime.now(UTC)


def aware(moment: datetime) -> datetime:
    """``moment`` with a timezone: naive datetimes are taken as UTC."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


# -- limits ----------------------------------------------------------------


@dataclass(frozen=True)
class Limits:
    """What one user may use.

    ``card_hours_per_month``: weighted card-hours per calendar month (0:
    no GPU time). ``max_concurrent``: workspaces starting, running or stopping at
    once, default and named servers, containers and VMs alike.
    ``max_cpu`` (cores), ``max_memory`` (quantity), ``max_gpus``: the
    largest single workspace (None: no limit; ``max_gpus`` counts units of
    any GPU resource: GPUs, MIG slices, replicas). ``max_disk``: the user's
    disks together, home plus VM root disks (quantity; None: no limit).
    """

    card_hours_per_month: float = 50.0
    max_concurrent: int = 2
    max_cpu: float | None = None
    max_memory: str | None = None
    max_gpus: int | None = None
    max_disk: str | None = "50Gi"


LIMIT_NAMES = tuple(f.name for f in fields(Limits))
_QUANTITY_LIMITS = ("max_memory", "max_disk")
_OPTIONAL_LIMITS = ("max_cpu", "max_memory", "max_gpus", "max_disk")


def check_limit(name: str, value):
    """``value`` checked (and normalized) for the limit ``name``; ValueError saying what is wrong.

    The message reads after the setting's name: ``"must be ..., not ..."``.
    """
    if name not in LIMIT_NAMES:
        raise ValueError(f"is not a quota limit (known: {', '.join(LIMIT_NAMES)})")
    if value is None:
        if name in _OPTIONAL_LIMITS:
            return None
        raise ValueError("must be set (None is allowed only for max_cpu, max_memory, max_gpus and max_disk)")
    if name in _QUANTITY_LIMITS:
        try:
            if isinstance(value, bool) or parse_quantity(value) < 0:
                raise ValueError
        except (ValueError, TypeError):
            raise ValueError(f"must be a Kubernetes quantity such as '50Gi', not {value!r}") from None
        return str(value)
    if name in ("max_concurrent", "max_gpus"):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"must be a whole number >= 0, not {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"must be a number >= 0, not {value!r}")
    return float(value)


def _generosity(name: str, value):
    """A sort key: larger is more generous; no limit (None) beats every number."""
    if value is None:
        return math.inf
    return float(parse_quantity(value)) if name in _QUANTITY_LIMITS else float(value)


def effective_limits(
    defaults: Limits,
    group_overrides: dict[str, dict],
    user_overrides: dict[str, dict],
    user: str,
    user_groups,
) -> Limits:
    """The limits of ``user``: defaults, then their groups' overrides, then their own override.

    A group override replaces the default (a student group may get less
    than the default). A user in several groups gets, limit by limit, the
    most generous value any of their groups sets. A per-user override
    (``user_overrides[user]``) wins over everything. Override dicts are
    partial: ``{"card_hours_per_month": 200}``.
    """
    chosen: dict = {}
    for group in sorted(set(user_groups) & set(group_overrides)):
        for name, value in group_overrides[group].items():
            if name not in chosen or _generosity(name, value) > _generosity(name, chosen[name]):
                chosen[name] = value
    chosen.update(user_overrides.get(user) or {})
    return replace(defaults, **chosen)


# -- periods and card-hours ---------------------------------------------------


def zone(tz: str | tzinfo) -> tzinfo:
    """An IANA timezone by name (``"Europe/Berlin"``), or ``tz`` itself if it is one; ValueError otherwise."""
    if isinstance(tz, tzinfo):
        return tz
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise ValueError(f"must be an IANA time zone such as 'Europe/Berlin' or 'UTC', not {tz!r}") from None


def month_bounds(now: datetime, tz: str | tzinfo = "UTC") -> tuple[datetime, datetime]:
    """The calendar month holding ``now`` in timezone ``tz``: ``(first instant, first instant of the next)``.

    Both are aware datetimes in ``tz``; the end is when card-hours reset.
    """
    where = zone(tz)
    local = aware(now).astimezone(where)
    start = datetime(local.year, local.month, 1, tzinfo=where)
    end = datetime(local.year + local.month // 12, local.month % 12 + 1, 1, tzinfo=where)
    return start, end


def named_month(text: str, tz: str | tzinfo = "UTC") -> tuple[datetime, datetime]:
    """The bounds of month ``"YYYY-MM"`` in ``tz``; ValueError for another shape."""
    try:
        year, month = (int(part) for part in text.split("-"))
        middle = datetime(year, month, 15, tzinfo=zone(tz))
    except (ValueError, TypeError):
        raise ValueError(f"a month is written YYYY-MM, such as 2025-06, not {text!r}") from None
    return month_bounds(middle, tz)


@dataclass(frozen=True)
class Run:
    """One workspace run of the ledger (or a reservation for one).

    ``started``: when it reached Running (for a reservation: when it was
    made). ``stopped``: None while open. ``last_seen``: the last time the
    cluster showed it alive. ``state``: ``reserved``, ``open`` or ``closed``.
    ``gpus``: units of ``gpu_resource``; ``gpu_product``: the GPU type
    (the node's ``nvidia.com/gpu.product``; ``""`` until known);
    ``weight``: card-hours one unit costs per hour, fixed at placement.
    """

    gpus: int
    started: datetime
    stopped: datetime | None = None
    user: str = ""
    server_name: str = ""
    profile: str = ""
    workspace_kind: str = "container"
    state: str = CLOSED
    id: int | None = None
    last_seen: datetime | None = None
    stop_reason: str | None = None
    gpu_resource: str = WHOLE_GPU
    gpu_product: str = ""
    weight: float = 1.0

    @property
    def rate(self) -> float:
        """Card-hours this run costs per hour while it holds its GPUs (``gpus`` × ``weight``; 0 for CPU)."""
        return card_hour_rate(self.gpus, self.weight)


def card_hour_rate(units: int, weight: float) -> float:
    """Card-hours per hour of ``units`` GPU units at ``weight`` card-hours per unit-hour (0 for none)."""
    return max(0, units) * weight


def _held(run: Run, start: datetime, until: datetime, now: datetime) -> tuple[datetime, datetime] | None:
    """The part of ``run`` inside ``[start, until)`` during which it held GPUs, up to ``now``; None if none."""
    if run.gpus <= 0 or run.state == RESERVED:
        return None
    begin = max(run.started, start)
    finish = min(run.stopped if run.stopped is not None else now, until)
    return (begin, finish) if finish > begin else None


def _utc(*moments: datetime) -> tuple[datetime, ...]:
    return tuple(aware(moment).astimezone(UTC) for moment in moments)


def card_hours(runs, start: datetime, end: datetime, now: datetime) -> float:
    """Card-hours the ``runs`` used inside ``[start, end)``, counted up to ``now``: Σ units × weight × hours.

    Each run is clipped to the period: a run across midnight of the 1st
    counts its part in each month, at the one weight it was charged at. An
    open run (``stopped`` None) counts up to ``now``. Reservations count
    nothing (they hold no GPU yet).

    The bounds are taken in UTC: two datetimes of one time zone subtract as
    wall-clock times, which would count a month with a daylight-saving
    change as 744 hours instead of 743 or 745.
    """
    total = 0.0
    start, end, now = _utc(start, end, now)
    until = min(end, now)
    for run in runs:
        held = _held(run, start, until, now)
        if held is not None:
            total += run.rate * (held[1] - held[0]).total_seconds() / 3600
    return total


def gpu_hours(runs, start: datetime, end: datetime, now: datetime) -> dict[tuple[str, str], float]:
    """Raw unit-hours (units × hours, unweighted) the ``runs`` held inside ``[start, end)`` up to ``now``, by
    ``(gpu_resource, gpu_product)``; clipped as :func:`card_hours`. Only keys with time held are present."""
    hours: dict[tuple[str, str], float] = {}
    start, end, now = _utc(start, end, now)
    until = min(end, now)
    for run in runs:
        held = _held(run, start, until, now)
        if held is not None:
            key = (run.gpu_resource, run.gpu_product)
            hours[key] = hours.get(key, 0.0) + run.gpus * (held[1] - held[0]).total_seconds() / 3600
    return hours


def exhausted_at(runs, start: datetime, limit: float, now: datetime) -> datetime | None:
    """When the ``runs`` used up ``limit`` card-hours counted from ``start``, or None if not by ``now``.

    Rates are weighted (card-hours per hour: units × weight), so a V100 at
    0.5 runs out twice as late as an A100 at 1.0.
    """
    steps: dict[datetime, float] = {}
    for run in runs:
        held = _held(run, start, now, now)
        if held is not None and run.rate > 0:
            begin, finish = held
            steps[begin] = steps.get(begin, 0.0) + run.rate
            steps[finish] = steps.get(finish, 0.0) - run.rate
    used, rate, previous = 0.0, 0.0, None
    for moment in sorted(steps):
        if previous is not None and rate > 1e-12:
            hours = (moment - previous).total_seconds() / 3600
            if used + rate * hours >= limit:
                return previous + timedelta(hours=max(0.0, limit - used) / rate)
            used += rate * hours
        rate += steps[moment]
        previous = moment
    return None


@dataclass(frozen=True)
class Usage:
    """A user's use in one period: card-hours so far, and the workspaces now reserved or running."""

    card_hours: float
    period_start: datetime
    period_end: datetime
    active: tuple[Run, ...] = ()

    @property
    def running(self) -> int:
        return len(self.active)

    @property
    def running_gpus(self) -> int:
        """GPU units (of any resource) of the workspaces reserved or running now."""
        return sum(run.gpus for run in self.active)

    @property
    def card_hour_rate(self) -> float:
        """Card-hours per hour the workspaces reserved or running now cost together (Σ units × weight)."""
        return sum(run.rate for run in self.active)


def usage_from_runs(runs, period: tuple[datetime, datetime], now: datetime) -> Usage:
    """The :class:`Usage` that ``runs`` (closed, open and reserved) make in ``period``."""
    runs = list(runs)
    start, end = period
    return Usage(
        card_hours=card_hours(runs, start, end, now),
        period_start=start,
        period_end=end,
        active=tuple(run for run in runs if run.state in ACTIVE_STATES),
    )


# -- the pre-spawn decision -----------------------------------------------------


@dataclass(frozen=True)
class Request:
    """What a start asks for, resolved from the chosen profile before anything is created.

    ``cpu`` in cores and ``memory`` a quantity (None: the profile sets no
    limit, which no instance limit can check). ``disk_new``: bytes of disk
    this start creates (a new home or root disk); ``disk_existing``: bytes
    the user's disks already hold. ``gpus``: units of ``gpu_resource``;
    ``gpu_product``: the GPU type the profile selects (``""``: any);
    ``gpu_weight``: card-hours one unit costs per hour until the workspace
    is placed (the product's weight, else the most the resource may cost).
    """

    gpus: int = 0
    cpu: float | None = None
    memory: str | None = None
    workspace_kind: str = "container"
    server_name: str = ""
    profile: str = ""
    disk_new: int = 0
    disk_existing: int = 0
    gpu_resource: str = WHOLE_GPU
    gpu_product: str = ""
    gpu_weight: float = 1.0


@dataclass(frozen=True)
class Reservation:
    """A place held for one start: a ledger row in state ``reserved`` (``id`` None when the ledger was down).

    ``gpu_resource``, ``gpu_product`` and ``weight`` as in :class:`Run`:
    the provisional price, until :meth:`~workspacespawner.quota.ledger.Ledger.price_run`.
    """

    id: int | None
    user: str
    server_name: str
    profile: str
    workspace_kind: str
    gpus: int
    reserved_at: datetime
    gpu_resource: str = WHOLE_GPU
    gpu_product: str = ""
    weight: float = 1.0

    @classmethod
    def of(cls, user: str, request: Request, now: datetime, run_id: int | None = None) -> Reservation:
        """The reservation of ``request`` by ``user`` made at ``now`` (ledger row ``run_id``)."""
        return cls(run_id, user, request.server_name, request.profile, request.workspace_kind, request.gpus, now,
                   request.gpu_resource, request.gpu_product, request.gpu_weight)


@dataclass(frozen=True)
class Decision:
    """Allowed, or refused for ``reason`` with the numbers that explain it.

    ``limit`` names the limit (a :class:`Limits` field); ``asked``,
    ``used``, ``left`` and ``allowed_max`` are in ``unit``; ``reset`` is
    when card-hours reset. ``reservation`` is set by the ledger when an
    allowed start was reserved.
    """

    allowed: bool
    reason: str | None = None
    limit: str | None = None
    asked: float | None = None
    used: float | None = None
    left: float | None = None
    allowed_max: float | None = None
    unit: str = ""
    reset: datetime | None = None
    detail: str = ""
    reservation: Reservation | None = None

    def message(self, contact: str = "an administrator") -> str:
        """The refusal in plain words for the user: asked, used, left, reset, whom to ask."""
        if self.allowed:
            return ""
        text = self.detail
        if self.reset is not None:
            text += f" Your card-hours reset on {when(self.reset)}."
        return f"{text} To get more, ask {contact}."


ALLOWED = Decision(allowed=True)


def number(value: float) -> str:
    """A count for people: at most two decimals, no trailing zeros (``49.25``, ``50``, ``0.1``)."""
    return f"{value:.2f}".rstrip("0").rstrip(".") if value % 1 else str(int(value))


def when(moment: datetime) -> str:
    """``2025-07-01 00:00 (Europe/Berlin)``: a reset time in its own timezone."""
    name = getattr(moment.tzinfo, "key", None) or moment.tzname() or "UTC"
    return f"{moment:%Y-%m-%d %H:%M} ({name})"


def _plural(count: float, word: str) -> str:
    return f"{number(count)} {word}{'' if count == 1 else 's'}"


def gpu_units(count: int, resource: str, product: str = "") -> str:
    """``count`` units of ``resource`` in words, with the GPU type when known: ``1 Tesla-V100-SXM2-16GB GPU``,
    ``2 MIG slices 1g.10gb (NVIDIA-A100-SXM4-80GB)``, ``1 shared GPU``, ``1 × nvidia.com/GRID_T4-4Q``."""
    known = parse_gpu_resource(resource) or GPUResource(resource, DEVICE)
    words = known.describe(count)
    if not product or known.kind == DEVICE:
        return words
    if known.kind == MIG:
        return f"{words} ({product})"
    head, _, rest = words.partition(" ")
    return f"{head} {product} {rest}"


def rate_words(count: int, resource: str, product: str, weight: float) -> str:
    """What ``count`` units cost, in words: ``0.5 card-hours per hour (1 Tesla-V100-SXM2-16GB GPU at 0.5)``."""
    return f"{_plural(card_hour_rate(count, weight), 'card-hour')} per hour ({gpu_units(count, resource, product)} at {number(weight)})"


def _instance_refusal(request: Request, limits: Limits) -> Decision | None:
    checks = (
        ("max_gpus", request.gpus, limits.max_gpus, "GPU unit" if request.gpu_resource != WHOLE_GPU else "GPU"),
        ("max_cpu", request.cpu, limits.max_cpu, "CPU core"),
    )
    for name, asked, most, word in checks:
        if asked is not None and most is not None and asked > most:
            return Decision(
                allowed=False,
                reason="instance-size",
                limit=name,
                asked=asked,
                allowed_max=most,
                unit=word + "s",
                detail=f"This profile asks for {_plural(asked, word)}; the largest workspace you may start has {_plural(most, word)}.",
            )
    if request.memory is not None and limits.max_memory is not None:
        asked, most = parse_quantity(request.memory), parse_quantity(limits.max_memory)
        if asked > most:
            return Decision(
                allowed=False,
                reason="instance-size",
                limit="max_memory",
                asked=float(asked),
                allowed_max=float(most),
                unit="bytes",
                detail=f"This profile asks for {request.memory} of memory; the largest workspace you may start has {limits.max_memory}.",
            )
    return None


def _disk_refusal(request: Request, limits: Limits) -> Decision | None:
    if limits.max_disk is None or request.disk_new <= 0:
        return None
    most = float(parse_quantity(limits.max_disk))
    if request.disk_existing + request.disk_new <= most:
        return None
    left = max(0.0, most - request.disk_existing)
    return Decision(
        allowed=False,
        reason="disk",
        limit="max_disk",
        asked=float(request.disk_new),
        used=float(request.disk_existing),
        left=left,
        allowed_max=most,
        unit="bytes",
        detail=(
            f"This workspace needs {gib(request.disk_new)} of new disk; your disks already hold "
            f"{gib(request.disk_existing)} of your {gib(most)}, so {gib(left)} is left."
        ),
    )


def decide(request: Request, usage: Usage, limits: Limits, now: datetime, *, min_start_hours: float = 0.25) -> Decision:
    """May this start go ahead? Checks, in order: instance size, disk, concurrency, card-hours.

    A start is refused for card-hours only if it asks for GPUs: CPU-only
    profiles are never refused for card-hours. A GPU start needs enough
    card-hours left to run all the user's GPU workspaces, this one
    included, for ``min_start_hours`` at their weighted rates: ``left >=
    (running rate + asked units × gpu_weight) × min_start_hours``, rates
    in card-hours per hour. With 0, any card-hours left will do. That
    rule is what makes two racing starts unable to share the last
    card-hours: the first one's reservation counts in the second one's check.
    """
    refusal = _instance_refusal(request, limits) or _disk_refusal(request, limits)
    if refusal is not None:
        return refusal
    if usage.running >= limits.max_concurrent:
        return Decision(
            allowed=False,
            reason="concurrency",
            limit="max_concurrent",
            asked=1,
            used=usage.running,
            left=max(0, limits.max_concurrent - usage.running),
            allowed_max=limits.max_concurrent,
            unit="workspaces",
            detail=(
                f"You already have {_plural(usage.running, 'workspace')} starting or running, "
                f"and may run {number(limits.max_concurrent)} at once. Stop one before starting another."
            ),
        )
    if request.gpus <= 0:
        return ALLOWED
    limit = limits.card_hours_per_month
    left = max(0.0, limit - usage.card_hours)
    needed = (usage.card_hour_rate + card_hour_rate(request.gpus, request.gpu_weight)) * min_start_hours
    if (left >= needed) if needed > 0 else (left > 0):
        return ALLOWED
    minutes = number(min_start_hours * 60)
    return Decision(
        allowed=False,
        reason="card-hours",
        limit="card_hours_per_month",
        asked=card_hour_rate(request.gpus, request.gpu_weight),
        used=usage.card_hours,
        left=left,
        allowed_max=limit,
        unit="card-hours",
        reset=usage.period_end,
        detail=(
            "Not enough GPU time left: this profile costs "
            + rate_words(request.gpus, request.gpu_resource, request.gpu_product, request.gpu_weight)
            + (
                f" and needs {number(needed)} card-hours left to start ({minutes} minutes of all your GPU workspaces, this one included)"
                if needed > 0
                else ""
            )
            + f". You have used {number(usage.card_hours)} of your {number(limit)} card-hours this month; "
            f"{number(left)} left. CPU profiles are still available."
        ),
    )


def ledger_down(request: Request, allow_cpu: bool) -> Decision:
    """The decision when the ledger cannot be reached: GPU starts fail closed; CPU ones as configured."""
    if request.gpus <= 0 and allow_cpu:
        return ALLOWED
    what = "GPU profiles" if request.gpus > 0 else "new workspaces"
    return Decision(
        allowed=False,
        reason="ledger-down",
        detail=f"Usage records cannot be reached right now, so {what} cannot be started. Please try again in a few minutes.",
    )


# -- enforcement while running ------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """What to do about a user's running GPU workspaces now.

    ``action``: ``none``, ``warn`` (card-hours run out soon), ``grace``
    (run out, stop pending) or ``stop``. ``stop_at``: when GPU servers will
    be (or were due to be) stopped. ``running_gpus``: GPU units of the open
    runs; ``rate``: the card-hours per hour they cost together.
    """

    action: str
    used: float
    limit: float
    left: float
    running_gpus: int
    stop_at: datetime | None = None
    rate: float = 0.0


def enforcement(
    runs,
    period: tuple[datetime, datetime],
    limit: float,
    now: datetime,
    *,
    warn_before: float,
    grace_period: float,
    grace_card_hours: float,
) -> Verdict:
    """The :class:`Verdict` for one user's ``runs`` (this period's, open ones included).

    GPU servers are stopped once the overrun beyond ``limit`` has lasted
    ``grace_period`` (seconds) *and* reached ``grace_card_hours``: the more generous
    grace applies. A warning comes when, at the current weighted rate
    (card-hours per hour of the open runs), card-hours run out within
    ``warn_before`` (seconds). Open runs whose weight is 0 (free GPUs) never run out.
    """
    runs = list(runs)
    start, _end = period
    used = card_hours(runs, start, period[1], now)
    gpus = sum(r.gpus for r in runs if r.state == OPEN and r.gpus > 0)
    rate = sum(r.rate for r in runs if r.state == OPEN and r.gpus > 0)
    left = limit - used
    if gpus == 0 or rate <= 0:
        return Verdict("none", used, limit, left, gpus, rate=rate)
    if left > 0:
        out_at = now + timedelta(hours=left / rate)
        stop_at = max(out_at + timedelta(seconds=grace_period), out_at + timedelta(hours=grace_card_hours / rate))
        action = "warn" if (out_at - now) <= timedelta(seconds=warn_before) else "none"
        return Verdict(action, used, limit, left, gpus, stop_at, rate)
    out_at = exhausted_at(runs, start, limit, now) or now
    overrun = used - limit
    by_minutes = out_at + timedelta(seconds=grace_period)
    by_hours = now + timedelta(hours=max(0.0, grace_card_hours - overrun) / rate)
    stop_at = max(by_minutes, by_hours)
    action = "stop" if now >= by_minutes and overrun >= grace_card_hours else "grace"
    return Verdict(action, used, limit, left, gpus, stop_at, rate)
