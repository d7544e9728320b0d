"""A real JupyterHub (subprocess) on loopback, pointed at a local cluster, driven through its REST API.

Tests use it where the hub matters: spawn requests, the 400/403 answers,
messages that reach the user, servers reached through the proxy.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import requests
from localcluster.ports import free_port

from tests.support.paths import CONFIG_D


def config_pieces(*pieces: str) -> str:
    """Config text that loads the given ``jupyterhub_config.d`` pieces in order (``"10-workspace-spawner.py"``, ...)."""
    return "".join(f"load_subconfig({str(CONFIG_D / piece)!r})\n" for piece in pieces)



def _container_state(state) -> str:
    """A container state (kubernetes client model) in a few words."""
    if state is None:
        return "-"
    for name in ("running", "waiting", "terminated"):
        part = getattr(state, name, None)
        if part is not None:
            detail = getattr(part, "reason", None) or ""
            code = getattr(part, "exit_code", None)
            message = (getattr(part, "message", None) or "")[:200]
            return " ".join(str(x) for x in (name, detail, f"exit {code}" if code is not None else "", message) if x)
    return "-"


def _log_tail(core, pod, container: str, lines: int = 15) -> list[str]:
    """The container's log's last ``lines`` lines (the previous run's when it restarted), or why there are none."""
    try:
        text = core.read_namespaced_pod_log(pod.metadata.name, pod.metadata.namespace, container=container,
                                            tail_lines=lines, _request_timeout=10)
        return text.splitlines()[-lines:] or ["(empty log)"]
    except Exception as e:  # noqa: BLE001 - only a help for reading a failure
        return [f"(no log: {type(e).__name__})"]

class Hub:
    """``jupyterhub`` in a subprocess running ``config`` (Python text), then the harness's loopback settings.

    The harness's settings come last, so its free ports, database, admin
    service token and test login win over whatever ``config`` sets.
    ``start_timeout`` (seconds, ``KubeSpawner.start_timeout``) bounds a
    spawn, and :meth:`wait_ready` waits that long plus 30 s: the real control
    plane (tests/support/planes.py) takes a VM through more hops than the
    embedded one, so its tests give it longer.
    """

    def __init__(self, workdir: Path, kubeconfig: Path, config: str, *, start_timeout: int = 60):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.token = secrets.token_hex(16)
        self.start_timeout = start_timeout
        self.config_file = self.workdir / "jupyterhub_config.py"
        self.config = textwrap.dedent(config)
        self._pick_ports()
        self.env = dict(os.environ, KUBECONFIG=str(kubeconfig))
        self.proc: subprocess.Popen | None = None
        self.log_file = self.workdir / "jupyterhub.log"
        self.answered = False

    def _pick_ports(self) -> None:
        """Free ports for the proxy, the hub and the proxy's API, written into the config file."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # the REST API is called at the hub's own port, as z2jh's services and singleuser servers do
        # (JUPYTERHUB_API_URL http://hub:8081/hub/api): a proxy hop adds its own failures (CI once read
        # configurable-http-proxy's 503 for a reset connection), which are not the hub's
        self.hub_port = free_port()
        self.api_url = f"http://127.0.0.1:{self.hub_port}/hub/api"
        # the test's config may name the hub's port (``hub_port``), e.g. in the URL a VM guest reaches the hub at
        self.config_file.write_text(f"hub_port = {self.hub_port}\n" + self.config + self._base_config())

    def _base_config(self) -> str:
        return textwrap.dedent(
            f"""
            c.JupyterHub.ip = "127.0.0.1"
            c.JupyterHub.port = {self.port}
            c.JupyterHub.hub_ip = "127.0.0.1"
            c.JupyterHub.hub_port = {self.hub_port}
            c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{free_port()}"
            c.ConfigurableHTTPProxy.pid_file = "{self.workdir / 'proxy.pid'}"
            c.JupyterHub.db_url = "sqlite:///{self.workdir / 'hub.sqlite'}"
            c.JupyterHub.cookie_secret = bytes.fromhex("{secrets.token_hex(32)}")
            c.JupyterHub.authenticator_class = "dummy"
            c.Authenticator.allow_all = True
            c.JupyterHub.services = [{{"name": "tests", "api_token": "{self.token}"}}]
            c.JupyterHub.load_roles = [{{"name": "admin", "services": ["tests"]}}]
            c.KubeSpawner.namespace = "default"
            c.KubeSpawner.start_timeout = {self.start_timeout}
            c.KubeSpawner.http_timeout = 60
            """
        )

    def start(self) -> Hub:
        """Start the hub and wait until it answers. Before it first answered, a port another process took between
        :func:`free_port` and the hub's bind (two test workers, clusters, browsers) is picked again, twice at most."""
        for attempt in range(3):
            try:
                return self._start()
            except RuntimeError as e:
                if self.answered or attempt == 2 or "Address already in use" not in str(e):
                    raise
                self._pick_ports()
        raise AssertionError("unreachable")

    def _start(self) -> Hub:
        # appended to, never truncated: a proxy the hub started outlives a SIGKILLed hub (kill_and_restart) and goes on
        # writing to this file; at its old offset in a truncated file that made a sparse file whose end was the proxy's
        log = open(self.log_file, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jupyterhub", "-f", str(self.config_file)],
            cwd=self.workdir,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        # a deadline, not a measure: a hub starts in seconds, but CI's two passes share two cores with clusters,
        # browsers and code-server builds
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyterhub exited {self.proc.returncode}:\n{self.log()}")
            try:
                if requests.get(f"{self.url}/hub/api/", timeout=2).ok:
                    self.answered = True
                    return self
            except (requests.ConnectionError, requests.Timeout):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"jupyterhub did not answer {self.url}/hub/api/ in 150 s:\n{self.log()}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log(self, tail: int | None = 8000) -> str:
        """The hub's log without the harness's own polling requests: its last ``tail`` characters (None: all of it,
        for a test that looks for a line)."""
        if not self.log_file.exists():
            return ""
        lines = self.log_file.read_text(errors="replace").splitlines(keepends=True)
        text = "".join(line for line in lines if "(tests@127.0.0.1)" not in line or " 200 GET " not in line)
        return text if tail is None else text[-tail:]

    # -- REST API ---------------------------------------------------------

    def api(self, method: str, path: str, **kwargs) -> requests.Response:
        headers = {"Authorization": f"token {self.token}"}
        return requests.request(method, f"{self.api_url}{path}", headers=headers, timeout=90, **kwargs)

    def create_user(self, name: str, groups: tuple[str, ...] = ()) -> None:
        r = self.api("POST", f"/users/{requests.utils.quote(name, safe='')}")
        assert r.status_code in (201, 409), r.text
        for group in groups:
            self.api("POST", f"/groups/{group}")
            r = self.api("POST", f"/groups/{group}/users", json={"users": [name]})
            assert r.ok, r.text

    def user(self, name: str) -> dict:
        r = self.api("GET", f"/users/{requests.utils.quote(name, safe='')}")
        r.raise_for_status()
        return r.json()

    def spawn(self, name: str, user_options: dict | None = None) -> requests.Response:
        """POST a start; returns the hub's answer (201/202 on the way, 4xx/5xx on a quick refusal)."""
        return self.api("POST", f"/users/{requests.utils.quote(name, safe='')}/server", json=user_options or {})

    def wait_ready(self, name: str, timeout: float | None = None) -> dict:
        timeout = timeout or self.start_timeout + 30
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            server = self.user(name).get("servers", {}).get("")
            if server and server.get("ready"):
                return server
            if not server:
                raise AssertionError(f"server of {name} stopped while starting: {self.complaints()}\n{self.log()}\n{self.cluster_state()}")
            time.sleep(0.3)
        raise AssertionError(f"server of {name} not ready after {timeout}s: {self.complaints()}\n{self.log()}\n{self.cluster_state()}")

    def complaints(self, most: int = 4) -> str:
        """The hub log's last ``most`` warnings and errors of a start (the spawner's, and JupyterHub's about a spawn),
        on one line each: a failure's reason in the assertion's first lines, which a CI log's excerpt keeps."""
        picked = [line.strip()[:400] for line in self.log(tail=None).splitlines()
                  if line.startswith(("[W ", "[E ")) and ("workspacespawner" in line or "spawn" in line.lower())
                  and "is slow to start" not in line]
        return " | ".join(picked[-most:]) or "(no warning or error in the hub's log)"

    def cluster_state(self, namespace: str = "default") -> str:
        """What the cluster showed when a start failed: each Node's Ready condition and taints, each Pod's phase,
        node, conditions and containers (their state, restarts and, while not ready, their log's last lines), and the
        namespace's last Events (for a start that hung with nothing in the hub's log); never raises."""
        try:
            import kubernetes

            client = kubernetes.config.new_client_from_config(self.env["KUBECONFIG"])
            try:
                core = kubernetes.client.CoreV1Api(client)
                lines = ["-- Nodes:"]
                for node in core.list_node(_request_timeout=10).items:
                    ready = next((f"Ready={c.status} ({c.reason})" for c in node.status.conditions or [] if c.type == "Ready"), "")
                    taints = ", ".join(f"{t.key}:{t.effect}" for t in node.spec.taints or [])
                    lines.append(f"{node.metadata.name}: {ready} taints [{taints}]")
                lines.append("-- Pods:")
                for pod in core.list_namespaced_pod(namespace, _request_timeout=10).items:
                    conditions = ", ".join(f"{c.type}={c.status}{' (' + c.reason + ')' if c.reason else ''}"
                                           for c in pod.status.conditions or [])
                    lines.append(f"{pod.metadata.name}: {pod.status.phase} on {pod.spec.node_name} [{conditions}]")
                    lines += [f"  PodScheduled: {c.message}" for c in pod.status.conditions or []
                              if c.type == "PodScheduled" and c.status == "False" and c.message]
                    for status in pod.status.container_statuses or []:
                        lines.append(f"  {status.name}: ready={status.ready} restarts={status.restart_count} "
                                     f"state={_container_state(status.state)} last={_container_state(status.last_state)}")
                        if not status.ready:
                            lines += [f"  | {line}" for line in _log_tail(core, pod, status.name)]
                lines.append("-- Events (last 30):")
                events = sorted(core.list_namespaced_event(namespace, _request_timeout=10).items,
                                key=lambda e: str(e.last_timestamp or e.event_time or e.metadata.creation_timestamp or ""))
                for event in events[-30:]:
                    lines.append(f"{event.involved_object.kind}/{event.involved_object.name}: {event.reason}: {event.message}")
                return "\n".join(lines)
            finally:
                client.close()
        except Exception as e:  # noqa: BLE001 - only a help for reading a failure
            return f"(cluster state unavailable: {type(e).__name__}: {e})"

    def start_server(self, name: str, user_options: dict | None = None) -> dict:
        r = self.spawn(name, user_options)
        assert r.status_code in (201, 202), f"{r.status_code} {r.text}\n{self.log()}"
        return self.wait_ready(name)

    def stop_server(self, name: str, timeout: float = 60) -> None:
        r = self.api("DELETE", f"/users/{requests.utils.quote(name, safe='')}/server")
        assert r.status_code in (202, 204), r.text
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.user(name).get("servers", {}).get(""):
                return
            time.sleep(0.3)
        raise AssertionError(f"server of {name} did not stop:\n{self.log()}")

    def server_request(self, name: str, method: str, path: str, **kwargs) -> requests.Response:
        """A request to the user's server through the proxy, authenticated with the admin service token."""
        headers = {"Authorization": f"token {self.token}"}
        url = f"{self.url}/user/{requests.utils.quote(name, safe='')}/{path.lstrip('/')}"
        return requests.request(method, url, headers=headers, timeout=60, **kwargs)


@contextlib.contextmanager
def core_v1(cluster):
    """A synchronous ``kubernetes`` CoreV1Api on ``cluster`` (anything with a ``kubeconfig`` path), closed after use."""
    import kubernetes

    client = kubernetes.config.new_client_from_config(str(cluster.kubeconfig))
    try:
        yield kubernetes.client.CoreV1Api(client)
    finally:
        client.close()


def home_phase(cluster, user: str) -> dict:
    """The lifecycle record (phase, reason, message, ...) on ``user``'s home PersistentVolumeClaim in ``cluster``."""
    from workspacespawner.core import names

    with core_v1(cluster) as core:
        claims = core.list_persistent_volume_claim_for_all_namespaces().items
    [home] = [c for c in claims if names.owned_by({"labels": c.metadata.labels, "annotations": c.metadata.annotations}, user)]
    return json.loads(home.metadata.annotations[names.LIFECYCLE_ANNOTATION])


@contextlib.contextmanager
def core_and_custom(cluster):
    """Synchronous ``kubernetes`` (CoreV1Api, CustomObjectsApi) on ``cluster`` (anything with a ``kubeconfig`` path), closed after use."""
    import kubernetes

    client = kubernetes.config.new_client_from_config(str(cluster.kubeconfig))
    try:
        yield kubernetes.client.CoreV1Api(client), kubernetes.client.CustomObjectsApi(client)
    finally:
        client.close()


def login(hub: Hub, name: str, *, follow: bool = True) -> requests.Session:
    """A browser-like session logged in as ``name`` (the harness's dummy authenticator takes any password).

    ``follow=False`` stops at the login's redirect instead of loading the
    page it leads to (the spawn form, for a user without a server).
    """
    session = requests.Session()
    session.get(f"{hub.url}/hub/login", timeout=30)
    r = session.post(
        f"{hub.url}/hub/login",
        data={"username": name, "password": "x", "_xsrf": session.cookies.get("_xsrf")},
        timeout=30,
        allow_redirects=follow,
    )
    assert r.ok, r.text
    return session


def progress_events(hub: Hub, name: str) -> list[dict]:
    """The spawn-progress event stream of ``name``'s default server (JupyterHub's progress dicts: ``progress``,
    ``message``, ``raw_event``...), read to its end (the server ready or failed)."""
    import json

    events = []
    url = f"/users/{requests.utils.quote(name, safe='')}/server/progress"
    with hub.api("GET", url, stream=True) as r:
        r.raise_for_status()
        for line in r.iter_lines(decode_unicode=True):
            if line and line.startswith("data:"):
                event = json.loads(line[5:])
                events.append(event)
                if event.get("ready") or event.get("failed"):
                    break
    return events


def progress_messages(hub: Hub, name: str) -> list[str]:
    """The messages of :func:`progress_events`."""
    return [event.get("message", "") for event in progress_events(hub, name)]


def progress_of_a_start(hub: Hub, name: str, user_options: dict) -> list[dict]:
    """Start ``name``'s default server with ``user_options`` and read its progress stream while it starts
    (:func:`progress_events`); asserts the start was accepted."""
    import threading

    answer = {}
    spawn = threading.Thread(target=lambda: answer.update(r=hub.spawn(name, user_options)))
    spawn.start()
    try:
        while not hub.user(name).get("servers", {}).get(""):
            time.sleep(0.05)
        events = progress_events(hub, name)
    finally:
        spawn.join()
    assert answer["r"].status_code in (201, 202), answer["r"].text
    return events
