"""A callable profile_list through a real JupyterHub on the local cluster.

Covers: the callable is called once per start (JupyterHub's
``apply_user_options`` hook checks the user's choice against its profiles,
and the start applies those same profiles: it was called twice, and a
callable that answers differently from one call to the next could have
had a start apply a profile its check never saw); its profiles are checked
(a profile it does not offer is refused 400 before anything is made) and
applied like a static list's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import planes
from tests.support.hubharness import Hub, config_pieces, core_v1
from workspacespawner.core import names

pytestmark = pytest.mark.embedded_only

IMAGE = "quay.io/jupyter/pytorch-notebook:2025-10-20"

#: The shipped profiles from a callable that notes each call (the user's name, one line per call) in a file.
CALLABLE = """
_shipped_profiles = c.KubeSpawner.profile_list

def _profiles_of(spawner):
    with open({calls!r}, "a") as calls:
        calls.write(spawner.user.name + "\\n")
    return _shipped_profiles + [{{"display_name": "PyTorch", "slug": "torch",
                                  "kubespawner_override": {{"image": {image!r}}}}}]

c.KubeSpawner.profile_list = _profiles_of
"""


@pytest.fixture(scope="module")
def calls(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("calls") / "profile_list_calls"


@pytest.fixture(scope="module")
def cluster(control_plane, tmp_path_factory):
    with planes.running(control_plane, tmp_path_factory.mktemp("cluster")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def hub(cluster, calls, tmp_path_factory):
    config = config_pieces("10-workspace-spawner.py", "20-profiles.py") + CALLABLE.format(calls=str(calls), image=IMAGE)
    extra, timeout = planes.hub_settings(cluster)
    hub = Hub(tmp_path_factory.mktemp("hub"), cluster.kubeconfig, config + extra, start_timeout=timeout).start()
    yield hub
    hub.stop()


def calls_of(calls: Path, user: str) -> int:
    return calls.read_text().splitlines().count(user) if calls.exists() else 0


def test_a_start_calls_the_profile_list_once_and_applies_what_it_checked(hub, cluster, calls):
    hub.create_user("ann")
    hub.start_server("ann", {"profile": "torch"})
    assert calls_of(calls, "ann") == 1
    with core_v1(cluster) as core:
        pod, = core.list_namespaced_pod("default", label_selector=names.owner_selector("ann")).items
    assert pod.spec.containers[0].image == IMAGE
    hub.stop_server("ann")
    hub.start_server("ann", {"profile": "torch"})
    assert calls_of(calls, "ann") == 2
    hub.stop_server("ann")


def test_a_profile_the_callable_does_not_offer_is_refused_before_anything_is_made(hub, cluster, calls):
    hub.create_user("bob")
    r = hub.spawn("bob", {"profile": "no-such-profile"})
    assert r.status_code == 400, r.text
    with core_v1(cluster) as core:
        assert core.list_namespaced_pod("default", label_selector=names.owner_selector("bob")).items == []
        assert core.list_namespaced_persistent_volume_claim("default", label_selector=names.owner_selector("bob")).items == []
