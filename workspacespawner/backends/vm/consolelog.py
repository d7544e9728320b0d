"""Following a starting VM's serial console, as ``kubectl logs -f virt-launcher-... -c guest-console-log`` does.

:class:`ConsoleFollower` runs beside a VM start's wait (:meth:`.workspace.VMWorkspace._wait_running`) and feeds
each console line to a :class:`~.guestconsole.ConsoleReader`. API followed: ``GET
/api/v1/namespaces/{namespace}/pods/{name}/log?container=guest-console-log&follow=true`` (``pods/log``: RBAC
``get``), one stream per starting VM, open only while its start waits. The launcher Pod comes from the shared Pod
watch cache (``launcher()``), which also says when its container has started; nothing is polled from the API.

Reading the console is a help, never a condition of a start: a cluster that does not log serial consoles (no
such container), a ``pods/log`` the API server cannot serve (403, a kubelet out of reach) or a stream that breaks
leaves :attr:`ConsoleFollower.boot` as it was, and the start goes on as it would without it.

A stream that ends while its container still runs is opened again after a pause: a kubelet may answer before the
guest wrote anything (the launcher Pod runs before QEMU starts), or a proxy on the way may close a long answer. The
answer holds the log from its start again, so it is read afresh. The pause doubles, up to
:data:`MAX_RETRY_SECONDS`, while the answers hold no line.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import aiohttp
from kubernetes_asyncio.client.rest import ApiException

from workspacespawner.backends.vm.guestconsole import CONTAINER, Boot, ConsoleReader

log = logging.getLogger("workspacespawner")

#: Seconds between two looks at the cached launcher Pod, and before a stream is opened again after it broke.
INTERVAL = 0.2
RETRY_SECONDS = 2.0
#: The longest pause before a stream of a running container that keeps ending without a line is opened again.
MAX_RETRY_SECONDS = 30.0


def _console_container(pod: dict | None) -> str | None:
    """``"running"`` while the Pod's console container runs, ``"started"`` once it has run, ``"absent"`` when the
    Pod has none, else None."""
    if pod is None:
        return None
    if CONTAINER not in [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]:
        return "absent"
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        state = status.get("state") or {}
        if status.get("name") == CONTAINER and "running" in state:
            return "running"
        if status.get("name") == CONTAINER and "terminated" in state:
            return "started"
    return None


class ConsoleFollower:
    """Follows the serial console of the guest of a starting VM.

    ``core_api``: kubernetes_asyncio ``CoreV1Api``; ``launcher()``: the
    VMI's virt-launcher Pod as the watch cache holds it now, or None.
    :attr:`boot` is None until a console line was read.
    """

    def __init__(self, core_api, launcher: Callable[[], dict | None]):
        self.core_api = core_api
        self.launcher = launcher
        self.boot: Boot | None = None

    async def run(self) -> None:
        """Follow each launcher Pod's console in turn (KubeVirt makes a new one when it boots the VM again), until
        cancelled or the console cannot be read."""
        loop = asyncio.get_running_loop()
        followed: str | None = None
        pause, reopen_at = RETRY_SECONDS, 0.0
        while True:
            pod = self.launcher()
            state = _console_container(pod)
            if state == "absent":
                log.debug("No serial console log for %s: its launcher Pod has no %s container", pod["metadata"]["name"], CONTAINER)
                return
            uid = (pod or {}).get("metadata", {}).get("uid")
            # a Pod whose stream ended is opened again only while its container runs, after the pause
            if state is None or (uid == followed and (state != "running" or loop.time() < reopen_at)):
                await asyncio.sleep(INTERVAL)
                continue
            if uid != followed:
                pause = RETRY_SECONDS
            try:
                read = await self._follow(pod)
                followed = uid
                pause = RETRY_SECONDS if read else min(2 * pause, MAX_RETRY_SECONDS)
                reopen_at = loop.time() + pause
            except ApiException as e:
                if e.status != 400:  # 400: the container is not running yet; else the console is out of reach
                    log.info("Cannot read the serial console of %s (%s %s)", pod["metadata"]["name"], e.status, e.reason)
                    return
                await asyncio.sleep(RETRY_SECONDS)
            except (TimeoutError, aiohttp.ClientError) as e:
                log.debug("Serial console stream of %s broke (%s); opening it again", pod["metadata"]["name"], e)
                await asyncio.sleep(RETRY_SECONDS)

    async def _follow(self, pod: dict) -> bool:
        """Read ``pod``'s console until its stream ends (the log from its start: a fresh reader); whether any line came."""
        meta = pod["metadata"]
        response = await self.core_api.read_namespaced_pod_log(
            meta["name"], meta["namespace"], container=CONTAINER, follow=True, _preload_content=False,
            _request_timeout=aiohttp.ClientTimeout(total=None, sock_read=None))
        reader, read = ConsoleReader(), False
        try:
            async for raw in response.content:
                read = True
                self.boot = reader.feed(raw.decode("utf-8", errors="replace"))
        finally:
            response.release()
        return read
