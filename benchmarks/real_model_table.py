"""The per-run table of real-model runs: one row per run, from `benchmarks/real_model_trial.py` logs (their RESULT
line) or `workbench train --json` outputs (their last line).

    python benchmarks/real_model_table.py reports/gpu_real_model/*.txt > reports/gpu_real_model/runs.csv
    python benchmarks/real_model_table.py reports/real_model_cpu/trial_*.json > reports/real_model_cpu/runs.csv

A log's decoder is its name's second field (`h100_static_8steps.txt`: static); a JSON output's precision is in its
name (`bf16` or `fp32`).
"""

import csv
import json
import sys
from pathlib import Path

COLUMNS = [
    "run", "device", "decoder", "precision", "steps", "accuracy_start", "accuracy_end", "pass_at_k_start", "pass_at_k_end",
    "mu_measured", "gen_seconds", "train_seconds", "eval_seconds", "wall_seconds", "peak_allocated_mib",
]  # fmt: skip


def train_json_row(path: Path) -> dict:
    out = json.loads(path.read_text().strip().splitlines()[-1])
    m = out["metrics"]
    return {
        "run": path.stem,
        "device": "cpu",
        "decoder": "static",  # the runs set generation.decode=static (their .txt logs show the command's settings)
        "precision": "bf16-autocast" if "bf16" in path.stem else "fp32",
        "steps": m["final/steps"],
        "accuracy_start": m["final/initial_accuracy"],
        "accuracy_end": m["final/accuracy"],
        "mu_measured": m["final/mu_measured"],
        "gen_seconds": m["final/gen_seconds"],
        "train_seconds": m["final/train_seconds"],
        "eval_seconds": m["final/eval_seconds"],
        "wall_seconds": m["final/wall_seconds"],
    }


def row(log: Path) -> dict:
    if log.suffix == ".json":
        return train_json_row(log)
    line = next(x for x in log.read_text().splitlines() if x.startswith("RESULT "))
    out = json.loads(line.removeprefix("RESULT "))
    first, last = out["curve"][0], out["curve"][-1]
    return {
        "run": log.stem,
        "device": out["device"],
        "decoder": log.stem.split("_")[1],
        "precision": "bf16-autocast",  # train.autocast auto on a GPU
        "steps": out["final/steps"],
        "accuracy_start": first["accuracy"],
        "accuracy_end": last["accuracy"],
        "pass_at_k_start": first["pass_at_k"],
        "pass_at_k_end": last["pass_at_k"],
        "mu_measured": out["final/mu_measured"],
        "gen_seconds": out["final/gen_seconds"],
        "train_seconds": out["final/train_seconds"],
        "eval_seconds": out["final/eval_seconds"],
        "wall_seconds": out["wall_s"],
        "peak_allocated_mib": out["peak_allocated_mib"],
    }


if __name__ == "__main__":
    writer = csv.DictWriter(sys.stdout, COLUMNS, lineterminator="\n", restval="")
    writer.writeheader()
    for path in sorted(sys.argv[1:]):
        writer.writerow(row(Path(path)))
