"""The code-server check of a start (workspacespawner.backends.codeserver) against a server on loopback.

The server answers as a singleuser server does at ``/user/<name>/vscode/``:
jupyter_server's bare 500 page when jupyter-vscode-proxy cannot find
code-server (the words only in its log), code-server's redirect when it
runs, or the hub's login for a token it does not take. Covers: the missing
code-server fails with the log's line, also when the line reaches the log a
moment after the answer; the token is sent; a server not listening yet is
asked again; a 500 nothing explains, a redirect to the login and no answer
by the deadline judge nothing; the message names what to install.
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from localcluster.ports import free_port
from tornado import httpserver, web

from workspacespawner.backends import codeserver
from workspacespawner.core.errors import WorkspaceError

#: jupyter_server's error page for an exception without a message (what the proxy's FileNotFoundError gives).
BARE_500 = "<html><body><div class=\"error\"><h1>500 : Internal Server Error</h1></div></body></html>"

#: The end of the singleuser server's log after that request (tornado's "Uncaught exception" and traceback).
LOG = """[I 2026-01-01 10:00:00.000 ServerApp] jupyter_server_proxy | extension was successfully loaded.
[E 2026-01-01 10:00:05.000 ServerApp] Uncaught exception GET /user/ada/vscode/ (10.0.0.1)
    Traceback (most recent call last):
      File "/opt/conda/lib/python3.12/site-packages/jupyter_vscode_proxy/__init__.py", line 47, in _get_cmd
        raise FileNotFoundError(f"Can not find {executable} in PATH")
    FileNotFoundError: Can not find code-server in PATH
[E 2026-01-01 10:00:05.010 ServerApp] 500 GET /user/ada/vscode/ (ada@10.0.0.1) 22.68ms
"""


class Server:
    """A tornado server on loopback answering ``/user/ada/vscode/`` with ``status``, ``body`` and ``headers``."""

    def __init__(self, status: int, body: str = "", headers: dict | None = None, delay: float = 0):
        self.status, self.body, self.headers, self.delay = status, body, headers or {}, delay
        self.tokens: list[str] = []
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/user/ada/vscode/"
        self.http: httpserver.HTTPServer | None = None

    def listen(self) -> None:
        server = self

        class VSCode(web.RequestHandler):
            async def get(self):
                server.tokens.append(self.request.headers.get("Authorization", ""))
                await asyncio.sleep(server.delay)
                self.set_status(server.status)
                for key, value in server.headers.items():
                    self.set_header(key, value)
                self.finish(server.body)

        self.http = httpserver.HTTPServer(web.Application([(r"/user/ada/vscode/", VSCode)]))
        self.http.listen(self.port, "127.0.0.1")

    def close(self) -> None:
        if self.http is not None:
            self.http.stop()


@pytest.fixture
def serve():
    servers = []

    def make(*args, listen: bool = True, **kwargs) -> Server:
        server = Server(*args, **kwargs)
        servers.append(server)
        if listen:
            server.listen()
        return server

    yield make
    for server in servers:
        server.close()


def failure(line: str) -> WorkspaceError:
    return codeserver.missing_error(profile="code-server (CPU)", image="example/notebook:1", log_line=line)


def log_of(*texts: str | None):
    """``server_log``: answers ``texts`` in turn (the last one again), counting its calls."""
    calls = []

    async def server_log(lines: int) -> str | None:
        calls.append(lines)
        return texts[min(len(calls), len(texts)) - 1]

    server_log.calls = calls
    return server_log


async def check(server: Server, server_log, seconds: float = 10) -> None:
    await codeserver.check(server.url, token="secret", deadline=time.monotonic() + seconds, server_log=server_log,
                           failure=failure)


async def test_a_missing_code_server_fails_with_the_servers_log_line(serve):
    server = serve(500, BARE_500)
    with pytest.raises(WorkspaceError) as failed:
        await check(server, log_of(LOG))
    error = failed.value
    assert error.reason == "code-server-missing" and error.status_code == 500
    assert error.jupyterhub_message == error.message == (
        "The profile 'code-server (CPU)' opens VS Code (code-server), but its image (example/notebook:1) has no "
        "code-server, so your server was stopped again; your files are kept. This is the hub's setup, not something "
        "you did: please tell the JupyterHub administrators. They must install in that image code-server on the PATH "
        "and the Python packages jupyter-server-proxy and jupyter-vscode-proxy (see helm-values/singleuser-image.md). "
        "The server reported: FileNotFoundError: Can not find code-server in PATH"
    )
    assert server.tokens == ["token secret"]


async def test_the_log_line_written_a_moment_after_the_answer_is_waited_for(serve):
    server_log = log_of("[I ServerApp] starting", "[I ServerApp] starting", LOG)
    with pytest.raises(WorkspaceError, match="Can not find code-server in PATH"):
        await check(serve(500, BARE_500), server_log)
    assert len(server_log.calls) == 3


async def test_an_answer_that_names_the_missing_program_needs_no_log(serve):
    server_log = log_of(None)
    with pytest.raises(WorkspaceError, match="Can not find openvscode-server in PATH"):
        await check(serve(500, "<pre>Can not find openvscode-server in PATH</pre>"), server_log)
    assert server_log.calls == []


async def test_a_server_not_listening_yet_is_asked_again(serve):
    server = serve(302, headers={"Location": "./?folder=/home/jovyan"}, listen=False)
    asyncio.get_running_loop().call_later(0.6, server.listen)
    server_log = log_of(LOG)
    await check(server, server_log)
    assert server.tokens == ["token secret"] and server_log.calls == []


async def test_a_bare_500_nothing_explains_fails_naming_the_likely_cause(serve, caplog):
    """A VM's guest has no log the hub reads: its bare 500 still never reaches the user."""
    with caplog.at_level(logging.WARNING, logger="workspacespawner"):
        with pytest.raises(WorkspaceError) as failed:
            await check(serve(500, BARE_500), log_of(None))
    assert failed.value.reason == "code-server-failed"
    assert failed.value.message.startswith(
        "The profile 'code-server (CPU)' opens VS Code (code-server), but VS Code did not start in it: it answered "
        '"500 : Internal Server Error" at the VS Code address, as a server whose image (example/notebook:1) has no '
        "code-server answers, so your server was stopped again; your files are kept.")
    assert "neither its body nor the server's log says why" in caplog.text


@pytest.mark.parametrize("status, headers, body, words", [
    (302, {"Location": "/hub/api/oauth2/authorize?client_id=jupyterhub-user-ada"}, "", "code-server not checked"),
    (404, {}, "", "code-server not checked"),
])
async def test_other_answers_judge_nothing(serve, caplog, status, headers, body, words):
    with caplog.at_level(logging.WARNING, logger="workspacespawner"):
        await check(serve(status, body, headers), log_of("[I ServerApp] nothing about code-server"), seconds=1.5)
    assert words in caplog.text


async def test_a_log_that_cannot_be_read_still_fails_the_500(serve, caplog):
    async def server_log(lines: int) -> str:
        raise OSError("pods/log refused")

    with caplog.at_level(logging.WARNING, logger="workspacespawner"):
        with pytest.raises(WorkspaceError) as failed:
            await check(serve(500, BARE_500), server_log)
    assert failed.value.reason == "code-server-failed"
    assert "Cannot read the server's log" in caplog.text


async def test_no_answer_by_the_deadline_judges_nothing(serve, caplog):
    server = serve(302, delay=5)
    began = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="workspacespawner"):
        await check(server, log_of(LOG), seconds=1)
    assert time.monotonic() - began < 3
    assert "did not answer before the start's deadline" in caplog.text
