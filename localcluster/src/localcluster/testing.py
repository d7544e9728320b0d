"""Helpers for tests that run against the local cluster: a wait with a deadline, the store's objects, raw HTTP.

Used by the local cluster's own tests and by any suite that installs it (the
fixtures are in :mod:`localcluster.pytest_plugin`).
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import time
from pathlib import Path
from urllib.parse import urlencode


async def wait_for(predicate, timeout: float = 5, interval: float = 0.02):
    """Await until ``predicate()`` is truthy and return its value; fail after ``timeout`` seconds.

    A wait with a deadline, not a timed assertion: the cluster's controllers
    run on the same event loop, so each step yields to them.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s: {getattr(predicate, '__name__', predicate)}")
        await asyncio.sleep(interval)


def get_object(cluster, key: tuple[str, str, str], name: str, namespace: str | None = "default") -> dict | None:
    """A copy of the stored object of kind ``key`` (group, version, plural), or None."""
    from localcluster.errors import ApiError

    try:
        return cluster.store.get(cluster.store.kind(*key), namespace, name)
    except ApiError:
        return None


def create_object(cluster, key: tuple[str, str, str], body: dict, namespace: str | None = "default") -> dict:
    """Create ``body`` as kind ``key`` through the store (validated like a client's write)."""
    return cluster.store.create(cluster.store.kind(*key), namespace, body)


def events_for(cluster, name: str, reason: str | None = None) -> list[dict]:
    """The Events about objects called ``name`` (with ``reason``, if given)."""
    store = cluster.store
    return [
        e for e in store.objects(store.kind("", "v1", "events"))
        if e["involvedObject"]["name"] == name and (reason is None or e["reason"] == reason)
    ]


class RawClient:
    """Plain HTTP against the cluster, for what typed clients cannot send or show (bad bodies, headers, raw Status)."""

    def __init__(self, url: str):
        from tornado.httpclient import AsyncHTTPClient

        self.url = url
        self.http = AsyncHTTPClient(force_instance=True)

    async def request(self, method: str, path: str, body=None, *, content_type: str = "application/json", headers=None):
        """Send a request; returns ``(status code, parsed JSON body or text, response headers)``."""
        import json

        if body is not None and not isinstance(body, (str, bytes)):
            body = json.dumps(body)
        all_headers = {"Content-Type": content_type, **(headers or {})}
        response = await self.http.fetch(
            self.url + path,
            method=method,
            body=body,
            headers=all_headers,
            raise_error=False,
            allow_nonstandard_methods=True,
            request_timeout=30,
        )
        text = response.body.decode() if response.body else ""
        try:
            parsed = json.loads(text) if text else None
        except ValueError:
            parsed = text
        return response.code, parsed, response.headers

    async def watch(self, path: str, *, headers=None):
        """GET a watch URL to its end; returns ``(status code, list of events, response headers)``."""
        import json

        response = await self.http.fetch(self.url + path, headers=headers, raise_error=False, request_timeout=30)
        events = [json.loads(line) for line in response.body.decode().splitlines() if line]
        return response.code, events, response.headers

    def close(self) -> None:
        self.http.close()


def run_kubectl(kubectl, kubeconfig, *args, check=True, timeout=60):
    """Run ``kubectl`` with ``kubeconfig``; fails the test on a non-zero exit unless ``check`` is false."""
    res = subprocess.run(
        [kubectl, f"--kubeconfig={kubeconfig}", *args], capture_output=True, text=True, timeout=timeout
    )
    if check and res.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
    return res


async def gone(read, *args) -> bool:
    """Whether ``await read(*args)`` answers 404."""
    from kubernetes_asyncio import client

    try:
        await read(*args)
    except client.ApiException as e:
        return e.status == 404
    return False


class Probe:
    """Raw requests through ``api`` (a kubernetes_asyncio ``ApiClient``); ``plane`` is ``"embedded"`` or ``"real"``.

    ``kubeconfig`` is the file ``api`` was made from (for kubectl), if known.
    """

    def __init__(self, api, plane: str, kubeconfig: str | None = None):
        self.api = api
        self.plane = plane
        self.kubeconfig = kubeconfig
        self._resources: dict[str, dict[str, dict] | None] = {}

    @property
    def real(self) -> bool:
        return self.plane == "real"

    async def call(self, method: str, path: str, body=None, *, content_type: str = "application/json", query=None):
        """Send one request; returns ``(status, body)``, the body parsed from JSON (a Status on errors)."""
        from kubernetes_asyncio.client import ApiException

        if query:
            path = f"{path}?{urlencode(query)}"
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        try:
            response = await self.api.call_api(
                path,
                method,
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
                _preload_content=False,
            )
        except ApiException as e:
            return e.status, json.loads(e.body) if e.body else None
        text = await response.text()
        return response.status, json.loads(text) if text else None

    async def ok(self, method: str, path: str, body=None, **kwargs):
        """:meth:`call` that must answer 2xx; returns the body."""
        status, answer = await self.call(method, path, body, **kwargs)
        assert 200 <= status < 300, (method, path, status, answer)
        return answer

    async def collection_path(self, obj: dict, namespace: str) -> str | None:
        """Where ``obj``'s kind is created (``/apis/{g}/{v}[/namespaces/{ns}]/{plural}``), from discovery; None if not served."""
        api_version = obj["apiVersion"]
        if api_version not in self._resources:
            prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            status, doc = await self.call("GET", prefix)
            self._resources[api_version] = (
                {r["kind"]: r for r in doc["resources"] if "/" not in r["name"]} if status == 200 else None
            )
        resource = (self._resources[api_version] or {}).get(obj["kind"])
        if resource is None:
            return None
        prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        where = f"/namespaces/{namespace}" if resource["namespaced"] else ""
        return f"{prefix}{where}/{resource['name']}"

    async def gone(self, path: str) -> bool:
        """Whether GET ``path`` answers 404."""
        return (await self.call("GET", path))[0] == 404


async def eventually(probe, timeout: float = 60.0, interval: float = 0.2, what: str = "condition"):
    """Await ``probe()`` until it returns something true (returned); AssertionError after ``timeout`` seconds.

    For effects a real control plane's controllers bring about some time
    after the request (garbage collection, namespace removal); the embedded
    cluster mostly has them done when the request answers.
    """
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = await probe()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"{what} not met after {timeout}s (last: {last!r})")


# -- real guests (QEMU) --------------------------------------------------------------------------

def real_guest_skip_reason() -> str | None:
    """Why a real guest cannot boot in a test on this machine (what to install or build), or None when it can."""
    from .guestimage import why_no_real_guest

    if shutil.which("dpkg-deb") is None:
        return "dpkg-deb, which builds the test's package, is not installed (apt-get install dpkg)"
    return why_no_real_guest()


def tiny_deb(folder: Path) -> bytes:
    """A package ``wstiny`` 1.0 with one file (``/usr/share/wstiny/hello``), built in ``folder`` with dpkg-deb."""
    root = Path(folder) / "wstiny"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "usr/share/wstiny").mkdir(parents=True)
    (root / "usr/share/wstiny/hello").write_text("hello from wstiny\n")
    (root / "DEBIAN/control").write_text(
        "Package: wstiny\nVersion: 1.0\nArchitecture: all\nMaintainer: workspacespawner tests <tests@example.org>\n"
        "Description: a file, to see that what a user installs stays\n"
    )
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(root), str(Path(folder) / "wstiny.deb")], check=True,
                   capture_output=True)
    return (Path(folder) / "wstiny.deb").read_bytes()


def derived_image(disk: Path, target: Path, *requests: str) -> Path:
    """A copy of the golden image's raw ext4 ``disk`` at ``target`` (sparse, as a clone keeps its holes), changed by
    e2fsprogs' ``debugfs -w`` ``requests`` (``rm /usr/local/bin/x``, ``write /dev/null etc/cloud/...``) without
    mounting it: a broken image, for the tests of what a start says about one."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "--sparse=always", str(disk), str(target)], check=True)
    for request in requests:
        _debugfs_write(target, request)
    return target


def _debugfs_write(disk: Path, request: str) -> None:
    result = subprocess.run(["debugfs", "-w", "-R", request, str(disk)], check=True, capture_output=True, text=True)
    failed = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("debugfs ")]
    if failed:
        raise RuntimeError(f"debugfs {request!r}: {' '.join(failed)}")


def free_blocks(disk: Path) -> int:
    """The ext4 filesystem ``disk``'s free blocks, as its superblock counts them (``dumpe2fs -h``)."""
    header = subprocess.run(["dumpe2fs", "-h", str(disk)], check=True, capture_output=True, text=True).stdout
    return int(re.search(r"^Free blocks:\s+(\d+)", header, re.M).group(1))


def full_image(disk: Path, target: Path) -> Path:
    """A copy of the golden image's ``disk`` at ``target`` whose filesystem has no block left (at most one: the
    extent tree's own blocks come out of what is asked), root's reserve included: a file ``/fill`` holds the rest,
    allocated with ``debugfs fallocate`` (unwritten extents, so the copy stays sparse on the host). A guest whose
    system disk a user filled, for the tests of what a start says about one."""
    target = derived_image(disk, target, "write /dev/null /fill")
    end = -1
    while (free := free_blocks(target)) > 1:
        start, end = end + 1, end + free - 1  # the file's next blocks, leaving one for the extent tree
        _debugfs_write(target, f"fallocate /fill {start} {end}")
    return target


def qemu_processes(name: str) -> list[int]:
    """The processes whose command line names QEMU guest ``name`` (``-name guest=NAME``): that argument whole, so
    ``default_ws`` is not ``default_ws-student``."""
    argument = f"guest={name}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if argument in (entry / "cmdline").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found
