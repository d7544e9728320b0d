"""The cache folder that tools/ scripts build and install test infrastructure into, and the installs found there.

tools/k8s/build.sh (the real control plane) and tools/code-server/install.sh
(code-server and its Node.js) each write into
``${WORKSPACESPAWNER_CACHE:-~/.cache/workspacespawner}/<tool>/<versions>/``,
the ``bin`` folder first and a marker file beside it last, so a folder with
its marker is a finished build.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$WORKSPACESPAWNER_CACHE``, else ``~/.cache/workspacespawner``."""
    return Path(os.environ.get("WORKSPACESPAWNER_CACHE") or Path.home() / ".cache" / "workspacespawner")


def newest_bin(tool: str, marker: str, program: str | None = None) -> Path | None:
    """The ``bin`` folder of ``tool``'s most recently finished build (its ``marker`` file newest), or None.

    ``tool``: the folder under :func:`cache_root` (``k8s``, ``code-server``);
    with ``program``, only builds whose ``bin/<program>`` is executable count.
    """
    finished = [
        found
        for found in (cache_root() / tool).glob(f"*/{marker}")
        if program is None or os.access(found.parent / "bin" / program, os.X_OK)
    ]
    if not finished:
        return None
    return max(finished, key=lambda found: found.stat().st_mtime).parent / "bin"
