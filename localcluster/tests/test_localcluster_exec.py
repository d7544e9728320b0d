"""``kubectl exec`` into a running Pod of the local cluster: the command runs inside the container's sandbox.

Runs kubectl (1.31 or later: the WebSocket form of exec) against an
in-process cluster and checks what the command sees: the Pod's hostname, its
home volume at its real path, its own PID namespace, and the exit code
kubectl passes on; ``-i`` is refused. Skipped without kubectl or where the node agent
cannot sandbox.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
from localcluster.testing import wait_for
from localcluster.volumes import claim_path
from test_localcluster_nodeagent import (  # noqa: F401 (no_orphans: an autouse fixture)
    CONTROLLERS,
    NS,
    create,
    make_pod,
    make_pvc,
    no_orphans,
    running_pod,
)

from localcluster import LocalCluster

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")


async def kubectl(cluster, *args: str, stdin: bytes | None = None) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        "kubectl", "--kubeconfig", str(cluster.kubeconfig), "-n", NS, *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(stdin), 60)
    return proc.returncode, out.decode()


async def test_kubectl_exec_runs_inside_the_containers_sandbox(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=CONTROLLERS) as cluster:
        if not cluster.controllers["nodeagent"].isolation:
            pytest.skip("this host cannot sandbox (needs Linux, and root or user namespaces)")
        store = cluster.store
        create(store, make_pvc("home-ann"))
        pod = make_pod("ws-ann", ["sleep", "600"], volumeMounts=[{"name": "home", "mountPath": "/home/jovyan"}])
        pod["spec"]["volumes"] = [{"name": "home", "persistentVolumeClaim": {"claimName": "home-ann"}}]
        create(store, pod)
        await running_pod(store, "ws-ann")
        home = await wait_for(lambda: claim_path(cluster, NS, "home-ann"))
        (home / "notes.txt").write_text("from the home volume")

        code, out = await kubectl(cluster, "exec", "ws-ann", "--", "sh", "-c", "hostname; cat /home/jovyan/notes.txt; echo; ls /proc | grep -c '^[0-9]'")
        assert code == 0, out
        hostname, notes, processes = out.splitlines()
        assert (hostname, notes) == ("ws-ann", "from the home volume")
        assert int(processes) < 10  # its own PID namespace: the container's init, sleep, this shell and ls

        code, out = await kubectl(cluster, "exec", "ws-ann", "--", "sh", "-c", "echo written > /home/jovyan/typed.txt; touch /etc/x")
        assert code == 0 and (home / "typed.txt").read_text() == "written\n"
        assert not Path("/etc/x").exists()  # the container's own layer, not the host's /etc

        code, out = await kubectl(cluster, "exec", "-i", "ws-ann", "--", "cat")
        assert code != 0 and "without stdin" in out

        code, out = await kubectl(cluster, "exec", "ws-ann", "--", "sh", "-c", "echo failing >&2; exit 3")
        assert code == 3 and "failing" in out

        code, out = await kubectl(cluster, "exec", "ws-ann", "--", "no-such-program")
        assert code != 0 and "no-such-program" in out
