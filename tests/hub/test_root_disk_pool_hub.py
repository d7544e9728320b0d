"""The root-disk pool through a real JupyterHub (``c.RootDiskPool``), on both control planes.

The hub keeps one pool disk of the demo's golden image. A first start made
before the disk is ready clones its own root disk as before; once it is
ready, another user's first start takes it: no DataVolume of that user's
is created, the spawn's progress shows no clone, the VM boots from the pool
disk and the pool refills. The claimed disk is the user's from then on:
listed as their root disk, counted in their disks, kept across a stop and
used again by the next start; the claim is in the audit trail. Faults on
the claim: a rival's claim first (422) passes to the next ready disk, an
API error (500) that lasts past the retries falls back to a clone and leaves
the pool disk in the pool.
The invariants hold after each (no disk deleted but retired pool disks).
"""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from tests.support import planes
from tests.support.faultcases import wait_until
from tests.support.hubharness import CONFIG_D, Hub, login, progress_of_a_start
from tests.support.invariants import assert_invariants
from workspacespawner.admin import disk
from workspacespawner.core import names
from workspacespawner.demo import GOLDEN_IMAGE
from workspacespawner.lifecycle.audit import AuditLog
from workspacespawner.vmdisk.rootdisk import root_disk_of

DV = ("cdi.kubevirt.io", "v1beta1", "default", "datavolumes")


@pytest.fixture(scope="module")
def cluster(control_plane, tmp_path_factory):
    proxy = {"fault_proxy": True} if control_plane == "real" else {}  # the claim's faults, and the request log
    with planes.running(control_plane, tmp_path_factory.mktemp("cluster"), golden=True, **proxy) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def hub(cluster, tmp_path_factory, ledger_url):
    config = "\n".join(f"load_subconfig({str(CONFIG_D / piece)!r})" for piece in ("10-workspace-spawner.py", "20-profiles.py"))
    plane_config, start_timeout = planes.hub_settings(cluster)
    config += f"\nc.RootDiskPool.ready_disks = {{{GOLDEN_IMAGE[1]!r}: {{'count': 1, 'namespace': {GOLDEN_IMAGE[0]!r}}}}}\n"
    config += f"c.RootDiskPool.refill_interval = 1\nc.WorkspaceQuota.ledger_url = {ledger_url!r}\n" + plane_config
    hub = Hub(tmp_path_factory.mktemp("hub"), cluster.kubeconfig, config, start_timeout=start_timeout).start()
    yield hub
    hub.stop()


def datavolumes(custom, selector: str) -> list[dict]:
    return custom.list_namespaced_custom_object(*DV, label_selector=selector)["items"]


def pool_disks(custom) -> list[dict]:
    return datavolumes(custom, f"{names.MANAGED_BY_LABEL}={names.MANAGED_BY},{names.DISK_LABEL}={names.POOL_DISK}")


def ready_pool_disk(custom) -> dict | None:
    return next((d for d in pool_disks(custom) if (d.get("status") or {}).get("phase") == "Succeeded"), None)


def the_vm(custom, user: str) -> dict:
    [vm] = custom.list_namespaced_custom_object("kubevirt.io", "v1", "default", "virtualmachines",
                                                label_selector=names.owner_selector(user))["items"]
    return vm


def test_a_first_start_takes_the_ready_pool_disk_and_the_pool_refills(hub, kube, cluster, ledger_url):
    _core, custom = kube
    hub.create_user("early")
    login(hub, "early").get(f"{hub.url}/hub/spawn", timeout=30)  # the hub's spawners start the pool keeper
    hub.start_server("early", {"profile": "ubuntu-vm"})  # the pool is still cloning: this start clones its own
    early_vm = the_vm(custom, "early")
    assert root_disk_of(early_vm) == f"{early_vm['metadata']['name']}-root"
    hub.stop_server("early")

    assert wait_until(lambda: ready_pool_disk(custom) is not None, timeout=120)
    pooled = ready_pool_disk(custom)
    name = pooled["metadata"]["name"]
    assert names.OWNER_LABEL not in pooled["metadata"]["labels"]

    hub.create_user("pia")
    events = progress_of_a_start(hub, "pia", {"profile": "ubuntu-vm"})
    messages = [e.get("message", "") for e in events]
    assert any(f"prepared from the system image {GOLDEN_IMAGE[1]}" in m for m in messages), messages
    assert not any("Copying the system image" in m or "Creating your root disk" in m for m in messages), messages
    hub.wait_ready("pia")

    [mine] = datavolumes(custom, names.owner_selector("pia"))
    assert mine["metadata"]["name"] == name and mine["metadata"]["uid"] == pooled["metadata"]["uid"]
    assert mine["metadata"]["labels"][names.DISK_LABEL] == names.ROOT_DISK
    vm = the_vm(custom, "pia")
    assert root_disk_of(vm) == name
    assert mine["metadata"]["annotations"][names.ROOT_SLOT_ANNOTATION] == vm["metadata"]["name"]
    r = hub.server_request("pia", "PUT", "api/contents/pooled.txt", json={"type": "file", "format": "text", "content": "mine"})
    assert r.status_code in (200, 201), r.text

    assert wait_until(lambda: ready_pool_disk(custom) is not None, timeout=120)  # refilled
    assert ready_pool_disk(custom)["metadata"]["name"] != name

    hub.stop_server("pia")
    hub.start_server("pia", {"profile": "ubuntu-vm"})  # the same disk again: the VM names it
    assert root_disk_of(the_vm(custom, "pia")) == name
    assert [d["metadata"]["name"] for d in datavolumes(custom, names.owner_selector("pia"))] == [name]
    hub.stop_server("pia")

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert disk.main(["list", "pia", "--json", "--kubeconfig", str(cluster.kubeconfig), "--namespace", "default"]) == 0
    rows = json.loads(out.getvalue())
    assert sorted((row["role"], row["name"] if row["role"] == "root" else "") for row in rows) == [("home", ""), ("root", name)]
    assert all(row["owner"] == "pia" for row in rows)

    log = AuditLog.from_url(ledger_url)
    try:
        [claim] = log.query(user="pia", action="claim")
        pool_records = [(r.action, r.result) for r in log.query(user="") if r.disk == name]
    finally:
        log.dispose()
    assert (claim.disk, claim.actor, claim.result, claim.after) == (name, "system", "ok", {"root_disk": name, "vm": vm["metadata"]["name"]})
    assert pool_records == [("create", "ok: pool disk")]  # cloned for the pool, then claimed: never retired


POOL_DISK_PATH = r"/namespaces/default/datavolumes/pool-[^/]+$"


def first_start_with_a_fault(hub, cluster, custom, user: str, status: int, reason: str, count: int = 1) -> dict:
    """``user``'s first VM start while the next ``count`` claims of a pool disk answer ``status``; returns their root
    DataVolume."""
    assert wait_until(lambda: ready_pool_disk(custom) is not None, timeout=120)
    cluster.faults.add("PATCH", POOL_DISK_PATH, status=status, reason=reason, message="injected on the claim", count=count)
    hub.create_user(user)
    try:
        hub.start_server(user, {"profile": "ubuntu-vm"})
    finally:
        cluster.faults.clear()
    [mine] = datavolumes(custom, names.owner_selector(user))
    assert root_disk_of(the_vm(custom, user)) == mine["metadata"]["name"]
    hub.stop_server(user)
    return mine


def test_a_claim_a_rival_won_passes_to_the_next_disk_or_clones(hub, kube, cluster):
    _core, custom = kube
    mine = first_start_with_a_fault(hub, cluster, custom, "rita", 422, "Invalid")
    assert mine["metadata"]["annotations"][names.ROOT_SLOT_ANNOTATION] == the_vm(custom, "rita")["metadata"]["name"]
    assert_invariants(cluster)


def test_an_api_error_on_the_claim_falls_back_to_a_clone_and_keeps_the_pool_disk(hub, kube, cluster):
    """A 500 is retried (as every transient API error); one that lasts makes the start clone instead."""
    _core, custom = kube
    waiting = ready_pool_disk(custom) or {}
    mine = first_start_with_a_fault(hub, cluster, custom, "omar", 500, "InternalError", count=10_000)
    vm = the_vm(custom, "omar")
    assert mine["metadata"]["name"] == f"{vm['metadata']['name']}-root"  # cloned: the pool is a shortcut, not a need
    assert names.OWNER_LABEL not in (ready_pool_disk(custom) or waiting)["metadata"]["labels"]
    assert_invariants(cluster)
