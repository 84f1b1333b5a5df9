"""A trainer outside the workbench that follows the trial protocol (docs/trainers.md), for the command-trial tests.

It trains nothing: its held-out accuracy climbs with the rollouts it has trained on at a rate set by the trial's lr
and replay ratio, so a study over it has a known answer. What it does exactly as a real trainer must: read the
trial config from `$WORKBENCH_TRIAL_CONFIG`, log to the MLflow run `$MLFLOW_RUN_ID` the greedy accuracy after s
optimizer steps at step s (from step 0) and the cumulative ledger after step i at step i.

    python protocol_trainer.py [--mode good|silent|no-ledger|crash|late-start|slow]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from mlflow import MlflowClient
from mlflow.entities import Metric


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="good", choices=["good", "silent", "no-ledger", "crash", "late-start", "slow"])
    args = ap.parse_args()
    cfg = json.loads(open(os.environ["WORKBENCH_TRIAL_CONFIG"]).read())
    client, run_id = MlflowClient(os.environ["MLFLOW_TRACKING_URI"]), os.environ["MLFLOW_RUN_ID"]
    print(f"protocol trainer: seed {cfg['seed']}, lr {cfg['lr']:g}, y {cfg['replay']['ratio']:g}", flush=True)
    if args.mode == "silent":
        return 0
    if args.mode == "crash":
        print("protocol trainer: out of cheese", file=sys.stderr, flush=True)
        return 3
    batch, y = cfg["batch_size"], cfg["replay"]["ratio"]
    steps, every = cfg["budget"]["steps"], cfg["eval"]["every"]
    rate = cfg["lr"] * 1e3 * (1.0 + 0.01 * cfg["seed"])  # accuracy per 100 trained rollouts
    gen = train = 0.0

    def log(metrics: dict[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        client.log_batch(run_id, metrics=[Metric(k, float(v), now, step) for k, v in metrics.items()])

    for step in range(steps + 1):
        if step % every == 0 or step == steps:
            if not (args.mode == "late-start" and step == 0):
                log({"eval/accuracy": min(1.0, 0.1 + rate * train / 100.0)}, step)
        if step == steps:
            break
        gen += batch / y
        train += batch
        if args.mode != "no-ledger":
            log(
                {
                    "compute/gen_rollouts": gen,
                    "compute/train_rollouts": train,
                    "compute/gen_seconds": 0.02 * gen,
                    "compute/train_seconds": 0.01 * train,
                },
                step,
            )
        if args.mode == "slow":
            time.sleep(0.5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
