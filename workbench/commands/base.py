"""What every command shares: the shape of a command, bad input as one line, and the helpers that read a study or
its MLflow experiment from the command line."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from typing import ClassVar

from workbench.config import ConfigError, resolve_tracking_uri

EXIT_BAD_INPUT = 2
"""Bad input: one line on stderr, this exit code, nothing recorded lost."""


def err(msg: str) -> None:
    """The one line of a bad input, written whole in one write (processes sharing a stderr, as torchrun's ranks do,
    cannot split it: `print` writes the text and its newline apart)."""
    sys.stderr.write(f"workbench: error: {msg}\n")
    sys.stderr.flush()


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line (and exit 2), like every other bad input."""

    def error(self, message: str):  # type: ignore[override]
        err(f"{message} (see `{self.prog} --help`)")
        raise SystemExit(EXIT_BAD_INPUT)


class Command:
    """One command: `name` and `help` for the table, `flags` (shared arguments, `workbench.commands.flags`) and
    `add_arguments` for its own, `run` for what it does. Each command imports what it runs when it runs (the model
    stack, Optuna, the analysis): start-up stays short."""

    name: ClassVar[str]
    help: ClassVar[str]
    description: ClassVar[str | None] = None
    flags: ClassVar[tuple[Callable[[argparse.ArgumentParser], None], ...]] = ()

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """The command's own arguments (the shared ones come from `flags`)."""

    def run(self, args: argparse.Namespace) -> int:
        raise NotImplementedError

    @classmethod
    def register(cls, sub) -> argparse.ArgumentParser:
        command = cls()
        parser = sub.add_parser(cls.name, help=cls.help, description=cls.description or cls.help)
        for flag in cls.flags:
            flag(parser)
        command.add_arguments(parser)
        parser.set_defaults(func=command.run)
        return parser


def study_context(args: argparse.Namespace):
    """The study a command names: its spec file, with `--storage` and `--tracking-uri` where given."""
    from workbench.study.context import context
    from workbench.study.spec import load_spec

    return context(load_spec(args.spec), storage=args.storage, tracking_uri=args.tracking_uri, spec_path=args.spec)


def analysis_inputs(args: argparse.Namespace) -> tuple[str, str]:
    """The MLflow experiment a reading command reads: a spec's name and store, or `--study NAME`."""
    if args.spec:
        from workbench.study.spec import load_spec

        spec = load_spec(args.spec)
        return spec.name, resolve_tracking_uri(args.tracking_uri or spec.tracking_uri)
    if not args.study:
        raise ConfigError("study: give --study NAME or a SPEC file")
    return args.study, resolve_tracking_uri(args.tracking_uri)


def target(value: float | None) -> float | None:
    if value is not None and not (math.isfinite(value) and 0 < value <= 1):
        raise ConfigError(f"--target: must be in (0, 1] (got {value})")
    return value


def positive(name: str, value: float | None) -> float | None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise ConfigError(f"--{name}: must be positive (got {value})")
    return value


def devices(text: str | None) -> list[int] | None:
    """`--devices 0-1` as ids (`workbench.study.devices.parse_devices`), None when not given."""
    if not text:
        return None
    from workbench.study.devices import parse_devices

    return parse_devices(text)
