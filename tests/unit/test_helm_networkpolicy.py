"""helm-values/networkpolicy.yaml: VM workspaces reachable only from the chart's proxy and hub, on the IDE ports.

Covers: a valid NetworkPolicy (kubernetes-validate, strict); its pod
selector matches the virt-launcher Pod of every VM workspace
:mod:`workspacespawner.backends.vm.manifests` builds (the template's labels plus
KubeVirt's ``kubevirt.io: virt-launcher``), whatever labels the hub adds,
and nothing else (not a container workspace, not the hub or proxy); its
sources match the chart's hub and proxy Pods and no user's server; its
ports are the ones the VM's Service forwards; the values let the same Pods
reach the hub API.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest
import yaml
from kubernetes_validate import validate as validate_manifest

from tests.support.chartvalues import HELM_VALUES, our_values
from workspacespawner.backends.vm import manifests as vmmanifests
from workspacespawner.backends.vm.manifests import VMIdentity, VMSettings
from workspacespawner.core import names

#: Labels of the chart's Pods (zero-to-jupyterhub 4.x, release "jupyterhub"), as its templates set them.
HUB_POD = {"app": "jupyterhub", "component": "hub", "release": "jupyterhub", "hub.jupyter.org/network-access-proxy-api": "true"}
PROXY_POD = {"app": "jupyterhub", "component": "proxy", "release": "jupyterhub", "hub.jupyter.org/network-access-hub": "true"}
#: kubespawner's labels on a container workspace, plus our owner labels.
CONTAINER_POD = {
    "app": "jupyterhub",
    "component": "singleuser-server",
    "release": "jupyterhub",
    "hub.jupyter.org/network-access-hub": "true",
    **names.owner_labels("ann"),
}


def policy() -> dict:
    """The NetworkPolicy of helm-values/networkpolicy.yaml."""
    return yaml.safe_load((HELM_VALUES / "networkpolicy.yaml").read_text())


def selects(selector: Mapping, labels: Mapping) -> bool:
    """Whether a LabelSelector of only ``matchLabels`` selects a Pod with ``labels``."""
    assert set(selector) <= {"matchLabels"}, "only matchLabels selectors are expected here"
    return all(labels.get(key) == value for key, value in selector.get("matchLabels", {}).items())


def launcher_pod_labels(user: str, *, extra_labels: Mapping[str, str] | None = None, gpus: int = 0) -> dict:
    """The labels of the virt-launcher Pod of ``user``'s VM: the template's, plus those virt-controller adds."""
    ident = VMIdentity.for_workspace(
        namespace="jhub", user_name=user, kubespawner_username=user, base_name=f"ws-{user}", home_pvc=f"home-{user}"
    )
    settings = VMSettings(golden_image="ubuntu-22.04-gpu", golden_image_namespace="golden-images", gpus=gpus)
    vm = vmmanifests.make_virtual_machine(ident=ident, settings=settings, extra_labels=extra_labels)
    return {**vm["spec"]["template"]["metadata"]["labels"], "kubevirt.io": "virt-launcher", "kubevirt.io/created-by": "0c9e"}


def test_policy_is_a_valid_networkpolicy():
    doc = policy()
    validate_manifest(doc, "1.32.0", strict=True)
    assert doc["spec"]["policyTypes"] == ["Ingress"]
    rbac = [d for d in yaml.safe_load_all((HELM_VALUES / "rbac.yaml").read_text()) if d and d["kind"] == "Role"]
    assert doc["metadata"]["namespace"] == rbac[0]["metadata"]["namespace"]


@pytest.mark.parametrize(
    "user, extra_labels, gpus",
    [
        ("ann", None, 0),
        ("Ann.B@Example.edu", None, 1),
        ("zoë", {"app": "jupyterhub", "release": "jupyterhub", "app.kubernetes.io/managed-by": "kubespawner"}, 0),
    ],
)
def test_policy_selects_vm_workspace_pods(user, extra_labels, gpus):
    assert selects(policy()["spec"]["podSelector"], launcher_pod_labels(user, extra_labels=extra_labels, gpus=gpus))


@pytest.mark.parametrize("labels", [CONTAINER_POD, HUB_POD, PROXY_POD, {"kubevirt.io": "virt-launcher", "kubevirt.io/domain": "someone-elses-vm"}])
def test_policy_selects_nothing_else(labels):
    assert not selects(policy()["spec"]["podSelector"], labels)


def test_only_hub_and_proxy_reach_the_ide_ports():
    [rule] = policy()["spec"]["ingress"]
    sources = rule["from"]
    assert all(set(source) == {"podSelector"} for source in sources), "no namespaceSelector or ipBlock"
    assert any(selects(s["podSelector"], HUB_POD) for s in sources)
    assert any(selects(s["podSelector"], PROXY_POD) for s in sources)
    for other in (CONTAINER_POD, launcher_pod_labels("mallory")):
        assert not any(selects(s["podSelector"], other) for s in sources)
    ports = {(p["protocol"], p["port"]) for p in rule["ports"]}
    assert ports == {("TCP", vmmanifests.JUPYTER_PORT), ("TCP", vmmanifests.CODE_SERVER_PORT)}
    ident = VMIdentity.for_workspace(namespace="jhub", user_name="ann", kubespawner_username="ann", base_name="ws-ann", home_pvc="home-ann")
    service = vmmanifests.make_vm_service(ident=ident)
    assert {("TCP", p["targetPort"]) for p in service["spec"]["ports"]} == ports


def test_vm_workspaces_may_reach_the_hub_api():
    """The chart's hub NetworkPolicy admits only labelled Pods; the values add the VM workspaces' launcher Pods."""
    [rule] = [r for r in our_values()["hub"]["networkPolicy"]["ingress"] if {"port": 8081} in r["ports"]]
    assert rule["ports"] == [{"port": 8081}]
    [source] = rule["from"]
    assert source["podSelector"] == policy()["spec"]["podSelector"]
    assert selects(source["podSelector"], launcher_pod_labels("ann"))
