"""Container workspaces through a real JupyterHub on the local cluster.

Covers: start, stop, start again with the same home PVC and the file the
first server wrote, one Pod at a time, no owner reference on the PVC; a PVC
Pending under WaitForFirstConsumer; a foreign PVC refused; odd user names;
forbidden and tampered profile choices answered 403/400; an unlisted image
choice checked before any Kubernetes write; no GPU setting
leaking into a later CPU spawn; an unschedulable GPU request failing fast
with the scheduler's reason; the code-server profile's default URL, the
real code-server's workbench behind it (already started by the start's
check), and another user refused it; a code-server profile whose image has
no code-server failing its start in words (what to install, the server's log
line), its Pod gone and its home kept. On both control planes
(tests/support/planes.py).
"""

from __future__ import annotations

import shutil
import threading
import time
import urllib.parse

import kubernetes
import pytest
import requests
from localcluster.codeserver import code_server_bin

from tests.support import codeserver, planes
from tests.support.callcount import workspace_calls
from tests.support.faultcases import attempt_start, wait_until
from tests.support.hubharness import CONFIG_D, Hub, login, progress_of_a_start
from workspacespawner.core import names
from workspacespawner.core.milestones import LADDER, Milestone

A100 = "NVIDIA A100 80GB"  # the NVIDIA-A100-SXM4-80GB label, as the spawn page names it (#38 item 13)

TEST_PROFILES = """
c.KubeSpawner.profile_list = c.KubeSpawner.profile_list + [
    {
        "display_name": "Too many GPUs",
        "slug": "sixteen-gpus",
        "kubespawner_override": {"extra_resource_limits": {"nvidia.com/gpu": 16}},
    },
    {
        "display_name": "JupyterLab with a choice of image",
        "slug": "choose-image",
        "profile_options": {
            "image": {
                "display_name": "Image",
                "choices": {
                    "scipy": {"display_name": "SciPy", "kubespawner_override": {"image": "quay.io/jupyter/scipy-notebook:2025-10-20"}},
                    "torch": {"display_name": "PyTorch", "kubespawner_override": {"image": "quay.io/jupyter/pytorch-notebook:2025-10-20"}},
                },
            },
        },
    },
    {
        "display_name": "JupyterLab with an image of your own",
        "slug": "own-image",
        "profile_options": {
            "image": {
                "display_name": "Image",
                "unlisted_choice": {"enabled": True, "display_name": "Image reference", "kubespawner_override": {"image": "{value}"}},
            },
        },
    },
    {
        "display_name": "Home on a WaitForFirstConsumer class",
        "slug": "late-binding",
        "kubespawner_override": {"storage_class": "ceph-rbd-wffc"},
    },
    {
        "display_name": "VS Code on an image without code-server",
        "slug": "code-server-missing",
        "kubespawner_override": {"ide": "code-server", "environment": {"PATH": "/usr/local/bin:/usr/bin:/bin"}},
    },
]
"""


@pytest.fixture(scope="module")
def cluster(control_plane, tmp_path_factory):
    with planes.running(control_plane, tmp_path_factory.mktemp("cluster")) as cluster:
        api = kubernetes.config.new_client_from_config(str(cluster.kubeconfig))
        kubernetes.client.StorageV1Api(api).create_storage_class(
            {
                "metadata": {"name": "ceph-rbd-wffc"},
                "provisioner": "rbd.csi.ceph.com",
                "volumeBindingMode": "WaitForFirstConsumer",
                "allowVolumeExpansion": True,
            }
        )
        api.close()
        yield cluster


@pytest.fixture(scope="module")
def hub(cluster, tmp_path_factory):
    config = "\n".join(
        f"load_subconfig({str(CONFIG_D / piece)!r})" for piece in ("10-workspace-spawner.py", "20-profiles.py")
    )
    config += TEST_PROFILES + f"\nload_subconfig({str(CONFIG_D / '90-check-config.py')!r})\n"
    code_server = code_server_bin()  # the real one, when installed: the code-server test skips without it
    if code_server is not None:
        config += f'c.KubeSpawner.environment = {{"PATH": {codeserver.pod_path(code_server)!r}}}\n'
    hub = Hub(tmp_path_factory.mktemp("hub"), cluster.kubeconfig, config).start()
    yield hub
    hub.stop()


@pytest.fixture(scope="module")
def core(cluster):
    client = kubernetes.config.new_client_from_config(str(cluster.kubeconfig))
    yield kubernetes.client.CoreV1Api(client)
    client.close()


def user_pods(core, user):
    return core.list_namespaced_pod("default", label_selector=names.owner_selector(user)).items


def test_start_stop_start_keeps_home(hub, core):
    hub.create_user("alice")
    hub.start_server("alice", {"profile": "jupyterlab-cpu"})
    assert len(user_pods(core, "alice")) == 1
    r = hub.server_request("alice", "PUT", "api/contents/notes.txt", json={"type": "file", "format": "text", "content": "kept"})
    assert r.status_code in (200, 201), r.text
    pvc = core.read_namespaced_persistent_volume_claim("home-alice", "default")
    assert pvc.metadata.owner_references is None
    assert pvc.spec.storage_class_name == "ceph-rbd"
    assert pvc.spec.access_modes == ["ReadWriteOnce"]
    assert names.owned_by({"labels": pvc.metadata.labels, "annotations": pvc.metadata.annotations}, "alice")
    uid = pvc.metadata.uid

    hub.stop_server("alice")
    assert user_pods(core, "alice") == []
    assert core.read_namespaced_persistent_volume_claim("home-alice", "default").metadata.uid == uid

    hub.start_server("alice", {"profile": "jupyterlab-cpu"})
    assert len(user_pods(core, "alice")) == 1
    r = hub.server_request("alice", "GET", "api/contents/notes.txt")
    assert r.status_code == 200, r.text
    assert r.json()["content"] == "kept"
    assert core.read_namespaced_persistent_volume_claim("home-alice", "default").metadata.uid == uid
    hub.stop_server("alice")


def test_home_pending_under_wait_for_first_consumer_starts(hub, core):
    hub.create_user("wendy")
    hub.start_server("wendy", {"profile": "late-binding"})
    pvc = core.read_namespaced_persistent_volume_claim("home-wendy", "default")
    assert pvc.spec.storage_class_name == "ceph-rbd-wffc"
    assert pvc.status.phase == "Bound"  # bound once the Pod was placed on a node
    hub.stop_server("wendy")


def test_foreign_pvc_is_refused_and_kept(hub, core):
    core.create_namespaced_persistent_volume_claim(
        "default",
        {
            "metadata": {"name": "home-mallory"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}, "storageClassName": "ceph-rbd"},
        },
    )
    hub.create_user("mallory")
    r = hub.spawn("mallory", {"profile": "jupyterlab-cpu"})
    assert r.status_code == 409, r.text
    assert "not created by workspacespawner" in r.json()["message"]
    assert user_pods(core, "mallory") == []
    assert core.read_namespaced_persistent_volume_claim("home-mallory", "default").metadata.labels is None


def test_other_users_pvc_is_refused(hub, core):
    hub.create_user("bob")
    hub.start_server("bob", {"profile": "jupyterlab-cpu"})
    hub.stop_server("bob")
    # A PVC carrying bob's owner labels, renamed into eve's slot, must not be adopted by eve.
    bobs = core.read_namespaced_persistent_volume_claim("home-bob", "default")
    core.create_namespaced_persistent_volume_claim(
        "default",
        {
            "metadata": {"name": "home-eve", "labels": bobs.metadata.labels, "annotations": bobs.metadata.annotations},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}, "storageClassName": "ceph-rbd"},
        },
    )
    hub.create_user("eve")
    r = hub.spawn("eve", {"profile": "jupyterlab-cpu"})
    assert r.status_code == 409
    assert "belongs to another user" in r.json()["message"]


@pytest.mark.parametrize("user", ["Ann.B@Example.edu", "zoë-ünïcode", "a" * 64])
def test_odd_user_names_get_valid_distinct_names(hub, core, user):
    hub.create_user(user)
    hub.start_server(user, {"profile": "jupyterlab-cpu"})
    pvcs = core.list_namespaced_persistent_volume_claim("default", label_selector=names.owner_selector(user)).items
    assert len(pvcs) == 1
    pvc = pvcs[0]
    assert pvc.metadata.annotations[names.OWNER_ANNOTATION] == user
    assert pvc.metadata.name.startswith("home-") and len(pvc.metadata.name) <= 63
    hub.stop_server(user)
    hub.start_server(user, {"profile": "jupyterlab-cpu"})
    again = core.list_namespaced_persistent_volume_claim("default", label_selector=names.owner_selector(user)).items
    assert [p.metadata.uid for p in again] == [pvc.metadata.uid]
    hub.stop_server(user)


def test_forbidden_profile_is_403(hub, core):
    hub.create_user("student")
    r = hub.spawn("student", {"profile": "jupyterlab-8gpu"})
    assert r.status_code == 403, r.text
    assert "limited to other groups" in r.json()["message"]
    assert user_pods(core, "student") == []


@pytest.mark.parametrize(
    "options, words",
    [
        ({"profile": "no-such-profile"}, "no such profile"),
        ({"profile": ["jupyterlab-cpu"]}, "by its name"),
        ({"profile": "choose-image", "image": "evil"}, "not a choice"),
        ({"profile": "choose-image", "image--unlisted-choice": "evil/miner:latest"}, "only one of its listed choices"),
        ({"profile": "jupyterlab-cpu", "evil_cpu_limit": "64"}, "does not have; it takes no options"),  # issue #38 item 6
    ],
)
def test_tampered_options_are_400(hub, core, options, words):
    hub.create_user("tamperer")
    r = hub.spawn("tamperer", options)
    assert r.status_code == 400, r.text
    assert words in r.json()["message"]
    assert "no-such-profile" not in r.json()["message"] and "evil" not in r.json()["message"]  # our words, not theirs
    assert user_pods(core, "tamperer") == []
    stored = hub.api("GET", "/users/tamperer?include_stopped_servers=1").json()["servers"]
    assert all(key in ("profile", "image") for server in stored.values() for key in server.get("user_options") or {}), [s.get("user_options") for s in stored.values()]


@pytest.mark.parametrize(
    "image, words",
    [
        ("quay.io/jupyter/scipy-notebook:2025-10-20\n", "control character"),
        ("quay.io/jupyter/scipy-notebook:2025-10-20; rm -rf /", "image reference"),
        ("$(reboot)", "image reference"),
        ("q" * 100_000, "at most 1000 characters"),
    ],
)
@pytest.mark.embedded_only("reads the embedded API server's request log")
def test_unlisted_image_is_checked_before_any_kubernetes_write(hub, core, cluster, image, words):
    hub.create_user("imager")
    cluster.requests.clear()
    r = hub.spawn("imager", {"profile": "own-image", "image--unlisted-choice": image})
    assert r.status_code == 400, r.text
    message = r.json()["message"]
    assert words in message and "'Image'" in message
    assert len(message) < 300
    writes = [(q.method, q.path) for q in cluster.requests.records if q.method != "GET"]
    assert writes == []
    assert not hub.user("imager").get("servers", {}).get("")


def test_gpu_request_does_not_leak_into_cpu_spawn(hub, core):
    hub.create_user("gina")
    hub.start_server("gina", {"profile": "jupyterlab-1gpu"})
    [pod] = user_pods(core, "gina")
    assert pod.spec.containers[0].resources.limits["nvidia.com/gpu"] == "1"
    hub.stop_server("gina")
    hub.start_server("gina", {"profile": "jupyterlab-cpu"})
    [pod] = user_pods(core, "gina")
    assert "nvidia.com/gpu" not in (pod.spec.containers[0].resources.limits or {})
    assert not (pod.spec.node_selector or {}).get("nvidia.com/gpu.product")
    hub.stop_server("gina")


def test_unschedulable_gpu_request_fails_fast_with_reason(hub, core):
    hub.create_user("greedy")
    r = hub.spawn("greedy", {"profile": "sixteen-gpus"})
    assert r.status_code == 503, r.text
    message = r.json()["message"]
    # it names no GPU type: every GPU node counts
    assert message.startswith("This profile needs 16 GPUs, more than any node has (8 GPUs at most). "), message
    assert "Try a CPU profile" in message
    assert "Insufficient nvidia.com/gpu" in hub.log(tail=None)  # the scheduler's own words stay in the log for the admins
    # 503 (not 202) means the spawn failed within slow_spawn_timeout, long before start_timeout.
    deadline = time.monotonic() + 30
    while user_pods(core, "greedy") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert user_pods(core, "greedy") == []


def spawn_form(hub, name: str) -> str:
    """The spawn form's text as ``name`` sees it."""
    page = login(hub, name).get(f"{hub.url}/hub/spawn", timeout=60)
    assert page.ok, page.text
    return page.text


def test_free_gpus_on_the_form_and_in_the_refusal_match_the_scheduler(hub, core):
    """Issue #17: the form counts the GPUs free now; once a server holds all 8, the form says a 1-GPU profile cannot
    start, and the scheduler's refusal of one reads as that sentence with the numbers."""
    hub.create_user("hal")
    hub.create_user("fill8", groups=("research",))
    assert f"8 of 8 {A100} free now" in spawn_form(hub, "hal")
    hub.start_server("fill8", {"profile": "jupyterlab-8gpu"})
    form = spawn_form(hub, "hal")
    assert f"0 of 8 {A100} free now" in form, form
    assert f"All 8 {A100} GPUs are in use right now; this profile needs 1 GPU." in form, form
    r = hub.spawn("hal", {"profile": "jupyterlab-1gpu"})
    assert r.status_code == 503, r.text
    assert r.json()["message"] == (f"All 8 {A100} GPUs are in use right now; this profile needs 1 GPU. "
                                   "Try a CPU profile or one with fewer GPUs, or try again later."), r.json()
    assert wait_until(lambda: user_pods(core, "hal") == [], timeout=30)
    hub.stop_server("fill8")
    assert f"8 of 8 {A100} free now" in spawn_form(hub, "hal")


def test_the_form_shows_an_option_that_offers_only_a_free_form_field(hub):
    """``own-image`` has an option with no ``choices``, only ``unlisted_choice``: kubespawner's form template read
    ``choices`` of every option, and the spawn page was a 500."""
    hub.create_user("ivy")
    assert "Image reference" in spawn_form(hub, "ivy")


@pytest.mark.embedded_only("reads the embedded API server's request log")
def test_the_form_lists_nodes_at_most_once_per_five_seconds(hub, cluster):
    hub.create_user("counter")
    spawn_form(hub, "counter")  # the hub's caches are loaded by now: this form has counted GPUs
    cluster.requests.clear()
    for _ in range(3):
        assert f"8 of 8 {A100} free now" in spawn_form(hub, "counter")
    assert cluster.requests.count("GET", r"/api/v1/nodes$") <= 1


@pytest.mark.embedded_only("reads the embedded API server's request log")
def test_the_spawn_pages_live_data_is_the_users_own_and_asks_the_cluster_nothing(hub, cluster):
    """Issue #17: the page refreshes from /hub/spawn-page-data/<user>/<server>; its answers come from the hub's caches
    (kept 5 s per user): no Kubernetes API call per request. Only the user and admins may read it."""
    hub.create_user("watcher")
    hub.create_user("peeker")
    session = login(hub, "watcher")
    url = f"{hub.url}/hub/spawn-page-data/watcher/"
    first = session.get(url, timeout=60)
    assert first.status_code == 200, first.text
    assert first.json()["cards"]["jupyterlab-1gpu"]["gpus_total"] == 8
    cluster.requests.clear()
    began = time.monotonic()
    for _ in range(10):
        again = session.get(url, timeout=60)
        assert again.status_code == 200 and again.json()["cards"] == first.json()["cards"]
    calls = workspace_calls(cluster.requests.records)
    # Nothing per request: at most the hub-wide Node list, once per 5 s (the free-GPU counts' only read).
    assert set(calls) <= {("GET", "/api/v1/nodes")}, calls
    assert len(calls) <= 1 + (time.monotonic() - began) // 5, calls
    assert login(hub, "peeker").get(url, timeout=60).status_code == 403
    anonymous = requests.get(url, timeout=60, allow_redirects=False)
    assert anonymous.status_code == 302 and "/hub/login" in anonymous.headers["Location"]


def test_code_server_profile_opens_vscode_url(hub, core):
    codeserver.real_bin()
    hub.create_user("coder")
    hub.create_user("mallory")
    hub.start_server("coder", {"profile": "code-server-cpu"})
    [pod] = user_pods(core, "coder")
    env = {e.name: e.value for e in pod.spec.containers[0].env}
    assert env.get("JUPYTERHUB_DEFAULT_URL") == "/vscode/"
    # the start's own check asked code-server's path, which started code-server before the user's first request
    assert codeserver.command_lines(env["JUPYTERHUB_API_TOKEN"]), hub.log()
    r = hub.server_request("coder", "GET", "vscode/")
    assert r.status_code == 200 and codeserver.WORKBENCH_MARKER in r.text, r.text[:2000]
    # started on a Unix socket (jupyter-vscode-proxy's socket mode), never on a TCP port another process could reach
    assert env.get("JUPYTER_VSCODE_PROXY_USE_SOCKET") == "true"
    started = codeserver.command_lines(env["JUPYTERHUB_API_TOKEN"])
    assert any("--socket" in argv for argv in started), started  # its child processes get their options over IPC
    assert not any(a.startswith(("--port", "--bind-addr")) for argv in started for a in argv), started
    # code-server's heartbeat (out/node/heart.js): every request but /healthz beats, /healthz reports it
    health = hub.server_request("coder", "GET", "vscode/healthz").json()
    assert health["status"] == "alive" and health["lastHeartbeat"] > 0, health

    anonymous = requests.get(f"{hub.url}/user/coder/vscode/", allow_redirects=False, timeout=30)
    assert anonymous.status_code == 302 and "oauth2/authorize" in anonymous.headers["Location"]
    # another user, logged in to the hub: the OAuth step refuses her coder's server
    other = login(hub, "mallory", follow=False)
    refused = other.get(f"{hub.url}/user/coder/vscode/", timeout=60)
    assert refused.status_code == 403, (refused.status_code, refused.url)
    assert codeserver.WORKBENCH_MARKER not in refused.text
    # and straight at the Pod's address, past the proxy, with her own API token or none
    token = hub.api("POST", "/users/mallory/tokens", json={"note": "code-server test"}).json()["token"]
    port = urllib.parse.urlsplit(env["JUPYTERHUB_SERVICE_URL"]).port
    direct = f"http://{pod.status.pod_ip}:{port}/user/coder/vscode/"
    by_token = requests.get(direct, headers={"Authorization": f"token {token}"}, allow_redirects=False, timeout=30)
    assert by_token.status_code == 403, by_token.status_code
    bare = requests.get(direct, allow_redirects=False, timeout=30)
    assert bare.status_code == 302 and "oauth2/authorize" in bare.headers["Location"], bare.status_code
    hub.stop_server("coder")
    hub.start_server("coder", {"profile": "jupyterlab-cpu"})
    [pod] = user_pods(core, "coder")
    env = {e.name: e.value for e in pod.spec.containers[0].env}
    assert env.get("JUPYTERHUB_DEFAULT_URL") != "/vscode/"
    hub.stop_server("coder")


@pytest.mark.embedded_only("the server's log line comes from pods/log, which the real plane's node agent does not serve "
                            "(it runs no kubelet API); there the start fails as code-server-failed, without the line")
def test_code_server_missing_fails_the_start_in_words(hub, core):
    """Issue #17: an image without code-server gave a bare "500 : Internal Server Error" at /vscode/, the cause only
    in the Pod's log. The start asks code-server's path itself and fails with what the admins must install and the
    server's log line, in the spawn's answer (or its progress stream) and on the page the user comes back to; the Pod
    goes, the home stays."""
    if shutil.which("code-server"):
        pytest.skip("code-server is on this process's PATH, which every Pod's PATH ends with")
    hub.create_user("nocode")
    outcome, said = attempt_start(hub, "nocode", {"profile": "code-server-missing"})
    assert outcome == "failed", said
    for words in (
        "The profile 'VS Code on an image without code-server' opens VS Code (code-server), but its image (",
        ") has no code-server, so your server was stopped again; your files are kept.",
        "please tell the JupyterHub administrators",
        "code-server on the PATH and the Python packages jupyter-server-proxy and jupyter-vscode-proxy",
        "(see helm-values/singleuser-image.md)",
        "The server reported: FileNotFoundError: Can not find code-server in PATH",
    ):
        assert words in said, f"{said}\n{hub.log()}"  # CI once saw a bare 500 here: the hub's log says which error
    assert "Internal Server Error" not in said
    assert wait_until(lambda: user_pods(core, "nocode") == [], timeout=60), "the failed start left its Pod"
    assert wait_until(lambda: hub.user("nocode")["servers"] == {}, timeout=60), hub.log()  # JupyterHub's cleanup done
    home = core.read_namespaced_persistent_volume_claim("home-nocode", "default")
    assert home.metadata.deletion_timestamp is None and home.status.phase == "Bound"
    # the page JupyterHub shows the user once the start failed (spawn-pending: "Spawn failed" and the message); not
    # after the login's redirect to the spawn form, whose visit forgets the failure
    page = login(hub, "nocode", follow=False).get(f"{hub.url}/hub/spawn-pending/nocode", timeout=60)
    assert page.status_code == 500 and "Spawn failed" in page.text, (page.status_code, page.text[-3000:])
    assert "Can not find code-server in PATH" in page.text and "jupyter-vscode-proxy" in page.text, page.text


HOLD = "workspacespawner.test/hold"


@pytest.mark.embedded_only("the server's log line comes from pods/log, which the real plane's node agent does not serve")
def test_a_failed_start_whose_pod_is_slow_to_go_still_answers_in_words(hub, core):
    """JupyterHub's spawn handler, once ``slow_spawn_timeout`` passed, asks ``poll()``; if the server is gone it
    gives the failed start one second more and then reads ``exception()`` of a future that is not done yet when its
    own cleanup (``stop()``) still runs, and answers a bare ``500 Internal Server Error`` (CI saw it: a Pod that took
    three seconds to go). The start removes what it made itself before it fails, so JupyterHub's cleanup has nothing
    to wait for and the words reach the user, however slowly the Pod goes. Here a finalizer holds the Pod's deletion
    for 15 s, across the hub's 10 s ``slow_spawn_timeout``."""
    if shutil.which("code-server"):
        pytest.skip("code-server is on this process's PATH, which every Pod's PATH ends with")
    hub.create_user("slowgo")
    held = threading.Event()

    def hold_the_pod_then_let_go():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not held.is_set():
            for pod in user_pods(core, "slowgo"):
                core.patch_namespaced_pod(pod.metadata.name, "default", {"metadata": {"finalizers": [HOLD]}})
                held.set()
            time.sleep(0.2)
        while time.monotonic() < deadline and not any(p.metadata.deletion_timestamp for p in user_pods(core, "slowgo")):
            time.sleep(0.2)
        time.sleep(15)
        for pod in user_pods(core, "slowgo"):
            core.patch_namespaced_pod(pod.metadata.name, "default", {"metadata": {"finalizers": None}})

    holder = threading.Thread(target=hold_the_pod_then_let_go, daemon=True)
    holder.start()
    try:
        outcome, said = attempt_start(hub, "slowgo", {"profile": "code-server-missing"})
    finally:
        holder.join(150)
    assert held.is_set(), "the Pod was never held"
    assert outcome == "failed", said
    assert "Internal Server Error" not in said, f"{said}\n{hub.log()}"
    assert ") has no code-server, so your server was stopped again; your files are kept." in said, f"{said}\n{hub.log()}"
    assert wait_until(lambda: user_pods(core, "slowgo") == [], timeout=60), "the failed start left its Pod"


def test_progress_speaks_plain_words_of_this_start_only(hub, core, cluster):
    hub.create_user("petra")
    agent = cluster.controllers["nodeagent"]
    agent.pull_seconds = 2.0  # an image pull long enough to watch the spawn page (an attribute the agent reads)
    try:
        first = progress_of_a_start(hub, "petra", {"profile": "jupyterlab-cpu"})
        hub.wait_ready("petra")
        [pod] = user_pods(core, "petra")
        hub.stop_server("petra")
        again = progress_of_a_start(hub, "petra", {"profile": "jupyterlab-cpu"})
    finally:
        agent.pull_seconds = 0.0
    text = "\n".join(e["message"] for e in first)
    assert "Home volume home-petra" in text
    assert "Found a node for your server" in text
    assert "Image ready" in text
    assert "Server starting" in text
    found = next(e for e in first if e["message"].startswith("Found a node for your server"))
    assert found["progress"] == LADDER[Milestone.NODE_FOUND], first  # the bar on the ladder (issue #17)
    # the second start shows the Events of its own Pod, none of the first one's (its start, its stop)
    old = [e["message"] for e in again if (e.get("raw_event") or {}).get("involvedObject", {}).get("uid") == pod.metadata.uid]
    assert old == [], old
    assert "Found a node for your server" in "\n".join(e["message"] for e in again)
    percents = [e["progress"] for e in again if "progress" in e]
    assert percents == sorted(percents), percents
    hub.wait_ready("petra")
    hub.stop_server("petra")


def test_a_stop_during_the_start_says_the_start_was_cancelled_and_offers_start_again(hub, core, cluster):
    """#38 item 5: the user's spawn page, reloaded after a stop cut the start short, says so and offers Start again."""
    hub.create_user("ceci")
    agent = cluster.controllers["nodeagent"]
    agent.pull_seconds = 30.0  # a start that is still pulling when the stop comes
    agent.pulled_images.clear()  # (an image an earlier test pulled would be "already present on machine")
    try:
        r = hub.spawn("ceci", {"profile": "jupyterlab-cpu"})
        assert r.status_code == 202, r.text
        hub.stop_server("ceci")
    finally:
        agent.pull_seconds = 0.0
    session = login(hub, "ceci")
    page = session.get(f"{hub.url}/hub/spawn-pending/ceci", timeout=30)
    assert page.status_code == 200 and page.url.endswith("/hub/spawn-pending/ceci"), (page.status_code, page.url)
    assert "Start cancelled" in page.text and "it was stopped while it was starting" in page.text, page.text[-3000:]
    assert 'href="/hub/spawn/ceci">Start again</a>' in page.text
    assert user_pods(core, "ceci") == []
    hub.start_server("ceci", {"profile": "jupyterlab-cpu"})  # starting again works, and then the page is plain again
    hub.stop_server("ceci")
    page = session.get(f"{hub.url}/hub/spawn-pending/ceci", timeout=30)
    assert "Server not running" in page.text and "Start cancelled" not in page.text
