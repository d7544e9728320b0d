"""Time settings in one style: bare names in seconds, as JupyterHub's and kubespawner's own (``start_timeout``,
``http_timeout``, ``poll_interval``).

Covers: no setting of ours is named in another unit (``_minutes``,
``_days``, ``_seconds``) except the deprecated aliases; each alias sets its
new setting converted to seconds, reads back in its own unit, and logs once
what to use instead; the defaults are the old ones, in seconds; the
start-up check names a bad value under the alias's own name.
"""

from __future__ import annotations

import logging
import re

import pytest
from traitlets import TraitError
from traitlets.config import Config, Configurable

from workspacespawner.config import traittypes
from workspacespawner.config.traittypes import DeprecatedAlias
from workspacespawner.lifecycle.settings import LifecycleTraits
from workspacespawner.quota.config import WorkspaceQuota

#: (section, old name, old value, new name, the same in seconds)
RENAMED = [
    ("WorkspaceQuota", "grace_minutes", 15, "grace_period", 900),
    ("WorkspaceQuota", "warn_minutes", 30, "warn_before", 1800),
    ("WorkspaceQuota", "min_gpu_start_minutes", 15, "min_gpu_start_time", 900),
    ("WorkspaceSpawner", "retention_days", 30, "retention_period", 30 * 86400),
    ("WorkspaceSpawner", "fence_wait_seconds", 120, "fence_timeout", 120),
    ("WorkspaceSpawner", "vm_termination_grace_seconds", 180, "vm_termination_grace_period", 180),
]


def our_settings():
    from kubespawner import KubeSpawner

    from workspacespawner.config.gpueconomy import GPUEconomy
    from workspacespawner.config.rootdiskpool import RootDiskPool
    from workspacespawner.dashboard.settings import WorkspacesDashboard
    from workspacespawner.idle.settings import GPUIdle
    from workspacespawner.spawner import WorkspaceSpawner

    inherited = set(KubeSpawner.class_trait_names(config=True))
    for cls in (WorkspaceSpawner, WorkspaceQuota, GPUIdle, RootDiskPool, GPUEconomy, WorkspacesDashboard):
        for name, trait in cls.class_traits(config=True).items():
            if name not in inherited:
                yield cls.__name__, name, trait


def test_no_setting_is_named_in_another_unit_but_the_deprecated_aliases():
    odd = [f"{cls}.{name}" for cls, name, trait in our_settings()
           if re.search(r"_(seconds|minutes|hours|days)$", name) and not name.endswith("card_hours")  # card-hours: GPU use
           and not isinstance(trait, DeprecatedAlias)]
    assert odd == []


def reader(section: str, config: Config):
    if section == "WorkspaceQuota":
        return WorkspaceQuota(config=config)
    from workspacespawner.backends.vm.settings import VMTraits

    cls = type("WorkspaceSpawner", (Configurable, LifecycleTraits, VMTraits), {})
    return cls(config=config)


@pytest.mark.parametrize("section, old, value, new, seconds", RENAMED)
def test_an_old_name_sets_the_new_setting_in_seconds(caplog, section, old, value, new, seconds):
    traittypes.said.clear()
    config = Config()
    config[section][old] = value
    with caplog.at_level(logging.WARNING):
        settings = reader(section, config)
        reader(section, config)
    assert getattr(settings, new) == seconds
    assert getattr(settings, old) == value  # the old name reads in its own unit
    assert getattr(reader(section, Config()), new) == seconds  # the default is the old default, in seconds
    warnings = [r.getMessage() for r in caplog.records if "deprecated" in r.getMessage()]
    assert warnings == [f"{section}.{old} is deprecated; use c.{section}.{new}"]


def test_start_up_check_names_a_bad_old_value():
    from workspacespawner.spawner import check_hub_config

    with pytest.raises(TraitError, match=r"c.WorkspaceSpawner.retention_days = -1 is invalid"):
        check_hub_config(Config({"WorkspaceSpawner": {"retention_days": -1}}))
    with pytest.raises(TraitError, match=r"grace_period"):
        WorkspaceQuota(config=Config({"WorkspaceQuota": {"grace_minutes": -5}}))
