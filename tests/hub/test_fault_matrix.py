"""The fault matrix: API faults, races and odd input through a real JupyterHub on the local cluster.

Each case does its worst to one user's workspace, then the invariants
(:func:`tests.support.invariants.assert_invariants`) are asserted: no disk
deleted, one consumer per ReadWriteOnce disk, every second of GPU compute
inside an open run of the ledger, no open run without compute once
reconciled, and the user's next start works.
"""

from __future__ import annotations

import importlib
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor

import kubernetes
import pytest

from tests.support import faultcases
from tests.support.faultcases import (
    CPU,
    GPU,
    VM,
    Case,
    kill_and_restart,
    matrix_case,
    run_case,
    server_of,
    stop,
    wait_until,
)
from tests.support.invariants import assert_invariants
from tests.support.lifecycleenv import pod_manifest
from tests.support.paths import REPO
from workspacespawner.admin import orphans
from workspacespawner.core import names
from workspacespawner.quota.ledger import Ledger
from workspacespawner.quota.policy import OPEN

#: The docs page holding the table of the matrix's cases.
RELIABILITY_PAGE = REPO / "docs" / "source" / "explanation" / "reliability.md"
PODS = r"/namespaces/default/pods$"


@pytest.fixture(scope="module")
def cluster(golden_cluster):
    return golden_cluster


@pytest.fixture(scope="module")
def hub(cluster, tmp_path_factory):
    with faultcases.matrix_hub(cluster, tmp_path_factory.mktemp("hub")) as hub:
        yield hub


@pytest.fixture(scope="module")
def ledger(hub):
    with faultcases.matrix_ledger(hub) as ledger:
        yield ledger


@pytest.fixture(scope="module")
def core(cluster):
    client = kubernetes.config.new_client_from_config(str(cluster.kubeconfig))
    yield kubernetes.client.CoreV1Api(client)
    client.close()


def user_pods(core, user):
    return core.list_namespaced_pod("default", label_selector=names.owner_selector(user)).items


def open_runs(ledger: Ledger, user: str):
    with ledger.engine.connect() as conn:
        ids = conn.exec_driver_sql(
            "SELECT id FROM workspacespawner_runs WHERE user_name = ? AND state = ?", (user, OPEN)
        ).scalars().all()
    return [ledger.get(i) for i in ids]


@matrix_case("pod-409-run", "metering", "Pod create 409 AlreadyExists: kubespawner stops and creates again (GPU, CPU)")
@pytest.mark.parametrize("profile", ["jupyterlab-1gpu", "jupyterlab-cpu"])
def test_pod_create_409_keeps_the_run_open(hub, cluster, core, ledger, profile):
    """Item 2: kubespawner's answer to 409 AlreadyExists on the Pod create is ``stop(True)``; the run must survive it."""
    user = f"al-{profile.split('-')[1]}"
    hub.create_user(user)
    cluster.faults.add("POST", PODS, status=409, reason="AlreadyExists", message="pods already exists")
    hub.start_server(user, {"profile": profile})
    assert len(user_pods(core, user)) == 1
    runs = open_runs(ledger, user)
    assert [(r.server_name, r.profile) for r in runs] == [("", profile)], runs
    hub.stop_server(user)
    assert open_runs(ledger, user) == []
    assert_invariants(cluster, ledger=ledger)


POD_OF = r"/namespaces/default/pods/jupyter-{user}$"


@matrix_case("stop-500-retried", "container stop", "Pod DELETE 500 three times: the stop retries")
def test_a_stop_retries_a_pod_delete_that_answers_500(hub, cluster, core, ledger):
    """Item 3: three 500s on the Pod DELETE; the stop retries and ends with the Pod gone and the run closed."""
    user = "gus-500"
    hub.create_user(user)
    hub.start_server(user, {"profile": "jupyterlab-1gpu"})
    cluster.faults.add("DELETE", POD_OF.format(user=user), status=500, count=3)
    hub.stop_server(user)
    assert user_pods(core, user) == []
    assert open_runs(ledger, user) == []
    assert_invariants(cluster, ledger=ledger)


@matrix_case("ghost-pod", "container stop", "Pod DELETE 503 past the stop: the reconciler removes it, metered until gone")
def test_a_ghost_pod_is_removed_once_the_api_is_back_and_metered_until_then(hub, cluster, core, ledger):
    """Item 3: the Pod DELETE answers 503 longer than the stop tries; the hub shows it stopped, the reconciler removes it."""
    user = "gus-503"
    hub.create_user(user)
    hub.start_server(user, {"profile": "jupyterlab-1gpu"})
    cluster.faults.add("DELETE", POD_OF.format(user=user), status=503, reason="ServiceUnavailable", count=10_000)
    hub.api("DELETE", f"/users/{user}/server")
    assert wait_until(lambda: not hub.user(user)["servers"], timeout=90)
    assert user_pods(core, user)
    time.sleep(3)  # a few enforcer passes
    assert [r.gpus for r in open_runs(ledger, user)] == [1], "its compute is still there: still metered"
    cluster.faults.clear()  # the API is back
    assert wait_until(lambda: not user_pods(core, user), timeout=60), "ghost Pod left running"
    assert wait_until(lambda: not open_runs(ledger, user), timeout=30), open_runs(ledger, user)
    hub.start_server(user, {"profile": "jupyterlab-cpu"})
    hub.stop_server(user)
    assert_invariants(cluster, ledger=ledger)


def orphans_command(hub, cluster, capsys, *args) -> tuple[int, str]:
    """``workspacespawner orphans`` against the hub's database and the cluster: (exit code, what it printed)."""
    config = hub.workdir / "admin_config.py"
    config.write_text(f"c.JupyterHub.db_url = 'sqlite:///{hub.workdir / 'hub.sqlite'}'\nc.KubeSpawner.namespace = 'default'\n")
    capsys.readouterr()
    code = orphans.main(["-f", str(config), "--kubeconfig", str(cluster.kubeconfig), *args])
    return code, capsys.readouterr().out


@matrix_case("orphan-pod", "orphans", "a Pod with a user's owner labels the hub does not know")
def test_orphan_compute_is_reported_and_one_command_removes_it(hub, cluster, core, ledger, capsys):
    """Issue #20 item 6: a Pod with a user's owner labels the hub does not know: log, metric, admin listing, removal."""
    hub.create_user("oli")
    hub.start_server("oli", {"profile": "jupyterlab-cpu"})  # the hub watches Pods from here on
    orphan = pod_manifest("zed", "jupyter-zed", "home-zed")
    orphan["metadata"]["annotations"].update({"hub.jupyter.org/username": "zed", "hub.jupyter.org/servername": ""})
    core.create_namespaced_pod("default", orphan)
    assert wait_until(lambda: "Orphan compute: Pod default/jupyter-zed of zed's server ''" in hub.log(tail=None), timeout=30), hub.log()
    assert "workspacespawner_orphan_compute 1.0" in hub.api("GET", "/../metrics").text
    code, out = orphans_command(hub, cluster, capsys, "--json")
    assert code == 2, out
    assert [(r["what"], r["name"], r["user"]) for r in json.loads(out)] == [("orphan", "jupyter-zed", "zed")]
    code, out = orphans_command(hub, cluster, capsys)
    assert code == 2 and "would remove" in out, out  # listed only
    code, out = orphans_command(hub, cluster, capsys, "--remove")
    assert code == 0 and "removed" in out, out
    assert wait_until(lambda: not user_pods(core, "zed"), timeout=30)
    assert [p.metadata.name for p in user_pods(core, "oli")] == ["jupyter-oli"]  # the hub's own server untouched
    assert wait_until(lambda: "workspacespawner_orphan_compute 0.0" in hub.api("GET", "/../metrics").text, timeout=30)
    hub.stop_server("oli")
    assert_invariants(cluster, ledger=ledger)


@matrix_case("leftover-holds-home", "orphans", "a Pod the hub did not start holds the user's home")
def test_a_leftover_holding_the_home_is_named_as_one_and_the_start_after_its_removal_runs(hub, cluster, core, ledger, capsys):
    """Issue #38 item 3: a Pod with bea's owner labels, of a server the hub does not have (an older hub's name scheme),
    mounts her home: her start is refused in words that say what it is and how an administrator removes it; after
    ``workspacespawner orphans --remove`` she starts."""
    user = "bea-left"
    hub.create_user(user)
    hub.start_server(user, {"profile": "jupyterlab-cpu"})  # her home exists
    hub.stop_server(user)
    leftover = pod_manifest(user, "jupyter-bea-old-scheme", f"home-{user}")
    leftover["metadata"]["annotations"].update({"hub.jupyter.org/username": user, "hub.jupyter.org/servername": "old"})
    core.create_namespaced_pod("default", leftover)
    r = hub.spawn(user, {"profile": "jupyterlab-cpu"})
    assert r.status_code == 409, r.text
    assert r.json()["message"] == (
        "Your disk is held by jupyter-bea-old-scheme, a leftover that this hub did not start, so nothing was started. "
        "Please ask an administrator to remove it (workspacespawner orphans --remove), then start again.")
    assert [p.metadata.name for p in user_pods(core, user)] == ["jupyter-bea-old-scheme"]  # not removed by the hub
    code, out = orphans_command(hub, cluster, capsys, "--remove")
    assert code == 0 and "jupyter-bea-old-scheme" in out, out
    assert wait_until(lambda: not user_pods(core, user), timeout=60)
    hub.start_server(user, {"profile": "jupyterlab-cpu"})
    hub.stop_server(user)
    assert_invariants(cluster, ledger=ledger)


@matrix_case("vm-ghost-restart", "VM stop", "stop subresource 503 past the stop; the user starts again while it still fails")
def test_a_vm_whose_stop_kept_failing_does_not_lock_its_user_out(hub, cluster, core, ledger):
    """Issue #38 item 4: the hub shows the VM server stopped while its guest runs (the ``stop`` answers 503). The
    user's next start stops that ghost itself, trying again while the API still refuses, says so, and starts."""
    user = "vic-ghost"
    hub.create_user(user)
    hub.start_server(user, {"profile": VM})
    cluster.faults.add("PUT", VM_STOP, status=503, reason="ServiceUnavailable", count=10_000)
    stop(hub, user)  # shown stopped; the guest still runs
    vmis = [v for v in custom_objects(cluster, "virtualmachineinstances") if names.labelled_for(v["metadata"], user)]
    assert vmis, "the ghost guest is gone already: nothing tested"
    with ThreadPoolExecutor(1) as pool:
        pool.submit(lambda: (time.sleep(8), cluster.faults.clear()))  # the API takes the stop again a while later
        outcome, said = faultcases.attempt_start(hub, user, {"profile": VM})
    assert outcome == "ready", f"{said}\n{hub.log()}"
    # the start met the ghost and stopped it itself (the progress stream is read only for a start slower than the
    # hub's slow-spawn window, so its step is looked for in the hub's log)
    assert "Stopping the previous VMI" in hub.log(tail=None), hub.log()
    assert not said or "Your previous virtual machine is still shutting down" in said, said
    stop(hub, user)
    assert_invariants(cluster, ledger=ledger)


def custom_objects(cluster, plural: str) -> list[dict]:
    client = kubernetes.config.new_client_from_config(str(cluster.kubeconfig))
    try:
        return kubernetes.client.CustomObjectsApi(client).list_namespaced_custom_object("kubevirt.io", "v1", "default", plural)["items"]
    finally:
        client.close()



# -- the matrix ------------------------------------------------------------------------------------

E500, E503, E429 = {"status": 500}, {"status": 503, "reason": "ServiceUnavailable"}, {"status": 429, "reason": "TooManyRequests"}
SLOW = {"delay": 5.0}  # the hub's client gives up after 3 s and tries again


def times(fault: dict, n: int) -> dict:
    return {**fault, "count": n}


POD_CREATE, POD = (r"/namespaces/default/pods$", r"/namespaces/default/pods/jupyter-{user}$")
PVC_CREATE, HOME = r"/persistentvolumeclaims$", r"/persistentvolumeclaims/home-"
DV_CREATE, VM_CREATE = r"/datavolumes$", r"/virtualmachines$"
SECRET_CREATE, SERVICE_CREATE = r"/namespaces/default/secrets$", r"/namespaces/default/services$"
VM_START, VM_STOP = r"/virtualmachines/[^/]+/start$", r"/virtualmachines/[^/]+/stop$"
BIG = "x" * 100_000

CASES = [
    # container start: every write, each error kind
    Case("pod-500", "container start", "Pod create 500", (("POST", POD_CREATE, E500),), expect="failed"),
    Case("pod-503", "container start", "Pod create 503", (("POST", POD_CREATE, E503),), expect="failed"),
    Case("pod-429", "container start", "Pod create 429", (("POST", POD_CREATE, E429),), expect="failed"),
    Case("pod-slow", "container start", "Pod create answered after the client timeout", (("POST", POD_CREATE, SLOW),)),
    Case("pod-slow-gpu", "container start", "Pod create after the client timeout, GPU", (("POST", POD_CREATE, SLOW),), profile=GPU),
    Case("home-create-500", "container start", "home PVC create 500 once", (("POST", PVC_CREATE, E500),)),
    Case("home-create-503x6", "container start", "home PVC create 503 six times", (("POST", PVC_CREATE, times(E503, 6)),),
         expect="failed"),
    Case("home-read-503", "container start", "home PVC read 503 twice", (("GET", HOME, times(E503, 2)),)),
    Case("home-patch-500", "container start", "home PVC patch (claim, phase) 500 once", (("PATCH", HOME, E500),)),
    Case("home-patch-slow", "container start", "home PVC patch after the client timeout", (("PATCH", HOME, SLOW),)),
    Case("home-list-500", "container start", "PVC list (home by owner) 500 once", (("GET", PVC_CREATE, E500),)),
    Case("pod-create-slow-stop", "container start", "slow Pod create, then a stop", (("POST", POD_CREATE, SLOW),),
         action="start-stop"),
    # container stop
    Case("stop-503-long", "container stop", "Pod DELETE 503 for longer than the stop tries",
         (("DELETE", POD, times(E503, 10_000)),), action="stop", profile=GPU),
    Case("stop-slow", "container stop", "Pod DELETE answered after the client timeout", (("DELETE", POD, SLOW),), action="stop"),
    Case("stop-429", "container stop", "Pod DELETE 429 twice", (("DELETE", POD, times(E429, 2)),), action="stop"),
    Case("stop-patch-500", "container stop", "home PVC patch (phase, claim release) 500 at stop",
         (("PATCH", HOME, times(E500, 4)),), action="stop"),
    # VM start and stop
    Case("vm-dv-500", "VM start", "DataVolume create 500 once", (("POST", DV_CREATE, E500),), profile=VM),
    Case("vm-vm-500", "VM start", "VirtualMachine create 500 once", (("POST", VM_CREATE, E500),), profile=VM),
    Case("vm-secret-500", "VM start", "cloud-init Secret create 500 once", (("POST", SECRET_CREATE, E500),), profile=VM),
    Case("vm-service-500", "VM start", "Service create 500 once", (("POST", SERVICE_CREATE, E500),), profile=VM),
    Case("vm-start-500", "VM start", "start subresource 500 once", (("PUT", VM_START, E500),), profile=VM),
    Case("vm-start-503x8", "VM start", "start subresource 503 eight times", (("PUT", VM_START, times(E503, 8)),),
         profile=VM, expect="failed"),
    Case("vm-stop-503", "VM stop", "stop subresource 503 for longer than the stop tries",
         (("PUT", VM_STOP, times(E503, 10_000)),), action="stop", profile=VM),
    # tampered input: refused with a sentence, nothing written
    Case("bad-profile", "tampered input", "a profile that does not exist", options={"profile": "no-such-profile"},
         expect="failed", words=("no such profile",)),  # our sentence: the request's text is never repeated
    Case("profile-not-text", "tampered input", "a profile that is a number", options={"profile": 7}, expect="failed"),
    Case("profile-huge", "tampered input", "a 100,000-character profile", options={"profile": BIG}, expect="failed"),
    Case("profile-newline", "tampered input", "a profile with a newline", options={"profile": f"{CPU}\n"}, expect="failed"),
    Case("profile-shell", "tampered input", "a profile that is a shell command", options={"profile": "$(reboot)"},
         expect="failed"),
    Case("options-list", "tampered input", "options that are a list", options={"profile": [CPU]}, expect="failed"),
    Case("options-unknown", "tampered input", "an option no profile defines (a trait's name)",
         options={"profile": CPU, "cpu_limit": "64"}, expect="failed", words=("does not have",)),
    # odd names
    Case("name-email", "odd names", "a user named like an e-mail address", user="ann@example.org"),
    Case("name-unicode", "odd names", "a user with non-ASCII letters", user="zoë-ünal"),
    Case("name-long", "odd names", "a 60-character user name", user="l" * 60),
    Case("name-dots", "odd names", "a user with dots and capitals", user="Jo.Smith_2"),
    Case("name-ann-anna-1", "odd names", "users ann and anna (one is a prefix of the other)", user="ann"),
    Case("name-ann-anna-2", "odd names", "users ann and anna (one is a prefix of the other)", user="anna"),
]


def foreign_home(cluster, user):
    """A PVC named as the user's home but not ours (no owner labels): it must be refused and left alone."""
    from kubespawner.slugs import safe_slug
    from localcluster.testing import create_object

    create_object(cluster, ("", "v1", "persistentvolumeclaims"), {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": f"home-{safe_slug(user)}"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    })


CASES += [
    Case("foreign-home", "foreign PVCs", "a PVC of the home's name without our labels", setup=foreign_home,
         expect="failed", words=("home-fm-foreign-home",), next_start=False),
]


def cases_to_play(cases: list[Case]) -> list[Case]:
    """Every case; with ``WORKSPACESPAWNER_FAULT_MATRIX=sample``, the first case of each category.

    CI's second pass, which runs the hub tests again under JupyterHub 5.5 (.ci/run), plays the sample: the whole
    matrix runs in the first pass on both planes, and the sample takes each category's path through the older hub
    (17 minutes of the second pass's 56 were the whole matrix again)."""
    if os.environ.get("WORKSPACESPAWNER_FAULT_MATRIX") != "sample":
        return cases
    return [c for i, c in enumerate(cases) if c.category not in {d.category for d in cases[:i]}]


@pytest.mark.parametrize("case", cases_to_play(CASES), ids=lambda c: c.id)
def test_fault_case(case, hub, cluster, ledger):
    run_case(case, hub=hub, cluster=cluster, ledger=ledger)


# -- races and hub crashes: a few lines more than a row each ------------------------------------------


def finish(hub, cluster, ledger, user: str, *, next_start: bool = True) -> None:
    """Whatever the case left: its server stopped, then the invariants (with the next start)."""
    if wait_until(lambda: server_of(hub, user) is None or server_of(hub, user).get("ready") or None, timeout=90):
        if server_of(hub, user) is not None:
            stop(hub, user)
    try:
        assert_invariants(cluster, ledger=ledger, next_start=faultcases.next_start(hub, user) if next_start else None)
    except AssertionError as e:  # what the hub did, for a case CI saw fail once
        raise AssertionError(f"{e}\n--- the hub's log ---\n{hub.log()}") from None


@matrix_case("concurrent-start", "races", "two starts of one server at once")
def test_two_starts_of_one_server_at_once(hub, cluster, ledger, core):
    user = "fm-concurrent"
    hub.create_user(user)
    with ThreadPoolExecutor(2) as pool:
        answers = sorted(pool.map(lambda _: hub.spawn(user, {"profile": GPU}).status_code, range(2)))
    assert answers[0] in (201, 202), answers
    hub.wait_ready(user)
    assert len(user_pods(core, user)) == 1
    finish(hub, cluster, ledger, user)


@matrix_case("named-one-home", "races", "two named servers on one home start at once")
def test_two_named_servers_on_one_home(hub, cluster, ledger):
    user = "fm-named"
    hub.create_user(user)
    with ThreadPoolExecutor(2) as pool:
        answers = dict(pool.map(lambda name: (name, hub.api("POST", f"/users/{user}/servers/{name}", json={"profile": CPU})),
                                ("a", "b")))
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        servers = hub.user(user)["servers"]
        if all(s.get("ready") for s in servers.values()) and servers:
            break
        time.sleep(0.3)
    assert len(hub.user(user)["servers"]) == 1, (hub.user(user)["servers"], {k: v.text for k, v in answers.items()})
    for name in hub.user(user)["servers"]:
        hub.api("DELETE", f"/users/{user}/servers/{name}")
    assert wait_until(lambda: not hub.user(user)["servers"], timeout=60)
    finish(hub, cluster, ledger, user)


@matrix_case("stop-while-starting", "races", "a stop asked while the start is under way")
def test_a_stop_while_the_start_is_under_way(hub, cluster, ledger):
    user = "fm-cancel"
    hub.create_user(user)
    cluster.faults.add("POST", POD_CREATE, delay=2.0)
    assert hub.spawn(user, {"profile": GPU}).status_code in (201, 202)
    hub.api("DELETE", f"/users/{user}/server")
    cluster.faults.clear()
    finish(hub, cluster, ledger, user)


@matrix_case("kill-running", "hub crash", "hub SIGKILL while a GPU server runs")
def test_hub_killed_while_a_gpu_server_runs(hub, cluster, ledger, core):
    user = "fm-kill-running"
    hub.create_user(user)
    hub.start_server(user, {"profile": GPU})
    [pod] = user_pods(core, user)
    kill_and_restart(hub)
    assert hub.wait_ready(user, timeout=60)["ready"]
    assert [p.metadata.uid for p in user_pods(core, user)] == [pod.metadata.uid]
    finish(hub, cluster, ledger, user)


@matrix_case("kill-starting", "hub crash", "hub SIGKILL while a GPU start is under way")
def test_hub_killed_while_a_start_is_under_way(hub, cluster, ledger):
    user = "fm-kill-starting"
    hub.create_user(user)
    cluster.requests.clear()
    assert hub.spawn(user, {"profile": GPU}).status_code in (201, 202)
    assert wait_until(lambda: cluster.requests.count("POST", POD_CREATE), timeout=60)
    kill_and_restart(hub)
    finish(hub, cluster, ledger, user)


@matrix_case("kill-stopping", "hub crash", "hub SIGKILL while a stop is under way")
def test_hub_killed_while_a_stop_is_under_way(hub, cluster, ledger):
    user = "fm-kill-stopping"
    hub.create_user(user)
    hub.start_server(user, {"profile": GPU})
    cluster.faults.add("DELETE", POD_OF.format(user=user), delay=3.0)
    hub.api("DELETE", f"/users/{user}/server")
    time.sleep(1.0)
    kill_and_restart(hub)
    cluster.faults.clear()
    finish(hub, cluster, ledger, user)


def test_the_docs_list_the_matrix():
    """The docs' reliability table is generated from the matrix (paste ``reliability_table`` after a change)."""
    importlib.import_module("tests.hub.test_fence_refusal_hub")  # its case is a row of the table too
    text = RELIABILITY_PAGE.read_text()
    start, end = text.index(faultcases.TABLE_BEGIN), text.index(faultcases.TABLE_END) + len(faultcases.TABLE_END)
    assert text[start:end] == faultcases.reliability_table(CASES), f"paste faultcases.reliability_table(CASES) into {RELIABILITY_PAGE}"
    assert len(CASES) + len(faultcases.SPECIAL) >= 40


def home_lifecycle(core, user: str) -> tuple[str | None, dict]:
    """The phase label and the lifecycle annotation of ``user``'s home PVC."""
    [pvc] = core.list_namespaced_persistent_volume_claim("default", label_selector=names.owner_selector(user)).items
    annotation = (pvc.metadata.annotations or {}).get(names.LIFECYCLE_ANNOTATION)
    return (pvc.metadata.labels or {}).get(names.PHASE_LABEL), json.loads(annotation) if annotation else {}


@matrix_case("delete-user-retain-fails", "user deletion", "the PATCH that marks the home Retained fails a while")
def test_user_deletion_whose_retention_write_fails_is_retried(hub, cluster, core, ledger):
    """Item 7: JupyterHub answers 204 whatever delete_forever does; the retention must still be recorded."""
    user = "fm-deleted"
    hub.create_user(user)
    hub.start_server(user, {"profile": CPU})
    stop(hub, user)
    assert home_lifecycle(core, user)[0] == "Stopped"
    cluster.faults.add("PATCH", HOME, status=503, reason="ServiceUnavailable", count=10_000)
    r = hub.api("DELETE", f"/users/{user}")
    assert r.status_code == 204, r.text
    time.sleep(2)
    cluster.faults.clear()  # the API is back
    phase, annotation = wait_until(lambda: (found := home_lifecycle(core, user))[0] == "Retained" and found, timeout=30) or \
        home_lifecycle(core, user)
    assert phase == "Retained" and annotation.get("retainUntil"), (phase, annotation)
    assert_invariants(cluster, ledger=ledger)


@matrix_case("vm-first-start-claim", "VM start", "a VM's first start: its new root disk claimed before the guest starts")
def test_a_vm_root_disk_is_claimed_on_its_first_start(hub, cluster, ledger, core):
    user = "fm-vm-first"
    hub.create_user(user)
    hub.start_server(user, {"profile": VM})
    custom = kubernetes.client.CustomObjectsApi(core.api_client)
    [disk] = custom.list_namespaced_custom_object("cdi.kubevirt.io", "v1beta1", "default", "datavolumes",
                                                  label_selector=names.owner_selector(user))["items"]
    claim = (disk["metadata"].get("annotations") or {}).get(names.ATTACH_ANNOTATION)
    assert claim and json.loads(claim)["server"].endswith(user), (disk["metadata"]["name"], claim)
    stop(hub, user)
    assert_invariants(cluster, ledger=ledger)
