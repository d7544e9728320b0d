"""Server-side printing cells (``localcluster.tables``) as pure functions: no cluster.

Covers Kubernetes' ``HumanDuration`` age format, the Pod STATUS/READY/RESTARTS
cells kubectl shows, condition and list-index cells for KubeVirt's printer
columns, and the Table document's shape (headers only when asked, row objects
per ``includeObject``).
"""

from __future__ import annotations

import datetime

import pytest

from localcluster import tables

NOW = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)


@pytest.mark.parametrize(
    "seconds, text",
    [
        (-5, "<invalid>"),
        (0, "0s"),
        (119, "119s"),
        (200, "3m20s"),
        (240, "4m"),
        (25 * 60, "25m"),
        (5 * 3600 + 600, "5h10m"),
        (20 * 3600, "20h"),
        (3 * 86400 + 4 * 3600, "3d4h"),
        (400 * 86400, "400d"),
        (800 * 86400, "2y70d"),
        (9 * 365 * 86400, "9y"),
    ],
)
def test_human_duration(seconds, text):
    assert tables.human_duration(seconds) == text


def pod(phase="Running", statuses=(), deleting=False) -> dict:
    meta = {"name": "web", "creationTimestamp": "2023-12-31T23:59:00Z"}
    if deleting:
        meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    return {
        "metadata": meta,
        "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
        "status": {"phase": phase, "containerStatuses": list(statuses)},
    }


def test_pod_cells():
    crashing = {"ready": False, "restartCount": 4, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
    ready = {"ready": True, "restartCount": 1, "state": {"running": {}}}
    obj = pod(statuses=[ready, crashing])
    cells = tables.table("Pod", [obj], NOW)["rows"][0]["cells"]
    assert cells == ["web", "1/2", "CrashLoopBackOff", 5, "60s", "<none>", "<none>"]
    assert tables.pod_status(pod(deleting=True), NOW) == "Terminating"
    exited = {"ready": False, "state": {"terminated": {"exitCode": 3}}}
    assert tables.pod_status(pod(phase="Failed", statuses=[exited]), NOW) == "ExitCode:3"


def test_kubevirt_cells():
    vmi = {
        "metadata": {"name": "vm1"},
        "status": {
            "phase": "Running",
            "nodeName": "gpu-node-1",
            "interfaces": [{"ipAddress": "127.0.0.5"}],
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    cells = tables.table("VirtualMachineInstance", [vmi], NOW)["rows"][0]["cells"]
    assert cells[:6] == ["vm1", "<unknown>", "Running", "127.0.0.5", "gpu-node-1", "True"]


def test_table_shape():
    obj = {"metadata": {"name": "c", "creationTimestamp": "2024-01-01T00:00:00Z"}, "data": {"k": "v"}}
    full = tables.table("ConfigMap", [obj], NOW, include_object="Object", resource_version="7")
    assert full["metadata"] == {"resourceVersion": "7"} and full["rows"][0]["object"] is obj
    assert [c["name"] for c in full["columnDefinitions"]] == ["Name", "Data", "Age"]
    bare = tables.table("ConfigMap", [obj], NOW, include_object="None", headers=False)
    assert bare["columnDefinitions"] == [] and "object" not in bare["rows"][0]
    assert [c["name"] for c in tables.table("Widget", [obj], NOW)["columnDefinitions"]] == ["Name", "Age"]
