"""``python3 -m workspacespawner``: the ``workspacespawner`` command (see :mod:`workspacespawner.cli`)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
