"""The ``pods/log`` subresource: ``GET /api/v1/namespaces/{ns}/pods/{name}/log``, what ``kubectl logs`` reads.

The API server's part: the container is the one named by ``container``, or
the Pod's only one (400 BadRequest ``a container name must be specified for
pod web, choose one of: [init main sidecar]`` when there are several,
``container x is not valid for pod web`` for a wrong name); a Pod not yet
on a node has no logs (an empty answer). The kubelet's part, decided from
the Pod's container status as ``validateContainerLogStatus`` does: a
running, terminated or crash-looping container shows its last run, and
``previous=true`` the run before it (400 ``previous terminated container
"main" in pod "web" not found`` when there was none); a container that
never ran answers 400 ``container "main" in pod "web" is waiting to start:
ContainerCreating`` (or the kubelet's words for image pull failures).

Query parameters: ``container``, ``previous``, ``tailLines`` (the last N
lines), ``limitBytes`` (at most N bytes) and ``follow``: after the current
output, new lines stream (chunked ``text/plain``) until the container's
process ends or the client goes away. A difference from a kubelet: a
container the node agent has no live output for yet (a virt-launcher Pod's
``guest-console-log`` before its guest started) answers what is there and
ends, where a kubelet would keep the stream open; a client that wants the
rest opens it again (as the hub's console follower does). ``timestamps``, ``sinceSeconds`` and
``sinceTime`` are accepted and ignored: the node agent keeps lines without
their times. Output is what the node agent kept (see
:mod:`.controllers.nodeagent`): the last ~200 lines of each run.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from . import errors
from .controllers.kubelet import container_log_path
from .watchstream import TRUE_WORDS

#: The kubelet's words for a container waiting on its image (``validateContainerLogStatus``).
WAITING_WORDS = {
    "ErrImagePull": "image can't be pulled",
    "ImagePullBackOff": "trying and failing to pull image",
}


@dataclass(frozen=True)
class LogOptions:
    """``PodLogOptions`` from the query string."""

    container: str | None
    follow: bool
    previous: bool
    tail_lines: int | None
    limit_bytes: int | None

    @classmethod
    def parse(cls, query) -> LogOptions:
        """Read the options from ``query(param)``; 400 for a malformed number, 422 for a negative one."""
        numbers = {}
        for param in ("tailLines", "limitBytes"):
            value = query(param)
            if value is None:
                numbers[param] = None
                continue
            try:
                numbers[param] = int(value)
            except ValueError:
                raise errors.bad_request(f'{param}: invalid value "{value}"') from None
            minimum = 0 if param == "tailLines" else 1
            if numbers[param] < minimum:
                causes = [{"field": param, "reason": "FieldValueInvalid", "message": f"Invalid value: {value}: must be greater than {'or equal to ' if minimum == 0 else ''}0"}]
                raise errors.invalid("PodLogOptions", "", causes)
        return cls(
            container=query("container") or None,
            follow=query("follow") in TRUE_WORDS,
            previous=query("previous") in TRUE_WORDS,
            tail_lines=numbers["tailLines"],
            limit_bytes=numbers["limitBytes"],
        )


def _container_names(pod: dict) -> list[str]:
    spec = pod.get("spec") or {}
    return [c["name"] for key in ("initContainers", "containers") for c in spec.get(key) or []]


def choose_container(pod: dict, container: str | None) -> str:
    """The container whose log is asked for (the API server's ``validateContainer``)."""
    name = pod["metadata"]["name"]
    if container:
        if container not in _container_names(pod):
            raise errors.bad_request(f"container {container} is not valid for pod {name}")
        return container
    containers = (pod.get("spec") or {}).get("containers") or []
    if len(containers) == 1:
        return containers[0]["name"]
    if not containers:
        raise errors.bad_request(f"a container name must be specified for pod {name}")
    raise errors.bad_request(
        f"a container name must be specified for pod {name}, choose one of: [{' '.join(_container_names(pod))}]"
    )


def _status_of(pod: dict, container: str) -> dict | None:
    status = pod.get("status") or {}
    for key in ("containerStatuses", "initContainerStatuses"):
        for entry in status.get(key) or []:
            if entry.get("name") == container:
                return entry
    return None


def run_to_read(pod: dict, container: str, previous: bool) -> bool:
    """Which run's file holds the asked-for log: False for the container's current file, True for its previous one.

    The kubelet's ``validateContainerLogStatus``: raises 400 when there is
    no such run. While a crashed container waits to restart, its last run is
    still the current file (the node agent rotates when the next run starts),
    so both the log and the previous log read it, as on a kubelet.
    """
    name = pod["metadata"]["name"]
    status = _status_of(pod, container)
    if status is None:
        raise errors.bad_request(f'container "{container}" in pod "{name}" is not available')
    state, last = status.get("state") or {}, (status.get("lastState") or {}).get("terminated")
    has_instance = "running" in state or "terminated" in state
    if previous:
        if last is None:
            raise errors.bad_request(f'previous terminated container "{container}" in pod "{name}" not found')
        return has_instance
    if has_instance or last is not None:
        return False
    reason = (state.get("waiting") or {}).get("reason")
    if reason:
        raise errors.bad_request(f'container "{container}" in pod "{name}" is waiting to start: {WAITING_WORDS.get(reason, reason)}')
    raise errors.bad_request(f'container "{container}" in pod "{name}" is waiting to start - no logs yet')


def _tail(lines: list[str], count: int | None) -> list[str]:
    if count is None:
        return lines
    return lines[len(lines) - count:] if count else []


class PodLog:
    """One ``pods/log`` answer: the text so far and, when following, the lines still to come."""

    def __init__(self, cluster, pod: dict, options: LogOptions):
        self.options = options
        self.text = ""
        self.queue: asyncio.Queue | None = None
        self._output = None
        self._budget = options.limit_bytes
        if not (pod.get("spec") or {}).get("nodeName"):
            return  # not on a node yet: no kubelet to ask, an empty log
        container = choose_container(pod, options.container)
        previous = run_to_read(pod, container, options.previous)
        agent = cluster.controllers.get("nodeagent")
        path = (agent.log_path(pod, container, previous) if agent is not None
                else container_log_path(Path(cluster.state_dir) / "pods", pod, container, previous))
        output = agent.container_output(pod, container) if agent is not None and not previous else None
        if options.follow and output is not None:
            # Read and subscribe in one step of the event loop: no line falls between.
            self.queue = output.follow()
            self._output = output if self.queue is not None else None
        lines = path.read_text(errors="replace").splitlines() if path.exists() else []
        self.text = "".join(f"{line}\n" for line in _tail(lines, options.tail_lines))

    def _limit(self, text: str) -> str:
        if self._budget is None:
            return text
        data = text.encode()[: self._budget]
        self._budget -= len(data)
        if self._budget <= 0:
            self.close()
        return data.decode(errors="ignore")

    def first(self) -> str:
        """What is there now (the last ``tailLines`` lines, within ``limitBytes``)."""
        return self._limit(self.text)

    async def next(self) -> str | None:
        """The next line when following, None once the output (or the answer) ended."""
        if self.queue is None:
            return None
        line = await self.queue.get()
        if line is None:
            self.queue = None
            return None
        return self._limit(line + "\n")

    def close(self) -> None:
        """Stop following (the client went away, or limitBytes was reached)."""
        if self._output is not None and self.queue is not None:
            self._output.unfollow(self.queue)
            self.queue.put_nowait(None)
        self._output = None
