"""Kubernetes quantities read by :mod:`workspacespawner.core.quantities`, and sizes written for people.

Covers: every binary (``Ki`` .. ``Ei``) and decimal (``n`` .. ``E``) suffix,
exponents in both cases and with signs, plain and signed numbers, the
number shapes ``1.``, ``.5``, exactness far beyond float precision, numbers
handed in as ``int``/``float``/``Decimal``, refusals (ValueError naming the
text) of what the API server would refuse, agreement with the sync
``kubernetes`` client's ``parse_quantity`` over a list of valid values
(and the inputs where that client is laxer than the API server), and
:func:`gib`.
"""

from __future__ import annotations

import random
from decimal import Decimal
from fractions import Fraction

import pytest

from workspacespawner.core.quantities import gib, in_unit_of, parse_quantity, spawner_memory_for_people

BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}


@pytest.mark.parametrize("suffix", sorted(BINARY))
def test_binary_suffixes(suffix):
    assert parse_quantity(f"3{suffix}") == 3 * BINARY[suffix]
    assert parse_quantity(f"1.5{suffix}") == Decimal("1.5") * BINARY[suffix]


@pytest.mark.parametrize("suffix", sorted(DECIMAL))
def test_decimal_suffixes(suffix):
    assert parse_quantity(f"7{suffix}") == 7 * Decimal(DECIMAL[suffix])
    assert parse_quantity(f"0.25{suffix}") == Decimal("0.25") * Decimal(DECIMAL[suffix])


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", 0),
        ("42", 42),
        ("+42", 42),
        ("-42", -42),
        ("007", 7),
        ("1.5", Decimal("1.5")),
        ("1.", 1),
        (".5", Decimal("0.5")),
        ("-.5", Decimal("-0.5")),
        ("500m", Decimal("0.5")),
        ("-1Gi", -(2**30)),
        ("+2Mi", 2 * 2**20),
        ("1e3", 1000),
        ("1E3", 1000),
        ("1e+3", 1000),
        ("1E-3", Decimal("0.001")),
        ("2.5e2", 250),
        ("-1e0", -1),
        ("1E", 10**18),  # a bare E is exa, not an exponent
    ],
)
def test_forms(text, value):
    assert parse_quantity(text) == value


def test_values_are_exact():
    # 36 significant digits: more than Decimal's default context keeps
    assert Fraction(parse_quantity("123456789.123456789Ei")) == Fraction(123456789123456789 * 2**60, 10**9)
    assert parse_quantity("0.1") == Decimal("0.1")
    assert parse_quantity("1n") * 10**9 == 1
    assert parse_quantity("99999999999999999999999999999999") == 99999999999999999999999999999999
    assert isinstance(parse_quantity("10Gi"), Decimal)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0, 0), (3, 3), (-3, -3), (2**70, 2**70), (0.5, Decimal("0.5")), (Decimal("1.25"), Decimal("1.25"))],
)
def test_numbers(value, expected):
    assert parse_quantity(value) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "Gi",
        "-",
        "+",
        ".",
        "-.",
        "1 Gi",
        " 1Gi",
        "1Gi ",
        "1Gi\n",
        "1K",
        "1Ki3",
        "1ki",
        "1mi",
        "1Gib",
        "1GiB",
        "1GB",
        "1e",
        "1E+",
        "1e1.5",
        "1e3k",
        "1e3Gi",
        "1.2.3",
        "1,5",
        "1_000",
        "0x10",
        "Infinity",
        "inf",
        "NaN",
        "--1",
        "+-1",
        "\u0661",  # an Arabic-Indic digit one
        "1e99999999999",
    ],
)
def test_refused_with_the_text(text):
    with pytest.raises(ValueError) as caught:
        parse_quantity(text)
    assert repr(text) in str(caught.value)


@pytest.mark.parametrize(
    "value", [True, False, None, [1], {"a": 1}, b"1Gi", float("inf"), float("nan"), Decimal("NaN")]
)
def test_refused_values(value):
    with pytest.raises(ValueError):
        parse_quantity(value)


#: Valid quantities on which ours and the sync client's must agree exactly.
AGREED = [
    "0",
    "1",
    "-1",
    "+1",
    "10",
    "1.5",
    "0.001",
    ".5",
    "1.",
    "100m",
    "1500m",
    "250n",
    "3u",
    "1k",
    "2M",
    "3G",
    "4T",
    "5P",
    "6E",
    "1Ki",
    "512Mi",
    "10Gi",
    "1.5Gi",
    "0.5Ti",
    "2Pi",
    "1Ei",
    "-10Gi",
    "1e3",
    "1E3",
    "1e-3",
    "1E+6",
    "2.5e2",
    "123456789",
    "12345.6789Mi",
    "999999999999Ki",
    *[f"{n}{suffix}" for n in (1, 7, 64, 1000) for suffix in (*BINARY, *DECIMAL)],
]

#: Inputs the sync client takes but the API server (and we) refuse.
CLIENT_LAXER = ["1K", "1e3k", "1e3Gi", " 1", "1_000", "Infinity", "NaN"]


def test_agrees_with_the_kubernetes_client():
    utils = pytest.importorskip("kubernetes.utils")
    for text in AGREED:
        assert parse_quantity(text) == utils.parse_quantity(text), text
    for number in (0, 5, -5, 2**40, 0.25, Decimal("3.5")):
        assert parse_quantity(number) == utils.parse_quantity(number), number


def _generated(count: int, seed: int = 20261201) -> list[str]:
    """``count`` valid quantities of every shape (signs, ``1.``, ``.5``, suffixes, exponents), reproducibly."""
    rng = random.Random(seed)
    suffixes = ["", *BINARY, *DECIMAL, "e0", "e3", "E-2", "e+6", "E12"]
    out = []
    for _ in range(count):
        whole = str(rng.randrange(10 ** rng.randrange(1, 12)))
        fraction = str(rng.randrange(10 ** rng.randrange(1, 8)))
        number = rng.choice([whole, f"{whole}.{fraction}", f"{whole}.", f".{fraction}"])
        out.append(rng.choice(["", "+", "-"]) + number + rng.choice(suffixes))
    return out


def test_agrees_with_the_kubernetes_client_on_generated_values():
    utils = pytest.importorskip("kubernetes.utils")
    for text in _generated(2000):
        ours, theirs = parse_quantity(text), utils.parse_quantity(text)
        # the client multiplies in Decimal's default 28 digits: agree to that precision
        assert ours == theirs or abs(ours - theirs) <= abs(theirs) * Decimal("1e-27"), text


def test_stricter_than_the_kubernetes_client():
    utils = pytest.importorskip("kubernetes.utils")
    for text in CLIENT_LAXER:
        utils.parse_quantity(text)  # the client lets it through
        with pytest.raises(ValueError):
            parse_quantity(text)


@pytest.mark.parametrize(
    ("nbytes", "text"),
    [
        (0, "0 GiB"),
        (50 * 2**30, "50 GiB"),
        (2**29, "0.5 GiB"),
        (int(1.25 * 2**30), "1.25 GiB"),
        (2**30 + 1, "1 GiB"),
        (1000 * 2**30, "1000 GiB"),
        (Decimal(3 * 2**30), "3 GiB"),
        (parse_quantity("1.5Ti"), "1536 GiB"),
    ],
)
def test_gib(nbytes, text):
    assert gib(nbytes) == text


@pytest.mark.parametrize(
    "nbytes, given, shown",
    [
        (2**30, "1Mi", "1024Mi"),
        (3 * 2**30, "10Gi", "3Gi"),
        (2**30, "500M", "1073.74M"),
        (2**20, "1Ti", "9.54e-07Ti"),
        (0, "1Gi", "0Gi"),
        (5 * 2**30, "1e9", "5368709120 bytes"),
        (1536, "2048", "1536 bytes"),
        (2**30, " 2Ki ", "1048576Ki"),
    ],
)
def test_sizes_in_the_unit_given(nbytes, given, shown):
    assert in_unit_of(nbytes, given) == shown


def test_a_spawners_memory_reads_as_jupyterhub_counts_it():
    """JupyterHub's ByteSpecification: ``"4G"`` is 4 * 1024**3 bytes, so the spawn card says 4 GiB (issue #38 item 13)."""
    from jupyterhub.traitlets import ByteSpecification
    from traitlets import HasTraits

    class Limits(HasTraits):
        mem = ByteSpecification()

    assert Limits(mem="4G").mem == 4 * 2**30
    assert spawner_memory_for_people("4G") == "4 GiB" and spawner_memory_for_people("1.5T") == "1.5 TiB"
    assert spawner_memory_for_people(4 * 2**30) == "4 GiB" and spawner_memory_for_people("512M") == "512 MiB"
    assert spawner_memory_for_people("lots") == "lots"
