"""A pytest plugin (setup.cfg's ``addopts``): a test module's temporary folders go once the module has passed.

With ``tmp_path_retention_policy = failed`` (setup.cfg) pytest removes a passing test's own ``tmp_path``, but not
what fixtures make with ``tmp_path_factory.mktemp``: the module-scoped clusters, hubs, real planes and real guests'
disks, most of the disk a run uses (one CI run came to about 50 GB and the machine ran out of space half-way).
Here, every folder that appears in pytest's base temporary folder while a module runs is removed after the
module's last teardown, unless one of the module's tests failed: then they stay for a look, as pytest keeps a
failed test's ``tmp_path``.

A module's fixtures are torn down before :func:`_module_scratch` (an autouse fixture is set up first, so it is torn
down last). What a session-scoped fixture makes lives as long as the session (the real-plane tier's planes,
``localcluster.realplane.fixtures``): :func:`pytest_fixture_setup` notes it, even when a module's fixture first
asks for it, and it stays.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

#: Folders session-scoped fixtures made: they live as long as the session.
_SESSION_FOLDERS: set[Path] = set()


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):
    if fixturedef.scope not in ("session", "package"):
        return (yield)
    base = request.config._tmp_path_factory.getbasetemp()  # what pytest's own tmp_path_factory fixture returns
    before = set(base.iterdir())
    try:
        return (yield)
    finally:
        _SESSION_FOLDERS.update(set(base.iterdir()) - before)


@pytest.fixture(scope="module", autouse=True)
def _module_scratch(request, tmp_path_factory):
    base = tmp_path_factory.getbasetemp()
    before = set(base.iterdir())
    failed = request.session.testsfailed
    yield
    if request.session.testsfailed != failed:
        return
    for path in set(base.iterdir()) - before - _SESSION_FOLDERS:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
