"""KubeVirt's VM subresources: ``PUT /apis/subresources.kubevirt.io/v1/namespaces/{ns}/virtualmachines/{name}/start|stop|restart``.

Mirrors virt-api's ``StartVMRequestHandler``, ``StopVMRequestHandler`` and
``RestartVMRequestHandler`` (``pkg/virt-api/rest/subresource.go``): the calls
``virtctl start/stop/restart`` make. What each does depends on the VM's run
strategy (``spec.runStrategy``, or the legacy ``spec.running``):

=================  ==============================  ===============================  ==========================
run strategy       start                           stop                             restart
=================  ==============================  ===============================  ==========================
Halted             runStrategy -> Always           409 unless a shorter gracePeriod 409
Always, Once       409 (manual start unsupported)  runStrategy -> Halted            Stop+Start requests (Once: 409)
RerunOnFailure     Start request                   runStrategy -> Halted            Stop+Start requests
Manual             Start request                   Stop request                     Stop+Start requests
=================  ==============================  ===============================  ==========================

"Requests" are ``status.stateChangeRequests`` that the virt controller acts on
(see :mod:`.controllers.virt`). Errors are KubeVirt's: 404 for a missing VM,
409 ``VM is already running`` / ``VM is not running`` and friends, 500 when a
start or stop is already underway, 400 for a bad body. A request body is the
``v1.StartOptions`` / ``v1.StopOptions`` / ``v1.RestartOptions`` JSON
(``dryRun: ["All"]`` persists nothing; ``paused`` start is accepted but the
guest starts unpaused).

The decision is shared by both control planes: :func:`plan_vm_action` reads
the VM and VMI (from a store or a client's cache) and answers the writes to
make and the error to answer after them; :func:`vm_action` makes them in the
embedded store, :func:`vm_action_through` through a
:class:`~.client.Client` (the real plane's virt-api, :mod:`.realplane.virtapi`).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import errors
from .controllers.refs import VMIS, VMS, get_or_none
from .kinds import VM_ACTIONS
from .runstrategy import FINAL_PHASES, run_strategy

_RESOURCE = ("virtualmachine", "kubevirt.io")


def _conflict(name: str, message: str) -> errors.ApiError:
    return errors.conflict(_RESOURCE[0], name, message, _RESOURCE[1])


def _internal(message: str) -> errors.ApiError:
    return errors.ApiError(500, "InternalError", f"Internal error occurred: {message}", {"causes": [{"message": message}]})


def _is_final(vmi: dict | None) -> bool:
    return vmi is not None and (vmi.get("status") or {}).get("phase") in FINAL_PHASES


@dataclass
class Write:
    """One replace virt-api makes: the object of ``key`` (group, version, plural), whole or its ``subresource``."""

    key: tuple[str, str, str]
    namespace: str
    name: str
    obj: dict
    subresource: str | None = None


def _set_running(writes: list, vm: dict, running: bool) -> None:
    """Patch ``spec.runStrategy`` (or legacy ``spec.running``), as virt-api's getRunningJson does."""
    spec = vm["spec"]
    if "runStrategy" in spec or "running" not in spec:
        spec["runStrategy"] = "Always" if running else "Halted"
    else:
        spec["running"] = running
    writes.append(Write(VMS, vm["metadata"]["namespace"], vm["metadata"]["name"], vm))


def _request_changes(writes: list, vm: dict, changes: list[dict]) -> None:
    """Put ``changes`` into ``status.stateChangeRequests`` (virt-api's getChangeRequestJson)."""
    status = vm.setdefault("status", {})
    lone_stop = len(changes) == 1 and changes[0]["action"] == "Stop"
    if status.get("stateChangeRequests") and not lone_stop:
        raise _internal("unable to complete request: stop/start already underway")
    status["stateChangeRequests"] = changes
    status.pop("startFailure", None)
    writes.append(Write(VMS, vm["metadata"]["namespace"], vm["metadata"]["name"], vm, "status"))


def _start(writes: list, vm: dict, vmi: dict | None, body: dict) -> None:
    name = vm["metadata"]["name"]
    if vmi is not None and not _is_final(vmi) and (vmi.get("status") or {}).get("phase") not in (None, "", "Unknown"):
        raise _conflict(name, "VM is already running")
    strategy = run_strategy(vm)
    phase = (vmi or {}).get("status", {}).get("phase")
    if strategy == "Halted":
        _set_running(writes, vm, True)
    elif strategy in ("RerunOnFailure", "Manual"):
        if strategy == "RerunOnFailure" and phase == "Failed":
            raise _conflict(name, "RerunOnFailure does not support starting VM from failed state")
        restart = (strategy == "RerunOnFailure" and phase == "Succeeded") or (strategy == "Manual" and _is_final(vmi))
        start = {"action": "Start"}
        if body.get("paused"):
            start["data"] = {"paused": "true"}
        changes = [{"action": "Stop", "uid": vmi["metadata"]["uid"]}, start] if restart else [start]
        _request_changes(writes, vm, changes)
    else:
        raise _conflict(name, f"{strategy} does not support manual start requests")


def _stop(writes: list, vm: dict, vmi: dict | None, body: dict) -> None:
    name = vm["metadata"]["name"]
    strategy = run_strategy(vm)
    active = vmi is not None and not _is_final(vmi)
    grace = body.get("gracePeriod")
    old_grace = None
    if active and grace is not None:
        old_grace = vmi["spec"].get("terminationGracePeriodSeconds")
        vmi["spec"]["terminationGracePeriodSeconds"] = int(grace)
        writes.append(Write(VMIS, vmi["metadata"]["namespace"], vmi["metadata"]["name"], vmi))
    if strategy in ("Halted", "Manual"):
        if not active:
            raise _conflict(name, "VM is not running")
        if strategy == "Halted" and (grace is None or (old_grace is not None and int(grace) >= old_grace)):
            raise _conflict(name, "Halted only supports manual stop requests with a shorter graceperiod")
        _request_changes(writes, vm, [{"action": "Stop", "uid": vmi["metadata"]["uid"]}])
    else:
        _set_running(writes, vm, False)


def _restart(writes: list, vm: dict, vmi: dict | None, body: dict) -> None:
    name = vm["metadata"]["name"]
    strategy = run_strategy(vm)
    if strategy in ("Halted", "Once"):
        raise _conflict(name, f"RunStategy {strategy} does not support manual restart requests")
    if vmi is None:
        raise _conflict(name, "VM is not running: Halted")
    _request_changes(writes, vm, [{"action": "Stop", "uid": vmi["metadata"]["uid"]}, {"action": "Start"}])


def plan_vm_action(
    store, namespace: str, name: str, action: str, body: dict | None
) -> tuple[list[Write], errors.ApiError | None, bool]:
    """What ``action`` (``start``, ``stop`` or ``restart``) on VM ``namespace/name`` takes.

    ``store`` is anything with ``get``/``kind`` (a Store or a
    :class:`~.client.Client`); ``body`` the decoded request body (None or
    ``{}`` when empty). Returns ``(writes, error, dry_run)``: the writes to
    make in order, then the error to answer (None: 202 Accepted, empty
    body), as virt-api writes a VMI's shorter grace period before it
    refuses a stop. Raises :class:`~.errors.ApiError` when nothing is to be
    written.
    """
    if action not in VM_ACTIONS:
        raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise errors.bad_request("Can not unmarshal Request body to struct, error: body must be a JSON object")
    if action == "restart":
        grace = body.get("gracePeriodSeconds")
        if grace is not None and grace > 0:
            raise errors.bad_request("For force restart, only gracePeriod=0 is supported for now")
        if grace is not None and grace < 0:
            raise errors.bad_request("gracePeriod has to be greater or equal to 0")
    vm = get_or_none(store, VMS, namespace, name)
    if vm is None:
        raise errors.not_found(_RESOURCE[0], name, _RESOURCE[1])
    vmi = get_or_none(store, VMIS, namespace, name)
    dry_run = "All" in (body.get("dryRun") or [])
    writes: list[Write] = []
    try:
        {"start": _start, "stop": _stop, "restart": _restart}[action](writes, vm, vmi, body)
    except errors.ApiError as e:
        return writes, e, dry_run
    return writes, None, dry_run


def vm_action(store, namespace: str, name: str, action: str, body: dict | None) -> None:
    """Perform ``action`` on VM ``namespace/name`` in the embedded ``store`` (see :func:`plan_vm_action`).

    Returns None on success (virt-api answers 202 Accepted with an empty
    body); raises :class:`~.errors.ApiError` otherwise.
    """
    writes, error, dry_run = plan_vm_action(store, namespace, name, action, body)
    for w in writes:
        store.replace(store.kind(*w.key), w.namespace, w.name, w.obj, subresource=w.subresource, dry_run=dry_run)
    if error is not None:
        raise error


class _Fresh:
    """The VM and VMI as just read from the API server, looked up as :func:`plan_vm_action` reads a store."""

    def __init__(self, client, objects: dict):
        self._client = client
        self._objects = objects  # (group, version, plural) -> object or None

    def kind(self, group: str, version: str, plural: str):
        return self._client.kind(group, version, plural)

    def get(self, kind, namespace: str | None, name: str) -> dict:
        obj = self._objects.get(kind.key)
        if obj is None:
            raise errors.not_found(kind.plural, name, kind.group)
        return obj


async def _read_or_none(client, key, namespace: str, name: str) -> dict | None:
    try:
        return await client.read(client.kind(*key), namespace, name)
    except errors.ApiError as e:
        if e.code == 404:
            return None
        raise


#: How often :func:`vm_action_through` reads and plans again after a write lost a race (409 Conflict).
CONFLICT_RETRIES = 5


async def vm_action_through(client, namespace: str, name: str, action: str, body: dict | None) -> None:
    """:func:`vm_action` through a :class:`~.client.Client`: the VM and VMI read afresh (as virt-api GETs them
    for each call, so a VMI its cache still holds after deletion never refuses a start), writes to its API server.

    KubeVirt's handler changes the VM with a patch, so a status write of virt-controller between its read and
    its write never fails the call; these writes are full updates, so one that answers 409 Conflict (the
    resourceVersion moved) is read, planned and made again, up to :data:`CONFLICT_RETRIES` times.
    """
    for attempt in range(CONFLICT_RETRIES + 1):
        fresh = _Fresh(client, {key: await _read_or_none(client, key, namespace, name) for key in (VMS, VMIS)})
        writes, error, dry_run = plan_vm_action(fresh, namespace, name, action, body)
        try:
            for w in writes:
                await client.replace(client.kind(*w.key), w.namespace, w.name, w.obj, subresource=w.subresource, dry_run=dry_run)
        except errors.ApiError as e:
            if e.code == 409 and attempt < CONFLICT_RETRIES:
                continue
            raise
        if error is not None:
            raise error
        return
