"""The local cluster's service proxy: a Service's clusterIP:port forwards to its ready endpoints.

Covers: HTTP through clusterIP:port reaching the selected pod, by a numeric
and by a named targetPort; a Service whose selector matches no ready
endpoint closing connections; a VMI as an endpoint (its interface address,
a named port of its interfaces); a deleted Service no longer listening.
"""

from __future__ import annotations

import asyncio
import random
import socket
import time

from localcluster.testing import wait_for

from localcluster import LocalCluster

NS = "default"
SERVE = ["python", "-m", "http.server", "--bind", "0.0.0.0", "8888"]


async def request(ip: str, port: int, path: str = "/") -> bytes:
    """One HTTP/1.0 GET over a raw connection; returns the whole answer (b"" if the proxy closed it)."""
    reader, writer = await asyncio.open_connection(ip, port)
    writer.write(f"GET {path} HTTP/1.0\r\nHost: {ip}\r\n\r\n".encode())
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    await writer.wait_closed()
    return answer


def service(name: str, selector: dict, ports: list[dict]) -> dict:
    """A ClusterIP Service at a random address of the service network (other local clusters may run beside this one)."""
    cluster_ip = f"127.96.{random.randrange(1, 255)}.{random.randrange(1, 255)}"
    spec = {"selector": selector, "ports": ports, "clusterIP": cluster_ip}
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec}


def create(store, obj: dict) -> dict:
    return store.create(store.kind_of(obj["apiVersion"], obj["kind"]), NS, obj)


def ready_pod(store, name: str) -> bool:
    pod = store.get(store.kind("", "v1", "pods"), NS, name)
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


async def test_cluster_ip_reaches_the_selected_pod(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=("scheduler", "nodeagent", "serviceproxy")) as cluster:
        store = cluster.store
        container = {
            "name": "notebook",
            "image": "quay.io/jupyter/base-notebook:2024-05-27",
            "args": SERVE,
            "ports": [{"name": "http", "containerPort": 8888}],
            "readinessProbe": {"tcpSocket": {"port": "http"}, "periodSeconds": 1},
        }
        create(store, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "nb", "labels": {"app": "nb"}}, "spec": {"containers": [container]}})
        svc = create(store, service("nb", {"app": "nb"}, [{"name": "web", "port": 80, "targetPort": 8888}, {"name": "named", "port": 81, "targetPort": "http"}]))
        empty = create(store, service("nobody", {"app": "nobody"}, [{"port": 80}]))
        ip = svc["spec"]["clusterIP"]
        await wait_for(lambda: ready_pod(store, "nb"))
        for port in (80, 81):
            answer = await wait_for_answer(ip, port)
            assert answer.startswith(b"HTTP/1.0 200") and b"Directory listing" in answer
        await wait_for(lambda: listening(empty["spec"]["clusterIP"], 80))
        reader, writer = await asyncio.open_connection(empty["spec"]["clusterIP"], 80)
        assert await asyncio.wait_for(reader.read(), 5) == b""  # no endpoint: closed at once
        writer.close()

        store.delete(store.kind("", "v1", "services"), NS, "nb")
        await wait_for(lambda: not listening(ip, 80))


def listening(ip: str, port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex((ip, port)) == 0


async def test_vmi_endpoint_by_named_port(tmp_path):
    async def guest(reader, writer):
        await reader.readline()
        writer.write(b"HTTP/1.0 200 OK\r\n\r\nfrom the guest")
        writer.close()

    server = await asyncio.start_server(guest, "127.10.254.1", 0)
    guest_port = server.sockets[0].getsockname()[1]
    async with server, LocalCluster(state_dir=tmp_path, controllers=("serviceproxy",)) as cluster:
        store = cluster.store
        vmis = store.kind("kubevirt.io", "v1", "virtualmachineinstances")
        vmi = create(store, {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": {"name": "ws", "labels": {"kubevirt.io/domain": "ws"}},
            "spec": {"domain": {"devices": {"interfaces": [{"name": "default", "masquerade": {}, "ports": [{"name": "lab", "port": guest_port}]}]}}},
        })
        vmi["status"] = {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "interfaces": [{"name": "default", "ipAddress": "127.10.254.1", "ipAddresses": ["127.10.254.1"]}],
        }
        store.replace(vmis, NS, "ws", vmi, subresource="status")
        svc = create(store, service("ws", {"kubevirt.io/domain": "ws"}, [{"port": 8888, "targetPort": "lab"}]))
        answer = await wait_for_answer(svc["spec"]["clusterIP"], 8888)
        assert answer.endswith(b"from the guest")


async def wait_for_answer(ip: str, port: int) -> bytes:
    """The first answer from ip:port once the proxy listens there."""
    deadline = time.monotonic() + 5
    while True:
        try:
            return await request(ip, port)
        except ConnectionRefusedError:
            assert time.monotonic() < deadline, "the proxy never listened"
            await asyncio.sleep(0.05)
