"""Label and field selectors, parsed and matched as the Kubernetes API server does.

``LabelSelector`` mirrors the string syntax of ``k8s.io/apimachinery/pkg/labels``
(``labels.Parse``): comma-separated requirements, each one of

* ``key`` (exists) and ``!key`` (does not exist);
* ``key=value``, ``key==value`` (key present with that value);
* ``key!=value`` (value differs, *or the key is missing*);
* ``key in (a,b)`` (key present, value in the set) and ``key notin (a,b)``
  (value outside the set, *or the key is missing*);
* ``key>N`` and ``key<N`` (key present and its value, read as an integer,
  greater or less than ``N``; the operators node affinity uses).

Whitespace between tokens is ignored, ``in``/``notin`` are keywords only where
an operator is expected (``x in (in)`` is valid), values may be empty
(``key=``, ``key in (a,)``, ``key in ()``), keys are qualified names with an
optional DNS-subdomain prefix (``hub.jupyter.org/username``) and values are
label values, validated as ``k8s.io/apimachinery/pkg/util/validation`` does.

``FieldSelector`` mirrors ``k8s.io/apimachinery/pkg/fields`` (``fields.ParseSelector``):
comma-separated ``field=value``, ``field==value`` or ``field!=value`` terms,
with ``\\,``, ``\\=`` and ``\\\\`` escapes in values. Only the field labels the
API server registers for the served kinds are accepted (see
:data:`SUPPORTED_FIELDS`); any other answers ``field label not supported: <f>``
as the API server's field label conversion does. A missing field compares as
the empty string.

Every syntax error raises :func:`errors.bad_request` (HTTP 400), which is how
the API server answers a ``labelSelector`` or ``fieldSelector`` query parameter
it cannot parse.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from . import errors

__all__ = ["SUPPORTED_FIELDS", "FieldSelector", "LabelSelector", "Requirement"]

# --- validation (k8s.io/apimachinery/pkg/util/validation) --------------------

_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS1123_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_INT_RE = re.compile(r"^[+-]?[0-9]+$")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

_QUALIFIED_NAME_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
    "end with an alphanumeric character (e.g. 'MyName', or 'my.name', or '123-abc', regex used "
    "for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain "
    "prefix and '/' (e.g. 'example.com/MyName'), at most 63 characters"
)
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue', or 'my_value', "
    "or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?'), "
    "at most 63 characters"
)


def _is_qualified_name(key: str) -> bool:
    parts = key.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN_RE.match(prefix):
            return False
    else:
        return False
    return 0 < len(name) <= 63 and bool(_NAME_RE.match(name))


def _is_label_value(value: str) -> bool:
    return value == "" or (len(value) <= 63 and bool(_NAME_RE.match(value)))


def _parse_int64(text: str) -> int | None:
    """``strconv.ParseInt(text, 10, 64)``: None when it would fail."""
    if not _INT_RE.match(text):
        return None
    number = int(text)
    return number if _INT64_MIN <= number <= _INT64_MAX else None


# --- label selector lexer ----------------------------------------------------

_WHITESPACE = " \t\r\n"
_SPECIAL = "=!(),><"
# Token kinds. IDENT is a key or value; IN/NOTIN are keywords only where an
# operator is expected (the parser's "KeyAndOperator" context), identifiers
# everywhere else, as in labels.Parser.lookahead/consume.
_END, _IDENT, _IN, _NOTIN = "end of string", "identifier", "in", "notin"
_SYMBOLS = ("!=", "==", "=", "!", "(", ")", ",", ">", "<")
_OPERATORS = {"=": "=", "==": "==", "!=": "!=", _IN: "in", _NOTIN: "notin", ">": "gt", "<": "lt"}


def _lex(text: str) -> list[tuple[str, str]]:
    """Split ``text`` into (kind, literal) tokens, ending with the end-of-string token."""
    tokens: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in _WHITESPACE:
            i += 1
        if i >= n:
            tokens.append((_END, ""))
            return tokens
        if text[i] in _SPECIAL:
            # Longest known operator starting here ("!=" before "!", "==" before "=").
            for symbol in _SYMBOLS:
                if text.startswith(symbol, i):
                    tokens.append((symbol, symbol))
                    i += len(symbol)
                    break
            continue
        start = i
        while i < n and text[i] not in _SPECIAL and text[i] not in _WHITESPACE:
            i += 1
        word = text[start:i]
        tokens.append((word if word in (_IN, _NOTIN) else _IDENT, word))


class _Tokens:
    def __init__(self, text: str):
        self._items = _lex(text)
        self._pos = 0

    def peek(self, keywords: bool = False) -> tuple[str, str]:
        kind, literal = self._items[self._pos]
        if not keywords and kind in (_IN, _NOTIN):
            kind = _IDENT
        return kind, literal

    def take(self, keywords: bool = False) -> tuple[str, str]:
        token = self.peek(keywords)
        if self._pos < len(self._items) - 1:
            self._pos += 1
        return token


@dataclass(frozen=True)
class Requirement:
    """One requirement of a label selector: ``key``, operator and value set.

    ``op`` is one of ``exists``, ``!``, ``=``, ``==``, ``!=``, ``in``,
    ``notin``, ``gt``, ``lt`` (the ``labels.Requirement`` operators).
    """

    key: str
    op: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: dict) -> bool:
        """``labels.Requirement.Matches``."""
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op in ("=", "==", "in"):
            return present and str(labels[self.key]) in self.values
        if self.op in ("!=", "notin"):
            return not present or str(labels[self.key]) not in self.values
        # gt / lt: the label must be present and read as an integer.
        if not present:
            return False
        have = _parse_int64(str(labels[self.key]))
        if have is None:
            return False
        want = int(next(iter(self.values)))
        return have > want if self.op == "gt" else have < want


def _check_key(key: str) -> None:
    if not _is_qualified_name(key):
        raise ValueError(f'key: Invalid value: "{key}": {_QUALIFIED_NAME_MSG}')


def _requirement(key: str, op: str, values: set[str]) -> Requirement:
    """``labels.NewRequirement``: integer values for ``gt``/``lt``, valid label values."""
    ordered = sorted(values)
    if op in ("gt", "lt") and _parse_int64(ordered[0]) is None:
        raise ValueError(
            f'values[0]: Invalid value: "{ordered[0]}": '
            "for 'Gt', 'Lt' operators, the value must be an integer"
        )
    for i, value in enumerate(ordered):
        if not _is_label_value(value):
            raise ValueError(f'values[{i}][{key}]: Invalid value: "{value}": {_LABEL_VALUE_MSG}')
    return Requirement(key, op, frozenset(values))


def _parse_requirement(tokens: _Tokens) -> Requirement:
    """``[!] KEY [op values]``; the key is validated as soon as it is read."""
    kind, literal = tokens.take()
    negated = kind == "!"
    if negated:
        kind, literal = tokens.take()
    if kind != _IDENT:
        raise ValueError(f"found '{literal}', expected: identifier")
    key = literal
    _check_key(key)
    if negated:
        # "!key" is complete; whatever follows is the caller's to reject.
        return Requirement(key, "!")
    if tokens.peek()[0] in (_END, ","):
        return Requirement(key, "exists")
    kind, literal = tokens.take(keywords=True)
    op = _OPERATORS.get(kind)
    if op is None:
        raise ValueError(f"found '{literal}', expected: '=', '!=', '==', 'in', notin'")
    if op in ("in", "notin"):
        values = _parse_value_set(tokens)
    else:
        values = _parse_exact_value(tokens)
    return _requirement(key, op, values)


def _parse_value_set(tokens: _Tokens) -> set[str]:
    """``(a,b,c)``: empty members are the empty value and ``()`` is ``{""}``."""
    kind, literal = tokens.take()
    if kind != "(":
        raise ValueError(f"found '{literal}' expected: '('")
    kind, literal = tokens.peek()
    if kind == ")":
        tokens.take()
        return {""}
    if kind not in (_IDENT, ","):
        raise ValueError(f"found '{literal}', expected: ',', ')' or identifier")
    values: set[str] = set()
    while True:
        kind, literal = tokens.take()
        if kind == _IDENT:
            values.add(literal)
            following, found = tokens.peek()
            if following == ",":
                continue
            if following == ")":
                break
            raise ValueError(f"found '{found}', expected: ',' or ')'")
        if kind != ",":
            raise ValueError(f"found '{literal}', expected: ',', or identifier")
        if not values:
            values.add("")  # "(,a)"
        following = tokens.peek()[0]
        if following == ")":
            values.add("")  # "(a,)"
            break
        if following == ",":
            tokens.take()
            values.add("")  # "(a,,b)"
    tokens.take()  # the ")"
    return values


def _parse_exact_value(tokens: _Tokens) -> set[str]:
    kind, literal = tokens.peek()
    if kind in (_END, ","):
        return {""}  # "key=" selects the empty value
    kind, literal = tokens.take()
    if kind != _IDENT:
        raise ValueError(f"found '{literal}', expected: identifier")
    return {literal}


class LabelSelector:
    """A parsed ``labelSelector``: all requirements must match (logical AND)."""

    def __init__(self, requirements: tuple[Requirement, ...] = ()):
        self.requirements = tuple(requirements)

    @classmethod
    def parse(cls, text: str | None) -> LabelSelector:
        """Parse the ``labelSelector`` query string; ``""``/None selects everything.

        Raises :func:`errors.bad_request` with the ``labels.Parse`` message on
        syntax errors, invalid keys and invalid values.
        """
        if not text:
            return cls()
        tokens = _Tokens(text)
        requirements: list[Requirement] = []
        while True:
            kind, literal = tokens.peek()
            if kind == _END:
                break
            if kind not in (_IDENT, "!"):
                raise errors.bad_request(f"found '{literal}', expected: !, identifier, or 'end of string'")
            try:
                requirements.append(_parse_requirement(tokens))
            except ValueError as exc:
                raise errors.bad_request(f"unable to parse requirement: {exc}") from None
            kind, literal = tokens.take()
            if kind == _END:
                break
            if kind != ",":
                raise errors.bad_request(f"found '{literal}', expected: ',' or 'end of string'")
            following, found = tokens.peek()
            if following not in (_IDENT, "!"):
                raise errors.bad_request(f"found '{found}', expected: identifier after ','")
        requirements.sort(key=lambda r: r.key)
        return cls(tuple(requirements))

    def empty(self) -> bool:
        """True when the selector selects everything."""
        return not self.requirements

    def matches(self, labels: dict | None) -> bool:
        """True when every requirement holds for ``labels`` (None means no labels)."""
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    def __repr__(self) -> str:
        return f"LabelSelector({self.requirements!r})"


# --- field selectors -----------------------------------------------------------

#: Field labels the API server registers for the kinds served here: the generic
#: ``metadata.name``/``metadata.namespace``, Pod ``spec.nodeName`` and
#: ``status.phase`` (also Namespace ``status.phase``), and the Event fields
#: ``kubectl describe`` selects on (``pkg/registry/core/event`` ``ToSelectableFields``).
#: The value is the object path read, ``source`` being ``source.component``.
SUPPORTED_FIELDS: dict[str, tuple[str, ...]] = {
    "metadata.name": ("metadata", "name"),
    "metadata.namespace": ("metadata", "namespace"),
    "status.phase": ("status", "phase"),
    "spec.nodeName": ("spec", "nodeName"),
    "involvedObject.kind": ("involvedObject", "kind"),
    "involvedObject.namespace": ("involvedObject", "namespace"),
    "involvedObject.name": ("involvedObject", "name"),
    "involvedObject.uid": ("involvedObject", "uid"),
    "involvedObject.apiVersion": ("involvedObject", "apiVersion"),
    "involvedObject.resourceVersion": ("involvedObject", "resourceVersion"),
    "involvedObject.fieldPath": ("involvedObject", "fieldPath"),
    "reason": ("reason",),
    "reportingComponent": ("reportingComponent",),
    "source": ("source", "component"),
    "type": ("type",),
}

_FIELD_OPERATORS = ("!=", "==", "=")


def _split_terms(text: str) -> list[str]:
    """Split on commas not escaped by a backslash (``fields.splitTerms``)."""
    terms, start, escaped = [], 0, False
    for i, ch in enumerate(text):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == ",":
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return terms


def _split_term(term: str) -> tuple[str, str, str] | None:
    """Split at the first operator occurrence (``fields.splitTerm``)."""
    for i in range(len(term)):
        for op in _FIELD_OPERATORS:
            if term.startswith(op, i):
                return term[:i], op, term[i + len(op) :]
    return None


def _unescape(value: str) -> str:
    """``fields.UnescapeValue``: ``\\\\``, ``\\,`` and ``\\=`` only; bare ``,``/``=`` are errors."""
    out, escaped = [], False
    for ch in value:
        if escaped:
            if ch not in "\\,=":
                raise errors.bad_request(f"invalid field selector: invalid escape sequence: \\{ch}")
            out.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch in ",=":
            raise errors.bad_request(f"invalid field selector: unescaped character in value: {ch}")
        else:
            out.append(ch)
    if escaped:
        raise errors.bad_request("invalid field selector: invalid escape sequence: \\")
    return "".join(out)


def _field_value(obj: dict, path: tuple[str, ...]) -> str:
    value = obj
    for part in path:
        if not isinstance(value, dict):
            return ""
        value = value.get(part)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class FieldSelector:
    """A parsed ``fieldSelector``: a list of (field, op, value) terms, all must hold."""

    def __init__(self, terms: tuple[tuple[str, str, str], ...] = ()):
        self.terms = tuple(terms)

    @classmethod
    def parse(cls, text: str | None) -> FieldSelector:
        """Parse the ``fieldSelector`` query string; ``""``/None selects everything.

        Raises :func:`errors.bad_request` for a term without an operator
        (``invalid selector: '<s>'; can't understand '<term>'``), a bad escape,
        or a field outside :data:`SUPPORTED_FIELDS` (``field label not supported: <f>``).
        Field names are taken verbatim, spaces included, as Kubernetes does.
        """
        if not text:
            return cls()
        terms = []
        for part in sorted(_split_terms(text)):
            if part == "":
                continue
            split = _split_term(part)
            if split is None:
                raise errors.bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
            field, op, raw = split
            value = _unescape(raw)
            if field not in SUPPORTED_FIELDS:
                raise errors.bad_request(f"field label not supported: {field}")
            terms.append((field, "!=" if op == "!=" else "=", value))
        return cls(tuple(terms))

    def empty(self) -> bool:
        """True when the selector selects everything."""
        return not self.terms

    def matches(self, obj: dict) -> bool:
        """True when every term holds for ``obj``; a missing field reads as ``""``."""
        for field, op, value in self.terms:
            have = _field_value(obj, SUPPORTED_FIELDS[field])
            if (have == value) != (op == "="):
                return False
        return True

    def __repr__(self) -> str:
        return f"FieldSelector({self.terms!r})"
