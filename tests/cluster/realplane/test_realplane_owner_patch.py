"""The product's owner-guarded JSON Patch on a real kube-apiserver, for a user name that is not ASCII.

kube-apiserver's JSON Patch ``test`` compares the raw JSON of the stored
value and of the patch's value; kubernetes_asyncio sends non-ASCII as
``\\uXXXX`` escapes, so a ``test`` of a non-ASCII annotation never holds
there (the embedded cluster compares decoded values and let it pass). The
real plane showed it: a user named ``zoë-ünïcode`` found their own home disk
"not theirs" and could not start again.

Runs only with WORKSPACESPAWNER_CONTROL_PLANE=real and WORKSPACESPAWNER_K8S_BIN.
"""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client

from workspacespawner.core import names
from workspacespawner.k8s.api import Kube, NotOurs
from workspacespawner.k8s.kinds import PVC


@pytest.mark.parametrize("user", ["ann", "zoë-ünïcode"])
async def test_patch_owned_holds_for_the_owner_and_only_them(api, namespace, user):
    core = client.CoreV1Api(api)
    await core.create_namespaced_persistent_volume_claim(
        namespace,
        {
            "metadata": {"name": "home", "labels": names.owner_labels(user), "annotations": {names.OWNER_ANNOTATION: user}},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        },
    )
    kube = Kube(core, client.CustomObjectsApi(api))
    mark = [{"op": "add", "path": "/metadata/annotations/checked", "value": "yes"}]
    patched = await kube.patch_owned(PVC, namespace, "home", user, mark)
    assert patched["metadata"]["annotations"]["checked"] == "yes"
    with pytest.raises(NotOurs):
        await kube.patch_owned(PVC, namespace, "home", user + "x", mark)
