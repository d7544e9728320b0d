"""The Kube facade and ensure_owned hand out core/v1 answers as the API server's JSON, not rebuilt from client models.

kubernetes_asyncio builds a model object from every answer it preloads
(a checked setter per field) and the facade used to turn it back into a
dict (``sanitize_for_serialization``): two walks of each object in Python
per call, and timestamps rewritten from the server's ``...Z`` to
``...+00:00``. Now the body is decoded once (``owned.call_json``): the same
JSON the watch caches hold, byte for byte where it matters, and API errors
still raise ``ApiException`` with the server's Status.
"""

from __future__ import annotations

import pytest
from kubernetes_asyncio.client.rest import ApiException

from workspacespawner.core import names
from workspacespawner.k8s.apistatus import status_message
from workspacespawner.k8s.kinds import NODE, PVC
from workspacespawner.k8s.owned import core_accessors


def claim(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": "default", "labels": names.owner_labels("ann"),
                     "annotations": names.owner_annotations("ann")},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }


async def test_reads_writes_and_lists_answer_the_servers_json(kube_objects, raw):
    made = await kube_objects.create(PVC, "default", claim("home-ann"))
    stamp = made["metadata"]["creationTimestamp"]
    assert stamp.endswith("Z"), stamp  # as the API server wrote it (a model's datetime came back as "+00:00")
    assert made["kind"] == "PersistentVolumeClaim" and made["spec"]["resources"]["requests"]["storage"] == "1Gi"
    for _ in range(50):  # the claim binds meanwhile: compare the two reads of one version
        ours = await kube_objects.get(PVC, "default", "home-ann")
        code, server, _headers = await raw.request("GET", "/api/v1/namespaces/default/persistentvolumeclaims/home-ann")
        if ours["metadata"]["resourceVersion"] == server["metadata"]["resourceVersion"]:
            break
    assert code == 200 and ours == server
    patched = await kube_objects.patch(PVC, "default", "home-ann", [{"op": "add", "path": "/metadata/labels/x", "value": "y"}])
    assert patched["metadata"]["labels"]["x"] == "y" and patched["metadata"]["creationTimestamp"] == stamp
    listed = await kube_objects.list(PVC, "default")
    assert [p["metadata"]["creationTimestamp"] for p in listed] == [stamp]
    assert all(isinstance(node, dict) for node in await kube_objects.list(NODE, None))
    assert await kube_objects.delete(PVC, "default", "home-ann") is True
    assert await kube_objects.get(PVC, "default", "home-ann") is None


async def test_an_api_error_still_raises_with_the_servers_status(kube_objects):
    read, create = core_accessors(kube_objects.core_api, "persistent_volume_claim", claim("home-bob"))
    with pytest.raises(ApiException) as missing:
        await read()
    assert missing.value.status == 404 and "not found" in status_message(missing.value)
    made = await create()
    assert made["metadata"]["name"] == "home-bob" and made["metadata"]["creationTimestamp"].endswith("Z")
    with pytest.raises(ApiException) as taken:
        await create()
    assert taken.value.status == 409 and "already exists" in status_message(taken.value)
