"""Fixtures the hub tests share; a module that needs another shape defines its own of the same name.

Each module builds its own ``cluster`` (a plane, with or without the golden
image) and ``hub`` (its own config); these build on them.
"""

from __future__ import annotations

import pytest

from tests.support.hubharness import core_and_custom


@pytest.fixture(scope="module")
def ledger_url(tmp_path_factory) -> str:
    """A SQLite file of the module's own for the quota ledger and the audit log (``c.WorkspaceQuota.ledger_url``)."""
    return f"sqlite:///{tmp_path_factory.mktemp('ledger') / 'ledger.sqlite'}"


@pytest.fixture(scope="module")
def kube(cluster):
    """``(CoreV1Api, CustomObjectsApi)``: the sync kubernetes clients of the module's ``cluster``, as an admin."""
    with core_and_custom(cluster) as apis:
        yield apis
