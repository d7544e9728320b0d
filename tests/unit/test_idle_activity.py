"""What the idle-GPU pass reads, as pure functions: the hub's user models read into servers with their activity,
start and profile; the workspaces holding GPUs counted once (a VM's virt-launcher Pod stands for its VMI); each
workspace's highest GPU utilisation joined by Pod; the servers both the cluster and the hub know; and the
workspace-side reading of code-server's heartbeat file into jupyter-server's activity settings."""

from __future__ import annotations

import os
from datetime import UTC, datetime

from tests.unit.test_idle_pass import pod, vmi
from workspacespawner.core.prometheus import Sample
from workspacespawner.gpu.metrics import UTIL, join_gpus
from workspacespawner.idle import serverext
from workspacespawner.idle.activity import gpu_servers, gpu_servers_held, hub_view, utilisation_by_server
from workspacespawner.k8s.objects import counted_once

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def test_hub_view_reads_servers_groups_and_profiles():
    view = hub_view([
        {"name": "ann", "groups": ["research"], "servers": {
            "": {"last_activity": "2026-03-02T12:00:00.123Z", "started": "2026-03-02T11:00:00Z", "pending": None,
                 "user_options": {"profile": "gpu-1"}},
            "vm": {"last_activity": None, "started": None, "pending": "spawn", "user_options": {}},
        }},
        {"name": "bob", "servers": {}},
        {"servers": {}},
    ])
    ann = view.servers[("ann", "")]
    assert (ann.last_activity.replace(microsecond=0), ann.started.hour, ann.profile) == (T0, 11, "gpu-1")
    assert view.servers[("ann", "vm")].pending == "spawn" and view.servers[("ann", "vm")].last_activity is None
    assert view.groups == {"ann": frozenset({"research"}), "bob": frozenset()}


def test_gpu_servers_held_counts_a_vm_once_and_skips_cpu_servers():
    machine = vmi("eve-vm", "eve", "vm")
    launcher = pod("virt-launcher-eve-vm-x", "eve", "vm", labels={"kubevirt.io": "virt-launcher",
                                                                   "kubevirt.io/created-by": "uid-eve-vm"})
    compute = counted_once([pod("jupyter-ann", "ann", gpus=2), pod("jupyter-bob", "bob", gpus=0), launcher, machine])
    assert gpu_servers_held(compute) == {("ann", ""): 2, ("eve", "vm"): 1}


def test_utilisation_is_the_highest_of_a_workspaces_gpus():
    pods = [pod("jupyter-ann", "ann", gpus=2), pod("other", None)]
    samples = [Sample({"gpu": "0", "pod": "jupyter-ann", "namespace": "jhub", "Hostname": "gpu-1"}, 3.0),
               Sample({"gpu": "1", "pod": "jupyter-ann", "namespace": "jhub", "Hostname": "gpu-1"}, 40.0),
               Sample({"gpu": "2", "pod": "other", "namespace": "jhub", "Hostname": "gpu-1"}, 0.0)]
    assert utilisation_by_server(join_gpus({UTIL: samples}, pods, [])) == {("ann", ""): 40.0}


def test_gpu_servers_join_the_cluster_and_the_hub():
    view = hub_view([{"name": "ann", "groups": ["g"], "servers": {"": {
        "last_activity": "2026-03-02T12:00:00Z", "started": "2026-03-02T11:00:00Z", "user_options": {"profile": "p"}}}}])
    [server] = gpu_servers({("ann", ""): 1, ("zed", ""): 1}, view, {("ann", ""): 2.5}, {"p": "One GPU"})
    assert (server.user, server.profile, server.display, server.groups, server.gpu_util, server.last_activity) == (
        "ann", "p", "One GPU", frozenset({"g"}), 2.5, T0)
    assert gpu_servers({("ann", ""): 1}, view, None)[0].gpu_util is None


def test_heartbeat_path_follows_xdg_data_home_like_code_server():
    assert serverext.heartbeat_path({"HOME": "/home/jovyan"}) == (
        serverext.Path("/home/jovyan/.local/share/code-server/heartbeat"))
    assert serverext.heartbeat_path({"HOME": "/h", "XDG_DATA_HOME": "/data"}) == serverext.Path(
        "/data/code-server/heartbeat")


def test_the_heartbeat_is_read_at_least_as_often_as_singleuser_reports():
    assert serverext.check_seconds({}) == serverext.CHECK_SECONDS == 30
    assert serverext.check_seconds({"JUPYTERHUB_ACTIVITY_INTERVAL": "300"}) == 30  # jupyterhub-singleuser's default
    assert serverext.check_seconds({"JUPYTERHUB_ACTIVITY_INTERVAL": "2"}) == 2
    for bad in ("", "soon", "0", "-5", "nan"):
        assert serverext.check_seconds({"JUPYTERHUB_ACTIVITY_INTERVAL": bad}) == 30, bad


def test_the_heartbeats_time_goes_into_a_last_activity_setting_only_forward(tmp_path):
    beat = tmp_path / "heartbeat"
    settings: dict = {}
    assert serverext.record_heartbeat(settings, beat) is None and settings == {}
    beat.write_text("")
    os.utime(beat, (T0.timestamp(), T0.timestamp()))
    assert serverext.record_heartbeat(settings, beat) == T0
    assert settings[serverext.SETTING] == T0 and serverext.SETTING.endswith("_last_activity")
    older = T0.timestamp() - 60
    os.utime(beat, (older, older))
    serverext.record_heartbeat(settings, beat)
    assert settings[serverext.SETTING] == T0
