"""A GPU workspace in line (workspacespawner.queue.line) and its run metered only once admitted (QuotaService).

The whole path through a real JupyterHub, Kueue and the real plane is tests/hub/test_gpu_queue_real.py; these
pin the pieces: who waits in which queue, the sentences, the wait's limit, one visibility request per LocalQueue
however many wait, a Pod of an earlier start not taken for this one's, and the run opened from the last moment
the Pod was seen at the gate.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from kubernetes_asyncio.client.rest import ApiException

from workspacespawner.core.errors import WorkspaceError
from workspacespawner.queue import line
from workspacespawner.queue.config import GPUQueue
from workspacespawner.quota.config import WorkspaceQuota
from workspacespawner.quota.ledger import Ledger
from workspacespawner.quota.policy import OPEN, Request
from workspacespawner.quota.service import QuotaService

ML101 = GPUQueue("ml101", ("ml101",), {("nvidia.com/gpu", "NVIDIA-A100-SXM4-80GB"): 4}, max_wait_seconds=600)
VISION = GPUQueue("vision", ("vision-lab",), {("nvidia.com/gpu", "*"): 2})
QUEUES = {"ml101": ML101, "vision": VISION}


def pod(uid: str, *gates: str, deleting: bool = False) -> dict:
    meta = {"uid": uid, **({"deletionTimestamp": "2026-12-07T10:00:00Z"} if deleting else {})}
    return {"metadata": meta, "spec": {"schedulingGates": [{"name": g} for g in gates]}}


def test_only_a_gpu_start_of_a_member_waits_in_its_groups_queue_for_a_resource_it_holds():
    gpu = "nvidia.com/gpu"
    assert line.queue_for(QUEUES, {"ml101", "students"}, gpus=1, resource=gpu, kind="container") is ML101
    assert line.queue_for(QUEUES, {"vision-lab"}, gpus=2, resource=gpu, kind="container") is VISION
    assert line.queue_for(QUEUES, {"ml101"}, gpus=0, resource=gpu, kind="container") is None  # a CPU start never waits
    assert line.queue_for(QUEUES, {"ml101"}, gpus=1, resource=gpu, kind="vm") is ML101  # its virt-launcher Pod waits
    assert line.queue_for(QUEUES, {"students"}, gpus=1, resource=gpu, kind="container") is None
    # ml101 holds whole GPUs: a MIG slice would never be admitted, so it does not wait (placed or refused at once)
    assert line.queue_for(QUEUES, {"ml101"}, gpus=1, resource="nvidia.com/mig-1g.10gb", kind="container") is None
    assert line.pod_labels(ML101) == {"kueue.x-k8s.io/queue-name": "ml101",
                                      "kueue.x-k8s.io/priority-class": "workspacespawner-interactive"}
    assert line.pod_labels(None) == {}


def test_kueues_gates_hold_a_pod_and_others_do_not():
    assert line.gated(pod("a", "kueue.x-k8s.io/admission", "kueue.x-k8s.io/topology"))
    assert line.gated(pod("a", "kueue.x-k8s.io/topology"))  # admitted, its topology not yet known: not schedulable
    assert not line.gated(pod("a", "example.org/other"))
    assert not line.gated(pod("a")) and not line.gated(None)


def test_the_sentences_a_student_reads():
    assert [line.ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 103, 111)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "103rd", "111th"]
    assert line.need_words(1, "nvidia.com/gpu", "NVIDIA A100 80GB") == "1 NVIDIA A100 80GB GPU"
    assert line.need_words(2, "nvidia.com/gpu", None) == "2 GPUs"
    assert line.need_words(1, "nvidia.com/mig-1g.10gb", None) == "1 MIG slice 1g.10gb"
    need = "1 NVIDIA A100 80GB GPU"
    assert line.in_line(line.Place(3, 7), need=need, queue="ml101") == (
        "In line for 1 NVIDIA A100 80GB GPU (queue ml101): 3rd of 7. Your workspace opens here when it is your turn; "
        "you need not click again.")
    assert line.in_line(None, need=need, queue="ml101").startswith("In line for 1 NVIDIA A100 80GB GPU (queue ml101). ")
    assert line.in_line(line.Place(3, 7), need=need, queue="ml101", started_ago=250) == (
        "In line for 1 NVIDIA A100 80GB GPU (queue ml101): 3rd of 7; the last one started 4 minutes ago. Your "
        "workspace opens here when it is your turn; you need not click again.")
    assert [line.ago(s) for s in (-3, 59, 60, 119, 5399, 5400, 9000)] == [
        "less than a minute ago", "less than a minute ago", "1 minute ago", "1 minute ago", "89 minutes ago",
        "2 hours ago", "2 hours ago"]
    assert line.gave_up(line.Place(2, 5), need=need, queue="ml101", waited=1790) == (
        "You waited 30 minutes for 1 NVIDIA A100 80GB GPU (queue ml101) and were still 2nd of 5 in line: the longest "
        "wait allowed. Nothing was started and no card-hours were charged. Try again later, or start a profile with "
        "fewer or no GPUs.")
    assert "You waited 1 minute for" in line.gave_up(None, need=need, queue="ml101", waited=20)


def test_a_gpu_card_tells_a_member_how_many_wait_in_the_queue():
    assert line.queue_note("ml101", 5) == ("Queue ml101: 5 waiting now. If its GPUs are taken, you wait in line for "
                                           "your turn here.")
    assert line.queue_note("ml101", 0).startswith("Queue ml101: no one waiting now.")
    assert line.queue_note("ml101", None) == "Queue ml101: If its GPUs are taken, you wait in line for your turn here."


def test_the_wait_limit_is_the_queues_within_the_start_timeout():
    assert line.wait_limit(ML101, 3600) == 600
    assert line.wait_limit(ML101, 300) == 300  # the start timeout covers the wait
    assert line.wait_limit(VISION, 300) == 270  # none of its own: room left for the start once admitted
    assert line.wait_limit(VISION, 40) == 20


class FakeApiClient:
    """``call_api`` answering from ``lines`` (LocalQueue name -> items, an exception, or a list of answers given in
    turn, the last one kept), counting the calls."""

    def __init__(self, lines: dict, workloads: list | None = None):
        self.lines = lines
        self.workloads = workloads or []
        self.calls: list[dict] = []

    async def call_api(self, path, method, *, path_params, **kwargs):
        self.calls.append(path_params)
        await asyncio.sleep(0.01)
        if path == line.WORKLOADS_PATH:
            return {"items": self.workloads}
        name = path_params["name"]
        found = self.lines[name]
        if isinstance(found, tuple):
            if len(found) > 1:
                self.lines[name] = found[1:]
            found = found[0]
        if isinstance(found, Exception):
            raise found
        return {"items": found}


def pending(*uids: str) -> list[dict]:
    return [{"metadata": {"ownerReferences": [{"kind": "Pod", "uid": uid}]}, "positionInLocalQueue": i}
            for i, uid in enumerate(uids)]


async def test_every_waiter_of_a_queue_shares_one_read_of_its_line():
    api = FakeApiClient({"ml101": pending("p1", "p2", "p3")})
    now = [0.0]
    reader = line.LineReader(api, interval=5, clock=lambda: now[0])
    places = await asyncio.gather(*(reader.place("jhub", "ml101", uid) for uid in ("p1", "p2", "p3", "gone")))
    assert places == [line.Place(1, 3), line.Place(2, 3), line.Place(3, 3), None]
    assert len(api.calls) == 1
    now[0] = 4.9
    assert await reader.place("jhub", "ml101", "p3") == line.Place(3, 3) and len(api.calls) == 1
    api.lines["ml101"] = pending("p3")
    now[0] = 5.1
    assert await reader.place("jhub", "ml101", "p3") == line.Place(1, 1) and len(api.calls) == 2


def in_queue(queue: str, admitted: str | None, status: str = "True") -> dict:
    conditions = [{"type": "Admitted", "status": status, "lastTransitionTime": admitted}] if admitted else []
    return {"spec": {"queueName": queue}, "status": {"conditions": conditions}}


async def test_when_the_queue_last_admitted_one_is_read_once_per_namespace_for_every_queue():
    """The newest Admitted condition of a LocalQueue's Workloads that still hold their GPUs ("the last one started
    4 minutes ago"); every queue and waiter of a namespace shares one LIST of its Workloads per interval."""
    api = FakeApiClient({}, [in_queue("ml101", "2026-12-07T10:00:00Z"), in_queue("ml101", "2026-12-07T10:04:00Z"),
                             in_queue("ml101", "2026-12-07T10:09:00Z", status="False"),  # finished: holds none
                             in_queue("ml101", None), in_queue("vision", "2026-12-07T10:07:00Z")])
    now = [0.0]
    reader = line.LineReader(api, interval=5, clock=lambda: now[0])
    found = await asyncio.gather(reader.last_started("jhub", "ml101"), reader.last_started("jhub", "vision"),
                                 reader.last_started("jhub", "nlp"))
    assert found == [datetime(2026, 12, 7, 10, 4, tzinfo=UTC), datetime(2026, 12, 7, 10, 7, tzinfo=UTC), None]
    assert api.calls == [{"namespace": "jhub"}]


async def test_a_line_that_cannot_be_read_is_not_known_and_read_again_next_time():
    api = FakeApiClient({"ml101": ApiException(status=503, reason="Service Unavailable")})
    now = [0.0]
    reader = line.LineReader(api, interval=5, clock=lambda: now[0])
    assert await reader.place("jhub", "ml101", "p1") is None
    api.lines["ml101"] = pending("p1")
    assert await reader.place("jhub", "ml101", "p1") is None  # an API in trouble is not asked by every waiter
    now[0] = 5
    assert await reader.place("jhub", "ml101", "p1") == line.Place(1, 1)
    assert len(api.calls) == 2


def waiter(pods: list, said: list, admitted: list, *, limit: float = 60, workloads: list | None = None) -> line.Waiter:
    async def admit(at):
        admitted.append(at)

    async def workload(uid):
        assert uid == "mine"
        found = (workloads or [None]).pop(0) if workloads else None
        return found

    async def gone(seen):
        assert seen["metadata"]["uid"] == "mine"
        return gone_now

    gone_now = True
    return line.Waiter(queue=ML101, namespace="jhub", need="1 GPU", limit=limit,
                       pod=lambda: pods[0] if len(pods) == 1 else pods.pop(0), say=said.append, admitted=admit,
                       workload=workload, gone=gone)


async def test_the_place_is_said_when_it_changes_and_the_run_starts_when_last_seen_at_the_gate():
    api = FakeApiClient({"ml101": (pending("x", "mine"), pending("x", "mine"), pending("mine"))})
    reader = line.LineReader(api, interval=0)
    old = pod("old")  # the Pod of the start before, still there when this one began: not this start's
    pods = [old, old, pod("mine", line.GATE), pod("mine", line.GATE), pod("mine", line.GATE), pod("mine")]
    said, admitted = [], []
    before = datetime.now(UTC)
    await line.wait_in_line(waiter(pods, said, admitted), reader, look=0.01)
    assert said == [
        line.in_line(line.Place(2, 2), need="1 GPU", queue="ml101"),
        line.in_line(line.Place(1, 1), need="1 GPU", queue="ml101"),
        "Your turn: 1 GPU admitted by the queue; starting your server",
    ]
    [at] = admitted
    assert before < at <= datetime.now(UTC)


async def test_a_pod_kueue_never_held_is_metered_from_when_the_wait_began():
    said, admitted = [], []
    before = datetime.now(UTC)
    await line.wait_in_line(waiter([None, pod("mine")], said, admitted), line.LineReader(FakeApiClient({})), look=0.01)
    assert said == [] and before <= admitted[0] <= before + timedelta(seconds=1)


async def test_a_wait_past_its_limit_ends_the_start_with_the_place():
    reader = line.LineReader(FakeApiClient({"ml101": pending("a", "b", "mine")}), interval=0)
    said, admitted = [], []
    with pytest.raises(WorkspaceError) as raised:
        await line.wait_in_line(waiter([None, pod("mine", line.GATE)], said, admitted, limit=0.1), reader, look=0.02)
    assert raised.value.reason == "queue-wait" and raised.value.status_code == 503
    assert "and were still 3rd of 3 in line" in raised.value.message
    assert admitted == []


async def test_a_start_in_line_is_metered_from_its_admission_and_one_refused_in_line_never(tmp_path):
    service = QuotaService(WorkspaceQuota(), ledger=Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}"))
    try:
        request = Request(gpus=1, server_name="", gpu_resource="nvidia.com/gpu")
        reservation = await service.reserve(user="bob", groups=[], request=request)
        service.in_line("bob", "", waits=True)
        assert await service.running(reservation) is None  # at the gate: no run yet
        assert ("bob", "") in service.in_hand  # the enforcer leaves the start alone
        at = datetime.now(UTC) - timedelta(seconds=30)
        run_id = await service.admitted("bob", "", at)
        run = service.ledger.get(run_id)
        assert run.state == OPEN and run.started.replace(tzinfo=UTC) == at.replace(tzinfo=UTC)
        assert await service.admitted("bob", "", at) is None  # once

        reservation = await service.reserve(user="cy", groups=[], request=request)
        service.in_line("cy", "", waits=True)
        assert await service.running(reservation) is None
        await service.release(reservation)  # the wait reached its limit
        service.start_done("cy", "")
        assert await service.admitted("cy", "", at) is None
        assert service.ledger.runs_of("cy", (at - timedelta(days=1), at + timedelta(days=1))) == []

        reservation = await service.reserve(user="dee", groups=[], request=request)
        service.in_line("dee", "", waits=True)
        service.in_line("dee", "", waits=False)  # a later start of the server that does not wait: metered at once
        assert await service.running(reservation) is not None
    finally:
        await service.close()


def workload(*, active: bool = True, **conditions: tuple[str, str]) -> dict:
    return {"metadata": {"name": "pod-jupyter-bob-1a2b3"}, "spec": {"active": active},
            "status": {"conditions": [{"type": kind, "status": status, "reason": reason, "message": f"{kind} by Kueue"}
                                      for kind, (status, reason) in conditions.items()]}}


def test_a_workload_out_of_the_line_or_inadmissible_ends_the_wait_in_our_words():
    pending_one = workload(QuotaReserved=("False", "Pending"))
    assert line.not_admissible(None, need="1 GPU", queue="ml101") is None
    assert line.not_admissible(pending_one, need="1 GPU", queue="ml101") is None
    out = line.not_admissible(workload(active=False), need="1 GPU", queue="ml101")
    assert out.startswith("Your workspace was taken out of the line for 1 GPU (queue ml101) before its turn")
    assert line.not_admissible(workload(Evicted=("True", "Preempted")), need="1 GPU", queue="ml101") == out
    gone = line.not_admissible(workload(QuotaReserved=("False", "Inadmissible")), need="1 GPU", queue="ml101")
    assert gone.startswith("The queue ml101 cannot take your workspace now: it was removed or stopped.")
    assert "by Kueue" not in out + gone  # Kueue's words go to the log


async def test_a_pod_removed_while_it_waits_ends_the_start_at_once_and_a_cache_refilled_does_not():
    reader = line.LineReader(FakeApiClient({"ml101": pending("mine")}), interval=0)
    with pytest.raises(WorkspaceError) as raised:
        await line.wait_in_line(waiter([None, pod("mine", line.GATE), None], [], []), reader, look=0.01)
    assert raised.value.reason == "queue-left" and "taken out of the line" in raised.value.message

    async def still_there(seen):
        assert seen["metadata"]["uid"] == "mine"
        return False

    admitted = []
    w = waiter([None, pod("mine", line.GATE), None, None, pod("mine")], [], admitted)
    w.gone = still_there  # the API server still has it: the cache was being filled again
    await line.wait_in_line(w, reader, look=0.01)
    assert len(admitted) == 1


def test_a_pods_binding_time_is_read_from_its_condition():
    bound = pod("mine")
    bound["status"] = {"conditions": [{"type": "PodScheduled", "status": "True",
                                       "lastTransitionTime": "2026-12-07T10:00:05Z"}]}
    assert line.scheduled_at(bound) == datetime(2026, 12, 7, 10, 0, 5, tzinfo=UTC)
    assert line.scheduled_at(pod("mine")) is None


async def test_a_run_starts_at_the_binding_when_the_cache_showed_the_gate_after_it():
    """The cache can lag: a Pod seen at the gate "now" may have been bound a moment before; the earlier time wins."""
    reader = line.LineReader(FakeApiClient({"ml101": pending("mine")}), interval=0)
    bound = pod("mine")
    early = datetime.now(UTC) - timedelta(seconds=30)
    bound["status"] = {"conditions": [{"type": "PodScheduled", "status": "True",
                                       "lastTransitionTime": early.strftime("%Y-%m-%dT%H:%M:%SZ")}]}
    admitted = []
    await line.wait_in_line(waiter([None, pod("mine", line.GATE), bound], [], admitted), reader, look=0.01)
    assert admitted == [early.replace(microsecond=0)]


async def test_a_pod_not_in_the_line_has_its_workload_read_at_most_once_per_interval_and_ends_if_deactivated():
    api = FakeApiClient({"ml101": []})  # not (or no longer) in the line read
    reader = line.LineReader(api, interval=0.1)
    workloads = [workload(QuotaReserved=("False", "Pending")), workload(active=False)]
    w = waiter([None, pod("mine", line.GATE)], [], [], workloads=workloads)
    read, asked = w.workload, []

    async def counted(uid):
        asked.append(time.monotonic())
        return await read(uid)

    w.workload = counted
    with pytest.raises(WorkspaceError) as raised:
        await line.wait_in_line(w, reader, look=0.01)
    assert raised.value.reason == "queue-left" and "taken out of the line" in raised.value.message
    assert len(asked) == 2 and asked[1] - asked[0] >= 0.1
    assert len(api.calls) >= 2  # the line was read again meanwhile


async def test_a_container_start_ends_only_once_its_run_is_open(monkeypatch):
    """kubespawner's wait for the Pod can end before the wait in line has seen the gate gone (the Pod starts within
    the wait's look): the start still ends only once the run is open, never with the wait cancelled (unmetered)."""
    from types import SimpleNamespace

    from workspacespawner import upstream
    from workspacespawner.backends.container.backend import ContainerBackend
    from workspacespawner.queue import start as queued

    done = []

    async def pod_started(spawner):
        return "http://jupyter-bob:8888"

    async def claims_bound(self):
        await asyncio.sleep(3600)

    async def waits(spawner, queue, say, *, pod):
        await asyncio.sleep(0.05)  # a look later
        done.append("run opened")

    monkeypatch.setattr(upstream, "start_pod", pod_started)
    monkeypatch.setattr(ContainerBackend, "_claims_bound", claims_bound)
    monkeypatch.setattr(queued, "wait", waits)
    monkeypatch.setattr(ContainerBackend, "queue", lambda self, groups: ML101)
    backend = ContainerBackend(SimpleNamespace(_options_loaded=False, namespace="jhub", pod_name="jupyter-bob",
                                               pod_reflector=None))
    ctx = SimpleNamespace(tiers=SimpleNamespace(groups=frozenset({"ml101"})), say=lambda *a, **k: None)
    assert await backend.start(ctx) == "http://jupyter-bob:8888"
    assert done == ["run opened"]


def test_the_progress_pages_script_knows_how_the_lines_messages_begin():
    """The progress page's script (the place in the tab's title, the turn's notification) finds the messages by
    how they begin: the same words as the sentences'."""
    from workspacespawner.homepage import TEMPLATES

    script = (Path(TEMPLATES) / "spawn_pending.html").read_text()
    assert f'var IN_LINE = "{line.IN_LINE}", YOUR_TURN = "{line.YOUR_TURN}";' in script
    assert line.in_line(line.Place(2, 5), need="1 GPU", queue="ml101").startswith(line.IN_LINE)
    assert line.in_line(None, need="1 GPU", queue="ml101").startswith(line.IN_LINE)


async def test_a_pod_is_gone_when_the_api_server_has_none_of_its_name_and_uid_and_not_when_it_cannot_say():
    from workspacespawner.queue.start import pod_gone

    class FakeKube:
        def __init__(self, answer):
            self.answer, self.asked = answer, []

        async def get(self, kind, namespace, name, *, fresh=False):
            self.asked.append((kind.kind, namespace, name, fresh))
            if isinstance(self.answer, Exception):
                raise self.answer
            return self.answer

    seen = {"metadata": {"namespace": "jhub", "name": "jupyter-bob", "uid": "mine"}}
    kube = FakeKube(None)
    assert await pod_gone(kube, seen, timeout=1) is True
    assert kube.asked == [("Pod", "jhub", "jupyter-bob", True)]  # the API server, not a cache
    assert await pod_gone(FakeKube({"metadata": {"uid": "next-start"}}), seen, timeout=1) is True
    assert await pod_gone(FakeKube({"metadata": {"uid": "mine"}}), seen, timeout=1) is False
    assert await pod_gone(FakeKube(ApiException(status=503)), seen, timeout=1) is False
    assert await pod_gone(FakeKube(TimeoutError()), seen, timeout=1) is False
