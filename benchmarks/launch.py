"""Launch to first step of `workbench train`: how long a trial takes from the process start to its first optimizer
step, and where that time goes.

Each round starts a fresh process running `workbench train` on the default task through the CLI's own `main`
(real config validation, MLflow store, checkpoint, decoder), with a short budget. Inside it, the times at which
the trial's phases end are recorded from the process start (`T0`, taken before any import): imports (to the end of
the model stack's, which `workbench train` starts after its MLflow helper), the wait for the MLflow run (created by
that helper process meanwhile: `workbench.run_process`), policy load, the step-0 evaluation (reported on its own: the issue's target excludes it), and the end of
the first optimizer step. The MLflow store and the compile cache are warm from a first, unreported round, as for a
user's second trial; `--fresh-store` gives every round a new store (the one-off schema creation included).

    .venv/bin/python benchmarks/launch.py [--rounds 5] [--threads 2] [--fresh-store]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

T0 = time.perf_counter()


def child(tracking_uri: str, threads: int) -> None:
    """One `workbench train` in this process, its phases timed from T0; prints one JSON line."""
    marks: dict[str, float] = {}
    from workbench import cli, run_process  # torch-free: what `workbench` itself imports before `train` runs

    def timed(name, fn, first_only=True):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            out = fn(*args, **kwargs)
            if not (first_only and name in marks):
                marks[name] = marks.get(name, 0.0) + time.perf_counter() - start
                marks[name + "_end"] = time.perf_counter() - T0
            return out

        return wrapper

    start_helper = run_process.RunProcess.__init__

    def started(self, *args, **kwargs):
        # `workbench train` starts the MLflow helper, then imports the model stack: time that import here, in
        # the same order, and hook the trial's phases once their modules are loaded
        start_helper(self, *args, **kwargs)
        marks["helper_started"] = time.perf_counter() - T0
        from workbench.trial import evaluation, loop, policy

        marks["imports"] = time.perf_counter() - T0
        loop.Policy = timed("policy_load", policy.Policy)
        evaluation.Evaluator.__call__ = timed("eval0", evaluation.Evaluator.__call__)
        loop.train_step = timed("first_step", loop.train_step)

    run_process.RunProcess.__init__ = started
    run_process.RunProcess._answer = timed("mlflow_run", run_process.RunProcess._answer)  # the first: the run's id
    cli.main(
        [
            "train",
            "--tracking-uri",
            tracking_uri,
            "--quiet",
            "--set",
            "budget.compute_units=null",
            "--set",
            "budget.steps=1",
            "--set",
            f"threads={threads}",
            "--set",
            f"tracking.experiment=launch-{os.getpid()}",
        ]
    )
    launch = marks["first_step_end"] - marks["eval0"]
    print(json.dumps({**{k: round(v, 3) for k, v in marks.items()}, "launch_to_first_step": round(launch, 3)}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--fresh-store", action="store_true")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.threads)
        return
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds + 1):
            uri = f"sqlite:///{tmp}/mlflow-{r if args.fresh_store else 0}.db"
            proc = subprocess.run(
                [sys.executable, __file__, "--child", uri, "--threads", str(args.threads)],
                capture_output=True,
                text=True,
                check=True,
            )
            row = json.loads(proc.stdout.strip().splitlines()[-1])
            if r > 0:  # the first round warms the store, the checkpoint and the compile cache
                rows.append(row)
                print(f"round {r}: {row}")
    med = lambda key: statistics.median(x[key] for x in rows)  # noqa: E731
    print(f"# {args.rounds} rounds, {args.threads} threads, {'fresh' if args.fresh_store else 'existing'} MLflow store")
    print(
        "| imports | waiting for the MLflow run | policy load | launch to first step (step-0 evaluation excluded) | step-0 evaluation |"
    )
    print("|---|---|---|---|---|")
    print(
        f"| {med('imports'):.2f} | {med('mlflow_run'):.2f} | {med('policy_load'):.2f} | {med('launch_to_first_step'):.2f} |"
        f" {med('eval0'):.2f} |"
    )


if __name__ == "__main__":
    main()
