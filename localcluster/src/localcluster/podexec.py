"""``pods/{name}/exec`` over WebSocket: ``kubectl exec`` into a running container's sandbox.

kubectl (1.31 and later) speaks the WebSocket form of the remote command
protocol, ``v5.channel.k8s.io`` (``v4.channel.k8s.io`` also accepted):
every binary message starts with its stream's number (1 stdout, 2 stderr,
3 the final Status). The command (``command=`` query arguments) runs
inside the container's sandbox (:func:`~.controllers.isolation.joined`):
its filesystem, hostname and processes, with no stdin. ``stdin=true``
(``kubectl exec -i``) and ``tty=true`` (``-t``) are refused with 400: the
client's stdin frames did not arrive in trials, so interactive sessions are
not served yet. The last message is the
Status: ``Success``, or ``Failure`` with reason ``NonZeroExitCode`` and the
exit code as the ``ExitCode`` cause, which kubectl exits with. The SPDY form
(kubectl before 1.31) is not served: such a client gets an error. A Pod
whose processes run with mapped paths (no sandbox on this host), or that is
not running here, answers with a Status error before the upgrade.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path

import tornado.websocket

from .controllers import isolation
from .controllers.runtime import Launch

log = logging.getLogger("localcluster")

PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
STDOUT, STDERR, ERROR = 1, 2, 3
NO_STDIN = "exec here runs commands without stdin or a terminal (no -i, no -t)"


def exit_status(code: int, argv: list[str]) -> dict:
    """The Status kubectl reads on stream 3 for a command that exited with ``code``."""
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"command terminated with non-zero exit code: error executing command {argv}, exit code {code}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


class ExecHandler(tornado.websocket.WebSocketHandler):
    """One ``kubectl exec`` session (see the module docstring)."""

    def initialize(self, cluster) -> None:
        self.cluster = cluster
        self.proc: asyncio.subprocess.Process | None = None
        self.tasks: list[asyncio.Task] = []

    def select_subprotocol(self, subprotocols: list[str]) -> str | None:
        return next((p for p in PROTOCOLS if p in subprotocols), None)

    def _fail(self, code: int, reason: str, message: str) -> None:
        self.set_status(code)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                "message": message, "reason": reason, "code": code}))

    async def post(self, namespace: str, name: str) -> None:
        """The SPDY form (kubectl's fallback, or before 1.31): not served."""
        if self.get_query_argument("stdin", "false") in ("true", "1") or self.get_query_argument("tty", "false") in ("true", "1"):
            return self._fail(400, "BadRequest", NO_STDIN)
        return self._fail(400, "BadRequest", "exec is served over WebSocket only (kubectl 1.31 or later), not SPDY")

    async def get(self, namespace: str, name: str) -> None:
        agent = self.cluster.controllers.get("nodeagent")
        pod = None
        if agent is not None:
            pod = next((r for r in agent.runtimes.values() if r.obj["kind"] == "Pod" and r.namespace == namespace and r.name == name), None)
        if pod is None:
            return self._fail(404, "NotFound", f'pods "{name}" is not running on a node of this cluster')
        if not agent.isolation:
            return self._fail(400, "BadRequest", "exec needs the node agent's sandboxes, which this host cannot make")
        wanted = self.get_query_argument("container", None)
        sups = [s for s in pod.containers if wanted in (None, s.name)]
        if not sups or sups[0].process is None or not sups[0].process.running:
            return self._fail(400, "BadRequest", f"container {wanted or 'default'} is not running in pod {name}")
        if self.get_query_argument("stdin", "false") in ("true", "1") or self.get_query_argument("tty", "false") in ("true", "1"):
            return self._fail(400, "BadRequest", NO_STDIN)
        self.argv = self.get_query_arguments("command")
        if not self.argv:
            return self._fail(400, "BadRequest", "you must specify at least 1 command")
        self.outer_pid, self.pod_dir, self.pod_name = sups[0].process.pid, pod.dir, pod.name
        self.env = {**agent.host_env({}), "HOSTNAME": pod.name, "HOME": "/root"}
        await super().get(namespace, name)

    async def open(self, namespace: str, name: str) -> None:
        launch = isolation.joined(self.outer_pid, Launch(self.argv, self.env, Path("/")), self.pod_dir)
        pipe = asyncio.subprocess.PIPE
        self.proc = await asyncio.create_subprocess_exec(
            *launch.argv, env=launch.env, cwd=str(launch.cwd), stdin=asyncio.subprocess.DEVNULL, stdout=pipe, stderr=pipe,
            start_new_session=True,
        )
        self.tasks += [asyncio.create_task(self._pump(self.proc.stdout, STDOUT)), asyncio.create_task(self._pump(self.proc.stderr, STDERR))]
        self.tasks.append(asyncio.create_task(self._finish()))

    async def _pump(self, stream: asyncio.StreamReader, channel: int) -> None:
        while chunk := await stream.read(65536):
            await self._send(channel, chunk)

    async def _send(self, channel: int, data: bytes) -> None:
        try:
            await self.write_message(bytes([channel]) + data, binary=True)
        except tornado.websocket.WebSocketClosedError:
            pass

    async def _finish(self) -> None:
        code = await self.proc.wait()
        code = 128 - code if code < 0 else code
        await asyncio.gather(*self.tasks[:-1], return_exceptions=True)
        await self._send(ERROR, json.dumps(exit_status(code, self.argv)).encode())
        self.close(1000)

    def on_message(self, message) -> None:
        """Nothing is read from the client: stdin and terminals are refused before the upgrade."""

    def on_close(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            try:
                os.killpg(self.proc.pid, 9)
            except (ProcessLookupError, PermissionError):
                log.debug("exec: session of pod %s already ended", getattr(self, "pod_name", "?"))
