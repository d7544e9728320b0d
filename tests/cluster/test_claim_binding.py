"""The StorageClass a start's claims bind by is read once per process, however many starts ask at once (issue #15).

A burst of 30 simultaneous spawns read ``ceph-rbd`` 13 times: each start
missed the per-process cache while the first read was still in flight.
"""

from __future__ import annotations

import asyncio

from kubernetes_asyncio import client

from workspacespawner.storage import binding


async def test_simultaneous_starts_read_a_storage_class_once(api, cluster, monkeypatch):
    monkeypatch.setattr(binding, "_binding_modes", {})
    core = client.CoreV1Api(api)
    cluster.requests.clear()
    modes = await asyncio.gather(*(binding.binding_mode(core, "ceph-rbd") for _ in range(20)))
    assert set(modes) == {"Immediate"}
    assert cluster.requests.count("GET", r"/storageclasses/ceph-rbd$") == 1
    assert await binding.binding_mode(core, "no-such-class") == ""  # none such: no mode, and asked again next time
    assert await binding.binding_mode(core, "no-such-class") == ""
    assert cluster.requests.count("GET", r"/storageclasses/no-such-class$") == 2
