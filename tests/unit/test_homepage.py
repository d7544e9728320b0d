"""The home page's "Your workspaces" panel as data: phases, GPUs held, card-hours per server, the warning, kept disks."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from workspacespawner.config.profiles import ResolvedProfile
from workspacespawner.core import names
from workspacespawner.homepage.gather import saved_profile
from workspacespawner.homepage.model import (
    disk_line,
    home_data,
    quota_warning,
    retained_disks,
    server_phase,
    server_row,
)
from workspacespawner.lifecycle.phases import REPLACED, Phase, Status
from workspacespawner.quota.policy import CLOSED, OPEN, Limits, Run, month_bounds, usage_from_runs
from workspacespawner.quota.service import MonthBalance

NOW = datetime(2026, 12, 10, 12, tzinfo=UTC)
A100 = "NVIDIA-A100-SXM4-80GB"
GPU_PROFILE = ResolvedProfile(slug="one", display_name="JupyterLab, 1 GPU", workspace_kind="container",
                              ide="jupyterlab", gpus=1, gpu_product=A100, cpu=8.0, memory="32G", image="i",
                              default_url="")


def month(runs, limit=50.0) -> MonthBalance:
    period = month_bounds(NOW, "Europe/Berlin")
    return MonthBalance(runs, usage_from_runs(runs, period, NOW), Limits(card_hours_per_month=limit), NOW)


def test_phase_follows_what_jupyterhub_knows():
    assert server_phase(False, False, None) == "Stopped"
    assert server_phase(True, False, "spawn") == "Starting"
    assert server_phase(True, True, None) == "Running"
    assert server_phase(True, True, "stop") == "Stopping"


def test_a_row_holds_gpus_only_while_running_and_counts_its_own_card_hours():
    runs = [Run(gpus=1, started=NOW - timedelta(hours=3), stopped=NOW - timedelta(hours=1), state=CLOSED, server_name=""),
            Run(gpus=2, started=NOW - timedelta(hours=1), state=OPEN, server_name="big")]
    spent = month(runs)
    running = server_row(name="", active=True, ready=True, pending=None, profile=GPU_PROFILE, url="/user/ann/",
                         month=spent)
    assert (running.phase, running.gpus, running.gpu_type, running.card_hours, running.url) == \
        ("Running", 1, A100, 2.0, "/user/ann/")
    stopped = server_row(name="big", active=False, ready=False, pending=None, profile=GPU_PROFILE, url="/user/ann/big/",
                         month=spent)
    assert (stopped.phase, stopped.gpus, stopped.card_hours, stopped.url) == ("Stopped", 0, 2.0, "")
    never = server_row(name="", active=False, ready=False, pending=None, profile=None, url="/u", month=None)
    assert (never.profile, never.card_hours) == ("", None)


def test_the_warning_is_the_enforcers_else_a_low_or_spent_balance():
    used = lambda hours: [Run(gpus=1, started=NOW - timedelta(hours=hours), stopped=NOW, state=CLOSED)]  # noqa: E731
    assert quota_warning(month(used(10)), "") is None
    assert quota_warning(month(used(46)), "") == \
        "You have 4 of your 50 card-hours left this month; they reset on 2027-01-01 00:00 (Europe/Berlin)."
    assert quota_warning(month(used(50)), "").startswith("You have used all 50 card-hours of this month")
    assert quota_warning(month(used(46)), "Your GPU server stops in 5 minutes.") == "Your GPU server stops in 5 minutes."
    assert quota_warning(None, "") is None
    assert quota_warning(month([], limit=0), "") is None  # no GPU time at all: nothing to warn about


def disk(name: str, phase: Phase, server: str = "", until: datetime | None = None) -> dict:
    status = Status(phase, server=server, retain_until=until)
    return {
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "labels": {names.PHASE_LABEL: str(phase)},
                     "annotations": {names.LIFECYCLE_ANNOTATION: json.dumps(status.to_state())}},
        "spec": {"resources": {"requests": {"storage": "10Gi"}}},
    }


def test_retained_disks_say_until_when_and_how_to_get_them_back():
    kept = retained_disks([
        disk("home-ann", Phase.STOPPED),
        disk("home-ann-proj", Phase.RETAINED, server="proj", until=NOW + timedelta(days=30)),
        disk("home-ann-old", Phase.RETAINED, until=NOW + timedelta(days=2)),
    ])
    assert [d.name for d in kept] == ["home-ann-old", "home-ann-proj"]
    assert kept[1].size == "10 GiB"
    assert kept[1].how == "Start your server “proj” again to use it; it is kept until 2027-01-09 12:00 UTC."
    assert kept[0].how.startswith("Start your default server again")
    assert home_data([], None, kept)["retained"][0]["name"] == "home-ann-old"
    all_three = [disk("a", Phase.STOPPED), disk("b", Phase.RETAINED), disk("c", Phase.RETAINED)]
    assert disk_line(all_three, "50Gi") == "Your disks: 30 GiB of 50 GiB."
    root_volume = {**disk("b", Phase.RETAINED), "kind": "DataVolume"}  # a root disk: its DataVolume and PVC are one disk
    assert disk_line([*all_three, root_volume], "50Gi") == "Your disks: 30 GiB of 50 GiB."
    assert disk_line([], None) == "Your disks: 0 GiB."


def test_a_disk_a_rebuild_or_restore_replaced_says_so_not_start_again():
    replaced = disk("ws-ann-root", Phase.RETAINED, until=NOW + timedelta(days=30))
    record = Status(Phase.RETAINED, reason=REPLACED, retain_until=NOW + timedelta(days=30))
    replaced["metadata"]["annotations"][names.LIFECYCLE_ANNOTATION] = json.dumps(record.to_state())
    [kept] = retained_disks([replaced])
    assert kept.how.startswith("A newer disk of your default server replaced it (a restore or a rebuild); it is kept until "
                               "2027-01-09 12:00 UTC in case you need something from it"), kept.how
    assert "Start" not in kept.how and "Give it back on the Workspaces dashboard" in kept.how


def test_a_stopped_server_shows_the_profile_its_saved_state_holds():
    class Row:  # what JupyterHub's database row of a server not loaded has
        name, state = "", {"profile": GPU_PROFILE.to_state()}

    assert saved_profile(Row()) == GPU_PROFILE
    Row.state = {"profile": {"unknown": 1}}
    assert saved_profile(Row()) is None
