"""Shell commands in a user's running server, run as the user runs them: in a Jupyter terminal, over its websocket.

:func:`run_in_terminal` opens one terminal (jupyter_server's ``/api/terminals``) through the hub's proxy,
authenticated with the harness's admin service token, types each command and reads what it printed up to a marker
that carries its exit status. Used where only a terminal can see the workspace from the inside (a real VM guest).
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets

from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

from tests.support.hubharness import Hub


async def _run(url: str, token: str, commands: list[str], timeout: float) -> list[tuple[int, str]]:
    conn = await websocket_connect(HTTPRequest(url, headers={"Authorization": f"token {token}"}, connect_timeout=30))
    results: list[tuple[int, str]] = []
    text = ""
    try:
        for command in commands:
            mark = secrets.token_hex(4)
            # the terminal echoes what is typed: only the commands' own output has the marker expanded
            conn.write_message(json.dumps(["stdin", f"printf 'BEGIN%s\\n' {mark}; {command}; printf '%s-%d-%s\\n' {mark} $? {mark}\r"]))
            pattern = re.compile(rf"BEGIN{mark}\n(.*?){mark}-(\d+)-{mark}\n", re.DOTALL)
            while not (found := pattern.search(text)):
                message = await asyncio.wait_for(conn.read_message(), timeout)
                if message is None:
                    raise AssertionError(f"the terminal closed while running {command!r}; it printed:\n{text[-2000:]}")
                kind, *data = json.loads(message)
                if kind == "stdout":
                    text += data[0].replace("\r", "")
            results.append((int(found.group(2)), found.group(1)))
            text = text[found.end():]
    finally:
        conn.close()
    return results


def run_in_terminal(hub: Hub, user: str, commands: list[str], *, timeout: float = 120) -> list[tuple[int, str]]:
    """``(exit status, output)`` of each of ``commands``, typed one after the other into a new terminal of ``user``'s
    server; ``timeout``: seconds each may print nothing."""
    created = hub.server_request(user, "POST", "api/terminals")
    assert created.ok, created.text
    url = hub.url.replace("http://", "ws://", 1) + f"/user/{user}/terminals/websocket/{created.json()['name']}"
    try:
        return asyncio.run(_run(url, hub.token, commands, timeout))
    finally:
        hub.server_request(user, "DELETE", f"api/terminals/{created.json()['name']}")
