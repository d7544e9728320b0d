"""A 403 from the API server to the hub itself becomes the start's failure in words (``forbidden_error``).

The Status bodies are the ones kube-apiserver v1.34 answered the hub on the
real control plane (tests/cluster/realplane/test_realplane_rbac.py): an RBAC
refusal and a ValidatingAdmissionPolicy's, and the 422 with which CDI's own
cdi-apiserver v1.61.1 refuses a clone the hub may not make
(localcluster/tests/realplane/test_realplane_cdi.py). A ResourceQuota
refusal, also a 403, has words of its own; other statuses are not this.
"""

from __future__ import annotations

import json

import pytest
from kubernetes_asyncio.client.rest import ApiException

from workspacespawner.k8s.owned import forbidden_error

RBAC = ('pods "jupyter-ann" is forbidden: User "system:serviceaccount:jhub:hub" cannot create resource "pods" '
        'in API group "" in the namespace "jhub"')
POLICY = ('datavolumes.cdi.kubevirt.io "ws-ann-root" is forbidden: ValidatingAdmissionPolicy \'cdi-clone-source-permission\' '
          "with binding 'cdi-clone-source-permission' denied request: User system:serviceaccount:jhub:hub has insufficient "
          "permissions in clone source namespace golden-images")
CDI_CLONE = ('admission webhook "datavolume-mutate.cdi.kubevirt.io" denied the request:  User '
             "system:serviceaccount:jhub:hub has insufficient permissions in clone source namespace golden-images")
QUOTA = ('persistentvolumeclaims "home-ann" is forbidden: exceeded quota: storage, requested: requests.storage=10Gi, '
         "used: requests.storage=45Gi, limited: requests.storage=50Gi")


REASONS = {403: "Forbidden", 404: "Not Found", 422: "Unprocessable Entity"}


def refusal(status: int, message: str) -> ApiException:
    error = ApiException(status=status, reason=REASONS[status])
    error.body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "code": status})
    return error


@pytest.mark.parametrize("status, message", [(403, RBAC), (403, POLICY), (422, CDI_CLONE)])
def test_the_api_servers_refusal_reaches_the_user_as_it_is(status, message):
    failure = forbidden_error(refusal(status, message))
    assert failure.reason == "kubernetes-forbidden" and failure.status_code == 500
    assert message in failure.jupyterhub_message
    assert "Nothing was deleted" in failure.jupyterhub_message
    assert "please tell the JupyterHub administrators" in failure.jupyterhub_message
    assert "try again" not in failure.jupyterhub_message  # waiting does not grant a permission


def test_a_body_without_a_status_still_says_forbidden():
    error = ApiException(status=403, reason="Forbidden")
    error.body = "not json"
    assert "403 Forbidden" in forbidden_error(error).jupyterhub_message


@pytest.mark.parametrize("error", [
    refusal(403, QUOTA), refusal(404, "not found"), refusal(422, 'DataVolume.cdi.kubevirt.io "x" is invalid'),
    TimeoutError(), ValueError("bug"),
])
def test_other_failures_are_not_this(error):
    assert forbidden_error(error) is None
