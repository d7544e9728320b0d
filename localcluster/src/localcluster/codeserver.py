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

from .toolcache import newest_bin

#: Environment variable naming the bin folder outright (what .ci/run sets from install.sh's output).
BIN_ENV = "WORKSPACESPAWNER_CODE_SERVER_BIN"

#: The hint given wherever code-server is missing.
INSTALL_HINT = "run tools/code-server/install.sh (a few minutes, once; it prints the folder to export as " + BIN_ENV + ")"


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
    return newest_bin("code-server", ".installed", "code-server")
