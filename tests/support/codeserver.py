"""The real code-server for tests (tools/code-server/install.sh): its bin folder, or skip, or fail in CI.

Tests that need it call :func:`real_bin`. Without an installed code-server
they skip with the reason locally; with ``$CI`` set that is an error
instead, so CI (which installs it, .ci/run) never skips them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from localcluster.codeserver import INSTALL_HINT, code_server_bin

#: What the VS Code workbench page code-server serves at its root holds (its configuration element).
WORKBENCH_MARKER = 'id="vscode-workbench-web-configuration"'


def _processes(api_token: str):
    """``(/proc/<pid>, argv, environ)`` (argv and environ as lists of bytes) of every code-server process of the server
    whose ``JUPYTERHUB_API_TOKEN`` is ``api_token``, read from ``/proc`` on this host, where the local cluster's
    (either plane's) node agent runs every Pod's processes."""
    marker = f"JUPYTERHUB_API_TOKEN={api_token}".encode()
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            if not any(b"code-server" in a for a in argv):
                continue
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:  # gone, or not ours to read
            continue
        if marker in environ:
            yield proc, argv, environ


def command_lines(api_token: str) -> list[list[str]]:
    """The command lines of the code-server processes of the server whose ``JUPYTERHUB_API_TOKEN`` is ``api_token``."""
    return [[a.decode(errors="replace") for a in argv if a] for _, argv, _ in _processes(api_token)]


def heartbeat_file(api_token: str) -> Path | None:
    """code-server's heartbeat file of the server whose ``JUPYTERHUB_API_TOKEN`` is ``api_token``, as this host reaches it.

    The path code-server writes (``$XDG_DATA_HOME/code-server/heartbeat``,
    :func:`workspacespawner.idle.serverext.heartbeat_path` of the process's
    own environment) under ``/proc/<pid>/root``, so it is found in a node
    agent's sandbox as well as on the host; None while no code-server of
    that server runs.
    """
    from workspacespawner.idle.serverext import heartbeat_path

    for proc, _, environ in _processes(api_token):  # its processes share one environment: the first will do
        env = dict(e.decode(errors="replace").partition("=")[::2] for e in environ if b"=" in e)
        return proc / "root" / heartbeat_path(env).relative_to("/")
    return None


def real_bin() -> Path:
    """The bin folder holding the real ``code-server``; skips (fails under ``$CI``) when it is not installed."""
    bin_dir = code_server_bin()
    if bin_dir is None:
        reason = f"the real code-server is not installed: {INSTALL_HINT}"
        if os.environ.get("CI"):
            pytest.fail(f"{reason} ($CI is set, so this is an error)", pytrace=False)
        pytest.skip(reason)
    return bin_dir


def pod_path(bin_dir: Path) -> str:
    """A Pod's PATH with ``bin_dir`` first: the value for ``c.KubeSpawner.environment["PATH"]``."""
    return f"{bin_dir}{os.pathsep}{os.environ.get('PATH', os.defpath)}"
