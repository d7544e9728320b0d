"""What peers' users hit (issue #20), through a real JupyterHub on the local cluster.

Covers: saved options naming a profile an admin removed start the default
profile, a removed profile asked for is a 400 naming it, and the form
selects the default (z2jh#3297, kubespawner#758); environment values with
line breaks and braces reach the server as written (harvester#760); a home
made under an older ``pvc_name_template`` or by hand with the user's
owner labels is found by owner, and two candidates are a refusal naming
both (z2jh#3536); a full storage ResourceQuota is named with its numbers
and never blocks an existing home (kubespawner#188); a claim that never
binds fails within ``claim_binding_timeout`` naming the claim, its class and
its last Event, and a missing claim fails at once (kubeflow#336); a start
during an API outage (long enough for kubespawner's own watch loop to give
up; ours never does) fails with a sentence, and the next start once the API
is back works, no watch having given up (kubespawner#209/#938).
"""

from __future__ import annotations

import re
import time

import kubernetes
import pytest

from tests.support.hubharness import Hub, config_pieces, core_v1, login
from workspacespawner.core import names

ENVIRONMENT = {
    "MOTD": "Welcome\nto the lab\n",
    "JSON_SETTINGS": '{"theme": "dark", "user": "{username}"}',
    "WHO": "{username}",
    "LITERAL": "${HOME}/data and {{doubled}}",
}


def hub_config(*, retired_profile: bool = True, template: str = "home-{username}") -> str:
    """The sample hub with profile ``odd-env`` (the test's environment) and ``retired`` (while ``retired_profile``)."""
    profiles = [
        {"display_name": "Odd environment", "slug": "odd-env", "kubespawner_override": {"environment": ENVIRONMENT}},
        {"display_name": "Home that never binds", "slug": "stuck-home",
         "kubespawner_override": {"storage_class": "nowhere", "claim_binding_timeout": 3}},
        {"display_name": "A claim that does not exist", "slug": "extra-claim", "kubespawner_override": {
            "volumes": [{"name": "extra", "persistentVolumeClaim": {"claimName": "no-such-claim"}}],
            "volume_mounts": [{"name": "extra", "mountPath": "/srv/extra"}]}},
    ]
    if retired_profile:
        profiles.append({"display_name": "Retired", "slug": "retired", "kubespawner_override": {"cpu_limit": 1.5}})
    return (
        config_pieces("10-workspace-spawner.py", "20-profiles.py")
        + f"c.KubeSpawner.profile_list = c.KubeSpawner.profile_list + {profiles!r}\n"
        + f"c.KubeSpawner.pvc_name_template = {template!r}\n"
    )


@pytest.fixture(scope="module")
def cluster(module_cluster):
    return module_cluster


@pytest.fixture(scope="module")
def hub(cluster, tmp_path_factory):
    hub = Hub(tmp_path_factory.mktemp("hub"), cluster.kubeconfig, hub_config()).start()
    yield hub
    hub.stop()


@pytest.fixture(scope="module")
def core(cluster):
    with core_v1(cluster) as api:
        yield api


def restart(hub: Hub, **config) -> None:
    """Stop the hub, change its configuration (see :func:`hub_config`), start it on the same database."""
    hub.stop()
    hub.config = hub_config(**config)
    hub.config_file.write_text(hub.config + hub._base_config())
    hub.start()


def user_pods(core, user):
    return core.list_namespaced_pod("default", label_selector=names.owner_selector(user)).items


def home_claims(core, user):
    return sorted(p.metadata.name for p in core.list_namespaced_persistent_volume_claim(
        "default", label_selector=names.owner_selector(user)).items)


def test_environment_with_line_breaks_and_braces_reaches_the_pod(hub, core):
    hub.create_user("envy")
    hub.start_server("envy", {"profile": "odd-env"})
    [pod] = user_pods(core, "envy")
    env = {e.name: e.value for e in pod.spec.containers[0].env}
    assert env["MOTD"] == ENVIRONMENT["MOTD"]
    assert env["JSON_SETTINGS"] == '{"theme": "dark", "user": "envy"}'
    assert env["WHO"] == "envy"
    assert env["LITERAL"] == "${HOME}/data and {{doubled}}"
    hub.stop_server("envy")


def test_removed_profile_and_changed_home_template(hub, core):
    """One hub restart for both cases: the admin removes profile ``retired`` and renames homes ``claim-{username}``."""
    for user in ("alice", "hana"):
        hub.create_user(user)
    hub.start_server("alice", {"profile": "retired"})
    hub.stop_server("alice")
    hub.start_server("hana", {"profile": "jupyterlab-cpu"})
    hub.stop_server("hana")
    hana_home = core.read_namespaced_persistent_volume_claim("home-hana", "default").metadata.uid
    # an admin's own PVC carrying bob's owner labels, under a name no template gives
    hub.create_user("bob")
    core.create_namespaced_persistent_volume_claim("default", {
        "metadata": {"name": "bobs-files", "labels": names.owner_labels("bob"), "annotations": names.owner_annotations("bob")},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}, "storageClassName": "ceph-rbd"},
    })

    restart(hub, retired_profile=False, template="claim-{username}")

    r = hub.spawn("alice")  # POST {}: JupyterHub reuses the saved {"profile": "retired"}
    assert r.status_code in (201, 202), r.text
    hub.wait_ready("alice")
    [pod] = user_pods(core, "alice")
    assert pod.spec.containers[0].resources.limits.get("cpu") != "1500m"  # the default profile, not the retired one
    hub.stop_server("alice")
    r = hub.spawn("alice", {"profile": "retired"})
    assert r.status_code == 400, r.text
    assert "no such profile" in r.json()["message"] and "retired" not in r.json()["message"]  # our words, not the request's
    form = login(hub, "alice").get(f"{hub.url}/hub/spawn", timeout=30)
    assert form.status_code == 200, form.text
    checked = re.findall(r'value="([^"]+)"\s+checked', form.text)
    assert checked == ["jupyterlab-cpu"], checked

    hub.start_server("hana", {"profile": "jupyterlab-cpu"})  # the template now says claim-hana: her home-hana is kept
    [pod] = user_pods(core, "hana")
    claims = [v.persistent_volume_claim.claim_name for v in pod.spec.volumes if v.persistent_volume_claim]
    assert "home-hana" in claims
    assert home_claims(core, "hana") == ["home-hana"]
    assert core.read_namespaced_persistent_volume_claim("home-hana", "default").metadata.uid == hana_home
    hub.stop_server("hana")

    hub.start_server("bob", {"profile": "jupyterlab-cpu"})
    assert home_claims(core, "bob") == ["bobs-files"]
    hub.stop_server("bob")

    # a second home of hana's, under the new template's name: two candidates are a refusal naming both
    core.create_namespaced_persistent_volume_claim("default", {
        "metadata": {"name": "hana-extra", "labels": names.owner_labels("hana"), "annotations": names.owner_annotations("hana")},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}, "storageClassName": "ceph-rbd"},
    })
    # a start finds homes in the hub's PVC watch (issue #15): give its watch event the moment it takes to arrive
    # (CI on JupyterHub 5.5 spawned before it had, and started with the one home it saw)
    time.sleep(2)
    r = hub.spawn("hana", {"profile": "jupyterlab-cpu"})
    assert r.status_code == 409, r.text
    message = r.json()["message"]
    assert "home-hana" in message and "hana-extra" in message
    assert user_pods(core, "hana") == []
    assert home_claims(core, "hana") == ["hana-extra", "home-hana"]


def test_full_storage_quota_is_named_and_never_blocks_an_existing_home(hub, core):
    hub.create_user("quinn")
    hub.start_server("quinn", {"profile": "jupyterlab-cpu"})
    hub.stop_server("quinn")
    core.create_namespaced_resource_quota("default", {"metadata": {"name": "storage"}, "spec": {"hard": {"requests.storage": "1Gi"}}})
    try:
        hub.create_user("nora")
        r = hub.spawn("nora", {"profile": "jupyterlab-cpu"})
        assert r.status_code == 403, r.text
        message = r.json()["message"]
        assert "storage quota of namespace 'default'" in message and "'storage'" in message
        assert "of 1Gi storage is in use and your new home volume needs 10Gi more" in message
        assert home_claims(core, "nora") == []
        homes = home_claims(core, "quinn")
        hub.start_server("quinn", {"profile": "jupyterlab-cpu"})  # the home exists: read, never re-created
        assert home_claims(core, "quinn") == homes and len(homes) == 1
        hub.stop_server("quinn")
    finally:
        core.delete_namespaced_resource_quota("storage", "default")
    hub.start_server("nora", {"profile": "jupyterlab-cpu"})
    hub.stop_server("nora")


def test_claim_that_never_binds_is_named_and_a_missing_one_fails_at_once(hub, core):
    storage = kubernetes.client.StorageV1Api(core.api_client)
    storage.create_storage_class({"metadata": {"name": "nowhere"}, "provisioner": "example.com/never"})
    hub.create_user("kim")
    r = hub.spawn("kim", {"profile": "stuck-home"})
    assert r.status_code == 503, r.text
    message = r.json()["message"]
    [home] = home_claims(core, "kim")  # kept (named by the hub's template, whichever the tests before left)
    assert f"'{home}'" in message and "'nowhere'" in message and "within 3 seconds" in message
    assert "ExternalProvisioning" in message and "example.com/never" in message
    assert user_pods(core, "kim") == [] or _gone(core, "kim")

    hub.create_user("lee")
    r = hub.spawn("lee", {"profile": "extra-claim"})
    assert r.status_code == 409, r.text
    assert "'no-such-claim'" in r.json()["message"] and "does not exist" in r.json()["message"]
    assert len(home_claims(core, "lee")) == 1


def _gone(core, user, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while user_pods(core, user) and time.monotonic() < deadline:
        time.sleep(0.2)
    return user_pods(core, user) == []


def test_api_outage_fails_a_start_in_words_and_the_hub_recovers(hub, core, module_cluster_thread):
    cluster = module_cluster_thread.cluster
    hub.create_user("otto")
    hub.start_server("otto", {"profile": "jupyterlab-cpu"})  # the shared Pod and Event watches are up
    hub.stop_server("otto")
    given_up = hub.log(tail=None).count("never recovered, giving up")
    cluster.faults.add("*", "", status=503, reason="ServiceUnavailable", message="the API server is restarting", count=10**9)
    try:
        module_cluster_thread.call(lambda cl: cl.store.close_watches())
        r = hub.spawn("otto", {"profile": "jupyterlab-cpu"})
        assert r.status_code == 503, (r.text, hub.log())
        assert "API server is not answering (503" in r.json()["message"], hub.log()
        # JupyterHub's cleanup of the refused start records nothing: the refusal made nothing, and a cleanup that
        # waits out the API's retries outlasts slow_spawn_timeout (JupyterHub then answers a bare 500)
        assert "Could not record that otto stopped" not in hub.log(tail=None), hub.log()
        # the shared Pod and Event watches fail and keep trying (they never give up: workspacespawner.k8s.watchloop)
        deadline = time.monotonic() + 120
        while not all(f"The {kind} watch in default failed" in hub.log(tail=None) for kind in ("pods", "events")):
            assert time.monotonic() < deadline, hub.log()
            time.sleep(1)
    finally:
        cluster.faults.clear()
    hub.start_server("otto", {"profile": "jupyterlab-cpu"})
    hub.stop_server("otto")
    log = hub.log(tail=None)
    assert log.count("never recovered, giving up") == given_up, log[-3000:]  # no watch gave up
    assert "The pods watch in default is back after" in log, log[-3000:]
