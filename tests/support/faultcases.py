"""Table-driven fault cases against a hub on the local cluster: one :class:`Case` is a row, :func:`run_case` plays it.

A case names the faults the API server injects (``faults``: ``(method,
path regex, FaultInjector.add keywords)``, ``{user}`` in the regex standing
for the user's kubespawner name), what the user does (``action``), and what
they should see (``expect``). After it, the faults are cleared (the API is
back) and the invariants are asserted (:func:`~tests.support.invariants.assert_invariants`),
with the user's next start unless the case says it cannot work
(``next_start=False``, e.g. a foreign disk in the way).

Actions: ``start`` (a start with the faults on), ``stop`` (a start without
faults, then the stop with the faults on), ``start-stop`` (both with the
faults on). ``expect``: ``ready`` (the start reached the server), or
``failed`` (the start was refused or failed); ``words``: text the user
must read (the spawn answer or the spawn-page progress). ``category``
groups the rows in the docs' reliability table (docs/source/explanation/reliability.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import requests
from kubespawner.slugs import safe_slug

from tests.support.hubharness import Hub, config_pieces, progress_messages
from tests.support.invariants import assert_invariants
from tests.support.paths import REPO
from workspacespawner.quota.ledger import Ledger

CPU = "jupyterlab-cpu"
GPU = "jupyterlab-1gpu"
VM = "ubuntu-vm"


@dataclass(frozen=True)
class Case:
    """One row of the fault matrix (see the module docstring)."""

    id: str
    category: str
    fault: str
    faults: tuple = ()
    action: str = "start"
    profile: str = CPU
    options: dict | None = None
    expect: str = "ready"
    words: tuple[str, ...] = ()
    user: str | None = None
    next_start: bool = True
    setup: Callable | None = field(default=None, compare=False)


#: The fault matrix hub's settings (``{ledger}``: the ledger's path): short client timeouts so that a slow
#: answer is a timeout, named servers for the races, one-second polls, ticks and reconciler passes.
MATRIX_CONFIG = """
c.JupyterHub.allow_named_servers = True
c.JupyterHub.named_server_limit_per_user = 5
c.KubeSpawner.k8s_api_request_timeout = 3
c.KubeSpawner.k8s_api_request_retry_timeout = 8
c.Spawner.poll_interval = 1
c.WorkspaceSpawner.reconcile_interval = 1
c.WorkspaceQuota.ledger_url = "sqlite:///{ledger}"
c.WorkspaceQuota.card_hours_per_month = 1000
c.WorkspaceQuota.max_gpus = 8
c.WorkspaceQuota.min_gpu_start_time = 0
c.WorkspaceQuota.enforce_interval = 1
"""


@contextmanager
def matrix_hub(cluster, workdir, *, extra: str = "", start_timeout: int = 60) -> Iterator[Hub]:
    """A started hub for the fault matrix on ``cluster`` in ``workdir`` (its ledger ``ledger.sqlite`` there), stopped on exit."""
    config = f"import sys\nsys.path.insert(0, {str(REPO)!r})\n" + config_pieces("10-workspace-spawner.py", "20-profiles.py")
    config += MATRIX_CONFIG.replace("{ledger}", str(workdir / "ledger.sqlite")) + extra
    hub = Hub(workdir, cluster.kubeconfig, config, start_timeout=start_timeout)
    hub.env["WORKSPACESPAWNER_QUOTA_TOKEN"] = hub.token
    hub.start()
    try:
        yield hub
    finally:
        hub.stop()


@contextmanager
def matrix_ledger(hub: Hub) -> Iterator[Ledger]:
    """The ledger of a :func:`matrix_hub`, to read runs from; disposed on exit."""
    ledger = Ledger(f"sqlite:///{hub.workdir / 'ledger.sqlite'}")
    try:
        yield ledger
    finally:
        ledger.dispose()


def user_of(case: Case) -> str:
    return case.user or f"fm-{case.id}"


def wait_until(predicate, timeout: float = 60, interval: float = 0.3):
    """``predicate()`` once truthy (polled every ``interval`` s), else its last value after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return predicate()


def server_of(hub: Hub, user: str) -> dict | None:
    return hub.user(user).get("servers", {}).get("")


def attempt_start(hub: Hub, user: str, options: dict) -> tuple[str, str]:
    """Start ``user``'s server: ``("ready", "")`` or ``("failed", what the user read)``."""
    r = hub.spawn(user, options)
    if r.status_code not in (201, 202):
        return "failed", r.text
    if r.status_code == 202:
        messages = progress_messages(hub, user)
    else:
        messages = []
    server = wait_until(lambda: (s := server_of(hub, user)) is None or s.get("ready"), timeout=120)
    if server and server_of(hub, user):
        return "ready", " ".join(messages)
    return "failed", " ".join(messages)


def stop(hub: Hub, user: str) -> None:
    """Ask for the stop; wait until the hub shows the server stopped (whether or not its compute went)."""
    hub.api("DELETE", f"/users/{requests.utils.quote(user, safe='')}/server")
    assert wait_until(lambda: server_of(hub, user) is None, timeout=120), f"server of {user} never stopped:\n{hub.log()}"


def scheduler_lines(cluster, user: str, n: int = 20) -> str:
    """The real plane's kube-scheduler log lines about ``user``'s Pods (its last ``n``), for a start that hung with its
    Pod unschedulable; ``""`` on the embedded plane."""
    logs = getattr(getattr(cluster, "plane", None), "logs_dir", None)
    if logs is None or not (logs / "scheduler.log").exists():
        return ""
    slug = safe_slug(user)
    lines = [line for line in (logs / "scheduler.log").read_text(errors="replace").splitlines() if slug in line]
    return "-- kube-scheduler on this user's Pods:\n" + "\n".join(lines[-n:])


def next_start(hub: Hub, user: str, cluster=None) -> Callable[[], None]:
    """The invariant "next start works": a CPU start that reaches the server, then a stop."""
    def start_again():
        outcome, said = attempt_start(hub, user, {"profile": CPU})
        assert outcome == "ready", (f"the next start of {user} failed: {said}\n{hub.cluster_state()}\n"
                                    f"{scheduler_lines(cluster, user)}\n{hub.log()}")
        stop(hub, user)
    return start_again


def run_case(case: Case, *, hub: Hub, cluster, ledger) -> None:
    """Play ``case`` (see the module docstring) and assert the invariants after it."""
    user = user_of(case)
    hub.create_user(user)
    if case.setup is not None:
        case.setup(cluster, user)
    options = case.options if case.options is not None else {"profile": case.profile}
    slug = safe_slug(user)
    if case.action == "stop":
        assert attempt_start(hub, user, options)[0] == "ready", f"{hub.cluster_state()}\n{hub.log()}"
    for method, pattern, kwargs in case.faults:
        cluster.faults.add(method, pattern.format(user=slug), **kwargs)
    try:
        if case.action == "stop":
            stop(hub, user)
            outcome, said = "ready", ""
        else:
            outcome, said = attempt_start(hub, user, options)
            if case.action == "start-stop" and outcome == "ready":
                stop(hub, user)
    finally:
        cluster.faults.clear()
    assert outcome == case.expect, f"{case.id}: {outcome} ({said})\n{hub.cluster_state()}\n{scheduler_lines(cluster, user)}\n{hub.log()}"
    for words in case.words:
        assert words in said, f"{case.id}: {words!r} not in {said!r}"
    if server_of(hub, user) is not None:
        stop(hub, user)
    assert_invariants(cluster, ledger=ledger, next_start=next_start(hub, user, cluster) if case.next_start else None)


#: ``(id, category, fault)`` of the matrix's cases written as their own tests (races, hub crashes), for the docs' table.
SPECIAL: list[tuple[str, str, str]] = []


def matrix_case(case_id: str, category: str, fault: str):
    """Register a test function as a matrix case (see :data:`SPECIAL`); returns it unchanged."""
    def register(fn):
        SPECIAL.append((case_id, category, fault))
        return fn
    return register


def kill_and_restart(hub: Hub) -> None:
    """SIGKILL the hub process (no cleanup of any kind), then start it again on the same database and config."""
    hub.proc.kill()
    hub.proc.wait()
    hub.start()


TABLE_BEGIN = "<!-- fault-matrix:begin (generated by tests/hub/test_fault_matrix.py) -->"
TABLE_END = "<!-- fault-matrix:end -->"


def reliability_table(cases: list[Case]) -> str:
    """The docs' table of the faults tested: one row per case of the table and of :data:`SPECIAL`, by category."""
    def outcome(case: Case) -> str:
        if case.expect != "failed":
            return "starts"
        return "the start fails (the next one works)" if case.next_start else "refused, nothing touched"

    rows = [(c.category, c.id, c.fault, outcome(c)) for c in cases if c.action == "start"]
    rows += [(c.category, c.id, c.fault, "stops; compute gone") for c in cases if c.action != "start"]
    rows += [(category, case_id, fault, "see the test") for case_id, category, fault in SPECIAL]
    order = list(dict.fromkeys(row[0] for row in rows))
    rows.sort(key=lambda row: order.index(row[0]))
    lines = [TABLE_BEGIN, "", "| category | case | fault | the user gets |", "|---|---|---|---|"]
    lines += [f"| {category} | `{case_id}` | {fault} | {outcome} |" for category, case_id, fault, outcome in rows]
    lines += ["", f"{len(rows)} cases; every one ends with the invariants above asserted.", "", TABLE_END]
    return "\n".join(lines)
