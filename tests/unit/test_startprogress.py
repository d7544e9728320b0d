"""The spawn page's progress of one start (workspacespawner.startprogress): its own steps and Events only."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

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
