"""WorkspaceSpawner's configuration surface: its config sections, and the start-up check covering every setting.

Covers: the trait classes it mixes in (``WorkspaceTraits``, ``HomeTraits``,
``StorageTraits``, ``LifecycleTraits``, ``VMTraits``) add no config section
of their own (no ``c.StorageTraits.*`` a hub could set and nobody check);
every setting WorkspaceSpawner adds to KubeSpawner is checked by
``check_hub_config`` with an error naming it; no class of ours has more than
40 methods.
"""

from __future__ import annotations

import inspect
import pkgutil

import pytest
from kubespawner import KubeSpawner
from traitlets import TraitError
from traitlets.config import Config

import workspacespawner
from workspacespawner.spawner import WorkspaceSpawner, check_hub_config

OURS = sorted(set(WorkspaceSpawner.class_trait_names(config=True)) - set(KubeSpawner.class_trait_names(config=True)))


def test_config_sections_are_jupyterhubs_and_ours_only():
    assert WorkspaceSpawner.section_names() == ["Configurable", "LoggingConfigurable", "Spawner", "KubeSpawner", "WorkspaceSpawner"]


def test_settings_of_the_trait_classes_are_workspacespawners():
    assert {"vm_golden_image", "team_folders", "home_size", "retention_days", "workspace_kind", "ide", "claim_binding_timeout"} <= set(OURS)


@pytest.mark.parametrize("name", OURS)
def test_start_up_check_covers_every_setting(name):
    with pytest.raises(TraitError, match=f"c.WorkspaceSpawner.{name} = "):
        check_hub_config(Config({"WorkspaceSpawner": {name: object()}}))


def _our_classes():
    for info in pkgutil.walk_packages(workspacespawner.__path__, "workspacespawner."):
        if ".localcluster" in info.name or ".migrations" in info.name:
            continue
        module = __import__(info.name, fromlist=["_"])
        for _name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == info.name:
                yield cls


def test_no_class_of_ours_over_40_methods():
    sizes = {f"{c.__module__}.{c.__qualname__}": sum(inspect.isfunction(v) for v in vars(c).values()) for c in _our_classes()}
    assert {name: n for name, n in sizes.items() if n > 40} == {}
