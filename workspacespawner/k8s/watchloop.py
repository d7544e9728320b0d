"""The watch loop of every reflector of ours: it never gives up, and it is back within seconds of the API server.

kubespawner's ``ResourceReflector._watch_and_update`` lists, then watches,
and on any error waits 0.2, 0.4, ... 25.6 s and gives up after about 50 s of
errors. After an API server outage of a minute (a control-plane upgrade, an
etcd hiccup), each reflector is either dead or asleep for up to 25.6 s more,
and a start made right after waits for them past its timeout.

:class:`RecoveringReflector` replaces that loop (the list, the cache and the
watch protocol stay kubespawner's): the wait after a failed try doubles from
0.1 s up to :data:`RETRY_CAP` seconds, with jitter, and the loop goes on for
as long as the hub runs, so the cache is fresh again at most
:data:`RETRY_CAP` seconds after the API server answers. A 410 Gone (the
watch's resourceVersion left etcd's history) is no error: the loop lists
again at once. It overrides two private methods of kubespawner's reflector
and reads a private attribute; :mod:`workspacespawner.upstream` checks
them against the installed kubespawner. A failure streak is logged once when it starts, with the
error, and once when it ends, with how long it lasted (kubespawner's list
logs a traceback for every failed try).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from functools import partial

from kubernetes_asyncio import watch
from kubernetes_asyncio.client import ApiException

#: Seconds, the longest wait between two tries of a reflector whose list or watch keeps failing: how long after
#: the API server is back a cache may still be stale. A hub has about six reflectors per namespace, so an outage
#: costs the API server a few requests a second at the most.
RETRY_CAP = 2.0
#: Seconds, the wait after the first failure of a streak; each further failure doubles it, up to :data:`RETRY_CAP`.
FIRST_RETRY = 0.1


def retry_delay(failures: int, *, rand=random.random) -> float:
    """Seconds to wait after the ``failures``-th failure in a row (1, 2, ...): doubling from :data:`FIRST_RETRY`,
    at most :data:`RETRY_CAP`, each drawn between half and all of that so that reflectors do not retry in step."""
    ceiling = min(RETRY_CAP, FIRST_RETRY * 2 ** (failures - 1))
    return ceiling * (0.5 + rand() / 2)


def is_expired(error: BaseException) -> bool:
    """Whether ``error`` is the API server's 410 Gone for a resourceVersion older than its history."""
    return isinstance(error, ApiException) and error.status == 410


class RecoveringReflector:
    """Mixin, first in the bases of a kubespawner ``ResourceReflector``: its watch loop (see the module docstring).

    ``on_failure`` is never called: the loop ends only when the reflector is stopped or cancelled.
    """

    #: Failures in a row so far (0 while the watch is healthy); tests and ``alive`` callers may read it.
    failures = 0

    def _selection(self) -> dict:
        args = {"label_selector": self.label_selector, "field_selector": self.field_selector}
        if not self.omit_namespace:
            args["namespace"] = self.namespace
        if self.request_timeout:
            args["_request_timeout"] = self.request_timeout
        return args

    async def _list_and_update(self, resource_version=None) -> str:
        """List the kind (at ``resource_version`` or newer, if given) into the cache; its resourceVersion.

        Raises :class:`ApiException` with the API server's status and
        message for an answer that is not a success, logging nothing (the
        loop logs a failure streak once).
        """
        args = self._selection()
        if resource_version is not None:
            args.update(resource_version=resource_version, resource_version_match="NotOlderThan")
        response = await getattr(self.api, self.list_method_name)(_preload_content=False, **args)
        body = await response.read()
        if not response.ok:
            try:
                message = json.loads(body).get("message") or response.reason
            except ValueError:
                message = response.reason
            raise ApiException(status=response.status, reason=message)
        listed = json.loads(body)
        self.resources = {f'{o["metadata"]["namespace"]}/{o["metadata"]["name"]}': o for o in listed["items"]}
        if not self.first_load_future.done():
            self.first_load_future.set_result(None)
        return listed["metadata"]["resourceVersion"]

    def _watch_args(self, resource_version: str) -> dict:
        args = {**self._selection(), "resource_version": resource_version}
        if self.timeout_seconds:
            args["timeout_seconds"] = self.timeout_seconds
        return args

    def _apply(self, event: dict) -> str | None:
        """Store one watch event in the cache; the resourceVersion to resume from, or None (a deletion)."""
        obj = event["raw_object"]
        key = f'{obj["metadata"]["namespace"]}/{obj["metadata"]["name"]}'
        if event["type"] == "DELETED":
            self.resources.pop(key, None)
            return None
        self.resources[key] = obj
        return obj["metadata"]["resourceVersion"]

    async def _watch_once(self, resource_version: str) -> str:
        """List (from ``resource_version``), then watch until the server ends the watch, ``restart_seconds`` pass or
        the reflector stops; returns the resourceVersion to resume from."""
        resource_version = await self._list_and_update(resource_version)
        self._recovered()
        started = time.monotonic()
        w = watch.Watch()
        method = partial(getattr(self.api, self.list_method_name), _preload_content=False)
        try:
            async with w.stream(method, **self._watch_args(resource_version)) as stream:
                async for event in stream:
                    resource_version = self._apply(event) or resource_version
                    if self._stopping or time.monotonic() - started >= self.restart_seconds:
                        break
        finally:
            w.stop()
            await w.close()
        return resource_version

    def _recovered(self) -> None:
        if self.failures:
            self.log.info("The %s watch in %s is back after %d failed tries (%.1f s)", self.kind, self._where(),
                          self.failures, time.monotonic() - self._failing_since)
        self.failures = 0

    def _where(self) -> str:
        return "all namespaces" if self.omit_namespace else self.namespace

    async def _watch_and_update(self):
        resource_version = "0"  # any version: the API server's cache answers the first list
        self.log.info("Watching %s in %s (%s)", self.kind, self._where(),
                      ", ".join(filter(None, (self.label_selector, self.field_selector))) or "all")
        while not self._stopping:
            try:
                resource_version = await self._watch_once(resource_version)
            except asyncio.CancelledError:
                if self._stopping:
                    break  # stop() cancelled us and waits for the task: end it cleanly, as kubespawner's loop does
                raise
            except Exception as e:
                resource_version = "0"  # after any failure (a 410 Gone too): list afresh
                if is_expired(e):
                    self.log.info("The %s watch in %s resumed past the API server's history; listing again",
                                  self.kind, self._where())
                    continue
                self.failures += 1
                if self.failures == 1:
                    self._failing_since = time.monotonic()
                    self.log.warning("The %s watch in %s failed (%s: %s); retrying every %.0f s at most until it is back",
                                     self.kind, self._where(), type(e).__name__, e, RETRY_CAP)
                await asyncio.sleep(retry_delay(self.failures))
        self.log.debug("The %s watch in %s stopped", self.kind, self._where())
