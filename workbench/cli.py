"""`workbench`: the command line, a table of commands (`workbench.commands`, one class each, its arguments beside its
code). Bad input ends with one line on stderr and exit code 2, never a traceback."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys

from workbench import interrupts, progress, tracking
from workbench.commands import arms, reading, study, tools, trial
from workbench.commands.base import EXIT_BAD_INPUT, Command, Parser, err
from workbench.commands.probe import Probe
from workbench.config import ConfigError


STUDY = "Optuna studies over the replay knobs (run, worker, status, compare, verify, confirm, race, pack, unpack)"
COMMANDS: tuple[type[Command] | tuple[str, str, tuple[type[Command], ...]], ...] = (
    trial.Train,
    trial.Config,
    (
        "study",
        STUDY,
        (
            study.Run,
            study.Worker,
            study.Status,
            arms.Verify,
            arms.Confirm,
            arms.Race,
            study.Compare,
            study.Pack,
            study.Unpack,
        ),
    ),
    reading.Analyze,
    reading.Report,
    reading.Recommend,
    reading.Regime,
    Probe,
    reading.Results,
    tools.Theory,
    tools.Ui,
    trial.RlepPool,
    trial.SampleData,
    trial.BuildModel,
    trial.FetchModel,
)
"""Every command in `workbench --help`'s order; a tuple is a group of subcommands (`workbench study run`)."""


def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> argparse.Namespace:
    """The parsed command line. An argument that looks like KEY=VALUE (`replay.ratio=2`, as verl and hydra users
    type it) is an override beside the `--set` ones on every command that takes `--set`; anything else unknown is
    the usual one-line error."""
    from workbench.config import OVERRIDE

    args, extra = parser.parse_known_args(argv)
    bare = [a for a in extra if OVERRIDE.match(a)] if hasattr(args, "set") else []
    rest = [a for a in extra if a not in bare]
    if isinstance(getattr(args, "keys", None), list):  # `workbench config`: its KEY arguments may follow options
        args.keys += [a for a in rest if not a.startswith("-")]
        rest = [a for a in rest if a.startswith("-")]
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if bare:
        args.set = (args.set or []) + bare
    return args


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="workbench", description="Experience replay for GRPO-style RL post-training: trials, sweeps, analysis."
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for entry in COMMANDS:
        if isinstance(entry, tuple):
            name, text, members = entry
            group = sub.add_parser(name, help=text).add_subparsers(
                dest=f"{name}_command", required=True, parser_class=Parser
            )
            for command in members:
                command.register(group)
        else:
            entry.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    # multiprocessing's tracker frees the semaphores of a process that was killed, and warns about each batch on
    # stderr: two lines of noise after a SIGKILLed trial, whose run's helper has said what happened
    quiet = "ignore::UserWarning:multiprocessing.resource_tracker"
    os.environ["PYTHONWARNINGS"] = (
        ",".join(w for w in (os.environ.get("PYTHONWARNINGS"), quiet) if w and quiet not in w) or quiet
    )
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    parser = build_parser()
    args = parse_args(parser, argv)
    progress.setup_logging(quiet=getattr(args, "quiet", False))
    interrupts.install()  # a Ctrl-C that lands in a garbage-collector callback is delivered again, not lost
    interrupts.dump_stacks_on(signal.SIGUSR1)  # `kill -USR1 PID`: what every thread of a slow process is doing
    try:
        return args.func(args)
    except ConfigError as e:
        err(str(e))
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        interrupts.ending()
        err("interrupted")
        return 130
    except tracking.TrackingUnavailable as e:  # the tracking server away past tracking.outage_s
        err(str(e))
        return 1
    except tracking.StoresFull as e:  # said once, by the worker that found it (the driver's is empty)
        if str(e):
            err(str(e))
        return tracking.EXIT_STORES_FULL


if __name__ == "__main__":
    sys.exit(main())
