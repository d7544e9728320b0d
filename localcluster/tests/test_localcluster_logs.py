"""``kubectl logs`` and ``read_namespaced_pod_log`` against the local cluster: the ``pods/log`` subresource.

Pods run as local processes (scheduler and node agent); their output is read
back through the API as a real cluster serves it: the current run, the last
``tailLines``, ``limitBytes``, one container of several (400 without a name,
as the API server answers), ``previous`` after a restart (400 when there was
none), the kubelet's 400 for a container still waiting, an empty log for a
Pod not on a node yet, and ``follow`` streaming lines until the container
exits. Discovery lists ``pods/log`` with the verb ``get`` only, and writes to
it answer 405.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
from localcluster.testing import wait_for

pytestmark = pytest.mark.parametrize(
    "cluster_thread", [{"controllers": ("storage", "protection", "scheduler", "nodeagent")}], indirect=True
)

kubectl_needed = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")

IMAGE = "quay.io/jupyter/base-notebook:2024-05-27"
PRINT_THEN_WAIT = "import sys, time\nfor i in range(1, 6): print(f'line {i}', flush=True)\ntime.sleep(600)"


def pod(name: str, *containers: dict, restart: str = "Always", **spec) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"restartPolicy": restart, "terminationGracePeriodSeconds": 1, "containers": list(containers), **spec},
    }


def python(name: str, script: str, **more) -> dict:
    return {"name": name, "image": IMAGE, "command": ["python", "-c", script], **more}


@pytest.fixture
def v1(sync_api):
    from kubernetes import client

    return client.CoreV1Api(sync_api)


def status_of(v1, name: str, container: str | None = None):
    statuses = v1.read_namespaced_pod(name, "default").status.container_statuses or []
    return next((s for s in statuses if container in (None, s.name)), None)


def running(v1, name: str, container: str | None = None) -> bool:
    status = status_of(v1, name, container)
    return bool(status and status.state.running)


def log(v1, name: str, **options) -> str:
    return v1.read_namespaced_pod_log(name, "default", **options)


def refused(v1, name: str, **options) -> tuple[int, str]:
    from kubernetes.client.exceptions import ApiException

    with pytest.raises(ApiException) as caught:
        log(v1, name, **options)
    return caught.value.status, json.loads(caught.value.body)["message"]


async def test_current_output_tail_and_limit(v1):
    v1.create_namespaced_pod("default", pod("printer", python("main", PRINT_THEN_WAIT)))
    await wait_for(lambda: running(v1, "printer") and log(v1, "printer").count("\n") == 5, timeout=15)
    assert log(v1, "printer") == "".join(f"line {i}\n" for i in range(1, 6))
    assert log(v1, "printer", tail_lines=2) == "line 4\nline 5\n"
    assert log(v1, "printer", tail_lines=0) == ""
    assert log(v1, "printer", limit_bytes=9) == "line 1\nli"
    assert log(v1, "printer", container="main", timestamps=True).startswith("line 1\n")
    assert refused(v1, "printer", previous=True) == (400, 'previous terminated container "main" in pod "printer" not found')
    assert refused(v1, "printer", container="sidecar") == (400, "container sidecar is not valid for pod printer")
    assert refused(v1, "printer", tail_lines=-1)[0] == 422


async def test_several_containers_need_a_name(v1):
    body = pod(
        "two",
        python("a", "print('from a', flush=True); import time; time.sleep(600)"),
        python("b", "print('from b', flush=True); import time; time.sleep(600)"),
    )
    body["spec"]["initContainers"] = [python("setup", "print('setting up')")]
    v1.create_namespaced_pod("default", body)
    await wait_for(lambda: running(v1, "two", "a") and running(v1, "two", "b"), timeout=15)
    assert refused(v1, "two") == (400, "a container name must be specified for pod two, choose one of: [setup a b]")
    await wait_for(lambda: log(v1, "two", container="b") == "from b\n", timeout=15)
    assert log(v1, "two", container="setup") == "setting up\n"  # a finished init container keeps its log
    # Each container's Events name it as a kubelet does (involvedObject.fieldPath)
    about = {(e.reason, e.involved_object.field_path) for e in v1.list_namespaced_event(
        "default", field_selector="involvedObject.name=two").items}
    assert {("Started", "spec.initContainers{setup}"), ("Started", "spec.containers{a}"),
            ("Started", "spec.containers{b}")} <= about, about


async def test_previous_run_after_a_restart(v1, cluster_thread):
    cluster_thread.call(lambda cluster: setattr(cluster.controllers["nodeagent"], "restart_backoff", 0.2))
    script = (
        "import os, pathlib, sys, time\n"
        "count = pathlib.Path(os.environ['COUNT'])\n"
        "n = int(count.read_text()) + 1 if count.exists() else 1\n"
        "count.write_text(str(n))\n"
        "print(f'run {n}', flush=True)\n"
        "sys.exit(1) if n < 3 else time.sleep(600)\n"
    )
    body = pod(
        "crashy",
        python(
            "main",
            script,
            env=[{"name": "COUNT", "value": "/scratch/count"}],  # a path in the pod: the node agent maps it to the volume
            volumeMounts=[{"name": "scratch", "mountPath": "/scratch"}],
        ),
        volumes=[{"name": "scratch", "emptyDir": {}}],
    )
    v1.create_namespaced_pod("default", body)
    await wait_for(lambda: (s := status_of(v1, "crashy")) and s.restart_count == 2 and s.state.running, timeout=15)
    await wait_for(lambda: log(v1, "crashy") == "run 3\n", timeout=15)
    assert log(v1, "crashy", previous=True) == "run 2\n"


async def test_waiting_and_unscheduled_pods(v1, cluster_thread):
    cluster_thread.call(lambda cluster: cluster.controllers["nodeagent"].failing_images.add("registry.example/missing:1"))
    v1.create_namespaced_pod("default", pod("pull", {"name": "main", "image": "registry.example/missing:1"}))
    await wait_for(lambda: (s := status_of(v1, "pull")) and s.state.waiting and s.state.waiting.reason in ("ErrImagePull", "ImagePullBackOff"), timeout=15)
    code, message = refused(v1, "pull")
    assert code == 400 and message in (
        'container "main" in pod "pull" is waiting to start: image can\'t be pulled',
        'container "main" in pod "pull" is waiting to start: trying and failing to pull image',
    )
    v1.create_namespaced_pod("default", pod("nowhere", python("main", "print(1)"), nodeSelector={"no": "such-node"}))
    assert log(v1, "nowhere") == ""


async def test_discovery_and_writes(raw):
    _, core, _ = await raw.request("GET", "/api/v1")
    logs = next(r for r in core["resources"] if r["name"] == "pods/log")
    assert (logs["kind"], logs["verbs"], logs["namespaced"]) == ("Pod", ["get"], True)
    code, body, _ = await raw.request("PUT", "/api/v1/namespaces/default/pods/x/log", {})
    assert code == 405 and body["reason"] == "MethodNotAllowed"
    code, body, _ = await raw.request("GET", "/api/v1/namespaces/default/pods/x/log")
    assert code == 404 and body["reason"] == "NotFound"


class Kubectl:
    def __init__(self, kubeconfig: str, home):
        self.env = {**os.environ, "KUBECONFIG": kubeconfig, "HOME": str(home), "KUBECACHEDIR": str(home / "cache")}

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(["kubectl", *args], env=self.env, capture_output=True, text=True, timeout=timeout)

    def out(self, *args: str) -> str:
        done = self.run(*args)
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done.stdout


@kubectl_needed
async def test_kubectl_logs(v1, kubeconfig, tmp_path):
    kubectl = Kubectl(kubeconfig, tmp_path)
    v1.create_namespaced_pod("default", pod("printer", python("main", PRINT_THEN_WAIT)))
    await wait_for(lambda: running(v1, "printer") and log(v1, "printer").count("\n") == 5, timeout=15)
    assert kubectl.out("logs", "printer") == "".join(f"line {i}\n" for i in range(1, 6))
    assert kubectl.out("logs", "printer", "--tail=1") == "line 5\n"
    assert kubectl.out("logs", "pod/printer", "-c", "main", "--tail=2") == "line 4\nline 5\n"
    previous = kubectl.run("logs", "printer", "--previous")
    assert previous.returncode != 0
    assert 'previous terminated container "main" in pod "printer" not found' in previous.stderr


@kubectl_needed
async def test_kubectl_logs_follow_streams_until_the_container_exits(v1, kubeconfig, tmp_path):
    kubectl = Kubectl(kubeconfig, tmp_path)
    script = (
        "import time\n"
        "print('started', flush=True)\n"
        "time.sleep(1.5)\n"
        "for i in range(3): print(f'tick {i}', flush=True); time.sleep(0.3)\n"
    )
    v1.create_namespaced_pod("default", pod("ticker", python("main", script), restart="Never"))
    await wait_for(lambda: running(v1, "ticker") and "started" in log(v1, "ticker"), timeout=15)
    follower = subprocess.Popen(["kubectl", "logs", "-f", "ticker"], env=kubectl.env, stdout=subprocess.PIPE, text=True)
    try:
        first = follower.stdout.readline()
        assert first == "started\n"
        assert status_of(v1, "ticker").state.running  # it streamed while the container ran
        out, _ = follower.communicate(timeout=20)
    finally:
        follower.kill()
        follower.wait()
    assert out == "tick 0\ntick 1\ntick 2\n"
    assert follower.returncode == 0
    await wait_for(lambda: v1.read_namespaced_pod("ticker", "default").status.phase == "Succeeded", timeout=15)
    assert kubectl.out("logs", "-f", "ticker") == "started\ntick 0\ntick 1\ntick 2\n"  # done: no wait
