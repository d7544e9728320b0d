"""Which Kubernetes RBAC permission an API request needs: a small pure mapping, and Role rules expanded to compare with it.

Kubernetes authorizes a resource request by (API group, resource[/subresource],
verb, namespace), where the verb comes from the HTTP method and the path
(https://kubernetes.io/docs/reference/access-authn-authz/authorization/#determine-the-request-verb):

=========  ==========================================  ==================
method     path                                        verb
=========  ==========================================  ==================
GET/HEAD   a named object (…/pods/NAME)                get
GET/HEAD   a collection (…/pods)                       list
GET/HEAD   with ``?watch=true`` or under ``/watch/``   watch
POST       a collection or a subresource               create
PUT        an object or a subresource                  update
PATCH      an object or a subresource                  patch
DELETE     a named object                              delete
DELETE     a collection                                deletecollection
=========  ==========================================  ==================

KubeVirt's ``PUT /apis/subresources.kubevirt.io/v1/namespaces/NS/virtualmachines/NAME/start``
is therefore ``update`` on ``virtualmachines/start`` in the group
``subresources.kubevirt.io``. Paths outside ``/api`` and ``/apis/GROUP/VERSION``
resources (discovery, ``/version``, ``/openapi``) are non-resource requests
that every authenticated client may make: :func:`access_for` returns None.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

VERBS_BY_METHOD = {"POST": "create", "PUT": "update", "PATCH": "patch"}


@dataclass(frozen=True, order=True)
class Access:
    """One permission: API group ("" for core), resource (``pods``, ``virtualmachines/start``), verb, namespace (None: cluster scope)."""

    group: str
    resource: str
    verb: str
    namespace: str | None = None

    @property
    def triple(self) -> tuple[str, str, str]:
        """(group, resource, verb), what a Role rule grants regardless of namespace."""
        return (self.group, self.resource, self.verb)


def access_for(method: str, path: str, query: Mapping[str, str] | None = None) -> Access | None:
    """The permission a request needs, or None for a non-resource request (discovery and the like).

    ``path`` is the URL path without the query; ``query`` maps parameter
    names to values (``{"watch": "true"}``). Raises ValueError for a method
    Kubernetes does not authorize.
    """
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 2:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, rest = parts[1], parts[3:]
    else:
        return None
    if not rest:
        return None
    legacy_watch = rest[0] == "watch"
    if legacy_watch:
        rest = rest[1:]
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    resource, name, subresource = rest[0], (rest[1] if len(rest) > 1 else None), (rest[2] if len(rest) > 2 else None)
    if subresource:
        resource = f"{resource}/{subresource}"
    method = method.upper()
    if method in ("GET", "HEAD"):
        watching = legacy_watch or str((query or {}).get("watch", "")).lower() in ("true", "1")
        verb = "watch" if watching else "get" if name else "list"
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    elif method in VERBS_BY_METHOD:
        verb = VERBS_BY_METHOD[method]
    else:
        raise ValueError(f"{method} is not a Kubernetes API verb")
    return Access(group, resource, verb, namespace)


def rule_triples(rules: Iterable[Mapping]) -> set[tuple[str, str, str]]:
    """Every (group, resource, verb) the RBAC ``rules`` of a Role or ClusterRole grant, one per combination.

    Wildcards (``*``) and ``resourceNames`` are not expanded: our Roles use
    neither, and the tests refuse them.
    """
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule.get("apiGroups", ())
        for resource in rule.get("resources", ())
        for verb in rule.get("verbs", ())
    }


def uncovered(accesses: Iterable[Access], rules: Iterable[Mapping]) -> list[Access]:
    """The ``accesses`` that ``rules`` do not grant, sorted and without repeats."""
    granted = rule_triples(rules)
    return sorted({a for a in accesses if a.triple not in granted})


def unused(rules: Iterable[Mapping], accesses: Iterable[Access], allowed: Iterable[tuple[str, str, str]] = ()) -> list[tuple[str, str, str]]:
    """The (group, resource, verb) ``rules`` grant that no access used and ``allowed`` does not excuse, sorted."""
    used = {a.triple for a in accesses}
    return sorted(rule_triples(rules) - used - set(allowed))
