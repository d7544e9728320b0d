"""Handing a refused or failed start to JupyterHub as a handled failure, on JupyterHub 5.5 and 6.

A refusal (quota, no GPU, a disk in use) is the user's limit, not a hub
failure: it must not count toward ``Spawner.consecutive_failure_limit``
(z2jh sets 5, and the hub exits once it is reached), and JupyterHub should
log it in one line, without a traceback.

- JupyterHub 6 counts only errors: a ``jupyterhub.spawner.SpawnException``
  is a handled failure, never counted. :func:`as_spawn_failure` turns a
  :class:`~workspacespawner.core.errors.WorkspaceError` into one (same
  message, reason and status).
- JupyterHub 5.5 has no SpawnException and counts every failed spawn; it
  logs an ``HTTPError`` without a traceback. For a quota refusal,
  :func:`as_spawn_failure` takes one off the count the hub is about to add,
  through the request handler JupyterHub 5.5 hands the spawner during a
  start (``spawner.handler``).

A failed start removes its compute before it raises (:func:`stop_compute_first`):
JupyterHub's own cleanup (``User.spawn`` awaiting ``stop()``) runs after the
start raised but before the spawn's future is done, and a spawn request whose
``slow_spawn_timeout`` ends during it is answered wrongly (JupyterHub 5.5 and
6.1: ``spawn_single_user`` then asks ``poll()``; a server still there gives a
201 for a start that failed, a server gone gives one more second and then
reads ``exception()`` of the unfinished future: a bare 500 "Internal Server
Error", the user's words lost). With the compute gone first, that cleanup has
nothing to wait for, and until the start raises JupyterHub still sees it
pending (a 202, the progress stream then says why it failed).
"""

from __future__ import annotations

import asyncio
import json
import logging

from workspacespawner import upstream
from workspacespawner.core.errors import WorkspaceError
from workspacespawner.k8s.owned import forbidden_error, outage_error
from workspacespawner.quota.refusal import QuotaRefused

try:  # JupyterHub >= 6
    from jupyterhub.spawner import SpawnException
except ImportError:  # JupyterHub 5.5
    SpawnException = None

log = logging.getLogger("workspacespawner")

#: Seconds a failed start waits for its compute to go before it hands its failure over (JupyterHub's cleanup then
#: goes on waiting): a Pod on a node that stopped answering may never go.
STOP_FIRST_SECONDS = 30

#: Whether this JupyterHub leaves handled failures (SpawnException) out of its failure count.
HUB_SKIPS_HANDLED_FAILURES = SpawnException is not None

if SpawnException is not None:

    class WorkspaceSpawnFailure(SpawnException, WorkspaceError):
        """A :class:`WorkspaceError` that JupyterHub 6 sees as a SpawnException (a handled failure)."""

        def __init__(self, error: WorkspaceError):
            WorkspaceError.__init__(
                self, error.message, reason=error.reason, status_code=error.status_code, log_message=error.detail
            )
            # SpawnException keeps log_message as a plain attribute (tornado's HTTPError has no setter on 5.5).
            self.log_message = error.detail
            self.cause = error


def as_spawn_failure(error: WorkspaceError, spawner=None) -> WorkspaceError:
    """``error`` as JupyterHub should see it (see the module docstring); raise the result ``from error``.

    ``spawner``: the spawner whose start failed; on JupyterHub 5.5 a quota
    refusal lowers its handler's ``failure_count`` by one, so the count is
    left as it was once the hub adds the failure.
    """
    if SpawnException is not None:
        return error if isinstance(error, SpawnException) else WorkspaceSpawnFailure(error)
    if isinstance(error, QuotaRefused) and spawner is not None:
        settings = getattr(getattr(spawner, "handler", None), "settings", None)
        if isinstance(settings, dict):
            settings["failure_count"] = settings.get("failure_count", 0) - 1
    return error


def raise_for_user(error: BaseException, spawner=None) -> None:
    """Re-raise ``error`` as the spawn page should show it: a refusal, an API outage or the hub's own lack of a
    permission in words (:func:`~workspacespawner.k8s.owned.outage_error`,
    :func:`~workspacespawner.k8s.owned.forbidden_error`), handed over by :func:`as_spawn_failure`; else as it is."""
    in_words = error if isinstance(error, WorkspaceError) else outage_error(error) or forbidden_error(error)
    if in_words is None:
        raise error
    raise as_spawn_failure(in_words, spawner) from error


async def stop_compute_first(spawner, error: BaseException) -> None:
    """Remove the compute of ``spawner``'s failed start (its backend's ``stop``) before ``error`` goes to JupyterHub
    (see the module docstring). Not for a start JupyterHub cancelled (its ``start_timeout``: it stops the server
    itself), nor for a node that stopped answering (its Pod cannot go); never raises."""
    if not isinstance(error, Exception) or getattr(error, "reason", None) == "node-unreachable":
        return
    try:
        await asyncio.wait_for(spawner.backend.stop(False), STOP_FIRST_SECONDS)
    except Exception as e:  # JupyterHub's cleanup stops it again
        log.warning("Could not remove the compute of the failed start of %s first: %r", upstream.log_name(spawner), e)


def options_sent(spawner) -> bool:
    """Whether the request starting this spawn carried user options; False when JupyterHub reuses the saved ones.

    JupyterHub reuses a server's saved ``user_options`` when a start names
    none: a REST ``POST /users/{name}/server`` with an empty body, or with
    ``"user_options": null`` (JupyterHub's ``get_server_json_body`` rules,
    mirrored here on ``spawner.handler.request``). A form POST or a spawn URL
    with query arguments always carries them. No handler (a start outside a
    request) counts as saved options.
    """
    request = getattr(getattr(spawner, "handler", None), "request", None)
    if request is None:
        return False
    if request.method != "POST":
        return any(key != "next" for key in (getattr(request, "query_arguments", None) or {}))
    if "json" not in (request.headers.get("Content-Type") or "json"):
        return True
    try:
        body = json.loads(request.body or b"null")
    except ValueError:
        return True
    if not body or not isinstance(body, dict):
        return False
    if "user_options" in body or "display_name" in body:
        return bool(body.get("user_options"))
    return True
