"""reStructuredText of docstrings as plain terminal text, for the commands' ``--help``.

The modules' docstrings are written for Sphinx-style readers
(````literal````, ``:func:`target```); argparse prints descriptions as they
are. :func:`terminal_text` drops the inline markup, :func:`summary` gives a
docstring's first paragraph that way.
"""

from __future__ import annotations

import re

_ROLE = re.compile(r":[a-z]+(?::[a-z]+)?:`(~?)([^`<]*?)(?:\s*<[^>]*>)?`")
_LITERAL = re.compile(r"``(.+?)``", re.DOTALL)
_LINK = re.compile(r"`([^`]+?)`__?")
_LITERAL_BLOCK_MARK = re.compile(r"::(\s*)$", re.MULTILINE)


def _role_text(match: re.Match) -> str:
    short, target = match.group(1), match.group(2).strip()
    return target.rsplit(".", 1)[-1] if short else target


def terminal_text(rst: str) -> str:
    """``rst`` without inline markup: ````x```` and ``:role:`x``` become x (``~a.b.c``: c), ```x`_`` x, a closing ``::`` one colon.

    Other text (emphasis, plain backquotes, indentation) is kept.
    """
    text = _ROLE.sub(_role_text, rst)
    text = _LITERAL.sub(r"\1", text)
    text = _LINK.sub(r"\1", text)
    return _LITERAL_BLOCK_MARK.sub(r":\1", text)


def summary(doc: str | None) -> str:
    """The first paragraph of a docstring ``doc`` as terminal text ("" for None)."""
    return terminal_text((doc or "").strip().split("\n\n")[0])
