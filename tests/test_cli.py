"""The command line's shape (issue 45): a table of commands, each with its arguments beside its code, the flags several
commands share declared once, and every command's parser built and helpful."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import workbench
from workbench import cli
from workbench.commands.base import Command

PACKAGE = Path(workbench.__file__).parent


def _commands() -> list[tuple[list[str], type[Command]]]:
    out = []
    for entry in cli.COMMANDS:
        if isinstance(entry, tuple):
            out += [([entry[0], c.name], c) for c in entry[2]]
        else:
            out.append(([entry.name], entry))
    return out


def _declarations(flag: str) -> int:
    """How many `add_argument("<flag>", ...)` calls the product's source holds."""
    n = 0
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", None) == "add_argument"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and node.args[0].value == flag
            ):
                n += 1
    return n


def test_the_command_line_module_is_a_short_table():
    assert len((PACKAGE / "cli.py").read_text().splitlines()) < 400
    names = [" ".join(words) for words, _ in _commands()]
    assert len(names) == len(set(names)) and {"train", "study run", "study confirm", "report", "results"} <= set(names)


@pytest.mark.parametrize("flag", ["--tracking-uri", "--storage", "--set", "--config", "--threads"])
def test_a_flag_several_commands_take_is_declared_once(flag):
    assert _declarations(flag) == 1


@pytest.mark.parametrize("words,command", _commands(), ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_every_command_parses_its_help_and_runs_its_own_code(words, command, capsys):
    parser = cli.build_parser()
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args([*words, "--help"])
    assert exit_.value.code == 0 and command.help.split()[0] in capsys.readouterr().out.replace("\n", " ")
    assert command.run is not Command.run  # each command says what it does
