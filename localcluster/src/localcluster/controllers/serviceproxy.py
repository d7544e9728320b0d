"""The service proxy: kube-proxy's part, forwarding each Service's clusterIP:port to a ready endpoint.

Service cluster IPs are loopback addresses (``127.96.0.0/16``, see
:mod:`..defaults`), so for every Service with a selector and a clusterIP in
``127/8`` the proxy listens on ``clusterIP:port`` for each TCP port. Each
new connection goes to a ready endpoint, chosen at connect time as
kube-proxy's rules would: a Running, Ready Pod whose labels match the
selector (``podIP:targetPort``, a number or a named container port), or a
Running, Ready VMI whose labels match (the labels of its VM's template,
``kubevirt.io/domain`` among them; named ports come from its interfaces'
``ports``). Terminating pods are not endpoints. With no endpoint, or none
accepting, the connection is closed. Bytes are piped both ways with
half-close passed through; a Service deleted or changed stops or moves its
listeners. The same on the real control plane, whose ClusterIP range is
inside loopback too (``127.64.0.0/16``): there is no kube-proxy there
but this one. Services without a selector (``kubernetes`` among them) are
never proxied, and so never dialled.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import logging
import random

from ..conditions import has_condition
from ..kinds import Kind
from .base import Controller
from .kubelet import container_ports
from .refs import PODS, VMIS, get_or_none
from .runtime import probe_port
from .virthandler import vmi_ports

log = logging.getLogger("localcluster")

SERVICES = ("", "v1", "services")
LOOPBACK = ipaddress.ip_network("127.0.0.0/8")


def _selected(obj: dict, namespace: str, selector: dict) -> bool:
    meta = obj["metadata"]
    labels = meta.get("labels") or {}
    return (
        meta.get("namespace") == namespace
        and not meta.get("deletionTimestamp")
        and (obj.get("status") or {}).get("phase") == "Running"
        and has_condition(obj, "Ready", "True")
        and all(labels.get(key) == value for key, value in selector.items())
    )


def _pod_endpoint(pod: dict, target) -> tuple[str, int] | None:
    ip, port = pod["status"].get("podIP"), probe_port(target, container_ports(pod["spec"].get("containers") or []))
    return (ip, port) if ip and port else None


def _vmi_endpoint(vmi: dict, target) -> tuple[str, int] | None:
    addresses = [i.get("ipAddress") for i in vmi["status"].get("interfaces") or [] if i.get("ipAddress")]
    port = probe_port(target, vmi_ports(vmi))
    return (addresses[0], port) if addresses and port else None


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: asyncio.StreamWriter) -> None:
    """Copy ``reader`` into ``writer`` until EOF, then half-close; on an error, abort both sides."""
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:
        for side in (writer, peer):
            side.transport.abort()


class ServiceProxy(Controller):
    """Listens on every selector Service's clusterIP:port and forwards to a ready endpoint.

    ``resync`` retries listeners that could not bind (another local cluster
    on this machine holding the same address, say).
    """

    name = "serviceproxy"
    watches = (SERVICES,)
    reads = (PODS, VMIS)
    resync = 5.0

    def __init__(self, cluster):
        super().__init__(cluster)
        self._servers: dict[tuple[str, str], dict[tuple[str, int], asyncio.Server]] = {}
        self._connections: set[asyncio.StreamWriter] = set()
        self._unbound: set[tuple[str, int]] = set()  # addresses that failed to bind: warned about once

    @staticmethod
    def _addresses(service: dict) -> set[tuple[str, int]]:
        """The (clusterIP, port) pairs a Service should be reachable on; empty when the proxy has nothing to do."""
        spec = service.get("spec") or {}
        ip = spec.get("clusterIP")
        if not spec.get("selector") or spec.get("type") == "ExternalName" or not ip or ip == "None":
            return set()
        try:
            if ipaddress.ip_address(ip) not in LOOPBACK:
                return set()
        except ValueError:
            return set()
        return {(ip, p["port"]) for p in spec.get("ports") or [] if p.get("protocol", "TCP") == "TCP"}

    async def reconcile(self, kind: Kind, obj: dict, deleted: bool) -> None:
        meta = obj["metadata"]
        key = (meta["namespace"], meta["name"])
        wanted = set() if deleted else self._addresses(obj)
        servers = self._servers.setdefault(key, {})
        for address in set(servers) - wanted:
            server = servers.pop(address)
            server.close()
            log.debug("serviceproxy: %s/%s no longer on %s:%s", *key, *address)
        for ip, port in wanted - set(servers):
            handler = functools.partial(self._forward, key, port)
            try:
                servers[(ip, port)] = await asyncio.start_server(handler, ip, port)
            except OSError as e:
                level = logging.DEBUG if (ip, port) in self._unbound else logging.WARNING
                self._unbound.add((ip, port))
                log.log(level, "serviceproxy: cannot listen on %s:%s for %s/%s: %s", ip, port, *key, e)
                continue
            self._unbound.discard((ip, port))
            log.debug("serviceproxy: %s/%s on %s:%s", *key, ip, port)
        if not servers:
            self._servers.pop(key, None)

    def endpoints(self, namespace: str, name: str, port: int) -> list[tuple[str, int]]:
        """The ready (ip, port) endpoints behind ``port`` of Service ``namespace/name``."""
        service = get_or_none(self.client, SERVICES, namespace, name)
        if service is None:
            return []
        spec = service["spec"]
        entry = next((p for p in spec.get("ports") or [] if p.get("port") == port), None)
        if entry is None:
            return []
        target, selector = entry.get("targetPort", port), spec.get("selector") or {}
        found = []
        for key, endpoint in ((PODS, _pod_endpoint), (VMIS, _vmi_endpoint)):
            for obj in self.client.objects(self.client.kind(*key)):
                if _selected(obj, namespace, selector):
                    address = endpoint(obj, target)
                    if address is not None:
                        found.append(address)
        return found

    async def _forward(self, key: tuple[str, str], port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections.add(writer)
        upstream = None
        try:
            endpoints = self.endpoints(*key, port)
            random.shuffle(endpoints)
            for ip, target in endpoints:
                try:
                    upstream = await asyncio.open_connection(ip, target)
                    break
                except OSError as e:
                    log.debug("serviceproxy: %s/%s endpoint %s:%s: %s", *key, ip, target, e)
            if upstream is None:
                log.debug("serviceproxy: %s/%s:%s has no ready endpoint", *key, port)
                return
            up_reader, up_writer = upstream
            self._connections.add(up_writer)
            await asyncio.gather(_pipe(reader, up_writer, writer), _pipe(up_reader, writer, up_writer))
        finally:
            for side in (writer, upstream[1] if upstream else None):
                if side is not None:
                    self._connections.discard(side)
                    side.close()
                    with contextlib.suppress(OSError):
                        await side.wait_closed()

    async def stop(self) -> None:
        """Stop listening and drop every open connection."""
        await super().stop()
        for servers in self._servers.values():
            for server in servers.values():
                server.close()
        for writer in list(self._connections):
            writer.transport.abort()
        for servers in self._servers.values():
            for server in servers.values():
                await server.wait_closed()
        self._servers.clear()
