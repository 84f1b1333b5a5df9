"""The arguments several commands take, each declared once; a command lists the ones it takes in `flags`."""

from __future__ import annotations

import argparse

SET_HELP = "override one config key (repeatable); a bare KEY=VALUE does the same (`workbench config` lists the keys)"


def spec(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", help="the study spec YAML (studies/*.yaml)")


def spec_or_study(p: argparse.ArgumentParser) -> None:
    """A reading command's source: a spec file, or `--study NAME` (its MLflow experiment)."""
    p.add_argument("spec", nargs="?", help="the study spec (or give --study)")
    p.add_argument("--study", help="study name (= its MLflow experiment)")


def storage(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--storage", help="Optuna storage URL (default: the spec's, else sqlite:///optuna.db); shared by every worker"
    )


def tracking_uri(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tracking-uri", help="MLflow tracking URI (default: the spec's, else $MLFLOW_TRACKING_URI, else ./mlflow.db)"
    )


def stores(p: argparse.ArgumentParser) -> None:
    """A study's two stores."""
    storage(p)
    tracking_uri(p)


def threads(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threads", type=int, help="torch threads for its trials")


def side_by_side(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--devices",
        help="GPU ids (CPU: core ids) to run on, e.g. 0-1: a configuration's seeds run side by side,"
        " one per trial's need",
    )


def overrides(p: argparse.ArgumentParser) -> None:
    """A trial config: a YAML file and `--set KEY=VALUE` (or bare KEY=VALUE) overrides."""
    p.add_argument("--config", help="YAML trial config (`workbench config` lists the keys: replay.ratio, ...)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help=SET_HELP)


def quiet(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def json_line(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the result as one JSON line (last, on a line of its own)")


def target(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", type=float, help="read compute-to-target at this accuracy instead of the study's")


def out_force(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--out",
        help="output folder (default: reports-out/NAME/ beside the study's MLflow store, e.g. next to"
        " ./mlflow.db; a store on a server: in the working directory)",
    )
    p.add_argument("--force", action="store_true", help="write even over files git tracks (refused otherwise)")
