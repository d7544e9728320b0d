"""The attach claim's pure parts (:mod:`workspacespawner.lifecycle.attach`): the decision and the recorded shape.

Covers: a free disk and one already ours are taken; another server's claim
refuses while its compute lives (``in-use``) and while it is younger than
the grace without compute (``starting``), and is stale after; a claim
without ``since`` and no compute is stale; the annotation round-trips and
an unreadable one holds nothing; the refusal's words.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from workspacespawner.core import names
from workspacespawner.lifecycle.attach import Holder, Verdict, already_held, claim_annotation, decide, me_of, refusal
from workspacespawner.lifecycle.phases import WorkspaceRef

NOW = datetime(2026, 12, 1, 23, 50, tzinfo=UTC)
ME = Holder("ann/work", "Pod", "jupyter-ann--work", NOW)
OTHER = Holder("ann", "Pod", "jupyter-ann", NOW - timedelta(seconds=30))


def test_decide():
    assert decide(None, ME, holder_alive=False, now=NOW, grace=60) == Verdict(True, "free")
    assert decide(Holder("ann/work", "Pod", "jupyter-ann--work", NOW - timedelta(days=3)), ME, holder_alive=True, now=NOW, grace=60) == Verdict(True, "ours")
    assert decide(OTHER, ME, holder_alive=True, now=NOW, grace=0) == Verdict(False, "in-use")
    assert decide(OTHER, ME, holder_alive=False, now=NOW, grace=60) == Verdict(False, "starting")
    assert decide(OTHER, ME, holder_alive=False, now=NOW, grace=10) == Verdict(True, "stale")
    assert decide(Holder("ann", "Pod", "jupyter-ann"), ME, holder_alive=False, now=NOW, grace=60) == Verdict(True, "stale")


def test_holder_round_trip_and_unreadable_claims():
    assert Holder.from_json(ME.to_json()) == ME
    assert Holder.from_json(None) is None
    assert Holder.from_json("not json") is None
    assert Holder.from_json('{"server": "ann"}') is None


def test_me_and_refusal_words():
    vm = WorkspaceRef(namespace="ns", user_name="ann", server_name="vm", home_pvc="home-ann", root_disk="ws-ann-vm-root", vm="ws-ann-vm")
    assert me_of(vm, NOW) == Holder("ann/vm", "VirtualMachineInstance", "ws-ann-vm", NOW)
    error = refusal("home-ann", OTHER, "in-use")
    assert (error.reason, error.status_code) == ("disk-attached", 409)
    assert error.message == (
        "Your disk home-ann can be used by one server at a time, and your server ann (Pod jupyter-ann) is using it. "
        "Stop ann first, then start this one. Nothing was started."
    )


def test_a_claim_of_ours_taken_moments_ago_is_not_written_again():
    me = Holder("ann", "Pod", "jupyter-ann", NOW)
    just = Holder("ann", "Pod", "jupyter-ann", NOW - timedelta(seconds=5))  # the home was made with it
    assert already_held(just, me, grace=600)
    assert not already_held(Holder("ann", "Pod", "jupyter-ann", NOW - timedelta(seconds=300)), me, grace=600)  # half the grace
    assert not already_held(Holder("ann/work", "Pod", "jupyter-ann--work", NOW), me, grace=600)  # another server's
    assert not already_held(Holder("ann", "VirtualMachineInstance", "ws-ann", NOW), me, grace=600)  # its other kind
    assert not already_held(Holder("ann", "Pod", "jupyter-ann", None), me, grace=600)
    assert not already_held(None, me, grace=600)


def test_a_disk_made_for_a_start_carries_its_claim():
    ref = WorkspaceRef(namespace="ns", user_name="ann", home_pvc="home-ann", pod="jupyter-ann")
    [(key, value)] = claim_annotation(ref, NOW).items()
    assert key == names.ATTACH_ANNOTATION and Holder.from_json(value) == me_of(ref, NOW)
