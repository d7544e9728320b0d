"""Our reflectors after an API server outage (workspacespawner.k8s.watchloop), on the local cluster.

Covers: a watch whose lists fail 30 times in a row (kubespawner's loop gives up
after 9) goes on and, once the API server answers, lists again and holds what
was made during the outage, never calling ``on_failure``; a 410 Gone is no
failure: the loop lists again at once, with no wait. The waits themselves are
made instant here (their values are tests/unit/test_watchloop_delay.py's).
"""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client
from localcluster.testing import wait_for

from workspacespawner.k8s import watches, watchloop

NS = "default"
LABELS = {"app": "watch-recovery"}
CLAIMS = "/api/v1/namespaces/default/persistentvolumeclaims"

api_only = pytest.mark.parametrize("cluster_thread", [{"controllers": ()}], indirect=True)


def claim(name: str) -> dict:
    return {"metadata": {"name": name, "labels": LABELS},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}


@pytest.fixture
def waits(monkeypatch) -> list[int]:
    """The failure counts the loop asked to wait after, each wait made instant."""
    asked = []

    def instant(failures: int, **_):
        asked.append(failures)
        return 0.01

    monkeypatch.setattr(watchloop, "retry_delay", instant)
    return asked


@pytest.fixture
async def reflector(api):
    gave_up = []
    reflector = watches.PersistentVolumeClaimReflector(
        namespace=NS, core_api=client.CoreV1Api(api), labels=LABELS, timeout_seconds=1, on_failure=lambda: gave_up.append(1),
    )
    await reflector.start()
    reflector.gave_up = gave_up
    try:
        yield reflector
    finally:
        await reflector.stop()


@api_only
async def test_a_watch_that_fails_thirty_times_comes_back_with_what_the_outage_hid(cluster, api, reflector, waits):
    cluster.faults.add("GET", CLAIMS, status=503, reason="ServiceUnavailable", count=30)
    cluster.store.create(cluster.store.kind("", "v1", "persistentvolumeclaims"), NS, claim("made-in-the-outage"))
    await wait_for(lambda: f"{NS}/made-in-the-outage" in reflector.resources, timeout=30)
    assert max(waits) >= 30 and waits[:3] == [1, 2, 3]  # one streak, counted up
    assert reflector.failures == 0 and watches.alive(reflector) and reflector.gave_up == []
    await client.CoreV1Api(api).create_namespaced_persistent_volume_claim(NS, claim("made-after"))
    await wait_for(lambda: f"{NS}/made-after" in reflector.resources, timeout=10)


@api_only
async def test_a_410_gone_lists_again_at_once(cluster, api, reflector, waits):
    cluster.faults.add("GET", CLAIMS, status=410, reason="Expired", count=2)
    cluster.store.create(cluster.store.kind("", "v1", "persistentvolumeclaims"), NS, claim("after-expiry"))
    await wait_for(lambda: f"{NS}/after-expiry" in reflector.resources, timeout=10)
    assert waits == [] and reflector.failures == 0
    assert cluster.faults.match("GET", CLAIMS) is None  # both 410s were answered
