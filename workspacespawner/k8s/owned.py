"""Objects the spawner creates and owns: make sure one exists and is ours, never adopt a foreign one.

Every per-user object (home PVC, root DataVolume, VirtualMachine, cloud-init
Secret, Service) is ensured the same way: read it first (one call when it
exists, the common case), create it on 404, read again on a 409 from a
concurrent create, and refuse, with a message for the user, an object of
that name that does not carry our owner labels and the user's exact name
(:func:`names.owned_by`). Nothing here deletes or rewrites a refused object. Calls are retried
after transient API errors (:func:`call`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable

import aiohttp
from kubernetes_asyncio.client.rest import ApiException, RESTResponse

from workspacespawner.core import names
from workspacespawner.core.errors import WorkspaceError
from workspacespawner.k8s.admission import clone_refused, exceeded_quota, webhook_down
from workspacespawner.k8s.apistatus import status_message

log = logging.getLogger("workspacespawner")

#: HTTP statuses worth a retry: throttled, or the API server (or virt-api) briefly unwell.
TRANSIENT_STATUSES = (429, 500, 502, 503, 504)
#: Seconds before each retry of a transient failure (then the error propagates).
RETRY_DELAYS = (0.5, 1.0, 2.0)


async def call(fn, *args, **kwargs):
    """``await fn(*args, **kwargs)``, retried after a transient failure (:data:`RETRY_DELAYS`)."""
    for delay in (*RETRY_DELAYS, None):
        try:
            return await fn(*args, **kwargs)
        except ApiException as e:
            if e.status not in TRANSIENT_STATUSES or delay is None:
                raise
            log.warning("Kubernetes API answered %s %s; retrying in %.1f s", e.status, e.reason, delay)
        except (aiohttp.ClientError, TimeoutError) as e:
            if delay is None:
                raise
            log.warning("Kubernetes API unreachable (%s); retrying in %.1f s", e, delay)
        await asyncio.sleep(delay)


async def until_accepted(fn, deadline: float, *, interval: float = 1.0, on_retry=None) -> int | None:
    """``await fn()`` until the API accepts it, for a write the caller must not give up on at once (a leftover's
    removal before a start): while it raises a transient ``ApiException`` (:data:`TRANSIENT_STATUSES`), again every
    ``interval`` seconds until the loop time ``deadline``. None once ``fn()`` returned; the last transient status when
    the deadline came first; any other error propagates. ``on_retry(status)`` runs before each wait."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            await fn()
            return None
        except ApiException as e:
            if e.status not in TRANSIENT_STATUSES:
                raise
            if loop.time() >= deadline:
                return e.status
            if on_retry is not None:
                on_retry(e.status)
        await asyncio.sleep(interval)


async def call_json(fn, *args, **kwargs) -> dict:
    """:func:`call` of a kubernetes_asyncio API method (``CoreV1Api.read_namespaced_persistent_volume_claim``, ...) for
    its answer as the API server's JSON: a dict with camelCase keys, timestamps as the server wrote them.

    The method runs with ``_preload_content=False`` and the body is decoded
    once (``json.loads``). Without it the client builds its model objects
    from the body (a setter call with checks per field) and the caller turns
    them back into a dict (``ApiClient.sanitize_for_serialization``): two
    walks of the object in Python, for every core/v1 answer of a start. A
    status outside 2xx raises ``ApiException`` carrying the body, as the
    client raises it. An empty body (some DELETEs) is ``{}``.
    """

    async def as_json() -> dict:
        response = await fn(*args, _preload_content=False, **kwargs)
        data = await response.read()
        if not 200 <= response.status <= 299:
            raise ApiException(http_resp=RESTResponse(response, data))
        return json.loads(data) if data else {}

    return await call(as_json)


def outage_error(error: BaseException) -> WorkspaceError | None:
    """A start's failure in words when ``error`` says the API server is unwell or unreachable (after :func:`call`'s retries),
    or an admission webhook it calls does not answer (:func:`~.admission.webhook_down`, 503, ``reason="webhook-down"``),
    else None.

    A transient status (:data:`TRANSIENT_STATUSES`: 429, 5xx) or a
    connection error: 503, ``reason="kubernetes-api"``. Anything else
    (a refusal, a bug) is not an outage: None.
    """
    if isinstance(error, ApiException) and webhook_down(error):
        return WorkspaceError(
            "A check the cluster runs before anything starts (an admission webhook, such as the GPU queues') is not "
            "answering, so nothing was started and no disk was changed. Please try again in a few minutes; if it "
            "goes on, tell an administrator.",
            reason="webhook-down", status_code=503, log_message=f"An admission webhook did not answer: {status_message(error)}")
    if isinstance(error, ApiException) and error.status in TRANSIENT_STATUSES:
        detail = f"{error.status} {error.reason}"
    elif isinstance(error, aiohttp.ClientError):
        detail = type(error).__name__
    else:
        return None
    return WorkspaceError(
        f"The cluster's API server is not answering ({detail}), so nothing was started and no disk was changed. "
        "Please try again in a few minutes.",
        reason="kubernetes-api",
        status_code=503,
        log_message=f"Kubernetes API outage during a start: {detail}",
    )


def forbidden_error(error: BaseException) -> WorkspaceError | None:
    """A start's failure in words when the API server refused the hub itself, else None.

    A 403 comes from the hub's RBAC role lacking a permission or from an
    admission policy; CDI's clone authorization (its DataVolume webhook asks
    whether the hub may clone from the golden images' namespace) refuses
    with a 422 in its own words (:func:`~workspacespawner.k8s.admission.clone_refused`). Both are the hub's
    setup, which the user cannot change and waiting will not fix. The API
    server's Status message names what was refused (``pods is forbidden:
    User "system:serviceaccount:jhub:hub" cannot create resource "pods" in
    API group "" in the namespace "jhub"``, or the webhook's or policy's
    reason) and carries no object data, so it is shown as it is. A
    ResourceQuota refusal, also a 403, is not this one
    (:func:`~workspacespawner.k8s.admission.exceeded_quota`). HTTP status
    500, ``reason="kubernetes-forbidden"``.
    """
    if not isinstance(error, ApiException):
        return None
    refused = error.status == 403 and exceeded_quota(error) is None
    if not (refused or clone_refused(error)):
        return None
    said = status_message(error) or f"{error.status} {error.reason}"
    return WorkspaceError(
        f"The cluster refused the hub: {said}. Nothing was deleted. This is the hub's setup, not something you did: "
        "please tell the JupyterHub administrators (the hub's Kubernetes permissions).",
        reason="kubernetes-forbidden",
        status_code=500,
        log_message=f"Kubernetes refused the hub during a start: {said}",
    )


def core_accessors(core_api, kind: str, manifest: dict) -> tuple[Callable[[], Awaitable[dict]], Callable[[], Awaitable[dict]]]:
    """``(read, create)`` for :func:`ensure_owned`: the core/v1 object of ``manifest`` as a plain dict.

    ``kind`` is the snake-case name in ``CoreV1Api``'s methods
    (``persistent_volume_claim``, ``secret``, ``service``).
    """
    namespace, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]

    async def read() -> dict:
        return await call_json(getattr(core_api, f"read_namespaced_{kind}"), name, namespace)

    async def create() -> dict:
        return await call_json(getattr(core_api, f"create_namespaced_{kind}"), namespace, manifest)

    return read, create


def refuse_foreign(obj: dict, user_name: str, *, what: str, reason: str) -> None:
    """Raise a 409 :class:`WorkspaceError` unless ``obj`` is ours and ``user_name``'s.

    ``what`` names the object for the user (``"home volume"``, ``"root
    disk"``); ``reason`` is the error's fixed reason word.
    """
    meta = obj.get("metadata") or {}
    if names.owned_by(meta, user_name):
        return
    theirs = (meta.get("annotations") or {}).get(names.OWNER_ANNOTATION)
    if theirs is not None and theirs != user_name:
        why = "it belongs to another user"
    else:
        why = "it was not created by workspacespawner (owner labels missing)"
    raise WorkspaceError(
        f"Your {what} {meta.get('name')!r} cannot be used: one with that name "
        f"already exists and {why}. Nothing was changed; please ask an administrator.",
        reason=reason,
        status_code=409,
    )


async def ensure_owned(
    *,
    read: Callable[[], Awaitable[dict]],
    create: Callable[[], Awaitable[dict]],
    user_name: str,
    what: str,
    reason: str,
    create_first: bool = False,
) -> tuple[dict, bool]:
    """Make sure an object exists and belongs to ``user_name``; return ``(object, created)``.

    ``read`` and ``create`` are coroutine functions returning the object as
    a plain dict (kubernetes_asyncio ``ApiException`` on failure). A 404 from
    ``read`` leads to ``create``; a 409 from ``create`` (made meanwhile) to
    one more read. ``create_first``: try ``create`` before any read (a watch
    cache says there is none of ours; a foreign one answers 409 and is read).
    A found object that is not ours raises :func:`refuse_foreign`'s 409
    :class:`WorkspaceError`; other API errors propagate.
    """
    for attempt in range(2):
        try:
            if create_first and attempt == 0:
                raise ApiException(status=404, reason="not in the watch cache")
            found = await read()
        except ApiException as e:
            if e.status != 404:
                raise
        else:
            refuse_foreign(found, user_name, what=what, reason=reason)
            return found, False
        try:
            return await create(), True
        except ApiException as e:
            if e.status != 409:
                raise
    raise WorkspaceError(
        f"Your {what} could not be read or created; please try again.",
        reason=reason,
        status_code=500,
    )
