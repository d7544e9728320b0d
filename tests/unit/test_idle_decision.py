"""The idle-GPU decision (pure, clock given): when a GPU server is active, warned, stopped or exempt, and what the
user reads.

Covers: activity within the timeout keeps a server active; the newest of
start and activity counts; a server idle for the timeout is warned with a
stop time of warning + grace that does not move at later passes, and
stopped once it has passed; a warning gone once the server is used again;
GPU utilisation under the threshold for the whole window making a server
idle even with fresh activity (an open tab), and utilisation at or above
it making it busy with no activity; no stop without a measured idle GPU
unless ``stop_without_prometheus``; exempt groups and profiles never
warned; a pending spawn never warned; timeout 0 (off) and threshold 0
(utilisation not used); the messages with their times and durations.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from workspacespawner.idle.decision import (
    ACTIVE,
    EXEMPT,
    STOP,
    WARN,
    GPUServer,
    Policy,
    decide,
    duration,
    warning_message,
)

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
POLICY = Policy(timeout=3600, grace=1800, threshold=5.0)


def server(**changes) -> GPUServer:
    fields = dict(user="ann", server="", profile="gpu-1", started=T0, last_activity=T0)
    fields.update(changes)
    return GPUServer(**fields)


def test_activity_within_the_timeout_keeps_a_server_active():
    verdict = decide(server(last_activity=T0 + 2 * HOUR), POLICY, T0 + 2.5 * HOUR)
    assert verdict.action == ACTIVE
    assert verdict.last_used == T0 + 2 * HOUR


def test_a_server_started_recently_without_activity_is_active():
    verdict = decide(server(started=T0, last_activity=None), POLICY, T0 + timedelta(minutes=59))
    assert verdict.action == ACTIVE


def test_idle_for_the_timeout_warns_with_a_stop_time_that_stays_put():
    first = decide(server(gpu_util=1.0), POLICY, T0 + HOUR)
    assert (first.action, first.warned_at, first.stop_at) == (WARN, T0 + HOUR, T0 + 1.5 * HOUR)
    later = decide(server(gpu_util=1.0), POLICY, T0 + 1.25 * HOUR, first.warned_at)
    assert (later.action, later.stop_at) == (WARN, T0 + 1.5 * HOUR)
    end = decide(server(gpu_util=1.0), POLICY, T0 + 1.5 * HOUR, first.warned_at)
    assert end.action == STOP


def test_a_server_used_again_loses_its_warning():
    warned = decide(server(), POLICY, T0 + HOUR, None)
    assert warned.action == WARN
    used = decide(server(last_activity=T0 + 1.1 * HOUR), POLICY, T0 + 1.2 * HOUR, warned.warned_at)
    assert used.action == ACTIVE and used.warned_at is None
    again = decide(server(last_activity=T0 + 1.1 * HOUR), POLICY, T0 + 2.1 * HOUR, warned.warned_at)
    assert again.warned_at == T0 + 2.1 * HOUR  # a fresh warning, not the one before the activity


def test_an_idle_gpu_makes_a_server_idle_even_with_an_open_tab():
    now = T0 + 3 * HOUR
    verdict = decide(server(last_activity=now, gpu_util=0.0), POLICY, now)
    assert verdict.action == WARN and verdict.measured
    assert verdict.last_used == now - HOUR


def test_a_busy_gpu_keeps_a_server_active_without_any_activity():
    verdict = decide(server(last_activity=None, gpu_util=5.0), POLICY, T0 + 5 * HOUR)
    assert verdict.action == ACTIVE and verdict.measured


def test_the_utilisation_window_starts_no_earlier_than_the_server():
    verdict = decide(server(started=T0 + 4.5 * HOUR, gpu_util=0.0), POLICY, T0 + 5 * HOUR)
    assert verdict.action == ACTIVE


def test_without_a_measured_gpu_idle_servers_are_warned_but_never_stopped():
    first = decide(server(), POLICY, T0 + HOUR)
    assert first.action == WARN and first.stop_at is None
    assert decide(server(), POLICY, T0 + 10 * HOUR, first.warned_at).action == WARN


def test_stop_without_prometheus_stops_on_activity_alone():
    policy = Policy(timeout=3600, grace=600, stop_without_prometheus=True)
    first = decide(server(), policy, T0 + HOUR)
    assert first.stop_at == T0 + HOUR + timedelta(minutes=10)
    assert decide(server(), policy, T0 + 1.2 * HOUR, first.warned_at).action == STOP


def test_exempt_groups_and_profiles_are_never_warned():
    policy = Policy(timeout=3600, grace=0, exempt_groups=frozenset({"research"}),
                    exempt_profiles=frozenset({"gpu-batch"}))
    late = T0 + 10 * HOUR
    assert decide(server(groups=frozenset({"research", "x"}), gpu_util=0.0), policy, late).action == EXEMPT
    assert decide(server(profile="gpu-batch", gpu_util=0.0), policy, late).action == EXEMPT
    assert decide(server(gpu_util=0.0), policy, late).action == STOP


def test_a_pending_server_and_timeout_zero_are_left_alone():
    late = T0 + 10 * HOUR
    assert decide(server(pending="spawn", gpu_util=0.0), POLICY, late).action == ACTIVE
    assert decide(server(gpu_util=0.0), Policy(timeout=0, grace=0), late).action == ACTIVE


def test_threshold_zero_leaves_utilisation_out():
    policy = Policy(timeout=3600, grace=0, threshold=0)
    verdict = decide(server(last_activity=T0 + 9.5 * HOUR, gpu_util=0.0), policy, T0 + 10 * HOUR)
    assert verdict.action == ACTIVE and not verdict.measured


def test_the_messages_name_the_server_the_idle_time_and_the_stop_time():
    berlin = ZoneInfo("Europe/Berlin")
    now = T0 + timedelta(hours=1, minutes=5)
    warned = decide(server(server="train", gpu_util=0.0, started=T0 - HOUR), POLICY, now)
    assert warning_message(warned, now, berlin) == (
        "Your workspace 'train' has used no GPU for 1 h; it will be stopped at 14:35 (Europe/Berlin) "
        "(disks kept) unless you use it.")
    unmeasured = decide(server(), POLICY, now)
    assert warning_message(unmeasured, now, UTC).startswith("Your workspace has shown no activity for 1 h 5 min while")
    stopped = decide(server(gpu_util=0.0, started=T0 - HOUR), Policy(timeout=3600, grace=0), now)
    assert stopped.action == STOP
    assert warning_message(stopped, now, UTC) == (
        "Your workspace was stopped: it had used no GPU for 1 h. Its disks are kept; start it again when you need it.")
    assert warning_message(decide(server(last_activity=now), POLICY, now), now, UTC) == ""


def test_duration_reads_in_hours_and_minutes():
    assert [duration(timedelta(minutes=m)) for m in (0, 0.5, 40, 60, 65, 125.9)] == ["0 s", "30 s", "40 min", "1 h",
                                                                                       "1 h 5 min", "2 h 5 min"]
