"""``workspacespawner COMMAND --help`` reads as plain terminal text: no reStructuredText markup.

Every command of :data:`workspacespawner.cli.COMMANDS` and every sub-command
of those that have them prints its help (exit 0) without ````literal````
quotes, ``:role:`target``` references, ```link`_`` or a paragraph ending in
``::``; :func:`workspacespawner.core.rsttext.terminal_text` on its own.
"""

from __future__ import annotations

import re

import pytest

from workspacespawner.cli import COMMANDS
from workspacespawner.cli import main as workspacespawner
from workspacespawner.core.rsttext import terminal_text

MARKUP = re.compile(r"``|:[a-z]+:`|`_|::\s*$", re.MULTILINE)


def sub_commands(name: str) -> list[str]:
    """The sub-commands of ``name`` (``disk list``, ...), read from its parser's choices in the help text."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        workspacespawner([name, "--help"])
    found = re.search(r"^usage: .*?\{([a-z,-]+)\}", out.getvalue(), re.MULTILINE | re.DOTALL)
    return found.group(1).split(",") if found else []


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_has_no_markup(name, capsys):
    for words in [[name], *([name, sub] for sub in sub_commands(name))]:
        capsys.readouterr()
        with pytest.raises(SystemExit) as exited:
            workspacespawner([*words, "--help"])
        assert exited.value.code == 0
        text = capsys.readouterr().out
        assert not MARKUP.search(text), f"{' '.join(words)} --help:\n{text}"


def test_terminal_text():
    rst = "``workspacespawner demo``: see :func:`~workspacespawner.demo.run_demo` and :class:`Ledger`, `KubeVirt`_ or *this*::"
    assert terminal_text(rst) == "workspacespawner demo: see run_demo and Ledger, KubeVirt or *this*:"
    assert terminal_text("Example::\n\n    code") == "Example:\n\n    code"
    assert terminal_text("no markup: a `b` c") == "no markup: a `b` c"


def test_python_dash_m_runs_the_command():
    """``python3 -m workspacespawner --help`` is the ``workspacespawner`` command (exit 0, its usage line)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "workspacespawner", "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: workspacespawner")
