"""Real RBAC: the hub runs with the ``hub`` ServiceAccount's token, bound to the chart's hub Role plus helm-values/rbac.yaml.

One real control plane and one hub for the module. kube-apiserver writes
an audit log of every request the hub's ServiceAccount makes, with the
authorizer's decision. The scenario: a container workspace on a home that
binds late (its claim watched until bound), stopped; the spawn form of
another user (the GPU nodes listed for the free-GPU counts); a VM workspace cloned
from the golden image in ``golden-images`` (CDI's clone check, asked of the
real authorizer: see ``install_clone_permission``), fenced by a second
start next to its running VMI (the VMI's Node read), stopped; started again
with a GPU profile (VM and cloud-init Secret updated) until the quota
enforcer posts its QuotaLow Event on the VM, stopped. Then:

- no request of the hub was forbidden;
- rbac.yaml alone grants every request the hub made, and without any one
  of its (group, resource, verb) grants some request is denied: asked of
  the real authorizer (SubjectAccessReview) for a second ServiceAccount
  bound to copies of the roles, with the requests the audit log recorded;
- a grant taken from the live hub's Role makes the next start fail with
  the refusal in words on the spawn page (the VM start subresource, CDI's
  clone permission, Pod creation).

The admin commands then run with the ``workspacespawner-admin`` token
(helm-values/retention.yaml) on what the hub left: ``disk list``, ``disk
expand`` (a home, a VM root disk), ``disk snapshot`` and ``disk restore``
(the VolumeSnapshot CRD of external-snapshotter, served by the real API
server), ``retention list``, ``purge --dry-run``, ``purge``, ``reclaim``;
none refused, and the same proof of least privilege for its Role.

Runs only with WORKSPACESPAWNER_CONTROL_PLANE=real and WORKSPACESPAWNER_K8S_BIN.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import time

import kubernetes
import pytest
import yaml

from tests.support import codeserver, planes
from tests.support.chart import render
from tests.support.chartvalues import HELM_VALUES, our_values
from tests.support.hubharness import Hub, config_pieces, core_and_custom, login, progress_messages
from workspacespawner.backends.vm.manifests import VMIdentity
from workspacespawner.backends.vm.workspace import VMWorkspace
from workspacespawner.core import names
from workspacespawner.core.errors import WorkspaceError

NS = "default"  # the test hub's namespace (hubharness); rbac.yaml's "jhub" stands for it
HUB = f"system:serviceaccount:{NS}:hub"
ADMIN = f"system:serviceaccount:{NS}:workspacespawner-admin"
ROLE_KINDS = {"Role": "roles", "ClusterRole": "clusterroles", "RoleBinding": "rolebindings", "ClusterRoleBinding": "clusterrolebindings"}

AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata", "users": [HUB, ADMIN]}, {"level": "None"}],
}

HUB_CONFIG = """
c.KubeSpawner.profile_list = c.KubeSpawner.profile_list + [
    {"display_name": "Home on a WaitForFirstConsumer class", "slug": "late-binding",
     "kubespawner_override": {"storage_class": "ceph-rbd-wffc"}},
]
c.JupyterHub.tornado_settings = {"slow_spawn_timeout": 15}
c.WorkspaceQuota.user_limits = {"rita": {"card_hours_per_month": 0.002}}
c.WorkspaceQuota.min_gpu_start_time = 0
c.WorkspaceQuota.grace_period = 36000
c.WorkspaceQuota.enforce_interval = 1
"""


# -- the roles, from the chart and rbac.yaml ----------------------------------------------------


def helm_values(name: str, kinds=("ServiceAccount", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")) -> list[dict]:
    """The documents of ``kinds`` in helm-values/``name``, in the test hub's namespace."""
    text = (HELM_VALUES / name).read_text().replace("namespace: jhub", f"namespace: {NS}")
    return [doc for doc in yaml.safe_load_all(text) if doc and doc["kind"] in kinds]


def rbac_yaml() -> list[dict]:
    """helm-values/rbac.yaml's documents, in the test hub's namespace."""
    return helm_values("rbac.yaml")


def chart_hub_objects() -> list[dict]:
    """The chart's hub ServiceAccount, Role and RoleBinding, rendered by Helm for the test hub's namespace."""
    wanted = {("ServiceAccount", "hub"), ("Role", "hub"), ("RoleBinding", "hub")}
    objects = [o for o in render(our_values(), namespace=NS) if (o["kind"], o["metadata"]["name"]) in wanted]
    assert len(objects) == 3, objects
    return [{**o, "metadata": {**o["metadata"], "namespace": NS}} for o in objects]


def collection(obj: dict) -> str:
    kind, namespace = obj["kind"], obj["metadata"].get("namespace")
    if kind == "ServiceAccount":
        return f"/api/v1/namespaces/{namespace}/serviceaccounts"
    base = "/apis/rbac.authorization.k8s.io/v1"
    return f"{base}/namespaces/{namespace}/{ROLE_KINDS[kind]}" if namespace else f"{base}/{ROLE_KINDS[kind]}"


def put(plane, obj: dict) -> None:
    """Create ``obj`` as the admin, or replace it."""
    status, body = plane.request("POST", collection(obj), obj)
    if status == 409:
        path = f"{collection(obj)}/{obj['metadata']['name']}"
        _, current = plane.request("GET", path)
        obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}}
        status, body = plane.request("PUT", path, obj)
    assert status in (200, 201), (status, body)


def triples(rules) -> set[tuple[str, str, str]]:
    return {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


def without(role: dict, triple: tuple[str, str, str]) -> dict:
    """``role`` with the one (group, resource, verb) ``triple`` no longer granted (other grants of its rule kept)."""
    group, resource, verb = triple
    rules = []
    for rule in role["rules"]:
        if group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]:
            rest = [{**rule, "apiGroups": [group], "resources": [resource], "verbs": [v for v in rule["verbs"] if v != verb]}]
            rest += [{**rule, "resources": [r for r in rule["resources"] if r != resource]}] if len(rule["resources"]) > 1 else []
            rest += [{**rule, "apiGroups": [g for g in rule["apiGroups"] if g != group]}] if len(rule["apiGroups"]) > 1 else []
            rules += [r for r in rest if r["verbs"] and r["resources"] and r["apiGroups"]]
        else:
            rules.append(rule)
    return {**copy.deepcopy(role), "rules": rules}


def renamed(obj: dict, subject: str) -> dict:
    """A copy of a role or binding of the hub for the ServiceAccount ``subject``: ``<name>-<subject>``, bound to it."""
    obj = copy.deepcopy(obj)
    obj["metadata"] = {k: v for k, v in obj["metadata"].items() if k in ("name", "namespace", "labels")}
    obj["metadata"]["name"] += f"-{subject}"
    if "roleRef" in obj:
        obj["roleRef"]["name"] += f"-{subject}"
        obj["subjects"] = [{"kind": "ServiceAccount", "name": subject, "namespace": NS}]
    return obj


# -- the audit log ------------------------------------------------------------------------------


def audited_requests(log_path, user: str) -> list[dict]:
    """The resource requests of ``user`` the audit log holds (one per request: the stage it completed in)."""
    events = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
    done = {}
    for event in events:
        if event.get("objectRef") and event["user"]["username"] == user:
            done[event["auditID"]] = event  # ResponseStarted (a watch), then ResponseComplete: keep the last
    return list(done.values())


def attributes(event: dict) -> dict:
    """The ``resourceAttributes`` of a SubjectAccessReview asking what ``event``'s request needed."""
    ref = event["objectRef"]
    attrs = {"verb": event["verb"], "group": ref.get("apiGroup", ""), "resource": ref["resource"]}
    for key in ("subresource", "namespace"):
        if ref.get(key):
            attrs[key] = ref[key]
    return attrs


def triple_of(attrs: dict) -> tuple[str, str, str]:
    resource = attrs["resource"] + (f"/{attrs['subresource']}" if attrs.get("subresource") else "")
    return (attrs["group"], resource, attrs["verb"])


def allowed(plane, user: str, attrs: dict) -> bool:
    """The real authorizer's answer: may ServiceAccount ``user`` (full name) do ``attrs``?"""
    namespace = user.split(":")[2]
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {"user": user, "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
                 "resourceAttributes": attrs},
    }
    status, body = plane.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
    assert status == 201, body
    return bool(body["status"].get("allowed"))


def until(predicate, what: str, timeout: float = 20.0) -> None:
    """RBAC changes reach the authorizer through its informers: wait (polling the API, ms each) until ``predicate()``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


# -- fixtures -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """The real cluster with the golden image, an audit log of the hub's ServiceAccount, the roles applied."""
    planes.skip_unless_real()
    state = tmp_path_factory.mktemp("rbac")
    policy, log = state / "audit-policy.yaml", state / "audit.log"
    policy.write_text(json.dumps(AUDIT_POLICY))
    audit_args = (f"--audit-policy-file={policy}", f"--audit-log-path={log}", "--audit-log-format=json")
    with planes.running("real", state / "cluster", golden=True, extra_apiserver_args=audit_args) as cluster:
        plane = cluster.plane
        plane.request("POST", "/apis/storage.k8s.io/v1/storageclasses", {
            "metadata": {"name": "ceph-rbd-wffc"}, "provisioner": "rbd.csi.ceph.com",
            "volumeBindingMode": "WaitForFirstConsumer", "allowVolumeExpansion": True,
        })
        for obj in chart_hub_objects() + rbac_yaml():
            put(plane, obj)
        cluster.audit_log = log
        yield cluster


@pytest.fixture(scope="module")
def hub(real, tmp_path_factory):
    kubeconfig = real.plane.serviceaccount_kubeconfig(NS, "hub", create=False)
    config = config_pieces("10-workspace-spawner.py", "20-profiles.py") + HUB_CONFIG
    # the scenario's VM profile opens code-server, which its start checks: the guests find the real one first
    config += f"c.KubeSpawner.environment = {{'PATH': {codeserver.pod_path(codeserver.real_bin())!r}}}\n"
    hub = Hub(tmp_path_factory.mktemp("hub"), kubeconfig, config, start_timeout=150)
    hub.env.update(NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
    hub.kubeconfig = kubeconfig
    try:
        yield hub.start()
    finally:
        hub.stop()


@pytest.fixture(scope="module")
def admin(real):
    with core_and_custom(real) as apis:
        yield apis


def vmis_of(custom, user: str) -> list[dict]:
    return custom.list_namespaced_custom_object(
        "kubevirt.io", "v1", NS, "virtualmachineinstances", label_selector=names.owner_selector(user))["items"]


async def fence(kubeconfig, ident: VMIdentity) -> None:
    """A second start of ``ident``'s running VM with the hub's credentials, refused by the fence (it reads the VMI's Node)."""
    from kubernetes_asyncio import client, config

    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    async with client.ApiClient(configuration) as api:
        workspace = VMWorkspace(ident=ident, settings=None, custom_api=client.CustomObjectsApi(api), core_api=client.CoreV1Api(api))
        with pytest.raises(WorkspaceError) as refused:
            await workspace.fence()
    assert refused.value.reason == "already-running"


@pytest.fixture(scope="module")
def scenario(real, hub, admin) -> list[dict]:
    """Run the scenario (module docstring) through the hub; returns the hub's requests from the audit log."""
    core, custom = admin
    hub.create_user("rita")
    hub.start_server("rita", {"profile": "late-binding"})
    assert core.read_namespaced_persistent_volume_claim("home-rita", NS).status.phase == "Bound"
    hub.stop_server("rita")
    form = login(hub, "sam").get(f"{hub.url}/hub/spawn", timeout=60)
    assert "8 of 8 NVIDIA A100 80GB free now" in form.text, form.text  # the Nodes listed

    hub.start_server("rita", {"profile": "ubuntu-vm"})
    [vmi] = vmis_of(custom, "rita")
    ident = VMIdentity.for_workspace(namespace=NS, user_name="rita", kubespawner_username="rita",
                                     base_name=vmi["metadata"]["name"], home_pvc="home-rita")
    asyncio.run(fence(hub.kubeconfig, ident))
    hub.stop_server("rita")

    hub.start_server("rita", {"profile": "ubuntu-vm-gpu-code"})

    def quota_events():
        selector = f"involvedObject.name={vmi['metadata']['name']},reason=QuotaLow"
        return core.list_namespaced_event(NS, field_selector=selector).items

    until(quota_events, "no QuotaLow Event on the VM", timeout=60)
    hub.stop_server("rita")
    return audited_requests(real.audit_log, HUB)


# -- the tests ----------------------------------------------------------------------------------


def refusals(requests: list[dict]) -> list[tuple]:
    """The requests the authorizer (or admission) refused: (verb, URI, status)."""
    return [(e["verb"], e["requestURI"], e["responseStatus"]["code"]) for e in requests
            if e["annotations"].get("authorization.k8s.io/decision") != "allow" or e["responseStatus"]["code"] == 403]


def least_privilege(plane, subject: str, docs: list[dict], events: list[dict], excused: dict) -> list:
    """Bind copies of the roles in ``docs`` to a new ServiceAccount ``subject``; with the real authorizer
    (SubjectAccessReview), check that they allow every request of ``events`` (audit events) and that without
    any one (group, resource, verb) they grant, some request is denied. ``excused``: {triple: why} left out.
    Returns the grants no request needed: [(role, triple)]."""
    user = f"system:serviceaccount:{NS}:{subject}"
    put(plane, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": subject, "namespace": NS}})
    docs = [renamed(d, subject) for d in docs if d["kind"] != "ServiceAccount"]
    for doc in docs:
        put(plane, doc)
    requests = list({json.dumps(attributes(e), sort_keys=True): attributes(e) for e in events}.values())
    until(lambda: all(allowed(plane, user, a) for a in requests),
          f"the roles alone deny: {[a for a in requests if not allowed(plane, user, a)]}")
    unneeded = []
    for role in (d for d in docs if d["kind"] in ("Role", "ClusterRole")):
        for triple in sorted(triples(role["rules"]) - set(excused)):
            needing = [a for a in requests if triple_of(a) == triple and a.get("namespace") == role["metadata"].get("namespace")]
            if not needing:
                unneeded.append((role["metadata"]["name"], triple))
                continue
            put(plane, without(role, triple))
            try:
                until(lambda: not allowed(plane, user, needing[0]), f"{triple} still granted")
                assert not any(allowed(plane, user, a) for a in needing)
            finally:
                put(plane, role)
            until(lambda: allowed(plane, user, needing[0]), f"{triple} not granted again")
    return unneeded


def test_the_hub_was_never_refused(scenario, hub):
    assert refusals(scenario) == []
    assert "forbidden" not in hub.log_file.read_text().lower()  # nor a refusal the hub swallowed (an Event, a Node it may not read)


def test_rbac_yaml_alone_grants_every_request_and_needs_every_rule(scenario, real):
    # CDI's clone check asks for datavolumes/source in admission, not as a request of the hub:
    # test_a_grant_taken_away_fails_the_start_in_words takes it away
    # Grants the scenario does not use but the hub does. Reads it makes only when a watch cannot answer
    # (k8s/cachedkube.py): a watch behind a guarded write (the attach claim's 422 is read again), a create that
    # finds one made meanwhile (409), a watch that gave up
    excused = {
        ("cdi.kubevirt.io", "datavolumes/source", "create"): "asked by CDI's admission check",
        ("", "persistentvolumeclaims", "get"): "read when a watch is behind or down",
        ("cdi.kubevirt.io", "datavolumes", "get"): "read when a watch is behind or down",
        ("kubevirt.io", "virtualmachines", "get"): "read when a watch is behind or down",
        ("kubevirt.io", "virtualmachineinstances", "get"): "read when a watch is behind or down",
        ("", "secrets", "get"): "read to name the owner of a foreign Secret of the same name",
        # a start and a stop record no phase (Starting, Running, Stopping are the compute's); Retained and
        # Degraded are, on the VM too: the scenario deletes no VM user
        ("kubevirt.io", "virtualmachines", "patch"): "records Retained or Degraded on a VM",
        # only a container start whose image has no code-server reads its server's log (the line the page shows)
        ("", "pods/log", "get"): "read when a code-server profile's image has no code-server",
        # the root-disk pool (c.RootDiskPool), which this scenario does not configure: test_realplane_pool_rbac.py
        ("cdi.kubevirt.io", "datasources", "get"): "the root-disk pool reads its golden images (test_realplane_pool_rbac)",
        ("cdi.kubevirt.io", "datavolumes", "delete"): "the root-disk pool retires its unassigned disks (test_realplane_pool_rbac)",
    }
    unneeded = least_privilege(real.plane, "hub-probe", rbac_yaml(), scenario, excused)
    assert unneeded == [], f"rbac.yaml grants what no request of the hub needed: {unneeded}"


@contextlib.contextmanager
def taken_away(plane, triple, *roles):
    """The live hub's ``roles`` (objects from rbac.yaml or the chart) without ``triple`` until the block ends."""
    for role in roles:
        put(plane, without(role, triple))
    attrs = {"group": triple[0], "resource": triple[1].split("/")[0], "verb": triple[2], "namespace": roles[0]["metadata"]["namespace"]}
    if "/" in triple[1]:
        attrs["subresource"] = triple[1].split("/")[1]
    until(lambda: not allowed(plane, HUB, attrs), f"{triple} still granted to the hub")
    try:
        yield
    finally:
        for role in roles:
            put(plane, role)
        until(lambda: allowed(plane, HUB, attrs), f"{triple} not granted to the hub again")


def role(kind: str, name: str, docs=None) -> dict:
    [doc] = [d for d in (docs or rbac_yaml() + chart_hub_objects()) if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def refused_spawn(hub, user: str, profile: str) -> str:
    """Start ``user``'s server with ``profile``, expecting a failure; the message the hub gives the user."""
    hub.create_user(user)
    r = hub.spawn(user, {"profile": profile})
    if r.status_code in (201, 202):  # failed after the slow-spawn window: the message is in the progress stream
        return progress_messages(hub, user)[-1]
    return r.json()["message"]


@pytest.mark.parametrize("triple, roles, profile, words", [
    (("subresources.kubevirt.io", "virtualmachines/start", "update"), [("Role", "workspacespawner-hub")], "ubuntu-vm",
     ['cannot update resource "virtualmachines/start" in API group "subresources.kubevirt.io"']),
    (("cdi.kubevirt.io", "datavolumes/source", "create"), [("Role", "workspacespawner-clone-source")], "ubuntu-vm",
     ["insufficient permissions in clone source namespace golden-images"]),
    (("", "pods", "create"), [("Role", "workspacespawner-hub"), ("Role", "hub")], "jupyterlab-cpu",
     ['cannot create resource "pods" in API group "" in the namespace "default"']),
])
def test_a_grant_taken_away_fails_the_start_in_words(scenario, real, hub, admin, triple, roles, profile, words):
    user = f"no-{triple[1].replace('/', '-')}-{triple[2]}"[:30].strip("-")
    with taken_away(real.plane, triple, *[role(*r) for r in roles]):
        message = refused_spawn(hub, user, profile)
    for w in [*words, "The cluster refused the hub: ", HUB, "please tell the JupyterHub administrators"]:
        assert w in message, message
    hub.api("DELETE", f"/users/{user}/server")


# -- the admin commands, with helm-values/retention.yaml's Role ---------------------------------



@pytest.fixture(scope="module")
def admin_scenario(real, scenario, admin, tmp_path_factory) -> list[dict]:
    """The admin commands with the ``workspacespawner-admin`` token on what the hub left: disk list and expand (a
    home, rita's VM root disk), retention list, purge --dry-run and purge (bob's retained home, rita's retained
    VM), reclaim (dee's home). Returns the admin's requests from the audit log."""
    from tests.support.lifecycleenv import make_home, with_kube
    from workspacespawner.admin import disk as disk_command
    from workspacespawner.admin import retention as retention_command
    from workspacespawner.lifecycle import retention
    from workspacespawner.lifecycle.phases import Phase, Status, WorkspaceRef

    plane = real.plane
    for doc in helm_values("retention.yaml"):
        put(plane, doc)
    core, custom = admin
    [vm] = custom.list_namespaced_custom_object("kubevirt.io", "v1", NS, "virtualmachines",
                                                label_selector=names.owner_selector("rita"))["items"]
    vm_name = vm["metadata"]["name"]

    async def setup(kube):
        for user in ("ann", "bob", "dee"):
            await make_home(kube, user)
        for ref, days in (
            (WorkspaceRef(namespace=NS, user_name="bob", home_pvc="home-bob"), 0),
            (WorkspaceRef(namespace=NS, user_name="rita", root_disk=f"{vm_name}-root", vm=vm_name), 0),
            (WorkspaceRef(namespace=NS, user_name="dee", home_pvc="home-dee"), 30),
        ):
            await retention.retain(kube, ref, Status(Phase.STOPPED), days=days)

    asyncio.run(with_kube(real.kubeconfig, setup))
    workdir = tmp_path_factory.mktemp("admin")
    (workdir / "jupyterhub_config.py").write_text(
        f"c.WorkspaceQuota.ledger_url = 'sqlite:///{workdir / 'ledger.sqlite'}'\nc.KubeSpawner.namespace = {NS!r}\n"
        "c.WorkspaceQuota.max_disk = None\n")
    token = plane.serviceaccount_kubeconfig(NS, "workspacespawner-admin", create=False)
    common = ["-f", str(workdir / "jupyterhub_config.py"), "--kubeconfig", str(token), "--actor", "retention-cronjob"]
    assert disk_command.main(["list", *common]) == 0
    assert disk_command.main(["expand", "ann", "--size", "2Gi", *common]) == 0
    assert disk_command.main(["snapshot", "ann", "--name", "ann-1", "--wait", "60", *common]) == 0
    assert disk_command.main(["restore", "ann", "--snapshot", "ann-1", *common]) == 0
    assert disk_command.main(["expand", "rita", "--pvc", f"{vm_name}-root", "--size", "60Gi", *common]) == 0
    assert retention_command.main(["list", *common]) == 0
    assert retention_command.main(["purge", "--dry-run", *common]) == 0
    assert retention_command.main(["purge", "--json", *common]) == 0
    assert retention_command.main(["reclaim", "dee", *common]) == 0
    for kind, name in (("datavolumes", f"{vm_name}-root"), ("virtualmachines", vm_name)):
        group = "kubevirt.io" if kind == "virtualmachines" else "cdi.kubevirt.io"
        version = "v1" if kind == "virtualmachines" else "v1beta1"
        try:
            left = custom.get_namespaced_custom_object(group, version, NS, kind, name)
        except kubernetes.client.ApiException as e:  # purged
            assert e.status == 404, e
        else:  # or going: a controller's finalizer (KubeVirt's own virt-controller's on a VM) ends it soon after
            assert left["metadata"].get("deletionTimestamp"), f"{kind}/{name} was not purged"
    return audited_requests(real.audit_log, ADMIN)


def test_the_admin_commands_were_never_refused(admin_scenario):
    assert refusals(admin_scenario) == []
    assert {e["verb"] for e in admin_scenario} >= {"list", "get", "patch", "delete"}


def test_the_admin_role_grants_every_request_and_needs_every_rule(admin_scenario, real):
    # the purge's mark on rita's root disk needs it of CDI's clone check (test_the_admin_commands_were_never_refused)
    excused = {("cdi.kubevirt.io", "datavolumes/source", "create"): "asked by CDI's admission check"}
    assert least_privilege(real.plane, "admin-probe", helm_values("retention.yaml"), admin_scenario, excused) == [], \
        "retention.yaml's Role grants what no admin command needed"
