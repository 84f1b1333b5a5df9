"""The study driver's overhead per trial against the trial's own time, side by side in one run.

Runs a study spec (default: studies/quickstart.yaml) in a temporary directory with real stores, then reads back:
- trial time: Optuna's start-to-complete time of each trial;
- training time: the sum of `final/wall_seconds` of its seed runs (policy load, training, evaluations);
- driver overhead = trial time - training time (Optuna storage, MLflow runs and params, per-trial bookkeeping);
- process start: a worker's imports (paid once per worker, amortised over its trials).

    .venv/bin/python benchmarks/driver_overhead.py [SPEC] [--n-trials 3] [--workers 1]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna
from mlflow import MlflowClient
from optuna.trial import TrialState

from workbench.processes import usable_cores

ROOT = Path(__file__).resolve().parents[1]


def process_start_seconds(code: str, repeats: int = 3) -> float:
    """Wall time of a fresh interpreter running `code` (the imports of a process)."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("spec", nargs="?", default=str(ROOT / "studies" / "quickstart.yaml"))
    ap.add_argument("--n-trials", type=int, default=3)
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="wb-overhead-"))
    storage, tracking = f"sqlite:///{work / 'optuna.db'}", f"sqlite:///{work / 'mlflow.db'}"
    t0 = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "workbench.cli",
            "study",
            "run",
            args.spec,
            "--n-trials",
            str(args.n_trials),
            "--workers",
            str(args.workers),
            "--storage",
            storage,
            "--tracking-uri",
            tracking,
        ],
        cwd=work,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    study_wall = time.perf_counter() - t0
    worker_start = process_start_seconds(
        "import workbench.cli, workbench.study.worker, workbench.trial.loop, mlflow, optuna, torch, transformers"
    )
    driver_start = process_start_seconds("import workbench.cli, workbench.study.driver")

    name = next(s.study_name for s in optuna.get_all_study_summaries(storage))
    study = optuna.load_study(study_name=name, storage=storage)
    client = MlflowClient(tracking)
    rows = []
    for t in study.get_trials(states=(TrialState.COMPLETE,)):
        trial_s = (t.datetime_complete - t.datetime_start).total_seconds()
        run = client.get_run(t.user_attrs["mlflow_run_id"])
        seeds = client.search_runs(
            [run.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{run.info.run_id}'"
        )
        train_s = sum(s.data.metrics["final/wall_seconds"] for s in seeds)
        rows.append((t.number, trial_s, train_s, trial_s - train_s))

    print(
        f"# {Path(args.spec).name}: {len(rows)} trials, {args.workers} worker(s), study wall {study_wall:.1f} s, "
        f"torch threads per worker {max(1, usable_cores() // args.workers)}"
    )
    print("| trial | trial s | training s | driver overhead s | overhead / trial |")
    print("|---|---|---|---|---|")
    for n, trial_s, train_s, over in rows:
        print(f"| {n} | {trial_s:.2f} | {train_s:.2f} | {over:.3f} | {over / trial_s:.2%} |")
    mean_trial = statistics.mean(r[1] for r in rows)
    mean_over = statistics.mean(r[3] for r in rows)
    # processes started: the driver (Optuna only) and K workers (torch, transformers, MLflow)
    per_trial_start = (driver_start + worker_start * args.workers) / max(len(rows), 1)
    print(
        f"process start (imports): driver {driver_start:.2f} s, worker {worker_start:.2f} s x {args.workers};"
        f" {per_trial_start:.2f} s per trial here"
    )
    total = mean_over + per_trial_start
    print(
        f"driver overhead per trial: {mean_over:.3f} s in-trial + {per_trial_start:.2f} s process start = {total:.2f} s"
        f" = {total / mean_trial:.2%} of a {mean_trial:.1f} s trial"
    )


if __name__ == "__main__":
    main()
