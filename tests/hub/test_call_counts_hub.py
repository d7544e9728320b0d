"""The exact Kubernetes API calls of a start and a stop, through a real JupyterHub (issue #15).

Reads come from the hub's shared watch caches (``k8s/cachedkube.py``) and a
start or stop writes only what must change, so the calls are pinned here,
call by call, as the API server's request log shows them (the shared
watches' own requests aside, ``tests/support/callcount.py``; a VM start's
stream of its guest's serial console, at most one, aside too). For
comparison, kubespawner with its own home PVC makes 2 calls to start a new
user (PVC create, Pod create), 1 to start again and 1 to stop
(``benchmarks/spawn_cost.py`` measures both side by side).

The embedded plane only: its request log records the hub's requests.
"""

from __future__ import annotations

import re
import time

import pytest

from tests.support import planes
from tests.support.callcount import workspace_calls
from tests.support.faultcases import wait_until
from tests.support.hubharness import Hub, config_pieces

pytestmark = pytest.mark.embedded_only("reads the embedded API server's request log")

PVCS, PODS = "/api/v1/namespaces/default/persistentvolumeclaims", "/api/v1/namespaces/default/pods"
VM_API = "/apis/kubevirt.io/v1/namespaces/default/virtualmachines"
SUBRESOURCES = "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachines"


@pytest.fixture(scope="module")
def cluster(control_plane, tmp_path_factory):
    with planes.running(control_plane, tmp_path_factory.mktemp("cluster"), golden=True) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def hub(cluster, tmp_path_factory):
    plane_config, start_timeout = planes.hub_settings(cluster)
    config = config_pieces("10-workspace-spawner.py", "20-profiles.py") + plane_config
    hub = Hub(tmp_path_factory.mktemp("hub"), cluster.kubeconfig, config, start_timeout=start_timeout).start()
    hub.create_user("warm")  # the first start of the hub opens the shared watches: not a workspace's calls
    hub.start_server("warm")
    hub.stop_server("warm")
    yield hub
    hub.stop()


def calls_of(cluster, action, *, expected: int) -> list[tuple[str, str]]:
    """The workspace calls ``action()`` made: once ``expected`` are in, and a second without more."""
    cluster.requests.clear()
    action()
    assert wait_until(lambda: len(workspace_calls(cluster.requests.records)) >= expected, timeout=30), \
        workspace_calls(cluster.requests.records)
    time.sleep(1.0)  # a call more than expected would arrive now
    return workspace_calls(cluster.requests.records)


#: A VM start's follow of its guest's serial console (its launcher Pod's guest-console-log, backends/vm/consolelog.py).
CONSOLE = re.compile(r"/api/v1/namespaces/default/pods/virt-launcher-ws-vic-[0-9a-f]{5}/log")


def without_console(calls: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``calls`` without the start's console stream, asserted to be at most one: it is opened only when the hub sees
    the launcher Pod's console container run before the guest is ready, which an emulated guest often is first."""
    console = [call for call in calls if call[0] == "GET" and CONSOLE.fullmatch(call[1])]
    assert len(console) <= 1, console
    return [call for call in calls if call not in console]


def test_container_start_and_stop_make_kubespawners_calls_plus_one_write(hub, cluster):
    hub.create_user("cal")
    # a new user: the home made already Stopped and claimed for this start, then the Pod
    assert calls_of(cluster, lambda: hub.start_server("cal"), expected=2) == [("POST", PVCS), ("POST", PODS)]
    # a stop: the Pod, then the attach claim released (the phase is what the Pod showed: nothing to record)
    assert calls_of(cluster, lambda: hub.stop_server("cal"), expected=2) == [
        ("DELETE", f"{PODS}/jupyter-cal"), ("PATCH", f"{PVCS}/home-cal"),
    ]
    # again: the attach claim, then the Pod; the home, the fence's Pods and VMIs are read from the watches
    assert calls_of(cluster, lambda: hub.start_server("cal"), expected=2) == [("PATCH", f"{PVCS}/home-cal"), ("POST", PODS)]
    hub.stop_server("cal")


def test_vm_start_and_stop_write_only_what_changes(hub, cluster):
    hub.create_user("vic")
    root, secret = "/apis/cdi.kubevirt.io/v1beta1/namespaces/default/datavolumes", "/api/v1/namespaces/default/secrets"
    first = without_console(calls_of(cluster, lambda: hub.start_server("vic", {"profile": "ubuntu-vm"}), expected=8))
    # the home and the root disk are made already Stopped and claimed for this start; the VM made Stopped;
    # the Secret and the Service are not watched: a patch that finds none, a read that finds none; and at most one
    # stream of the guest's console (without_console)
    assert first == [
        ("POST", PVCS), ("POST", root), ("POST", VM_API), ("PATCH", f"{secret}/ws-vic-cloudinit"), ("POST", secret),
        ("GET", "/api/v1/namespaces/default/services/ws-vic"), ("POST", "/api/v1/namespaces/default/services"),
        ("PUT", f"{SUBRESOURCES}/ws-vic/start"),
    ]
    # a stop: the stop subresource, both claims released (the Secret's token is revoked by JupyterHub, not written)
    stop = [("PUT", f"{SUBRESOURCES}/ws-vic/stop"), ("PATCH", f"{PVCS}/home-vic"), ("PATCH", f"{root}/ws-vic-root")]
    assert calls_of(cluster, lambda: hub.stop_server("vic"), expected=3) == stop
    # again: both claims, this start's Secret, the Service's address, the start subresource (the VM, at its profile
    # already, and the root disk are read from their watches)
    assert without_console(calls_of(cluster, lambda: hub.start_server("vic", {"profile": "ubuntu-vm"}), expected=5)) == [
        ("PATCH", f"{PVCS}/home-vic"), ("PATCH", f"{root}/ws-vic-root"), ("PATCH", f"{secret}/ws-vic-cloudinit"),
        ("GET", "/api/v1/namespaces/default/services/ws-vic"), ("PUT", f"{SUBRESOURCES}/ws-vic/start"),
    ]
    assert calls_of(cluster, lambda: hub.stop_server("vic"), expected=3) == stop
