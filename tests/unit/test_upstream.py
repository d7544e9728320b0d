"""Every private kubespawner and JupyterHub member the package uses is still there, as used (:mod:`workspacespawner.upstream`).

An upgrade of either that renames, drops or changes the arguments of one
fails here, by name. Also: no module of the package but ``upstream`` reaches
a private member of theirs, so the list stays whole.
"""

from __future__ import annotations

import inspect
import pathlib
import re

import pytest
from jupyterhub.spawner import Spawner
from kubespawner import KubeSpawner

import workspacespawner
from workspacespawner.upstream import PRIVATE_MEMBERS, PrivateMember

PACKAGE = pathlib.Path(workspacespawner.__file__).parent


@pytest.mark.parametrize("member", PRIVATE_MEMBERS, ids=lambda m: f"{m.owner.__name__}.{m.name}")
def test_each_private_member_is_as_used(member: PrivateMember):
    assert member.problem() is None


def test_a_changed_member_is_named():
    assert PrivateMember(KubeSpawner, "_start_watching_pods", "self").problem() == (
        "kubespawner.spawner.KubeSpawner._start_watching_pods takes (self, replace), not (self)")
    assert "is gone" in PrivateMember(KubeSpawner, "_no_such_method", "self").problem()
    assert "no longer a property" in PrivateMember(KubeSpawner, "_expand_all", "property").problem()
    assert "no longer assigned" in PrivateMember(Spawner, "_no_such_attribute", "attribute").problem()


def _private_names() -> set[str]:
    """Every ``_name`` KubeSpawner and JupyterHub's Spawner have, as methods, properties or assigned attributes."""
    found = {name for cls in (KubeSpawner, Spawner) for name in dir(cls) if re.fullmatch(r"_[a-z]\w*", name)}
    for cls in (KubeSpawner, Spawner):
        found |= set(re.findall(r"self\.(_[a-z]\w*)\s*=", inspect.getsource(cls)))
    return found


def test_no_other_module_reaches_their_private_members():
    """No attribute read or method defined (an override) under one of their private names outside ``upstream``."""
    theirs = _private_names()
    used = {}
    for path in PACKAGE.rglob("*.py"):
        if path.name == "upstream.py" or "localcluster" in path.parts:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for name in re.findall(r"(?:spawner|self|super\(\))\.(_[a-z]\w*)", line):
                if name in theirs:
                    used.setdefault(f"{path.relative_to(PACKAGE)}:{number}", []).append(name)
            for name in re.findall(r"def (_[a-z]\w*)\(", line):
                if name in theirs:
                    used.setdefault(f"{path.relative_to(PACKAGE)}:{number}", []).append(name)
    assert used == {}
