"""Status conditions as Kubernetes controllers keep them (``metav1.Condition``-style lists).

Every controller of the local cluster writes conditions the same way the
upstream helpers do (client-go's pod condition utilities, KubeVirt's
``ConditionManager``, CDI's ``updateCondition``): one entry per ``type``,
``lastTransitionTime`` moves only when ``status`` changes. Keeping the
timestamps stable matters here too: a status write that changes nothing is a
no-op for the store, so reconcile loops settle instead of rewriting a fresh
timestamp forever.
"""

from __future__ import annotations


def find_condition(conditions: list | None, ctype: str) -> dict | None:
    """The condition of ``ctype`` in ``conditions``, or None."""
    for cond in conditions or []:
        if cond.get("type") == ctype:
            return cond
    return None


def has_condition(obj: dict, ctype: str, status: str, reason: str | None = None) -> bool:
    """Whether ``obj.status.conditions`` holds ``ctype`` with ``status`` (and ``reason`` if given)."""
    cond = find_condition((obj.get("status") or {}).get("conditions"), ctype)
    if cond is None or cond.get("status") != status:
        return False
    return reason is None or cond.get("reason") == reason


def set_condition(
    conditions: list,
    ctype: str,
    status: str,
    reason: str = "",
    message: str = "",
    *,
    now: str,
    stamps: tuple[str, ...] = ("lastTransitionTime",),
) -> None:
    """Insert or update the ``ctype`` condition in place.

    ``stamps`` names the timestamp fields the kind's condition carries
    (Pods: ``lastTransitionTime``; CDI: also ``lastHeartbeatTime``). They are
    set to ``now`` when the condition is new or its status, reason or message
    changed, and kept otherwise. Empty reason and message are left out.
    """
    cond = find_condition(conditions, ctype)
    wanted = {"type": ctype, "status": status}
    if reason:
        wanted["reason"] = reason
    if message:
        wanted["message"] = message
    if cond is not None:
        same = all(cond.get(k) == wanted.get(k) for k in ("status", "reason", "message"))
        if same:
            return
        transition = cond.get("status") != status
        kept = {k: cond[k] for k in stamps if k in cond and not transition}
        cond.clear()
        cond.update(wanted)
        cond.update({k: kept.get(k, now) for k in stamps})
        return
    wanted.update({k: now for k in stamps})
    conditions.append(wanted)


def remove_condition(conditions: list, ctype: str) -> None:
    """Drop the ``ctype`` condition, if present, in place."""
    conditions[:] = [c for c in conditions if c.get("type") != ctype]
