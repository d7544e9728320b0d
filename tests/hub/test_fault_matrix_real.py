"""The fault matrix on the real control plane: one case of each kind of API fault, through the fault proxy.

The embedded cluster runs every case of the matrix (tests/hub/test_fault_matrix.py);
here the same cases reach a real kube-apiserver, controller-manager and
scheduler, with the faults injected by the proxy in front of the API server
(localcluster.realplane.faultproxy) and the invariants
asserted after each one, as there: no disk deleted, one consumer per
ReadWriteOnce disk, every GPU second metered, no open run without compute,
and the next start works. Every row whose fault is an API answer (a
container's or a VM's start and stop) and an e-mail user name; then every
case written as its own test there (metering, races, hub crashes, ghost and
orphan Pods, user deletion, a VM's first start), the same functions with
this module's fixtures. The tampered-input and other odd-name rows never
reach the API server differently and run on the embedded cluster only.
"""

from __future__ import annotations

import pytest

# The matrix's rows, and the cases written as tests of their own (collected here too, with this module's fixtures):
from tests.hub.test_fault_matrix import (
    CASES,
    core,  # noqa: F401 (a CoreV1Api on this module's cluster)
    test_a_ghost_pod_is_removed_once_the_api_is_back_and_metered_until_then,  # noqa: F401
    test_a_leftover_holding_the_home_is_named_as_one_and_the_start_after_its_removal_runs,  # noqa: F401
    test_a_stop_retries_a_pod_delete_that_answers_500,  # noqa: F401
    test_a_stop_while_the_start_is_under_way,  # noqa: F401
    test_a_vm_root_disk_is_claimed_on_its_first_start,  # noqa: F401
    test_a_vm_whose_stop_kept_failing_does_not_lock_its_user_out,  # noqa: F401
    test_hub_killed_while_a_gpu_server_runs,  # noqa: F401
    test_hub_killed_while_a_start_is_under_way,  # noqa: F401
    test_hub_killed_while_a_stop_is_under_way,  # noqa: F401
    test_orphan_compute_is_reported_and_one_command_removes_it,  # noqa: F401
    test_pod_create_409_keeps_the_run_open,  # noqa: F401
    test_two_named_servers_on_one_home,  # noqa: F401
    test_two_starts_of_one_server_at_once,  # noqa: F401
    test_user_deletion_whose_retention_write_fails_is_retried,  # noqa: F401
)
from tests.support import faultcases, planes
from tests.support.faultcases import run_case
from tests.support.invariants import assert_invariants

#: The categories whose faults are API answers: every case of them runs here (tests/hub/test_fault_matrix.py's CASES).
API_FAULTS = ("container start", "container stop", "VM start", "VM stop")
#: Cases of the other categories that reach the API server differently on a real one (an e-mail name's objects).
REAL_CASES = ("name-email",)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with planes.running("real", tmp_path_factory.mktemp("cluster"), golden=True, fault_proxy=True) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def hub(cluster, tmp_path_factory):
    extra, start_timeout = planes.hub_settings(cluster)
    with faultcases.matrix_hub(cluster, tmp_path_factory.mktemp("hub"), extra=extra, start_timeout=start_timeout) as hub:
        yield hub


@pytest.fixture(scope="module")
def ledger(hub):
    with faultcases.matrix_ledger(hub) as ledger:
        yield ledger


@pytest.mark.parametrize("case", [c for c in CASES if c.category in API_FAULTS or c.id in REAL_CASES], ids=lambda c: c.id)
def test_fault_case_on_the_real_plane(case, hub, cluster, ledger):
    run_case(case, hub=hub, cluster=cluster, ledger=ledger)


def test_the_invariants_see_the_real_plane(hub, cluster, ledger):
    """The invariants are not vacuous here: the proxy recorded the hub's writes, the node agent the disks' use."""
    assert cluster.requests.count("POST", r"/namespaces/default/pods$") > 0
    assert cluster.attacher.history
    assert_invariants(cluster, ledger=ledger)
