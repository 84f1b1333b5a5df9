"""The per-run table of `benchmarks/real_model_trial.py` logs: one row per run, read from each log's RESULT line.

    python benchmarks/real_model_table.py reports/gpu_real_model/*.txt > reports/gpu_real_model/runs.csv

The decoder is the log name's second field (`h100_static_8steps.txt`: static).
"""

import csv
import json
import sys
from pathlib import Path

COLUMNS = [
    "run", "device", "decoder", "steps", "accuracy_start", "accuracy_end", "pass_at_k_start", "pass_at_k_end",
    "mu_measured", "gen_seconds", "train_seconds", "eval_seconds", "wall_seconds", "peak_allocated_mib",
]  # fmt: skip


def row(log: Path) -> dict:
    line = next(x for x in log.read_text().splitlines() if x.startswith("RESULT "))
    out = json.loads(line.removeprefix("RESULT "))
    first, last = out["curve"][0], out["curve"][-1]
    return {
        "run": log.stem,
        "device": out["device"],
        "decoder": log.stem.split("_")[1],
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
    writer = csv.DictWriter(sys.stdout, COLUMNS, lineterminator="\n")
    writer.writeheader()
    for path in sorted(sys.argv[1:]):
        writer.writerow(row(Path(path)))
