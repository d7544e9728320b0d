"""A jupyter-server extension for the workspace image: code-server's heartbeat counted as the server's activity.

code-server (4.x) touches ``$XDG_DATA_HOME/code-server/heartbeat``
(``~/.local/share/code-server/heartbeat`` when ``XDG_DATA_HOME`` is unset)
when it serves a request, at most once a minute, and every minute while
any connection to it stays open (see :mod:`workspacespawner.idle.activity`
for exactly when). Every :data:`CHECK_SECONDS` this extension reads the
file's modification time (or every ``$JUPYTERHUB_ACTIVITY_INTERVAL``
seconds when that is shorter: :func:`check_seconds`) into the server's
``code_server_heartbeat_last_activity`` setting: jupyter-server's
``last_activity()`` counts every setting whose name ends in
``_last_activity``, and jupyterhub-singleuser reports that to the hub
(``POST /hub/api/users/{name}/activity``), where the idle-GPU pass reads it.
The hub never reaches into the workspace for it.

Enable it in the image (it imports nothing but the standard library and
tornado, which jupyter-server brings)::

    jupyter server extension enable workspacespawner.idle.serverext

or ``c.ServerApp.jpserver_extensions = {"workspacespawner.idle.serverext": True}``,
or from the hub without changing the image, by the server's command line
(``c.KubeSpawner.args``, with ``c.KubeSpawner.cmd`` set as the chart's
``singleuser.cmd`` sets it; helm-values/singleuser-image.md)::

    c.KubeSpawner.args = ["--ServerApp.jpserver_extensions=workspacespawner.idle.serverext=True"]
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

#: Seconds between two reads of the heartbeat file (code-server writes it at most once a minute).
CHECK_SECONDS = 30.0

#: The jupyter-server setting the heartbeat goes into (its ``_last_activity`` suffix makes it count).
SETTING = "code_server_heartbeat_last_activity"


def check_seconds(environ=None) -> float:
    """Seconds between two reads of the heartbeat: :data:`CHECK_SECONDS`, or jupyterhub-singleuser's activity
    interval (``$JUPYTERHUB_ACTIVITY_INTERVAL``, seconds, its own setting for how often it reports) when that is
    shorter, so a report is never more than one interval behind the file. A missing, unreadable or non-positive
    interval leaves :data:`CHECK_SECONDS`."""
    environ = os.environ if environ is None else environ
    try:
        interval = float(environ.get("JUPYTERHUB_ACTIVITY_INTERVAL", ""))
    except ValueError:
        return CHECK_SECONDS
    return min(CHECK_SECONDS, interval) if interval > 0 else CHECK_SECONDS


def heartbeat_path(environ=None) -> Path:
    """Where code-server writes its heartbeat: ``$XDG_DATA_HOME/code-server/heartbeat``, else
    ``$HOME/.local/share/code-server/heartbeat`` (code-server's ``paths.data`` on Linux)."""
    environ = os.environ if environ is None else environ
    data = environ.get("XDG_DATA_HOME") or os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".local", "share")
    return Path(data) / "code-server" / "heartbeat"


def heartbeat_time(path: Path) -> datetime | None:
    """The heartbeat file's modification time (aware UTC), None when code-server has not written it."""
    try:
        return datetime.fromtimestamp(path.stat().st_mtime, UTC)
    except OSError:
        return None


def record_heartbeat(settings: dict, path: Path) -> datetime | None:
    """Put the heartbeat's time into ``settings`` (a jupyter-server web app's) when it is newer; returns it."""
    beat = heartbeat_time(path)
    if beat is not None and (settings.get(SETTING) is None or beat > settings[SETTING]):
        settings[SETTING] = beat
    return beat


def _jupyter_server_extension_points():
    return [{"module": "workspacespawner.idle.serverext"}]


def _load_jupyter_server_extension(serverapp) -> None:
    from tornado.ioloop import PeriodicCallback

    path = heartbeat_path()
    settings = serverapp.web_app.settings
    check = PeriodicCallback(lambda: record_heartbeat(settings, path), check_seconds() * 1000)
    check.start()
    settings["workspacespawner_heartbeat_check"] = check
    serverapp.log.info("Counting code-server's heartbeat (%s) as activity", path)
