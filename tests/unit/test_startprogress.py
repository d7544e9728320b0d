"""The spawn page's progress of one start (workspacespawner.startprogress): its own steps and Events only, the bar
on the milestone ladder (workspacespawner.core.milestones)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from workspacespawner.core.milestones import LADDER, Milestone, event_milestone, percent
from workspacespawner.k8s.events import describe_event, events_since
from workspacespawner.startprogress import StartSteps


def event(uid: str, reason: str, at: datetime, *, count: int = 1) -> dict:
    stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"metadata": {"uid": uid, "creationTimestamp": stamp}, "reason": reason, "message": f"{reason} {uid}",
            "lastTimestamp": stamp, "count": count, "type": "Normal"}


def test_events_since_drops_older_ones_and_orders_by_time():
    start = datetime(2026, 12, 3, 12, 0, 0, 500_000, tzinfo=UTC)
    older = event("a", "Killing", start - timedelta(seconds=5))
    same_second = event("b", "Scheduled", start.replace(microsecond=0))
    later = event("c", "Pulled", start + timedelta(seconds=3))
    micro = {**event("d", "Started", start), "lastTimestamp": None, "eventTime": "2026-12-03T12:00:04.250000Z"}
    assert [e["metadata"]["uid"] for e in events_since([later, micro, older, same_second], start)] == ["b", "c", "d"]
    assert events_since([{"reason": "NoTime"}], start) == []


def test_events_read_as_steps_and_an_init_containers_as_preparation():
    def about(reason, message, field_path=None, type="Normal"):
        involved = {"kind": "Pod", "name": "jupyter-ann", **({"fieldPath": field_path} if field_path else {})}
        return {"reason": reason, "message": message, "type": type, "involvedObject": involved}

    assert describe_event(about("Started", "Started container notebook", "spec.containers{notebook}")) == "Server starting"
    assert describe_event(about("Started", "Started container scratch-notice", "spec.initContainers{scratch-notice}")) \
        == "Preparing your server: Started container scratch-notice"
    assert describe_event(about("Failed", "Error: ErrImagePull", "spec.initContainers{scratch-notice}", "Warning")) \
        == "Start failed: Error: ErrImagePull"  # a failure reads as one, whichever container
    assert describe_event(about("Killing", "Stopping container notebook")) == "Stopping: Stopping container notebook"
    assert describe_event(about("Scheduled", "Successfully assigned default/jupyter-ann to cpu-node-1")) \
        == "Found a node for your server (cpu-node-1)"
    assert describe_event(about("Odd", "something")) == "[Normal] something"


def test_the_schedulers_event_comes_before_a_kubelets_of_the_same_second():
    """kube-scheduler stamps to the microsecond, a kubelet to the second: the Scheduled that caused a Pulling of the
    same second still comes first (seen on the real control plane)."""
    start = datetime(2026, 12, 3, 12, 0, 0, tzinfo=UTC)
    scheduled = {**event("s", "Scheduled", start), "lastTimestamp": None, "eventTime": "2026-12-03T12:00:01.750000Z",
                 "source": {}, "reportingComponent": "default-scheduler"}
    pulling = {**event("p", "Pulling", start + timedelta(seconds=1)), "source": {"component": "kubelet"}}
    started = {**event("t", "Started", start + timedelta(seconds=2)), "source": {"component": "kubelet"}}
    assert [e["metadata"]["uid"] for e in events_since([started, pulling, scheduled], start)] == ["s", "p", "t"]


def test_a_start_shows_each_of_its_events_once_in_order_and_the_bar_only_moves_forward():
    async def run():
        steps = StartSteps()
        steps.reset()
        begun = steps.started
        cache = [event("old", "Killing", begun - timedelta(seconds=30))]
        done = False
        shown = []

        async def consume():
            async for item in steps.stream(finished=lambda: done, compute_events=lambda: list(cache), describe=describe_event):
                shown.append(item)

        task = asyncio.ensure_future(consume())
        steps.say("Home volume home-ann ready")
        await asyncio.sleep(0.05)
        cache.append(event("s", "Scheduled", begun))
        steps.say("Root disk cloned")
        await asyncio.sleep(0.05)
        cache[-1] = event("s", "Scheduled", begun, count=2)  # the same Event, updated in the cache
        cache.append(event("p", "Pulled", begun + timedelta(seconds=1)))
        done = True
        steps.say("Server answering")
        await asyncio.wait_for(task, timeout=5)
        return shown

    shown = asyncio.run(run())
    messages = [item["message"] for item in shown]
    assert messages == ["Home volume home-ann ready", "Root disk cloned", "Found a node for your server (Scheduled s)",
                        "Server answering", "Image ready: Pulled p"], messages
    assert not any("Killing" in m for m in messages)
    percents = [item["progress"] for item in shown]
    assert percents == sorted(percents) and percents[-1] < 100, percents


def said(steps: StartSteps, events: list[dict] = ()) -> list[tuple[int, str]]:
    """(progress, message) of everything ``steps`` holds, as one finished start's stream gives it."""
    async def run():
        return [item async for item in steps.stream(finished=lambda: True, compute_events=lambda: list(events),
                                                    describe=describe_event)]

    return [(item["progress"], item["message"]) for item in asyncio.run(run())]


def test_the_ladder_climbs_in_the_order_a_start_reaches_its_milestones_and_stops_short_of_100():
    assert list(LADDER) == list(Milestone)
    rungs = list(LADDER.values())
    assert rungs == sorted(set(rungs)) and 0 < rungs[0] and rungs[-1] < 100, rungs


@pytest.mark.parametrize(("part", "expected"), [(0.0, 20.0), (0.452, 38.08), (1.0, 60.0), (1.7, 60.0), (-1.0, 20.0)])
def test_a_root_disk_cloned_part_way_spreads_over_the_range_from_the_rung_below(part, expected):
    assert LADDER[Milestone.HOME_READY] == 20 and LADDER[Milestone.ROOT_DISK_READY] == 60
    assert percent(Milestone.ROOT_DISK_READY, part) == pytest.approx(expected)
    assert percent(Milestone.ACCEPTED, 0.5) == LADDER[Milestone.ACCEPTED] / 2  # the first rung's range starts at 0


def test_events_reach_milestones_by_reason_except_an_init_containers():
    at = datetime(2026, 12, 3, 12, tzinfo=UTC)
    assert [event_milestone(event(u, r, at)) for u, r in [("a", "Scheduled"), ("b", "Pulled"), ("c", "Started")]] == [
        Milestone.NODE_FOUND, Milestone.IMAGE_PULLED, Milestone.STARTED]
    assert event_milestone(event("d", "Pulling", at)) is None
    assert event_milestone(event("e", "FailedScheduling", at)) is None
    init = {**event("f", "Started", at), "involvedObject": {"kind": "Pod", "fieldPath": "spec.initContainers{tiers}"}}
    assert event_milestone(init) is None
    main = {**event("g", "Started", at), "involvedObject": {"kind": "Pod", "fieldPath": "spec.containers{notebook}"}}
    assert event_milestone(main) is Milestone.STARTED


def test_kueues_events_on_a_queued_pod_read_in_our_words_and_reach_no_milestone():
    """Kueue's admission of a queued Pod is a ``Started`` about the whole Pod (seen on the real plane): not the
    container's start, so the bar stays; its Workload's creation is a note of ours, not Kueue's words."""
    at = datetime(2026, 12, 3, 12, tzinfo=UTC)
    pod = {"kind": "Pod", "name": "jupyter-bob"}
    admitted = {**event("h", "Started", at), "involvedObject": pod, "message": "Admitted by clusterQueue workspaces-ml101"}
    created = {**event("i", "CreatedWorkload", at), "involvedObject": pod,
               "message": "Created Workload: default/pod-jupyter-bob-1417a"}
    assert event_milestone(admitted) is None and event_milestone(created) is None
    assert describe_event(admitted) == "The GPU queue admitted your workspace; finding a node for it"
    assert describe_event(created) == "Your workspace joined the GPU queue"


def test_a_container_start_climbs_its_milestones_and_notes_keep_the_bar_where_it_is():
    steps = StartSteps()
    steps.reset()
    begun = steps.started
    steps.say("Preparing your workspace", Milestone.ACCEPTED)
    steps.say("Waiting for your previous server to stop")
    steps.say("Home volume home-ann ready", Milestone.HOME_READY)
    steps.say("/scratch is scratch space")
    steps.say("Starting your server")
    events = [event("s", "Scheduled", begun), event("p1", "Pulling", begun + timedelta(seconds=1)),
              event("p2", "Pulled", begun + timedelta(seconds=2)), event("c", "Created", begun + timedelta(seconds=3)),
              event("t", "Started", begun + timedelta(seconds=3)),
              {**event("w", "Unhealthy", begun + timedelta(seconds=4)), "type": "Warning"}]
    assert [p for p, _m in said(steps, events)] == [5, 5, 20, 20, 20, 70, 70, 80, 80, 90, 90]


def test_a_vm_start_shows_the_clone_in_its_range_and_never_goes_back_or_reaches_100():
    steps = StartSteps()
    steps.reset()
    steps.say("Preparing your workspace", Milestone.ACCEPTED)
    steps.say("Home volume home-ann created (Pending)")  # not bound: no milestone
    steps.say("Creating your root disk")
    for clone in (0, 25.5, 50, 75):
        steps.say(f"Copying the system image to your root disk: {clone:.0f}%", Milestone.ROOT_DISK_READY, part=clone / 100)
    steps.say("Starting your virtual machine", Milestone.ROOT_DISK_READY)
    steps.say("Booting your virtual machine on n1", Milestone.NODE_FOUND)
    steps.say("Your virtual machine is booting on n1", Milestone.STARTED)
    steps.say("Your virtual machine is running on n1", Milestone.ANSWERING)
    late = [event("s", "Scheduled", steps.started), event("t", "Started", steps.started)]  # Events read after the guest answers
    shown = said(steps, late)
    assert [p for p, _m in shown] == [5, 5, 5, 20, 30, 40, 50, 60, 70, 90, 95, 95, 95], shown
    steps.say("Home volume home-ann ready", Milestone.HOME_READY)  # a milestone below the bar: it stays
    assert said(steps)[-1][0] == 95


def test_a_start_nobody_watches_keeps_no_waiter_and_a_watched_one_survives_a_new_start():
    async def run():
        steps = StartSteps()
        steps.reset()
        steps.say("Preparing your workspace", Milestone.ACCEPTED)
        unwatched = steps._changed  # a REST API spawn: nobody streams its progress
        done, shown = False, []

        async def consume():
            async for item in steps.stream(finished=lambda: done, compute_events=list, describe=describe_event):
                shown.append(item["message"])

        task = asyncio.ensure_future(consume())
        await asyncio.sleep(0.05)
        steps.reset()  # the next start begins while a page still streams the last one
        steps.say("Preparing your workspace again", Milestone.ACCEPTED)
        await asyncio.sleep(0.05)
        done = True
        steps.say("Server answering")
        await asyncio.wait_for(task, timeout=5)
        return unwatched, shown

    unwatched, shown = asyncio.run(run())
    assert unwatched is None
    assert shown[0] == "Preparing your workspace" and shown[-1] == "Server answering", shown


def test_a_vmis_events_read_in_a_vms_words():
    """Issue #38 item 12: KubeVirt's Events on a VMI (virt-controller's, virt-handler's) are not a container's."""
    def about(reason, message):
        return {"reason": reason, "message": message, "type": "Normal",
                "involvedObject": {"kind": "VirtualMachineInstance", "name": "vm-ann"}}

    assert describe_event(about("SuccessfulCreate", "Created virtual machine pod virt-launcher-vm-ann-x2k9q")) \
        == "Your virtual machine's Pod was created"
    assert describe_event(about("Created", "VirtualMachineInstance defined.")) == "Your virtual machine is defined on its node"
    assert describe_event(about("Started", "VirtualMachineInstance started.")) == (
        "Your virtual machine started: its operating system boots, then it starts your server")
