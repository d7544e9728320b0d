"""The real plane's ``create_or_replace`` (how it installs CRDs, APIServices and webhooks) against a writer in between.

CI once saw a restarted plane fail to come up: kube-apiserver's APIService availability controller wrote the
status of ``v1alpha3.subresources.kubevirt.io`` between the plane's read and its replace, and the replace was
answered 409 Conflict. A replace that lost such a race reads again and replaces again; one refused for another
reason still raises, naming the object.
"""

from __future__ import annotations

import pytest
from localcluster.realplane.plane import RealControlPlane

OBJ = {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
       "metadata": {"name": "v1alpha3.subresources.kubevirt.io"}, "spec": {"group": "subresources.kubevirt.io"}}
COLLECTION = "/apis/apiregistration.k8s.io/v1/apiservices"
CONFLICT = {"kind": "Status", "reason": "Conflict", "code": 409}


def plane_answering(puts: list[tuple[int, dict]]):
    """A plane whose API answers the POST 409 (it exists), each GET with a newer resourceVersion, and each PUT from
    ``puts`` in turn; ``calls`` records (method, resourceVersion sent)."""
    plane = RealControlPlane.__new__(RealControlPlane)
    calls, version = [], iter(range(1, 100))

    def request(method, path, body=None, **kwargs):
        calls.append((method, (body or {}).get("metadata", {}).get("resourceVersion")))
        if method == "POST":
            return 409, {"kind": "Status", "reason": "AlreadyExists", "code": 409}
        if method == "GET":
            return 200, {**OBJ, "metadata": {**OBJ["metadata"], "resourceVersion": str(next(version))}}
        return puts.pop(0)

    plane.request = request
    return plane, calls


def test_a_replace_that_lost_a_race_reads_again_and_replaces():
    plane, calls = plane_answering([(409, CONFLICT), (200, OBJ)])
    plane.create_or_replace(COLLECTION, OBJ)
    assert calls == [("POST", None), ("GET", None), ("PUT", "1"), ("GET", None), ("PUT", "2")]


def test_a_replace_refused_otherwise_or_losing_every_time_raises_naming_the_object():
    plane, _ = plane_answering([(422, {"kind": "Status", "code": 422})])
    with pytest.raises(RuntimeError, match=r"writing APIService v1alpha3.subresources.kubevirt.io: HTTP 422"):
        plane.create_or_replace(COLLECTION, OBJ)
    plane, calls = plane_answering([(409, CONFLICT)] * 5)
    with pytest.raises(RuntimeError, match="HTTP 409"):
        plane.create_or_replace(COLLECTION, OBJ)
    assert [c[0] for c in calls].count("PUT") == 5
