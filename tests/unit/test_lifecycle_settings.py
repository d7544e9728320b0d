"""The lifecycle settings and a workspace's recorded phase, without a hub (:mod:`workspacespawner.lifecycle.settings`, ``.tracker``).

Covers: the settings as the hub and the admin commands read them
(``c.WorkspaceSpawner.*``, checked: an unknown reclaim policy, a disk limit
that is not a quantity); which named servers share the default server's
home (so deleting them keeps it as it is); the phase in the spawner state,
and an unreadable saved phase falling back to Requested.
"""

from __future__ import annotations

import pytest
from traitlets import TraitError
from traitlets.config import Config

from workspacespawner.admin.common import lifecycle_settings
from workspacespawner.backends.container.podstatus import ContainerStatus
from workspacespawner.lifecycle.phases import Phase, Status
from workspacespawner.lifecycle.tracker import LifecycleSettings, WorkspaceLifecycle
from workspacespawner.storage.home import home_is_shared


def test_settings_from_the_hub_config():
    settings = lifecycle_settings(Config({"KubeSpawner": {"namespace": "jhub"}, "WorkspaceSpawner": {
        "retention_period": 7 * 86400, "reclaim_policy": "admin-only", "disk_limit": "200Gi", "fence_timeout": 30}}))
    assert (settings.retention_period, settings.reclaim_policy, settings.disk_limit, settings.fence_timeout) == (
        7 * 86400, "admin-only", "200Gi", 30)
    assert settings.retention_days == 7  # the deprecated name reads in its own unit
    defaults = lifecycle_settings(Config())
    assert (defaults.retention_period, defaults.reclaim_policy, defaults.disk_limit) == (30 * 86400, "automatic", None)
    for bad in ({"reclaim_policy": "never"}, {"disk_limit": "lots"}, {"retention_period": -1}, {"retention_days": -1}):
        with pytest.raises(TraitError):
            lifecycle_settings(Config({"WorkspaceSpawner": bad}))


@pytest.mark.parametrize("template, server, shared", [
    ("home-{username}", "gpu", True),
    ("home-{username}", "", False),
    ("home-{user_server}", "gpu", False),
    ("home-{username}--{servername}", "gpu", False),
    ("home-{escaped_username}{unescaped_servername}", "gpu", False),
])
def test_which_named_servers_share_the_home(template, server, shared):
    assert home_is_shared(template, server) is shared


def new_lifecycle() -> WorkspaceLifecycle:
    return WorkspaceLifecycle(kube=None, audit=None, kind=ContainerStatus(), settings=LifecycleSettings())


def test_phase_in_spawner_state():
    lifecycle = new_lifecycle()
    assert lifecycle.phase == Phase.REQUESTED
    lifecycle.status = Status(Phase.RUNNING, server="gpu")
    state = lifecycle.state()
    restored = new_lifecycle()
    restored.load_state(state)
    assert restored.status == lifecycle.status
    restored.load_state({"lifecycle": {"phase": "Napping"}})
    assert restored.phase == Phase.REQUESTED
