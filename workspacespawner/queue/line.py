"""A GPU workspace in line: Kueue's gate on its Pod, its place from Kueue's visibility API, the wait's limit (#41).

A container workspace of a GPU profile whose user is in a queue's group
(:meth:`~.config.GPUQueues.queue_of`) names the queue's LocalQueue and the
interactive WorkloadPriorityClass in its Pod's labels (:func:`pod_labels`).
Kueue's webhook then holds the Pod at its scheduling gate (:data:`GATE`)
until the queue's ClusterQueue has the GPUs, and lifts the gate when it
admits the Pod's Workload. While the gate is on, :func:`wait_in_line` tells
the spawn page the workspace's place and when the queue last admitted one (from
``GET .../localqueues/{queue}/pendingworkloads``, read through
:class:`LineReader`: one request per LocalQueue every few seconds for the
whole hub, however many wait), ends the wait at its limit with a sentence
(:func:`gave_up`), and opens the metered run once the gate is lifted, from
the last moment the Pod was seen at the gate: a Pod at the gate holds no GPU
and is not charged (:meth:`~workspacespawner.quota.service.QuotaService.admitted`).

API followed: Kueue v0.15's pod integration (the ``kueue.x-k8s.io/admission``
scheduling gate) and its visibility API ``visibility.kueue.x-k8s.io/v1beta2``
(``PendingWorkloadsSummary``: items with ``positionInLocalQueue``, 0 first,
and the Workload's ``ownerReferences``: the Pod).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from kubernetes_asyncio.client.rest import ApiException

from workspacespawner.core.errors import WorkspaceError
from workspacespawner.core.gpuresources import parse_gpu_resource
from workspacespawner.core.times import parse_time
from workspacespawner.k8s.objects import condition, terminating
from workspacespawner.queue.config import GPUQueue
from workspacespawner.queue.kueueobjects import INTERACTIVE, PRIORITY_LABEL, QUEUE_LABEL

#: The scheduling gate Kueue's pod integration puts on a Pod until its Workload is admitted.
GATE = "kueue.x-k8s.io/admission"
#: The prefix of Kueue's scheduling gates: besides :data:`GATE`, v0.15 puts ``kueue.x-k8s.io/topology`` on a Pod
#: (lifted after admission, once its topology is known); a Pod with either cannot be scheduled.
KUEUE_GATES = "kueue.x-k8s.io/"
log = logging.getLogger("workspacespawner")

#: The label of a Workload naming the uid of the Pod it stands for.
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
#: Kueue's visibility API: the Workloads waiting in a LocalQueue, in order.
PENDING_PATH = "/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/{namespace}/localqueues/{name}/pendingworkloads"
#: How the progress messages of a start in line begin, while it waits and once admitted (the progress page's script,
#: workspacespawner/homepage/templates/spawn_pending.html, shows the place and the turn in the tab's title by them).
IN_LINE, YOUR_TURN = "In line for", "Your turn:"
#: A namespace's Workloads (when each LocalQueue last admitted one).
WORKLOADS_PATH = "/apis/kueue.x-k8s.io/v1beta2/namespaces/{namespace}/workloads"
#: Seconds a LocalQueue's line is reused before it is read again (for every waiter of the hub).
LINE_INTERVAL = 5.0
#: Seconds between two looks at the Pod (in kubespawner's Pod cache, as kubespawner's own wait looks: no API call).
LOOK_INTERVAL = 1.0
#: Seconds of a start's timeout a wait without a limit of its own leaves for the start once admitted.
AFTER_WAIT = 30.0
#: The workspace kinds whose compute waits in a GPU queue: a container's Pod, a VM's virt-launcher Pod (KubeVirt
#: gives it the VMI's labels, so Kueue holds it as it holds a container's).
QUEUED_KINDS = ("container", "vm")


def queue_for(queues: Mapping[str, GPUQueue], groups: Iterable[str], *, gpus: int, resource: str,
              kind: str) -> GPUQueue | None:
    """The queue a start waits in: a workspace asking for ``gpus`` > 0 of ``resource``, of a member of one of the
    queue's ``groups`` (the user's JupyterHub groups), whose queue holds that resource; None: it does not wait (a GPU
    start that cannot be placed fails at once with the numbers). A resource the member's queue does not hold (a MIG
    slice where the queue holds whole GPUs) is not waited for: Kueue would never admit it."""
    if gpus <= 0 or kind not in QUEUED_KINDS:
        return None
    return next((queue for queue in queues.values() if queue.member(groups) and resource in queue.resources()), None)


def wait_limit(queue: GPUQueue, start_timeout: float) -> float:
    """Seconds a start may wait in ``queue``: its ``max_wait_seconds``, within the start timeout (which covers the
    wait and the start after it); without one, the start timeout less :data:`AFTER_WAIT` (at least half of it)."""
    if queue.max_wait_seconds:
        return min(float(queue.max_wait_seconds), start_timeout)
    return max(start_timeout - AFTER_WAIT, start_timeout / 2)


def need_words(gpus: int, resource: str, product: str | None) -> str:
    """What a start waits for, in words: ``1 GPU``, ``2 NVIDIA A100 GPUs``, ``1 MIG slice 1g.10gb``."""
    known = parse_gpu_resource(resource)
    words = known.describe(gpus) if known is not None else f"{gpus} × {resource}"
    count, _, unit = words.partition(" ")
    return f"{count} {product} {unit}" if product else words


def pod_labels(queue: GPUQueue | None) -> dict[str, str]:
    """The labels that put a workspace's Pod in ``queue`` (none without a queue)."""
    return {QUEUE_LABEL: queue.name, PRIORITY_LABEL: INTERACTIVE} if queue is not None else {}


def gated(pod: dict | None) -> bool:
    """Whether Kueue holds ``pod`` (a core/v1 Pod dict) at one of its gates (:data:`KUEUE_GATES`)."""
    gates = ((pod or {}).get("spec") or {}).get("schedulingGates") or []
    return any((gate.get("name") or "").startswith(KUEUE_GATES) for gate in gates)


@dataclass(frozen=True)
class Place:
    """A workspace's place in its LocalQueue: ``position`` (1 first) of ``waiting``."""

    position: int
    waiting: int

    def __str__(self) -> str:
        return f"{ordinal(self.position)} of {self.waiting}"


def ordinal(n: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``4th``, ``11th``, ``21st``..."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def in_line(place: Place | None, *, need: str, queue: str, started_ago: float | None = None) -> str:
    """The spawn page's line while the workspace waits; ``started_ago``: seconds since the queue last admitted a
    workspace that still runs (None: none does, or not known)."""
    where = f"{IN_LINE} {need} (queue {queue})"
    if place is None:
        return f"{where}. Your place will show here in a moment; you need not click again."
    last = f"; the last one started {ago(started_ago)}" if started_ago is not None else ""
    return f"{where}: {place}{last}. Your workspace opens here when it is your turn; you need not click again."


def ago(seconds: float) -> str:
    """``less than a minute ago``, ``1 minute ago``, ``4 minutes ago``, ``2 hours ago`` (from 90 minutes)."""
    minutes = int(max(seconds, 0) // 60)
    if minutes < 1:
        return "less than a minute ago"
    if minutes < 90:
        return f"{minutes} minute{'s' if minutes != 1 else ''} ago"
    return f"{round(minutes / 60)} hours ago"


def gave_up(place: Place | None, *, need: str, queue: str, waited: float) -> str:
    """The start's end when its wait reached the limit."""
    minutes = max(1, round(waited / 60))
    still = f" and were still {place} in line" if place is not None else ""
    return (f"You waited {minutes} minute{'s' if minutes != 1 else ''} for {need} (queue {queue}){still}: the longest "
            "wait allowed. Nothing was started and no card-hours were charged. Try again later, or start a profile "
            "with fewer or no GPUs.")


def queue_note(queue: str, waiting: int | None) -> str:
    """A GPU card's line of its queue, for a member: how many wait in it now (None: not known now)."""
    turn = "If its GPUs are taken, you wait in line for your turn here."
    if waiting is None:
        return f"Queue {queue}: {turn}"
    return f"Queue {queue}: {waiting or 'no one'} waiting now. {turn}"


def left_line(*, need: str, queue: str) -> str:
    """The start's end when its Pod was removed while it waited (its Workload deleted)."""
    return (f"Your workspace was taken out of the line for {need} (queue {queue}) before its turn: its place was "
            "removed from the cluster. Nothing was started and no card-hours were charged. Start it again to get "
            "back in line.")


def not_admissible(workload: dict | None, *, need: str, queue: str) -> str | None:
    """The start's end when its Workload can no longer be admitted, or None while it still waits its turn.

    ``workload``: the Kueue Workload of the start's Pod (None: not found).
    Deactivated (``spec.active: false``, as ``kubectl`` or an admin's
    tooling sets it) or finished or evicted before admission: taken out of
    the line; ``QuotaReserved`` False for ``Inadmissible`` (its LocalQueue
    or ClusterQueue is gone or stopped): the queue cannot take it. Kueue's
    own words go to the hub's log, not to the student.
    """
    if workload is None:
        return None
    reserved = condition(workload, "QuotaReserved") or {}
    out = (workload.get("spec") or {}).get("active") is False or any(
        (condition(workload, kind) or {}).get("status") == "True" for kind in ("Evicted", "Finished"))
    if out:
        return (f"Your workspace was taken out of the line for {need} (queue {queue}) before its turn, by an "
                "administrator or the queue's rules. Nothing was started and no card-hours were charged. Start it "
                "again to get back in line, or ask an administrator why.")
    if reserved.get("status") == "False" and reserved.get("reason") == "Inadmissible":
        return (f"The queue {queue} cannot take your workspace now: it was removed or stopped. Nothing was started "
                "and no card-hours were charged. Please tell an administrator, and start a profile without GPUs "
                "meanwhile.")
    return None


class LineReader:
    """The places in each LocalQueue, from Kueue's visibility API (see the module docstring), and when each last
    admitted a workspace, from the namespace's Workloads.

    ``api_client``: kubernetes_asyncio's ``ApiClient``; ``interval``: seconds
    a read is reused; ``clock``: monotonic seconds (tests pass their own).
    Concurrent readers of one LocalQueue (or one namespace's Workloads) share
    one request.
    """

    def __init__(self, api_client, *, interval: float = LINE_INTERVAL, clock: Callable[[], float] = time.monotonic):
        self.api_client = api_client
        self.interval = interval
        self.clock = clock
        self._read_at: dict[tuple, tuple[float, list[dict] | None]] = {}
        #: namespace -> (the Workloads read, :func:`latest_admissions` of them)
        self._latest: dict[str, tuple[list[dict], dict[str, datetime]]] = {}
        self._reading: dict[tuple, asyncio.Future] = {}

    async def _read(self, path: str, params: dict) -> list[dict] | None:
        try:
            found = await self.api_client.call_api(
                path, "GET", path_params=params,
                header_params={"Accept": "application/json"}, auth_settings=["BearerToken"],
                response_types_map={200: "object"}, _return_http_data_only=True)
        except (TimeoutError, ApiException, OSError):  # not known now: the place shows at the next read
            return None
        return (found or {}).get("items") or []

    async def _shared(self, path: str, **params: str) -> list[dict] | None:
        """The items at ``path``, read at most once per interval for every caller (None: cannot be read now)."""
        key = (path, *sorted(params.items()))
        read_at, items = self._read_at.get(key, (None, None))
        if read_at is not None and self.clock() - read_at < self.interval:
            return items
        if key not in self._reading:
            self._reading[key] = asyncio.ensure_future(self._read(path, params))
            self._reading[key].add_done_callback(lambda done: self._done(key, done))
        return await asyncio.shield(self._reading[key])

    def _done(self, key, done: asyncio.Future) -> None:
        self._reading.pop(key, None)
        if not done.cancelled() and done.exception() is None:
            self._read_at[key] = (self.clock(), done.result())

    async def line(self, namespace: str, queue: str) -> list[dict] | None:
        """The Workloads waiting in LocalQueue ``queue`` of ``namespace`` (None: the line cannot be read now)."""
        return await self._shared(PENDING_PATH, namespace=namespace, name=queue)

    async def last_started(self, namespace: str, queue: str) -> datetime | None:
        """When the queue last admitted a Workload that still holds its GPUs (:func:`latest_admissions` of
        ``namespace``'s Workloads, read with every LocalQueue of the namespace in one LIST per interval and worked
        out once per read for every waiter), or None: none holds any now, or they cannot be read now."""
        workloads = await self._shared(WORKLOADS_PATH, namespace=namespace)
        if workloads is None:
            return None
        read, latest = self._latest.get(namespace, (None, {}))
        if read is not workloads:
            latest = latest_admissions(workloads)
            self._latest[namespace] = (workloads, latest)
        return latest.get(queue)

    async def workload(self, custom_api, namespace: str, pod_uid: str) -> dict | None:
        """The Workload Kueue made for the Pod with ``pod_uid`` (by :data:`JOB_UID_LABEL`), or None (none, or the API
        cannot be asked now)."""
        try:
            found = await custom_api.list_namespaced_custom_object(
                "kueue.x-k8s.io", "v1beta2", namespace, "workloads", label_selector=f"{JOB_UID_LABEL}={pod_uid}")
        except (TimeoutError, ApiException, OSError):
            return None
        items = (found or {}).get("items") or []
        return items[0] if items else None

    async def place(self, namespace: str, queue: str, pod_uid: str) -> Place | None:
        """The place of the Pod with ``pod_uid`` in ``queue``, or None while it is not in the line read."""
        items = await self.line(namespace, queue)
        for item in items or ():
            owners = (item.get("metadata") or {}).get("ownerReferences") or []
            if any(owner.get("uid") == pod_uid for owner in owners):
                return Place(int(item.get("positionInLocalQueue") or 0) + 1, len(items))
        return None


def latest_admissions(workloads: Iterable[dict]) -> dict[str, datetime]:
    """``{LocalQueue: newest Admitted time}`` of the ``workloads`` that are admitted now (so still hold their GPUs)."""
    latest: dict[str, datetime] = {}
    for workload in workloads:
        queue = (workload.get("spec") or {}).get("queueName")
        admitted = condition(workload, "Admitted") or {}
        at = parse_time(admitted.get("lastTransitionTime")) if admitted.get("status") == "True" else None
        if queue and at is not None and (queue not in latest or at > latest[queue]):
            latest[queue] = at
    return latest


@dataclass
class Waiter:
    """One start waiting in line: what :func:`wait_in_line` needs.

    ``pod``: the start's Pod as kubespawner's Pod cache has it now (None
    before it is made; a Pod of an earlier start, still going, is not
    taken for it); ``admitted(at)``: the gate is lifted, the Pod was last
    seen at it at ``at``; ``limit``: seconds the start may wait
    (:func:`wait_limit`); ``need``: what it waits for (:func:`need_words`);
    ``workload(uid)``: the Pod's Workload (:meth:`LineReader.workload`),
    asked only while the Pod is not in the line read, at most every
    ``LINE_INTERVAL`` seconds; ``gone(pod)``: whether the API server no
    longer has ``pod``, as last seen (asked when the cache stops holding it:
    a cache being filled again after its watch gave up is no reason to end
    the start; :func:`~.start.pod_gone`).
    """

    queue: GPUQueue
    namespace: str
    need: str
    limit: float
    pod: Callable[[], dict | None]
    say: Callable[[str], None]
    admitted: Callable[[datetime], Awaitable[object]]
    workload: Callable[[str], Awaitable[dict | None]]
    gone: Callable[[dict], Awaitable[bool]]


async def wait_in_line(waiter: Waiter, reader: LineReader, *, look: float = LOOK_INTERVAL,
                       clock: Callable[[], float] = time.monotonic) -> None:
    """While the start's Pod is at Kueue's gate: say its place when it changes, and raise
    :class:`~workspacespawner.core.errors.WorkspaceError` (503) once it waited ``limit`` seconds (reason
    ``queue-wait``) or left the line before its turn (``queue-left``: its Pod removed, its Workload deactivated or
    inadmissible); return after calling ``admitted`` once the gate is lifted, from the last moment the Pod was seen at
    the gate, or from its binding to a node if the cache showed that earlier (:func:`scheduled_at`)."""
    began, said, place, seen, asked = clock(), None, None, None, None
    seen_gated = datetime.now(UTC)
    earlier = _uid(waiter.pod())  # a Pod there before this start made its own (kubespawner replaces it)
    need, name = waiter.need, waiter.queue.name
    while True:
        pod = waiter.pod()
        if pod is not None and (_uid(pod) == earlier or terminating(pod)):
            pod = None
        if pod is None and seen is not None and await waiter.gone(seen):
            raise WorkspaceError(left_line(need=need, queue=name), reason="queue-left", status_code=503)
        if pod is not None and not gated(pod):
            bound = scheduled_at(pod)
            await waiter.admitted(min(seen_gated, bound) if bound is not None else seen_gated)
            if said is not None:
                waiter.say(f"{YOUR_TURN} {need} admitted by the queue; starting your server")
            return
        if pod is not None:
            seen, seen_gated = pod, datetime.now(UTC)
            found = await reader.place(waiter.namespace, name, _uid(pod) or "")
            if found is None and (asked is None or clock() - asked >= reader.interval):
                asked = clock()
                workload = await waiter.workload(_uid(pod) or "")
                ended = not_admissible(workload, need=need, queue=name)
                if ended is not None:
                    kueue_said = [c.get("message") for c in (workload.get("status") or {}).get("conditions") or []]
                    log.info("%s left queue %s: Workload %s says %s", need, name, workload["metadata"].get("name"),
                             kueue_said)
                    raise WorkspaceError(ended, reason="queue-left", status_code=503)
            place = found or place
            started = await reader.last_started(waiter.namespace, name) if place is not None else None
            ago_now = (datetime.now(UTC) - started).total_seconds() if started is not None else None
            message = in_line(place, need=need, queue=name, started_ago=ago_now)
            if message != said:
                waiter.say(message)
                said = message
        waited = clock() - began
        if waited >= waiter.limit:
            raise WorkspaceError(gave_up(place, need=need, queue=name, waited=waited), reason="queue-wait",
                                 status_code=503)
        await asyncio.sleep(look)


def scheduled_at(pod: dict) -> datetime | None:
    """When ``pod`` was bound to a node (its ``PodScheduled`` condition turned True; whole seconds, so never later
    than the binding), or None while it is not."""
    scheduled = condition(pod, "PodScheduled") or {}
    return parse_time(scheduled.get("lastTransitionTime")) if scheduled.get("status") == "True" else None


def _uid(pod: dict | None) -> str | None:
    return ((pod or {}).get("metadata") or {}).get("uid")
