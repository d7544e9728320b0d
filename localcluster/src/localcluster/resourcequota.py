"""The ResourceQuota admission plugin, for storage: a claim that would exceed a namespace's quota is refused.

Mirrors kube-apiserver's ``ResourceQuota`` validating admission plugin
(plugin/pkg/admission/resourcequota) for core/v1 PersistentVolumeClaims
and the storage resources of a core/v1 ResourceQuota's ``spec.hard``:

- ``requests.storage``: the sum of ``spec.resources.requests.storage`` of
  the namespace's claims;
- ``persistentvolumeclaims``: how many claims there are;
- ``<class>.storageclass.storage.k8s.io/requests.storage`` and
  ``<class>.storageclass.storage.k8s.io/persistentvolumeclaims``: the same,
  for claims of storage class ``<class>``.

A create is charged its size and one claim; an update only what it grows
(a claim never shrinks; an unchanged or smaller request passes even over
a lowered quota, as in Kubernetes). A refusal is 403 Forbidden worded as
the plugin words it::

    persistentvolumeclaims "home-ann" is forbidden: exceeded quota: storage,
    requested: requests.storage=10Gi, used: requests.storage=15Gi, limited: requests.storage=20Gi

Usage is counted from the stored claims at each admission (the real
plugin reads ``status.used``, which its controller keeps equal to that);
``status`` of the ResourceQuota is not maintained here. Other resources of
a quota (cpu, pods, ...) are not enforced. On a real cluster those count
Pods, never VMIs: a VM counts through its virt-launcher Pod, which carries
the VMI's requests and GPUs (:mod:`.controllers.launcher`), once.
"""

from __future__ import annotations

from decimal import Decimal

from . import errors
from .validation import parse_quantity

STORAGE = "requests.storage"
CLAIMS = "persistentvolumeclaims"
CLASS_SUFFIX = ".storageclass.storage.k8s.io/"

_BINARY = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))
_DECIMAL = (("E", 10**18), ("P", 10**15), ("T", 10**12), ("G", 10**9), ("M", 10**6), ("k", 10**3))


def format_quantity(value: Decimal) -> str:
    """A whole quantity as ``resource.Quantity.String()`` prints one: the largest binary, else decimal, suffix that divides it."""
    if value == 0:
        return "0"
    for suffixes in (_BINARY, _DECIMAL):
        for suffix, unit in suffixes:
            if value % unit == 0:
                return f"{int(value // unit)}{suffix}"
    return str(int(value)) if value == value.to_integral_value() else str(value)


def claim_usage(pvc: dict) -> dict[str, Decimal]:
    """What one claim counts against a quota: ``{resource name: amount}`` (its size and one claim, overall and for its class)."""
    spec = pvc.get("spec") if isinstance(pvc.get("spec"), dict) else {}
    requests = ((spec.get("resources") or {}).get("requests") or {}) if isinstance(spec.get("resources"), dict) else {}
    try:
        size = parse_quantity(requests.get("storage", 0))
    except (TypeError, ValueError):
        size = Decimal(0)
    usage = {STORAGE: size, CLAIMS: Decimal(1)}
    storage_class = spec.get("storageClassName")
    if storage_class:
        usage[f"{storage_class}{CLASS_SUFFIX}{STORAGE}"] = size
        usage[f"{storage_class}{CLASS_SUFFIX}{CLAIMS}"] = Decimal(1)
    return usage


def _pretty(amounts: dict[str, Decimal]) -> str:
    """The plugin's prettyPrint of a ResourceList: ``name=quantity`` pairs sorted by name, joined by commas."""
    return ",".join(f"{name}={format_quantity(amounts[name])}" for name in sorted(amounts))


def admit_claim(pvc: dict, store) -> None:
    """Refuse (403 Forbidden) a create or update of claim ``pvc`` that would take its namespace past a ResourceQuota.

    ``store``: the :class:`~.store.Store`, holding the claim as it was
    before this write (absent on create). Quotas are checked in name order;
    the first exceeded one is named, with every resource it exceeds.
    """
    meta = pvc.get("metadata") or {}
    namespace, name = meta.get("namespace"), meta.get("name")
    claims_kind = store.kind("", "v1", CLAIMS)
    quotas, _ = store.list(store.kind("", "v1", "resourcequotas"), namespace)
    if not quotas:
        return
    claims, _ = store.list(claims_kind, namespace)
    used: dict[str, Decimal] = {}
    before: dict[str, Decimal] = {}
    for claim in claims:
        for resource, amount in claim_usage(claim).items():
            used[resource] = used.get(resource, Decimal(0)) + amount
        if claim["metadata"]["name"] == name:
            before = claim_usage(claim)
    after = claim_usage(pvc)
    requested = {r: amount - before.get(r, Decimal(0)) for r, amount in after.items() if amount > before.get(r, Decimal(0))}
    for quota in sorted(quotas, key=lambda q: q["metadata"]["name"]):
        hard = ((quota.get("spec") or {}).get("hard") or {})
        exceeded = []
        for resource, limit in hard.items():
            if resource not in requested:
                continue
            try:
                limited = parse_quantity(limit)
            except (TypeError, ValueError):
                continue
            if used.get(resource, Decimal(0)) + requested[resource] > limited:
                exceeded.append(resource)
        if exceeded:
            raise errors.ApiError(
                403,
                "Forbidden",
                f'{CLAIMS} "{name}" is forbidden: exceeded quota: {quota["metadata"]["name"]}, '
                f"requested: {_pretty({r: requested[r] for r in exceeded})}, "
                f"used: {_pretty({r: used.get(r, Decimal(0)) for r in exceeded})}, "
                f"limited: {_pretty({r: parse_quantity(hard[r]) for r in exceeded})}",
                {"name": name, "kind": CLAIMS},
            )
