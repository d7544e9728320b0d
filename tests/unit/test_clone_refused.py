"""CDI's clone authorization refuses a write of a cloned DataVolume with a 422 (``k8s.admission.clone_refused``):
the owner-guarded patch raises it as it is, so the caller says what was refused, and a JSON Patch ``test``'s 422
stays :class:`NotOurs`.

The Status bodies: the first is CDI v1.61.1's cdi-apiserver's, read on the real control plane
(localcluster/tests/realplane/test_realplane_cdi.py), when the admin commands' ServiceAccount, without the right to
clone from ``golden-images``, marked a retained VM root disk for the purge; the second a failed ``test``.
"""

from __future__ import annotations

import json

import pytest
from kubernetes_asyncio.client.rest import ApiException

from workspacespawner.k8s.admission import clone_refused
from workspacespawner.k8s.api import Kube, NotOurs
from workspacespawner.k8s.kinds import DATA_VOLUME

CDI = ('admission webhook "datavolume-mutate.cdi.kubevirt.io" denied the request:  User '
       "system:serviceaccount:jhub:workspacespawner-admin has insufficient permissions in clone source namespace "
       "golden-images")
TEST_FAILED = 'the server rejected our request due to an error in our request'


def unprocessable(message: str) -> ApiException:
    error = ApiException(status=422, reason="Unprocessable Entity")
    error.body = json.dumps({"kind": "Status", "status": "Failure", "message": message, "code": 422})
    return error


class Refusing(Kube):
    def __init__(self, error):
        super().__init__(None, None)
        self.error = error

    async def patch(self, kind, namespace, name, operations):
        raise self.error


def test_only_cdis_words_are_a_clone_refusal():
    assert clone_refused(unprocessable(CDI))
    assert not clone_refused(unprocessable(TEST_FAILED))
    forbidden = ApiException(status=403, reason="Forbidden")
    forbidden.body = json.dumps({"message": CDI})
    assert not clone_refused(forbidden) and not clone_refused(ValueError(CDI))


async def test_a_clone_refusal_is_raised_as_it_is_not_as_not_ours():
    with pytest.raises(ApiException) as raised:
        await Refusing(unprocessable(CDI)).patch_owned(DATA_VOLUME, "jhub", "ws-rita-root", "rita", [])
    assert not isinstance(raised.value, NotOurs) and raised.value.status == 422


async def test_a_failed_test_is_still_not_ours():
    with pytest.raises(NotOurs):
        await Refusing(unprocessable(TEST_FAILED)).patch_owned(DATA_VOLUME, "jhub", "ws-rita-root", "rita", [])
