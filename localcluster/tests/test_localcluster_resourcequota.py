"""The local API server's ResourceQuota admission for storage, as kube-apiserver's plugin answers.

Covers, on a store with the real validator (no controllers): a claim create
past ``requests.storage`` is 403 Forbidden with the plugin's message (name,
requested, used, limited), one within it passes; the count of claims and a
class-scoped quota; growing a claim is charged only what it grows, and an
unchanged claim passes a quota lowered below what it holds.
"""

from __future__ import annotations

import pytest
from localcluster.errors import ApiError
from localcluster.kinds import KINDS
from localcluster.store import Store
from localcluster.validation import Validator


@pytest.fixture
def store():
    return Store(KINDS, Validator(KINDS))


def claim(name: str, size: str, storage_class: str = "ceph-rbd") -> dict:
    return {
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}, "storageClassName": storage_class},
    }


def quota(store, name: str, **hard) -> dict:
    return store.create(store.kind("", "v1", "resourcequotas"), "default", {"metadata": {"name": name}, "spec": {"hard": hard}})


def refusal(store, body: dict) -> ApiError:
    with pytest.raises(ApiError) as caught:
        store.create(store.kind("", "v1", "persistentvolumeclaims"), "default", body)
    return caught.value


def test_requests_storage_past_the_quota_is_forbidden(store):
    pvcs = store.kind("", "v1", "persistentvolumeclaims")
    quota(store, "storage", **{"requests.storage": "20Gi"})
    store.create(pvcs, "default", claim("home-a", "15Gi"))
    error = refusal(store, claim("home-b", "10Gi"))
    assert (error.code, error.reason) == (403, "Forbidden")
    assert error.message == (
        'persistentvolumeclaims "home-b" is forbidden: exceeded quota: storage, '
        "requested: requests.storage=10Gi, used: requests.storage=15Gi, limited: requests.storage=20Gi"
    )
    assert error.status()["details"] == {"name": "home-b", "kind": "persistentvolumeclaims"}
    store.create(pvcs, "default", claim("home-c", "5Gi"))  # exactly at the limit


def test_claim_count_and_class_quota(store):
    pvcs = store.kind("", "v1", "persistentvolumeclaims")
    quota(store, "claims", persistentvolumeclaims="1", **{"fast.storageclass.storage.k8s.io/requests.storage": "1Gi"})
    error = refusal(store, claim("big-fast", "2Gi", "fast"))
    assert "exceeded quota: claims, requested: fast.storageclass.storage.k8s.io/requests.storage=2Gi," in error.message
    store.create(pvcs, "default", claim("one", "100Gi"))
    error = refusal(store, claim("two", "1Mi"))
    assert error.message.endswith("requested: persistentvolumeclaims=1, used: persistentvolumeclaims=1, limited: persistentvolumeclaims=1")


def test_growing_is_charged_what_it_grows(store):
    pvcs = store.kind("", "v1", "persistentvolumeclaims")
    quota(store, "storage", **{"requests.storage": "10Gi"})
    store.create(pvcs, "default", claim("home-a", "8Gi"))
    # Only a Bound claim of an expandable class may grow (ValidatePersistentVolumeClaimUpdate and the
    # PersistentVolumeClaimResize admission plugin), as the PV binder would leave it.
    store.create(store.kind("storage.k8s.io", "v1", "storageclasses"), None, {
        "metadata": {"name": "ceph-rbd"}, "provisioner": "rbd.csi.ceph.com", "allowVolumeExpansion": True})
    store.patch(pvcs, "default", "home-a", {"status": {"phase": "Bound"}}, "application/merge-patch+json", subresource="status")
    store.patch(pvcs, "default", "home-a", {"spec": {"resources": {"requests": {"storage": "10Gi"}}}}, "application/merge-patch+json")
    with pytest.raises(ApiError) as caught:
        store.patch(pvcs, "default", "home-a", {"spec": {"resources": {"requests": {"storage": "11Gi"}}}}, "application/merge-patch+json")
    assert "requested: requests.storage=1Gi, used: requests.storage=10Gi, limited: requests.storage=10Gi" in caught.value.message
    store.patch(store.kind("", "v1", "resourcequotas"), "default", "storage", {"spec": {"hard": {"requests.storage": "1Gi"}}},
                "application/merge-patch+json")
    store.patch(pvcs, "default", "home-a", {"metadata": {"labels": {"kept": "yes"}}}, "application/merge-patch+json")
