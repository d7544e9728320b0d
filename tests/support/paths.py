"""Where the tests find the repository's files: one place, so a test module can move between tiers."""

from pathlib import Path

#: The repository's root (``setup.cfg``, ``README.md``, ``jupyterhub_config.d/``, ``helm-values/``).
REPO = Path(__file__).resolve().parents[2]
#: The test suite's root folder.
TESTS = REPO / "tests"
#: Data the tests carry (trimmed schemas, the z2jh chart's values schema), with sources noted.
DATA = TESTS / "data"
#: Screenshots and other files a test leaves for a person to look at.
ARTIFACTS = REPO / "test-artifacts"
#: The hub configuration pieces shipped with the package.
CONFIG_D = REPO / "jupyterhub_config.d"
