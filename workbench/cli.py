"""`workbench`: the command line. Bad input ends with one line on stderr and exit code 2, never a traceback."""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys

from workbench.config import ConfigError

EXIT_BAD_INPUT = 2


def _err(msg: str) -> None:
    print(f"workbench: error: {msg}", file=sys.stderr, flush=True)


def _progress(quiet: bool):
    if quiet:
        return lambda msg: None
    return lambda msg: print(msg, file=sys.stderr, flush=True)


def cmd_train(args: argparse.Namespace) -> int:
    from workbench.config import load_config
    from workbench.tracking import resolve_tracking_uri

    cfg = load_config(args.config, args.set or [])
    from workbench.trainer import run_trial  # heavy imports (torch, transformers, mlflow) after validation

    uri = resolve_tracking_uri(args.tracking_uri)
    say = _progress(args.quiet)
    result = run_trial(cfg, tracking_uri=uri, run_name=args.run_name, progress=say)
    m = result.metrics
    ctt = m.get("final/compute_to_target")
    say(
        f"done: accuracy {m['final/initial_accuracy']:.3f} -> {m['final/accuracy']:.3f} (best {m['final/best_accuracy']:.3f}),"
        f" compute-to-target {'%.1f units' % ctt if ctt is not None else 'not reached'},"
        f" {m['final/compute_units']:.1f} units, {m['final/steps']:.0f} steps, mu {m['final/mu']:.2f},"
        f" {m['final/wall_seconds']:.0f}s; MLflow run {result.run_id} in {uri}"
    )
    if args.json:
        clean = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in m.items()}
        print(json.dumps({"run_id": result.run_id, "tracking_uri": uri, "metrics": clean}))
    return 0


def cmd_sample_data(args: argparse.Namespace) -> int:
    from workbench.tasks import write_sample_jsonl

    path = write_sample_jsonl(args.path, n=args.n, seed=args.seed)
    print(path)
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line (and exit 2), like every other bad input."""

    def error(self, message: str):  # type: ignore[override]
        _err(f"{message} (see `{self.prog} --help`)")
        raise SystemExit(EXIT_BAD_INPUT)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="workbench",
        description="Experience replay for GRPO-style RL post-training: trials, sweeps, analysis.",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    train = sub.add_parser("train", help="run one training trial (the embedded default unless configured)")
    train.add_argument("--config", help="YAML trial config (keys as in design §1: replay.ratio, budget.steps, ...)")
    train.add_argument("--set", action="append", metavar="KEY=VALUE", help="override one config key (repeatable)")
    train.add_argument("--tracking-uri", help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else ./mlflow.db)")
    train.add_argument("--run-name", help="MLflow run name")
    train.add_argument("--json", action="store_true", help="print a final JSON line with run_id and the final metrics")
    train.add_argument("--quiet", action="store_true", help="no progress lines")
    train.set_defaults(func=cmd_train)

    data = sub.add_parser("sample-data", help="write a small GSM8K-style JSONL sample task file")
    data.add_argument("path")
    data.add_argument("--n", type=int, default=200)
    data.add_argument("--seed", type=int, default=0)
    data.set_defaults(func=cmd_sample_data)
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as err:
        _err(str(err))
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        _err("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
