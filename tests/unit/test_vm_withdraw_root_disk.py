"""withdraw_unmade_root_disk deletes a root DataVolume only while it never had a volume, guarded by what was read.

CDI signs a DataVolume's clone token once, at its creation, for the PVC its DataSource names then; a DataVolume made
while its golden image was missing can therefore never clone once the DataSource is fixed. The start that finds it
waiting (CloneWithoutSource), or refused (CloneValidationFailed: a disk smaller than its image), withdraws it. A disk that got a volume, or that moved on since it was read, is kept.
"""

from __future__ import annotations

import pytest
from kubernetes_asyncio.client.rest import ApiException

from workspacespawner.backends.vm.effects import withdraw_unmade_root_disk


class CustomApi:
    def __init__(self, status: int | None = None):
        self.calls, self.status = [], status

    async def delete_namespaced_custom_object(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        if self.status is not None:
            raise ApiException(status=self.status)
        return {}


def datavolume(phase: str | None = "Pending", bound: str = "False", reason: str = "CloneWithoutSource") -> dict:
    status = {"conditions": [{"type": "Bound", "status": bound, "reason": reason}]}
    if phase is not None:
        status["phase"] = phase
    return {"metadata": {"namespace": "default", "name": "ws-gwen-root", "uid": "u-1", "resourceVersion": "42"},
            "status": status}


@pytest.mark.parametrize("reason", ["CloneWithoutSource", "CloneValidationFailed"])
async def test_a_disk_cdi_cannot_clone_is_withdrawn_guarded_by_what_was_read(reason):
    api = CustomApi()
    assert await withdraw_unmade_root_disk(api, datavolume(reason=reason)) is True
    [(args, kwargs)] = api.calls
    assert args == ("cdi.kubevirt.io", "v1beta1", "default", "datavolumes", "ws-gwen-root")
    assert kwargs["body"]["preconditions"] == {"uid": "u-1", "resourceVersion": "42"}


@pytest.mark.parametrize("dv", [datavolume(phase="Succeeded", bound="True", reason="Bound"),
                                datavolume(phase="CloneInProgress"),
                                datavolume(bound="True", reason="Bound")])
async def test_a_disk_that_got_a_volume_is_kept(dv):
    api = CustomApi()
    assert await withdraw_unmade_root_disk(api, dv) is False
    assert api.calls == []


@pytest.mark.parametrize("status", [404, 409])
async def test_a_disk_gone_or_changed_since_it_was_read_is_left_alone(status):
    assert await withdraw_unmade_root_disk(CustomApi(status), datavolume()) is False
