"""Refusals of the API server's admission plugins, read back from the API error: the ResourceQuota plugin's,
CDI's clone authorization, and an admission webhook that does not answer.

kube-apiserver's ResourceQuota plugin answers a create (or grow) that would
exceed a namespace's quota with 403 Forbidden and a fixed message
(plugin/pkg/admission/resourcequota)::

    persistentvolumeclaims "home-ann" is forbidden: exceeded quota: storage,
    requested: requests.storage=10Gi, used: requests.storage=15Gi, limited: requests.storage=20Gi

:func:`exceeded_quota` reads that into a :class:`QuotaExceeded`; its
:meth:`~QuotaExceeded.sentence` says it for a user.

CDI's DataVolume mutating webhook checks every write of a DataVolume cloned
from another namespace (its creation and each later update, until it is
being deleted): the writer must be allowed to ``create``
``datavolumes/source`` in the source namespace (``DataVolume.AuthorizeUser``
in CDI v1.61). It refuses with 422 and its own words::

    admission webhook "datavolume-mutate.cdi.kubevirt.io" denied the request:  User
    system:serviceaccount:jhub:hub has insufficient permissions in clone source namespace golden-images

:func:`clone_refused` tells that refusal from a 422 of a JSON Patch
``test``.

A webhook whose ``failurePolicy`` is ``Fail`` and that does not answer
(Kueue's Pod webhook while its manager is down or restarting) makes the API
server refuse the write with 500 and its own words
(``apiserver/pkg/admission/plugin/webhook/errors``)::

    Internal error occurred: failed calling webhook "mpod.kb.io": failed to call webhook: Post
    "https://kueue-webhook-service.kueue-system.svc:443/mutate--v1-pod?timeout=10s": dial tcp ...: connect: connection refused

:func:`webhook_down` tells it from an outage of the API server itself.
Pure functions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kubernetes_asyncio.client.rest import ApiException

from workspacespawner.k8s.apistatus import status_message

_EXCEEDED = re.compile(r"exceeded quota: (?P<quota>[^,]+), requested: (?P<requested>.*?), used: (?P<used>.*?), limited: (?P<limited>.*)$")

#: How a quota's resource reads in a sentence (others are named as Kubernetes names them).
RESOURCE_WORDS = {
    "requests.storage": "storage",
    "persistentvolumeclaims": "volumes",
}


def _amounts(text: str) -> dict[str, str]:
    """``a=1,b=2Gi`` (the plugin's prettyPrint of a ResourceList) as ``{"a": "1", "b": "2Gi"}``."""
    return dict(part.split("=", 1) for part in text.split(",") if "=" in part)


@dataclass(frozen=True)
class QuotaExceeded:
    """A ResourceQuota refusal: the quota's name, and per exceeded resource what was requested, used and the limit (quantities as text)."""

    quota: str
    requested: dict[str, str]
    used: dict[str, str]
    limited: dict[str, str]

    def sentence(self, namespace: str, what: str) -> str:
        """For the user: ``what`` (e.g. ``"your new home volume"``) does not fit namespace ``namespace``'s quota, with the numbers."""
        parts = []
        for resource in sorted(self.requested):
            word = RESOURCE_WORDS.get(resource, resource)
            parts.append(
                f"{self.used.get(resource, '?')} of {self.limited.get(resource, '?')} {word} is in use "
                f"and {what} needs {self.requested[resource]} more"
            )
        return (
            f"The storage quota of namespace {namespace!r} (ResourceQuota {self.quota!r}) is full: "
            + "; ".join(parts)
            + ". Nothing was started and no disk was changed; please ask an administrator to raise the quota or free space."
        )


def exceeded_quota(error: ApiException) -> QuotaExceeded | None:
    """The ResourceQuota refusal ``error`` carries (a 403 whose Status message says "exceeded quota"), else None."""
    if getattr(error, "status", None) != 403:
        return None
    match = _EXCEEDED.search(status_message(error))
    if match is None:
        return None
    return QuotaExceeded(
        quota=match["quota"].strip(),
        requested=_amounts(match["requested"]),
        used=_amounts(match["used"]),
        limited=_amounts(match["limited"]),
    )


#: CDI's words when its clone authorization refuses a write of a cloned DataVolume (module docstring).
CLONE_REFUSED = "insufficient permissions in clone source namespace"


def clone_refused(error: BaseException) -> bool:
    """Whether ``error`` is CDI's clone authorization refusing the writer (a 422 in CDI's words), not a failed
    ``test`` or an invalid object."""
    return getattr(error, "status", None) == 422 and CLONE_REFUSED in status_message(error)


#: The API server's words when an admission webhook could not be called (module docstring).
WEBHOOK_DOWN = "failed calling webhook"


def webhook_down(error: BaseException) -> bool:
    """Whether ``error`` is the API server refusing a write because an admission webhook did not answer."""
    return getattr(error, "status", None) in (500, 503) and WEBHOOK_DOWN in status_message(error)
