"""API errors as the Kubernetes API server reports them: ``Status`` objects.

Follows ``meta/v1 Status`` (https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/status/):
``{"kind": "Status", "apiVersion": "v1", "status": "Failure", "message", "reason", "details", "code"}``.
Every failure inside the local cluster raises :class:`ApiError`; the HTTP layer
turns it into the response body and status code.
"""

from __future__ import annotations


class ApiError(Exception):
    """A failed API request.

    ``code`` is the HTTP status, ``reason`` the Status reason word
    (``NotFound``, ``AlreadyExists``, ``Conflict``, ``Invalid``, ``BadRequest``,
    ``MethodNotAllowed``, ``Gone``, ``UnsupportedMediaType``, ...), ``details``
    the Status ``details`` dict (name, group, kind, causes), ``metadata`` its
    list metadata (``continue`` of an expired list's 410).
    """

    def __init__(self, code: int, reason: str, message: str, details: dict | None = None, metadata: dict | None = None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details or {}
        self.metadata = metadata or {}

    def status(self) -> dict:
        """The ``Status`` object for the response body."""
        body = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": dict(self.metadata),
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


def _details(kind, name, group=""):
    details = {"kind": kind}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    return details


def not_found(plural: str, name: str, group: str = "") -> ApiError:
    """404 NotFound, worded as the API server words it."""
    what = f"{plural}.{group}" if group else plural
    return ApiError(404, "NotFound", f'{what} "{name}" not found', _details(plural, name, group))


def already_exists(plural: str, name: str, group: str = "") -> ApiError:
    """409 AlreadyExists for a create whose name is taken."""
    what = f"{plural}.{group}" if group else plural
    return ApiError(
        409, "AlreadyExists", f'{what} "{name}" already exists', _details(plural, name, group)
    )


def conflict(plural: str, name: str, message: str, group: str = "") -> ApiError:
    """409 Conflict, e.g. a stale resourceVersion on replace."""
    what = f"{plural}.{group}" if group else plural
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {what} "{name}": {message}',
        _details(plural, name, group),
    )


def invalid(kind: str, name: str, causes: list[dict], group: str = "") -> ApiError:
    """422 Invalid with field causes: ``[{"field": "spec.x", "reason": "FieldValueInvalid", "message": ...}]``.

    The message lists them after ``{kind} "{name}" is invalid: ``, in
    brackets when there is more than one.
    """
    summary = ", ".join(f"{c.get('field', '')}: {c.get('message', '')}" for c in causes)
    if len(causes) > 1:
        summary = f"[{summary}]"  # an aggregate of errors prints as a list, as apimachinery's does
    what = f"{kind}.{group}" if group else kind
    details = _details(kind, name, group)
    details["causes"] = causes
    return ApiError(422, "Invalid", f'{what} "{name}" is invalid: {summary}', details)


def forbidden(plural: str, name: str, message: str, group: str = "", causes: list[dict] | None = None) -> ApiError:
    """403 Forbidden from an admission plugin: ``{plural} "{name}" is forbidden: {message}``."""
    what = f"{plural}.{group}" if group else plural
    details = _details(plural, name, group)
    if causes:
        details["causes"] = causes
    return ApiError(403, "Forbidden", f'{what} "{name}" is forbidden: {message}', details)


def invalid_option(options_kind: str, field: str, message: str) -> ApiError:
    """422 for a bad request option (``DeleteOptions``, ``CreateOptions``...), as the API server validates them."""
    return invalid(options_kind, "", [{"field": field, "reason": "FieldValueNotSupported", "message": message}], "meta.k8s.io")


def bad_request(message: str) -> ApiError:
    """400 BadRequest."""
    return ApiError(400, "BadRequest", message)


def method_not_allowed(message: str) -> ApiError:
    """405 MethodNotAllowed."""
    return ApiError(405, "MethodNotAllowed", message)


def gone(message: str) -> ApiError:
    """410 Gone: a watch or list from a resourceVersion the server no longer keeps."""
    return ApiError(410, "Expired", message)


#: The patch types of a server without server-side apply: strategic merge for built-in kinds only.
PATCH_MEDIA_TYPES = ("application/json-patch+json", "application/merge-patch+json", "application/strategic-merge-patch+json")


def unsupported_media_type(content_type: str, strategic_merge: bool = True) -> ApiError:
    """415 UnsupportedMediaType for a patch content type the kind does not accept.

    Worded as kube-apiserver's patch handler words it, listing what a server
    without server-side apply accepts (the local cluster answers
    ``application/apply-patch+yaml`` this way: see its README).
    """
    accepted = PATCH_MEDIA_TYPES if strategic_merge else PATCH_MEDIA_TYPES[:2]
    return ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted media types include: {', '.join(accepted)}",
    )
