#!/usr/bin/env bash
# Build the documentation site into docs/_build/html; any warning fails the build.
# Needs the docs extra: pip install -e '.[docs]' (and the package itself, whose traits and commands it documents).
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-python3}" -m sphinx -E -W --keep-going -n -b html docs/source docs/_build/html "$@"
