"""Where the real code-server for the local cluster's Pods and guests is: the folder holding its ``code-server``.

tools/code-server/install.sh installs code-server and the Node.js 24 it runs
on from the npm registry into
``${WORKSPACESPAWNER_CACHE:-~/.cache/workspacespawner}/code-server/<code-server>-node<node>/bin``
and writes the marker ``.installed`` beside ``bin/`` last. A folder on the
PATH that Pods get (the host's PATH follows a Pod's own) makes
jupyter-vscode-proxy's ``code-server`` command that one.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Environment variable naming the bin folder outright (what .ci/run sets from install.sh's output).
BIN_ENV = "WORKSPACESPAWNER_CODE_SERVER_BIN"

#: The hint given wherever code-server is missing.
INSTALL_HINT = "run tools/code-server/install.sh (a few minutes, once; it prints the folder to export as " + BIN_ENV + ")"


def cache_root() -> Path:
    """The cache folder tools/ scripts install into: ``$WORKSPACESPAWNER_CACHE``, else ``~/.cache/workspacespawner``."""
    return Path(os.environ.get("WORKSPACESPAWNER_CACHE") or Path.home() / ".cache" / "workspacespawner")


def code_server_bin() -> Path | None:
    """The bin folder of an installed code-server, or None when there is none.

    ``$WORKSPACESPAWNER_CODE_SERVER_BIN`` when set (raises FileNotFoundError
    when it holds no executable ``code-server``: a wrong setting is an error,
    not an absence); else the most recently installed folder of the cache
    whose install finished (its ``.installed`` marker exists).
    """
    named = os.environ.get(BIN_ENV)
    if named:
        if not os.access(Path(named) / "code-server", os.X_OK):
            raise FileNotFoundError(f"{BIN_ENV}={named} holds no executable code-server")
        return Path(named)
    installed = [
        marker.parent / "bin"
        for marker in (cache_root() / "code-server").glob("*/.installed")
        if os.access(marker.parent / "bin" / "code-server", os.X_OK)
    ]
    if not installed:
        return None
    return max(installed, key=lambda bin_dir: (bin_dir.parent / ".installed").stat().st_mtime)
