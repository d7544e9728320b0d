"""A start right after an API server outage, through a real JupyterHub on the local cluster.

Covers: every request of the hub answered 503 for a minute, with every open
watch dropped (a control-plane upgrade, an etcd hiccup); once the API server
answers again, a new user's start completes within the hub's 60 s start
timeout (kubespawner's reflectors were asleep for up to 25.6 s more, or had
given up). Then etcd's history compacted and the watches dropped again: a
reflector lists before it watches, so none resumes from a version etcd no
longer has, and a start completes (a 410 Gone on a watch itself is
tests/cluster/test_watch_recovery.py's). benchmarks/api_outage.py measures how long the first start takes
after outages of several lengths, against kubespawner's own watch loop.
"""

from __future__ import annotations

import time

import pytest

from localcluster import ClusterThread
from tests.support.hubharness import CONFIG_D, Hub

#: Seconds the API server answers nothing but 503 (the issue's minute).
OUTAGE = 60
PROFILE = {"profile": "jupyterlab-cpu"}


@pytest.fixture(scope="module")
def thread(tmp_path_factory):
    thread = ClusterThread(state_dir=tmp_path_factory.mktemp("cluster"))
    thread.start()
    yield thread
    thread.stop()


@pytest.fixture(scope="module")
def hub(thread, tmp_path_factory):
    config = "".join(f"load_subconfig({str(CONFIG_D / piece)!r})\n" for piece in ("10-workspace-spawner.py", "20-profiles.py"))
    hub = Hub(tmp_path_factory.mktemp("hub"), thread.cluster.kubeconfig, config, start_timeout=60).start()
    yield hub
    hub.stop()


def outage(thread, seconds: float) -> None:
    """Every request of the hub answered 503 for ``seconds``, its open watches dropped at the start."""
    cluster = thread.cluster
    cluster.faults.add("*", "", status=503, reason="ServiceUnavailable", message="etcd is unavailable", count=10**9)
    thread.call(lambda c: c.store.close_watches())
    try:
        time.sleep(seconds)
    finally:
        cluster.faults.clear()


def test_a_start_right_after_a_minute_long_outage_completes_within_the_start_timeout(hub, thread):
    hub.create_user("warm")
    hub.start_server("warm", PROFILE)  # every watch of the hub is up
    hub.stop_server("warm")
    outage(thread, OUTAGE)
    hub.create_user("after-outage")
    hub.start_server("after-outage", PROFILE)  # fails past the 60 s start timeout
    assert "restarting pod reflector" not in hub.log(tail=None)
    hub.stop_server("after-outage")


def test_a_start_after_the_watch_history_was_compacted_completes(hub, thread):
    thread.call(lambda c: (c.store.compact(), c.store.close_watches()))
    hub.create_user("after-compaction")
    hub.start_server("after-compaction", PROFILE)
    hub.stop_server("after-compaction")
