"""Kubernetes quantities (``"10Gi"``, ``"500m"``, ``"1e3"``) as exact numbers, and sizes for people.

:func:`parse_quantity` reads the serialization of ``resource.Quantity``
(``k8s.io/apimachinery/pkg/api/resource``)::

    quantity  = [sign] number [suffix]
    sign      = "+" | "-"
    number    = digits | digits "." [digits] | "." digits
    suffix    = binary | decimal | exponent
    binary    = "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei"        (powers of 1024)
    decimal   = "n" | "u" | "m" | "k" | "M" | "G" | "T" | "P" | "E"   (powers of 1000)
    exponent  = ("e" | "E") [sign] digits                      (a power of ten)

``n`` and ``u`` are not in the grammar Kubernetes documents but its
parser takes them, so we do too. Anything else is refused, including what
the ``kubernetes`` Python client lets through but the API server would not:
an upper-case ``K``, a suffix after an exponent (``1e3k``), blanks,
underscores, ``Infinity`` and ``NaN``.

The value is a :class:`~decimal.Decimal`, computed without rounding.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, DecimalException, localcontext

__all__ = ["gib", "in_unit_of", "parse_quantity"]

_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -3, "u": -2, "m": -1, "k": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6}

_QUANTITY_RE = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<suffix>[KMGTPE]i|[numkMGTPE])|[eE](?P<exponent>[+-]?[0-9]+))?"
)


def parse_quantity(value: str | int | float | Decimal) -> Decimal:
    """The exact value of a Kubernetes quantity: ``"10Gi"`` is ``10737418240``, ``"500m"`` is ``0.5``.

    Numbers (``int``, ``float``, :class:`~decimal.Decimal`) are taken as
    they are. Raises ValueError, naming ``value``, for anything that is not
    a quantity (see the module docstring), a bool, or a number that is not
    finite.
    """
    if isinstance(value, bool):
        raise ValueError(f"not a Kubernetes quantity: {value!r}")
    if isinstance(value, (int, float, Decimal)):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"not a Kubernetes quantity: {value!r}")
        if isinstance(value, Decimal) and not value.is_finite():
            raise ValueError(f"not a Kubernetes quantity: {value!r}")
        return Decimal(value)
    if not isinstance(value, str):
        raise ValueError(f"not a Kubernetes quantity: {value!r}")
    match = _QUANTITY_RE.fullmatch(value)
    if match is None:
        raise ValueError(f"not a Kubernetes quantity: {value!r}")
    number, suffix, exponent = match.group("number", "suffix", "exponent")
    # Enough digits that no product below is rounded: the number's own plus 1024**6's 19.
    with localcontext() as context:
        context.prec = len(value) + 40
        try:
            amount = Decimal(number)
            if exponent is not None:
                return amount.scaleb(int(exponent))
            if suffix is None:
                return amount
            if suffix in _BINARY:
                return amount * Decimal(1024) ** _BINARY[suffix]
            return amount.scaleb(3 * _DECIMAL[suffix])
        except (DecimalException, OverflowError, ValueError) as e:
            raise ValueError(f"not a Kubernetes quantity (out of range): {value!r}") from e


def _number(value: float) -> str:
    """At most two decimals, no trailing zeros: ``49.25``, ``50``, ``0.1``."""
    return f"{value:.2f}".rstrip("0").rstrip(".")


#: JupyterHub's byte specification (``Spawner.mem_limit``, ``mem_guarantee``): K, M, G and T count powers of 1024.
_SPAWNER_BYTE_UNITS = {"K": "KiB", "M": "MiB", "G": "GiB", "T": "TiB"}


def spawner_memory_for_people(value) -> str:
    """A spawner's ``mem_limit`` as a person reads it. JupyterHub's byte specification counts K, M, G and T in powers
    of 1024 (kubespawner's ``"4G"`` is a limit of 4 GiB), so ``"4G"`` is ``"4 GiB"``; plain bytes are shown in GiB;
    anything else as given."""
    text = str(value).strip()
    if text.isdigit():
        return gib(int(text))
    if text[-1:] in _SPAWNER_BYTE_UNITS:
        try:
            number = float(text[:-1])
        except ValueError:
            return text
        return f"{_number(number)} {_SPAWNER_BYTE_UNITS[text[-1]]}"
    return text


def gib(nbytes: float | int | Decimal) -> str:
    """Bytes as GiB for people: ``gib(50 * 2**30)`` is ``"50 GiB"``, two decimals at most."""
    return f"{_number(float(nbytes) / 2**30)} GiB"


def in_unit_of(nbytes: float | int | Decimal, quantity: str) -> str:
    """Bytes in the unit of the quantity a person gave: ``in_unit_of(2**30, "1Mi")`` is ``"1024Mi"``.

    A binary or decimal suffix gives that suffix, two decimals at most (a
    value that would round to 0 keeps three significant digits); a
    quantity without one, or with an exponent, gives plain bytes.
    """
    match = _QUANTITY_RE.fullmatch(quantity.strip()) if isinstance(quantity, str) else None
    suffix = match.group("suffix") if match else None
    if suffix is None or suffix in ("n", "u", "m"):
        return f"{int(nbytes)} bytes"
    scale = 1024 ** _BINARY[suffix] if suffix in _BINARY else 10 ** (3 * _DECIMAL[suffix])
    value = float(nbytes) / scale
    text = _number(value)
    if text == "0" and value:
        text = f"{value:.3g}"
    return f"{text}{suffix}"
