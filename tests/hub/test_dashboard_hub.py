"""The Workspaces dashboard as the hub runs it (a managed service at /services/workspaces/) on the local cluster.

Covers: the hub starts the service from the config piece; alice's browser session logs in to it through the hub's
OAuth and her page shows her servers; her token reads only her own workspaces (bob's: 403 from the service); a POST on
bob's server as alice is 403 and changes nothing (bob's server still runs, no audit record); her own snapshot, stop and
give-back work and are audited with her name; expanding her home is refused over her disk quota and done within it
(both audited); a team lead (a team group's role) reads her team's workspaces but not others' and acts on none of
theirs; a cookie POST without the XSRF token is refused; the GPUs and card-hours the service shows equal the
cluster's and the ledger's in the same test; restoring her snapshot while stopped keeps the old home Retained;
rebuilding the system disk of her stopped VM workspace is refused to bob (403, nothing made) and done for her (the VM
names the new disk, the old one Retained, audited with her name), and a snapshot of its first system disk, taken
before, restores into a third system disk the VM boots from (CDI's DataVolume from a snapshot; on the real plane CDI's
own controller), the rebuilt one Retained; a stopped VM server shows the golden image (and version) its system disk
was cloned from.
"""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime

import pytest
import requests

from tests.support import planes
from tests.support.hubharness import CONFIG_D, Hub, core_and_custom, free_port, login
from tests.support.paths import REPO
from workspacespawner.config.goldenimages import parse_image_name
from workspacespawner.core import names
from workspacespawner.core.gpuresources import product_display_name
from workspacespawner.demo import GOLDEN_IMAGE
from workspacespawner.lifecycle.audit import AuditLog
from workspacespawner.quota import policy
from workspacespawner.quota.ledger import Ledger


class DashboardHub(Hub):
    """A harness hub that adds the dashboard after the harness's own settings (they replace ``c.JupyterHub.services``
    and ``load_roles``), as jupyterhub_config.d/50-workspaces-dashboard.py does, so the hub starts the service."""

    def __init__(self, *args, dashboard_port: int, **kwargs):
        self.dashboard_port = dashboard_port
        super().__init__(*args, **kwargs)

    def _base_config(self) -> str:
        return (super()._base_config() + "from workspacespawner.dashboard.settings import configure_hub\n"
                + f"c.WorkspacesDashboard.port = {self.dashboard_port}\nconfigure_hub(c)\n")

    def service_url(self, path: str = "") -> str:
        return f"{self.url}/services/workspaces/{path}"

    def wait_service(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if requests.get(f"http://127.0.0.1:{self.dashboard_port}/services/workspaces/api/workspaces",
                                timeout=2).status_code == 403:
                    return
            except (requests.ConnectionError, requests.Timeout):  # refused, or queued at a port bound before serving
                pass
            time.sleep(0.3)
        raise AssertionError(f"the dashboard service did not answer:\n{self.log()}")


def dashboard_config(ledger_url: str, team_groups=("research",)) -> str:
    config = f"import sys\nsys.path.insert(0, {str(REPO)!r})\n"
    config += "".join(f"load_subconfig({str(CONFIG_D / p)!r})\n" for p in ("10-workspace-spawner.py", "20-profiles.py"))
    return config + f"""
c.JupyterHub.spawner_class = "workspace"
c.WorkspaceQuota.ledger_url = {ledger_url!r}
c.WorkspaceQuota.card_hours_per_month = 100
c.WorkspaceQuota.max_gpus = 8
# room for the rebuild's 10Gi system disk (no smaller than the demo's golden image, or CDI refuses the clone)
# beside alice's home and the disks her restore and give-back retain
c.WorkspaceQuota.max_disk = "64Gi"
c.WorkspacesDashboard.team_groups = {list(team_groups)!r}
"""


@pytest.fixture(scope="module")
def cluster(control_plane, tmp_path_factory):
    with planes.running(control_plane, tmp_path_factory.mktemp("cluster"), golden=True) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def ledger_url(control_plane, tmp_path_factory):
    """A ledger of the plane's own, as its cluster and hub are."""
    return f"sqlite:///{tmp_path_factory.mktemp('ledger') / 'ledger.sqlite'}"


@pytest.fixture(scope="module")
def hub(cluster, tmp_path_factory, ledger_url):
    plane_config, start_timeout = planes.hub_settings(cluster)
    hub = DashboardHub(tmp_path_factory.mktemp("hub"), cluster.kubeconfig, dashboard_config(ledger_url) + plane_config,
                       dashboard_port=free_port(), start_timeout=start_timeout)
    hub.start()
    try:
        hub.wait_service()
        for name in ("alice", "bob"):
            hub.create_user(name)
        hub.start_server("alice", {"profile": "jupyterlab-1gpu"})
        hub.start_server("bob", {"profile": "jupyterlab-cpu"})
        yield hub
    finally:
        hub.stop()


def token_of(hub: Hub, user: str, *more: str) -> dict:
    """Headers with a token of ``user``'s holding what the user role gives for the dashboard, and ``more`` scopes."""
    scopes = ["access:services!service=workspaces", "custom:workspaces:read!user", "custom:workspaces:act!user",
              "read:users!user", *more]
    r = hub.api("POST", f"/users/{user}/tokens", json={"scopes": scopes, "note": "dashboard test"})
    assert r.status_code == 201, r.text
    return {"Authorization": f"token {r.json()['token']}"}


def audit_records(ledger_url: str, **filters):
    log = AuditLog.from_url(ledger_url)
    try:
        return log.query(**filters)
    finally:
        log.dispose()


def test_alices_browser_session_reaches_her_page_through_the_hubs_oauth(hub):
    session = login(hub, "alice")
    r = session.get(hub.service_url(), timeout=60)
    assert r.status_code == 200, r.text
    assert "My workspaces" in r.text and "Default server" in r.text
    assert session.get(hub.service_url("api/workspaces/bob"), timeout=30).status_code == 403


def test_a_user_reads_only_her_own_workspaces(hub):
    alice = token_of(hub, "alice")
    mine = requests.get(hub.service_url("api/workspaces"), headers=alice, timeout=60)
    assert mine.status_code == 200, mine.text
    assert mine.json()["user"] == "alice"
    refused = requests.get(hub.service_url("api/workspaces/bob"), headers=alice, timeout=30)
    assert refused.status_code == 403
    assert "bob" in refused.json()["message"]


def test_the_gpus_shown_are_the_clusters(hub, cluster):
    alice = token_of(hub, "alice")
    (server,) = requests.get(hub.service_url("api/workspaces"), headers=alice, timeout=60).json()["servers"]
    with core_and_custom(cluster) as (core, _custom):
        pods = core.list_namespaced_pod("default", label_selector=names.owner_selector("alice")).items
        (pod,) = [p for p in pods if p.metadata.annotations.get("hub.jupyter.org/username") == "alice"]
        held = sum(int((c.resources.limits or {}).get("nvidia.com/gpu", 0)) for c in pod.spec.containers)
        node = core.read_node(pod.spec.node_name)
    assert (server["phase"], server["gpus"], server["node"]) == ("Running", held, pod.spec.node_name)
    assert held == 1
    assert server["gpu_type"] == product_display_name(node.metadata.labels.get("nvidia.com/gpu.product"))  # #38 item 13


def test_acting_on_another_users_server_is_refused_and_changes_nothing(hub, ledger_url):
    alice = token_of(hub, "alice")
    before = audit_records(ledger_url, user="bob")
    for action, body in (("stop", {"server": ""}), ("snapshot", {"pvc": "home-bob"}), ("give-back", {"disk": "home-bob"})):
        r = requests.post(hub.service_url(f"api/workspaces/bob/{action}"), headers=alice, json=body, timeout=30)
        assert r.status_code == 403, (action, r.text)
    assert hub.user("bob")["servers"][""]["ready"]
    assert audit_records(ledger_url, user="bob") == before  # the hub's own records of bob's disk, none more


def test_her_own_snapshot_and_stop_are_done_and_audited_and_card_hours_match_the_ledger(hub, ledger_url):
    alice = token_of(hub, "alice")
    data = requests.get(hub.service_url("api/workspaces"), headers=alice, timeout=60).json()
    (home,) = [d["name"] for d in data["servers"][0]["disks"] if d["role"] == "home"]
    r = requests.post(hub.service_url("api/workspaces/alice/snapshot"), headers=alice, json={"pvc": home}, timeout=60)
    assert r.status_code == 200, r.text
    snapshot = r.json()["name"]
    r = requests.post(hub.service_url("api/workspaces/alice/stop"), headers=alice, json={"server": ""}, timeout=60)
    assert r.status_code == 200, r.text
    deadline = time.monotonic() + 60
    while hub.user("alice")["servers"].get("") and time.monotonic() < deadline:
        time.sleep(0.3)
    assert not hub.user("alice")["servers"].get("")
    actions = {(rec.action, rec.actor, rec.disk) for rec in audit_records(ledger_url, user="alice")}
    assert ("snapshot", "alice", home) in actions and ("stop", "alice", "") in actions

    # the run is closed once the Pod is gone: from then on the ledger's card-hours stay put
    ledger = Ledger(ledger_url)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        runs = ledger.runs_of("alice", policy.month_bounds(datetime.now(UTC), "UTC"))
        if runs and all(run.stopped for run in runs):
            break
        time.sleep(0.3)
    ledger.dispose()
    period = policy.month_bounds(datetime.now(UTC), "UTC")
    expected = round(policy.card_hours(runs, *period, datetime.now(UTC)), 4)
    data = requests.get(hub.service_url("api/workspaces"), headers=alice, timeout=60).json()
    assert data["servers"][0]["card_hours"] == expected > 0
    assert data["balance"]["used"] == expected
    assert snapshot in [s["name"] for s in data["snapshots"]]


def test_giving_back_a_retained_disk_sets_retain_until_to_now_and_deletes_nothing(hub, cluster, ledger_url):
    meta = {"name": "alice-old-home", "labels": {**names.owner_labels("alice"), names.DISK_LABEL: "home",
                                                   names.PHASE_LABEL: "Retained"},
            "annotations": {**names.owner_annotations("alice"), names.LIFECYCLE_ANNOTATION: json.dumps(
                {"phase": "Retained", "since": "2026-01-01T00:00:00Z", "server": "old",
                 "retainUntil": "2099-01-01T00:00:00Z"})}}
    body = {"metadata": meta, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}
    with core_and_custom(cluster) as (core, _custom):
        core.create_namespaced_persistent_volume_claim("default", body)
    alice = token_of(hub, "alice")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        data = requests.get(hub.service_url("api/workspaces"), headers=alice, timeout=60).json()
        if any(r["name"] == "alice-old-home" for r in data["retained"]):
            break
        time.sleep(0.3)
    before = datetime.now(UTC).replace(microsecond=0)
    r = requests.post(hub.service_url("api/workspaces/alice/give-back"), headers=alice, json={"disk": "alice-old-home"},
                      timeout=30)
    assert r.status_code == 200, r.text
    with core_and_custom(cluster) as (core, _custom):
        pvc = core.read_namespaced_persistent_volume_claim("alice-old-home", "default")
    state = json.loads(pvc.metadata.annotations[names.LIFECYCLE_ANNOTATION])
    assert state["phase"] == "Retained" and pvc.metadata.deletion_timestamp is None
    assert datetime.fromisoformat(state["retainUntil"].replace("Z", "+00:00")) >= before
    assert datetime.fromisoformat(state["retainUntil"].replace("Z", "+00:00")) <= datetime.now(UTC)
    assert [rec.actor for rec in audit_records(ledger_url, user="alice", action="retain")] == ["alice"]


def test_a_cookie_post_without_the_xsrf_token_is_refused(hub):
    session = login(hub, "bob")
    assert session.get(hub.service_url(), timeout=60).status_code == 200
    r = session.post(hub.service_url("api/workspaces/bob/stop"), data={"server": ""}, timeout=30)
    assert r.status_code == 403
    assert hub.user("bob")["servers"][""]["ready"]




#: What a link would have the page say on its banners.
WORDS = "Your quota was revoked: contact admin@evil.example"


def test_a_link_cannot_put_words_on_the_pages_banners(hub):
    session = login(hub, "bob")
    for query in ({"error": WORDS}, {"done": WORDS}, {"error": WORDS, "done": WORDS, "user": "bob"}, {"user": WORDS}):
        r = session.get(hub.service_url(), params=query, timeout=60)
        assert r.status_code == (403 if query.get("user") == WORDS else 200), (query, r.text)
        assert "quota was revoked" not in r.text and "evil.example" not in r.text, query
        assert 'class="ws-done"' not in r.text
    assert 'class="ws-error"' in r.text and "You may not see that user&#39;s workspaces." in r.text  # ours, for ?user=


def xsrf_of(page: str) -> str:
    return re.search(r'name="_xsrf" value="([^"]+)"', page).group(1)


def test_a_form_action_comes_back_with_our_sentence_once_and_for_its_viewer_only(hub):
    bob = login(hub, "bob")
    page = bob.get(hub.service_url(), timeout=60)
    (home,) = [d["name"] for d in bob.get(hub.service_url("api/workspaces"), timeout=60).json()["servers"][0]["disks"]
               if d["role"] == "home"]
    form = {"_xsrf": xsrf_of(page.text), "next": "/services/workspaces/?user=bob"}
    r = bob.post(hub.service_url("api/workspaces/bob/snapshot"), data={**form, "pvc": home}, allow_redirects=False,
                 timeout=60)
    assert r.status_code == 302, r.text
    assert r.headers["Location"] == "/services/workspaces/?user=bob"  # no words in the URL
    flash = r.cookies.get("workspaces-flash")
    shown = bob.get(hub.service_url() + "?user=bob", timeout=60).text
    assert re.search(rf'class="ws-done"[^>]*>Snapshot \S+ of {home} taken', shown), shown
    assert 'class="ws-done"' not in bob.get(hub.service_url() + "?user=bob", timeout=60).text  # once

    alice = login(hub, "alice")
    alice.cookies.set("workspaces-flash", flash, path="/services/workspaces/")  # bob's, replayed
    assert 'class="ws-done"' not in alice.get(hub.service_url(), timeout=60).text

    r = bob.post(hub.service_url("api/workspaces/bob/expand"), data={**form, "pvc": home, "size": "100000Gi"},
                 timeout=60)
    assert r.status_code == 200 and r.url.endswith("/services/workspaces/?user=bob")
    assert re.search(r'class="ws-error"[^>]*>[^<]*100000Gi', r.text), r.text


def test_a_team_lead_reads_the_team_and_acts_only_on_her_own(hub):
    hub.create_user("carol", groups=("research",))
    hub.create_user("lead", groups=("research",))
    lead = token_of(hub, "lead", "custom:workspaces:read!group=research", "custom:workspaces:cluster")
    assert requests.get(hub.service_url("api/workspaces/carol"), headers=lead, timeout=60).status_code == 200
    assert requests.get(hub.service_url("api/workspaces/alice"), headers=lead, timeout=60).status_code == 403
    r = requests.post(hub.service_url("api/workspaces/carol/give-back"), headers=lead, json={"disk": "x"}, timeout=30)
    assert r.status_code == 403


def test_a_vm_server_shows_the_golden_image_its_system_disk_was_cloned_from(hub):
    hub.create_user("vic")
    hub.start_server("vic", {"profile": "ubuntu-vm"})
    hub.stop_server("vic")
    image = f"{GOLDEN_IMAGE[1]} ({parse_image_name(GOLDEN_IMAGE[1]).version})"  # the demo's image is versioned
    session = login(hub, "vic")
    page = session.get(hub.service_url(), timeout=60)  # through the hub's OAuth: the session's cookie
    assert page.status_code == 200 and f'data-field="system_image" title="The golden image this server\'s system disk was cloned from">{image}<' \
        in page.text.replace("&#39;", "'"), page.text
    (server,) = session.get(hub.service_url("api/workspaces"), timeout=60).json()["servers"]
    assert (server["kind"], server["phase"]) == ("vm", "Stopped")
    assert f"{server['system_image']} ({server['system_image_version']})" == image


def test_expanding_the_home_stays_within_the_disk_quota(hub, ledger_url):
    alice = token_of(hub, "alice")
    r = requests.post(hub.service_url("api/workspaces/alice/expand"), headers=alice,
                      json={"pvc": "home-alice", "size": "100Gi"}, timeout=30)
    assert r.status_code == 409 and "cannot grow to 100Gi" in r.json()["message"]
    r = requests.post(hub.service_url("api/workspaces/alice/expand"), headers=alice,
                      json={"pvc": "home-alice", "size": "20Gi"}, timeout=30)
    assert r.status_code == 200, r.text
    results = [(rec.actor, rec.result) for rec in audit_records(ledger_url, user="alice", action="expand")]
    assert results[-1] == ("alice", "ok") and results[-2][1].startswith("refused")


def test_restoring_her_snapshot_while_the_server_is_stopped_swaps_the_home(hub, ledger_url):
    alice = token_of(hub, "alice")
    assert not hub.user("alice")["servers"].get("")  # stopped by the stop test
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        snapshots = requests.get(hub.service_url("api/workspaces"), headers=alice, timeout=60).json()["snapshots"]
        if any(s["ready"] for s in snapshots):
            break
        time.sleep(0.3)
    [snapshot] = [s["name"] for s in snapshots if s["ready"]][:1]
    r = requests.post(hub.service_url("api/workspaces/alice/restore"), headers=alice, json={"snapshot": snapshot},
                      timeout=60)
    assert r.status_code == 200, r.text
    deadline = time.monotonic() + 30  # the service's cache hears of the swap by its watch
    while time.monotonic() < deadline:
        retained = {d["name"] for d in requests.get(hub.service_url("api/workspaces"), headers=alice, timeout=60).json()["retained"]}
        if "home-alice" in retained:
            break
        time.sleep(0.3)
    assert "home-alice" in retained  # the old home is kept, not deleted
    assert [rec.actor for rec in audit_records(ledger_url, user="alice", action="restore")][-1] == "alice"


def test_rebuilding_the_system_disk_of_her_stopped_vm(hub, cluster, ledger_url):
    from workspacespawner.backends.vm.manifests import (
        VMIdentity,
        VMSettings,
        make_root_datavolume,
        make_virtual_machine,
    )
    from workspacespawner.lifecycle.phases import Phase, Status, made_in
    from workspacespawner.vmdisk.rootdisk import root_disk_of

    ident = VMIdentity.for_workspace(namespace="default", user_name="alice", kubespawner_username="alice",
                                     base_name="ws-alice--desk", home_pvc="home-alice", server_name="desk")
    settings = VMSettings(golden_image=GOLDEN_IMAGE[1], golden_image_namespace=GOLDEN_IMAGE[0], root_disk_size="10Gi")
    stopped = Status(Phase.STOPPED, server="desk")
    dvs = ("cdi.kubevirt.io", "v1beta1", "default", "datavolumes")
    with core_and_custom(cluster) as (_core, custom):
        custom.create_namespaced_custom_object(*dvs, made_in(make_root_datavolume(ident=ident, settings=settings), stopped))
        custom.create_namespaced_custom_object("kubevirt.io", "v1", "default", "virtualmachines",
                                               made_in(make_virtual_machine(ident=ident, settings=settings), stopped))
        deadline = time.monotonic() + 30
        while (custom.get_namespaced_custom_object(*dvs, ident.root_disk).get("status") or {}).get("phase") != "Succeeded":
            assert time.monotonic() < deadline
            time.sleep(0.2)

    alice = token_of(hub, "alice")
    # the system disk's PVC is CDI's (managed-by cdi-controller), outside the service's caches of ours
    r = requests.post(hub.service_url("api/workspaces/alice/snapshot"), headers=alice, json={"pvc": ident.root_disk}, timeout=60)
    assert r.status_code == 200, r.text
    system_snapshot = r.json()["name"]

    bob = token_of(hub, "bob")
    r = requests.post(hub.service_url("api/workspaces/alice/rebuild"), headers=bob, json={"server": "desk"}, timeout=30)
    assert r.status_code == 403, r.text
    assert audit_records(ledger_url, user="alice", action="rebuild") == []

    r = requests.post(hub.service_url("api/workspaces/alice/rebuild"), headers=alice, json={"server": "desk", "image": "nope"},
                      timeout=60)
    assert r.status_code == 404 and "no golden image golden-images/nope" in r.text, r.text
    r = requests.post(hub.service_url("api/workspaces/alice/rebuild"), headers=alice, json={"server": "desk"}, timeout=60)
    assert r.status_code == 200, r.text
    done = r.json()
    assert done["name"].startswith("ws-alice--desk-root-")
    assert "the home is kept" in done["message"] and f"the old system disk {ident.root_disk} is kept until 20" in done["message"]
    with core_and_custom(cluster) as (_core, custom):
        vm = custom.get_namespaced_custom_object("kubevirt.io", "v1", "default", "virtualmachines", ident.vm)
        old = custom.get_namespaced_custom_object(*dvs, ident.root_disk)
    assert root_disk_of(vm) == done["name"]
    assert old["metadata"]["labels"][names.PHASE_LABEL] == "Retained"
    assert [(rec.actor, rec.server, rec.result.split(":")[0]) for rec in audit_records(ledger_url, user="alice", action="rebuild")] == [
        ("alice", "desk", "refused"), ("alice", "desk", "ok")]

    # the snapshot of the first system disk, restored: a third system disk, made by CDI from the snapshot
    deadline = time.monotonic() + 60
    while not any(s["ready"] and s["system"] for s in requests.get(hub.service_url("api/workspaces"), headers=alice,
                                                                   timeout=60).json()["snapshots"]):
        assert time.monotonic() < deadline, "the system disk's snapshot never became ready"
        time.sleep(0.3)
    r = requests.post(hub.service_url("api/workspaces/alice/restore"), headers=bob, json={"snapshot": system_snapshot}, timeout=30)
    assert r.status_code == 403, r.text
    r = requests.post(hub.service_url("api/workspaces/alice/restore"), headers=alice, json={"snapshot": system_snapshot}, timeout=60)
    assert r.status_code == 200, r.text
    restored = r.json()
    assert f"Restored {system_snapshot} into the new system disk {restored['name']}; the next start boots it" in restored["message"]
    with core_and_custom(cluster) as (_core, custom):
        vm = custom.get_namespaced_custom_object("kubevirt.io", "v1", "default", "virtualmachines", ident.vm)
        assert root_disk_of(vm) == restored["name"]
        deadline = time.monotonic() + 120
        while (custom.get_namespaced_custom_object(*dvs, restored["name"]).get("status") or {}).get("phase") != "Succeeded":
            assert time.monotonic() < deadline, custom.get_namespaced_custom_object(*dvs, restored["name"]).get("status")
            time.sleep(0.3)
        rebuilt = custom.get_namespaced_custom_object(*dvs, done["name"])
    assert rebuilt["metadata"]["labels"][names.PHASE_LABEL] == "Retained"
    [record] = [rec for rec in audit_records(ledger_url, user="alice", action="restore") if rec.server == "desk"]
    assert (record.actor, record.result, record.after["snapshot"]) == ("alice", "ok", system_snapshot)
