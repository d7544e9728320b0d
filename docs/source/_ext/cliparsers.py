"""The argument parsers of the ``workspacespawner`` commands, for sphinx-argparse.

Each command builds its parser inside its ``main``; this module runs that
``main`` with ``ArgumentParser.parse_args`` replaced by a catch, so the
reference shows exactly the parser the command uses (nothing is run).
"""

from __future__ import annotations

import argparse
import importlib

from workspacespawner.cli import COMMANDS


class _Caught(Exception):
    def __init__(self, parser):
        super().__init__(parser.prog)
        self.parser = parser


def _catch(self, *args, **kwargs):
    raise _Caught(self)


def parser_of(command: str) -> argparse.ArgumentParser:
    """The parser ``workspacespawner COMMAND`` builds."""
    module = importlib.import_module(COMMANDS[command][0])
    saved = argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args
    argparse.ArgumentParser.parse_args = argparse.ArgumentParser.parse_known_args = _catch
    try:
        module.main([])
    except _Caught as caught:
        caught.parser.prog = f"workspacespawner {command}"
        return caught.parser
    finally:
        argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args = saved
    raise RuntimeError(f"workspacespawner {command}: its main() parsed no arguments")


def _factory(command):
    def build():
        return parser_of(command)

    build.__name__ = command
    return build


# One attribute per command (``:func: disk``), the names of workspacespawner.cli.COMMANDS.
globals().update({command: _factory(command) for command in COMMANDS})
