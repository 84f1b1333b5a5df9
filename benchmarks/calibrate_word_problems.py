"""Where a model starts on the `word_problems` task at each difficulty: held-out greedy accuracy and sampled pass@1
at each decoding temperature, before any training (`workbench.trial.headroom.readings`).

    python benchmarks/calibrate_word_problems.py MODEL_DIR [--difficulties 1 2 3] [--n-eval 60] [--threads 2]
        [--csv runs.csv]

A level is usable for RL when greedy accuracy is 10-60% (mixed rewards in most groups); a study's target has
headroom above the largest reading (no temperature reaches it untrained). Prints one JSON line per level; `--csv`
also writes one row per level and temperature (the per-run table of a calibration).
"""

import argparse
import csv
import json
import time

import torch

from workbench.config import build_config
from workbench.trial.headroom import has_headroom, readings

parser = argparse.ArgumentParser()
parser.add_argument("model")
parser.add_argument("--difficulties", type=int, nargs="+", default=[1, 2, 3])
parser.add_argument("--n-eval", type=int, default=60)
parser.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 0.5, 1.0])
parser.add_argument("--k", type=int, default=2)
parser.add_argument("--threads", type=int, default=2)
parser.add_argument("--target", type=float, default=None)
parser.add_argument("--csv", default=None)
args = parser.parse_args()
rows = []
torch.set_num_threads(args.threads)
for d in args.difficulties:
    cfg = build_config(
        {
            "model": {"path": args.model},
            "task": {"name": "word_problems", "difficulty": d, "n_eval": args.n_eval, "chat_template": True},
        }
    )
    t0 = time.perf_counter()
    read = readings(cfg, tuple(args.temperatures), k=args.k)
    out = {"difficulty": d, "n_eval": args.n_eval, "readings": read, "seconds": round(time.perf_counter() - t0, 1)}
    if args.target is not None:
        out["target_has_headroom"] = has_headroom(args.target, read)
    print(json.dumps(out), flush=True)
    rows += [
        {"difficulty": d, "temperature": t, "accuracy": a, "n_eval": args.n_eval, "k": 1 if t == 0 else args.k}
        for t, a in read.items()
    ]
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, list(rows[0]), lineterminator="\n")
            writer.writeheader()
            writer.writerows(rows)
