"""The API server's discovery documents, built from the table of kinds.

Mirrors the unaggregated discovery of a Kubernetes API server of the
release in :mod:`.version`:
``/version`` (``version.Info``), ``/api`` (``APIVersions``), ``/apis``
(``APIGroupList``), ``/apis/{group}`` (``APIGroup``) and ``/api/v1`` /
``/apis/{group}/{version}`` (``APIResourceList``, with subresources listed
as ``plural/sub``: ``pods/status``, ``pods/log`` and the like). Clients asking for aggregated discovery
(``as=APIGroupDiscoveryList``) get these documents too and fall back, as
they do against any server that does not aggregate.
"""

from __future__ import annotations

from .errors import ApiError
from .kinds import (
    KUBEVIRT_SUBRESOURCE_GROUP,
    KUBEVIRT_SUBRESOURCE_VERSION,
    READ_ONLY_SUBRESOURCES,
    VM_ACTIONS,
    Kind,
    groups,
)
from .version import BUILD_DATE, GIT_VERSION, GO_VERSION, MAJOR, MINOR

#: Verbs of a ``{plural}/status`` subresource.
STATUS_VERBS = ("get", "patch", "update")
#: Verbs of a read-only subresource (``pods/log``).
READ_VERBS = ("get",)


def version_info() -> dict:
    """``GET /version``: the ``version.Info`` of the local cluster."""
    return {
        "major": MAJOR,
        "minor": MINOR,
        "gitVersion": GIT_VERSION,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": BUILD_DATE,
        "goVersion": GO_VERSION,
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def api_versions(server_address: str) -> dict:
    """``GET /api``: the core group's versions."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def _served_groups(kinds) -> dict[str, list[str]]:
    served = groups(kinds)
    served[KUBEVIRT_SUBRESOURCE_GROUP] = [KUBEVIRT_SUBRESOURCE_VERSION]
    return served


def _group_document(name: str, versions: list[str]) -> dict:
    listed = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": listed, "preferredVersion": listed[0]}


def api_group_list(kinds) -> dict:
    """``GET /apis``: every non-core group with its versions."""
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group_document(name, versions) for name, versions in _served_groups(kinds).items()],
    }


def api_group(kinds, group: str) -> dict:
    """``GET /apis/{group}``; 404 for a group that is not served."""
    versions = _served_groups(kinds).get(group)
    if not versions:
        raise _not_found()
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_document(group, versions)}


def _resource(kind: Kind) -> dict:
    doc = {
        "name": kind.plural,
        "singularName": kind.singular,
        "namespaced": kind.namespaced,
        "kind": kind.kind,
        "verbs": list(kind.verbs),
    }
    if kind.short_names:
        doc["shortNames"] = list(kind.short_names)
    if kind.categories:
        doc["categories"] = list(kind.categories)
    return doc


def _subresource(kind: Kind, sub: str, verbs, sub_kind: str) -> dict:
    return {
        "name": f"{kind.plural}/{sub}",
        "singularName": "",
        "namespaced": kind.namespaced,
        "kind": sub_kind,
        "verbs": list(verbs),
    }


def _kubevirt_subresources(kinds) -> list[dict]:
    vm = next(k for k in kinds if k.group == "kubevirt.io" and k.plural == "virtualmachines")
    return [_subresource(vm, action, ("update",), "") for action in VM_ACTIONS]


def api_resource_list(kinds, group: str, version: str) -> dict:
    """``GET /api/v1`` or ``/apis/{group}/{version}``: the resources of one group version."""
    if (group, version) == (KUBEVIRT_SUBRESOURCE_GROUP, KUBEVIRT_SUBRESOURCE_VERSION):
        resources = _kubevirt_subresources(kinds)
    else:
        resources = []
        for kind in kinds:
            if (kind.group, kind.version) == (group, version):
                resources.append(_resource(kind))
                resources.extend(
                    _subresource(kind, sub, READ_VERBS if sub in READ_ONLY_SUBRESOURCES else STATUS_VERBS, kind.kind)
                    for sub in kind.subresources
                )
        if not resources:
            raise _not_found()
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }


def _not_found() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource")
