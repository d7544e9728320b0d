"""Whether a code-server profile's server really runs code-server: asked inside the start, once the server answers.

What a server without code-server does (jupyter-vscode-proxy 0.7, jupyter-server-proxy 4.x, jupyter_server 2):
jupyter-vscode-proxy registers code-server with jupyter-server-proxy at ``/vscode/``, and the first request there
runs its command factory, which raises ``FileNotFoundError("Can not find code-server in PATH")`` when no
``code-server`` is on the server's PATH (``openvscode-server`` when ``CODE_EXECUTABLE`` names that one).
jupyter-server-proxy lets it through, so jupyter_server answers with its bare error page, "500 : Internal Server
Error" (the exception has no ``log_message``, so the page says nothing more), and only the server's log has the
words: tornado's ``Uncaught exception GET /user/<name>/vscode/`` with the traceback, whose last line is
``FileNotFoundError: Can not find code-server in PATH``. Nothing is kept of that failure, so every request tries
again and answers the same.

:func:`check` asks that path as the user's browser would next (with the server's API token) and, when the answer
is that 500 and its body or the server's log names the missing program, raises a
:class:`~workspacespawner.core.errors.WorkspaceError` (``reason="code-server-missing"``) whose message says what
the image lacks and what the administrators must install, with the log's line; a 500 nothing explains (a VM's
guest, whose log the hub cannot read) fails the start too, naming the likely cause as likely. Any other answer
judges nothing.
When code-server is there, the same request starts it (jupyter-server-proxy waits until it listens), so the
user's first page of VS Code is quick.
"""

from __future__ import annotations

import asyncio
import logging
import re
import ssl
import time
from collections.abc import Awaitable, Callable

from jupyterhub.utils import make_ssl_context, url_path_join
from tornado import httpclient, iostream

from workspacespawner.core.errors import WorkspaceError

log = logging.getLogger("workspacespawner")

#: jupyter-vscode-proxy's words when the program is not on the server's PATH (group 1: the program).
MISSING = re.compile(r"Can not find (\S+) in PATH")

#: Where the administrators read what a workspace image needs (the repository's helm-values folder).
IMAGE_DOC = "helm-values/singleuser-image.md"

#: Lines of the server's log read for jupyter-vscode-proxy's words (its traceback is about 30 lines).
LOG_LINES = 200

#: At most this many characters of the server's line are shown.
MAX_LINE = 300

#: Seconds of ``start_timeout`` a code-server check leaves for the rest of the start.
CHECK_MARGIN = 5

#: Seconds the server's log is read again for the line (the node writes a container's output a little after it).
LOG_WAIT = 5.0


def missing_error(*, profile: str, image: str, log_line: str | None) -> WorkspaceError:
    """The start's failure when ``profile``'s server cannot run code-server.

    ``log_line``: the server's own words naming the missing program
    (``reason="code-server-missing"``); None when its answer was the bare 500
    and nothing said why (a VM's guest has no log the hub can read:
    ``reason="code-server-failed"``, the likely cause named as likely).
    """
    if log_line:
        what, reason = f"but its image ({image}) has no code-server", "code-server-missing"
        said = f" The server reported: {log_line[:MAX_LINE]}"
    else:
        what, reason = (f"but VS Code did not start in it: it answered \"500 : Internal Server Error\" at the VS Code "
                        f"address, as a server whose image ({image}) has no code-server answers"), "code-server-failed"
        said = ""
    return WorkspaceError(
        f"The profile {profile!r} opens VS Code (code-server), {what}, so your "
        "server was stopped again; your files are kept. This is the hub's setup, not something you did: please tell "
        "the JupyterHub administrators. They must install in that image code-server on the PATH and the Python "
        f"packages jupyter-server-proxy and jupyter-vscode-proxy (see {IMAGE_DOC}).{said}",
        reason=reason,
        status_code=500,
        log_message=f"code-server did not run from image {image} of profile {profile!r}: {log_line or 'a bare 500, no log line'}",
    )


def missing_line(text: str) -> str | None:
    """The last line of ``text`` (an answer's body, a log) naming the program jupyter-vscode-proxy cannot find."""
    lines = [line.strip() for line in text.splitlines() if MISSING.search(line)]
    return lines[-1] if lines else None


async def ask(url: str, *, token: str, deadline: float, ssl_options: ssl.SSLContext | None = None) -> httpclient.HTTPResponse | None:
    """GET ``url`` with ``token`` until the server answers (any HTTP status; no redirect followed); None when it has
    not by ``deadline`` (``time.monotonic()``): a refused connection is tried again, an answer that takes longer
    than what is left gives up."""
    client = httpclient.AsyncHTTPClient()
    pause = 0.25
    while (left := deadline - time.monotonic()) > 0:
        request = httpclient.HTTPRequest(
            url, headers={"Authorization": f"token {token}"}, follow_redirects=False,
            connect_timeout=min(left, 10), request_timeout=left, ssl_options=ssl_options,
        )
        try:
            return await client.fetch(request, raise_error=False)
        except (OSError, iostream.StreamClosedError, httpclient.HTTPClientError) as e:  # not listening yet, or timed out
            log.debug("%s did not answer yet: %s", url, e)
        await asyncio.sleep(min(pause, max(deadline - time.monotonic(), 0)))
        pause = min(pause * 2, 2)
    return None


async def read_log_line(server_log: Callable[[int], Awaitable[str | None]], *, deadline: float,
                        logger: logging.Logger = log) -> str | None:
    """The server's log line naming the missing program, read again for up to :data:`LOG_WAIT` s (not past
    ``deadline``); None when the log has none or cannot be read (logged)."""
    until = min(time.monotonic() + LOG_WAIT, deadline)
    while True:
        try:
            text = await server_log(LOG_LINES)
        except Exception as e:  # the failure is told either way; its log line is a bonus
            logger.warning("Cannot read the server's log for code-server's failure: %s", e)
            return None
        line = missing_line(text or "")
        if line is not None or text is None or time.monotonic() >= until:
            return line
        await asyncio.sleep(0.5)


async def check(url: str, *, token: str, deadline: float, server_log: Callable[[int], Awaitable[str | None]],
                failure: Callable[[str], WorkspaceError], ssl_options: ssl.SSLContext | None = None,
                logger: logging.Logger = log) -> None:
    """Ask code-server's ``url`` (the server's own address and code-server's path) until ``deadline``; on a 500
    raise ``failure(line)``: ``line`` the server's own words when they name the missing program (module docstring),
    else None (VS Code cannot open either way: the user is never sent to that 500).

    ``server_log(lines)``: the server's last log lines, or None when its kind has no log to read (a VM's guest);
    read only on a 500. An answer that never comes, or any other status, is logged (to ``logger``) and judges
    nothing.
    """
    answer = await ask(url, token=token, deadline=deadline, ssl_options=ssl_options)
    if answer is None:
        logger.warning("%s did not answer before the start's deadline: code-server not checked", url)
        return
    if answer.code != 500:
        if answer.code < 400 and "/oauth2/authorize" not in answer.headers.get("Location", ""):
            logger.info("%s answered %s: code-server runs", url, answer.code)
        else:  # a refusal, or the server sending the token's request to the hub's login: code-server not reached
            logger.warning("%s answered %s %s: code-server not checked", url, answer.code, answer.reason)
        return
    line = missing_line((answer.body or b"").decode(errors="replace")) or await read_log_line(server_log, deadline=deadline, logger=logger)
    if line is None:
        logger.warning("%s answered 500 and neither its body nor the server's log says why", url)
    raise failure(line)


async def check_started(spawner, url: str, *, began: float, label: str) -> None:
    """A code-server profile's server, at ``url`` (what the backend's start returned), really runs code-server.

    ``spawner``: the WorkspaceSpawner whose start began at ``began``
    (``time.monotonic()``); ``label``: its server's name in log lines.
    Called inside ``start`` once the backend's start returned: a missing
    code-server fails the start like any other failure of it (the message
    on the spawn page and in the REST API's progress, the server stopped by
    JupyterHub's cleanup, no disk touched), and the user is never sent to a
    bare 500 at ``/vscode/``. JupyterHub has no hook after its own wait for
    the server, and that wait only asks ``/api``. The check asks the
    server's own address directly (not through the proxy, whose route
    JupyterHub adds later) at its base URL plus ``code_server_url``, with
    the server's API token, until it answers (:func:`check`). It waits at
    most ``code_server_check_timeout`` and never past :data:`CHECK_MARGIN`
    seconds before ``start_timeout``, so JupyterHub's ``start_timeout`` keeps
    its meaning; a server that has not answered by then is left to
    JupyterHub's own wait (``http_timeout``), as for any other profile.
    """
    s = spawner
    if s.server is None or not s.api_token:  # started outside JupyterHub's spawn: nothing to ask with
        return
    deadline = min(began + s.start_timeout - CHECK_MARGIN, time.monotonic() + s.code_server_check_timeout)
    if deadline <= time.monotonic():
        s.log.warning("No time left in start_timeout to check code-server of %s", label)
        return
    s.steps.say("Starting VS Code (code-server) in your server")
    profile, image = s.profile.display_name if s.profile else "code-server", s.backend.image()
    await check(
        url.rstrip("/") + url_path_join(s.server.base_url, s.code_server_url),
        token=s.api_token, deadline=deadline, server_log=s.backend.server_log,
        failure=lambda line: missing_error(profile=profile, image=image, log_line=line),
        ssl_options=server_ssl_context(s.user) if url.startswith("https:") else None, logger=s.log,
    )


def server_ssl_context(user) -> ssl.SSLContext:
    """The hub's client context for a server of ``user`` behind JupyterHub's internal SSL (as JupyterHub's own wait
    uses)."""
    settings = getattr(user, "settings", None) or {}
    return make_ssl_context(settings.get("internal_ssl_key"), settings.get("internal_ssl_cert"),
                            cafile=settings.get("internal_ssl_ca"))
