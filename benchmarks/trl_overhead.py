"""What the TRL integration costs a TRL step: TRL's stock GRPOTrainer against the same trainer with the workbench's
ledger and protocol callback (`LedgerGRPOTrainer` + `ProtocolCallback`, its MLflow writes included, its evaluations
not: they are the trial's held-out evaluation, off the training clock in both trainers' accounting, and subtracted
from the step that ran one), side by side.

Both sides build the same trial (`workbench.integrations.trl.trial.build`; `protocol=False` gives the stock trainer on
the same model, data, reward and optimizer), from the same starting weights, in one process, alternating which goes
first in each pair. Each runs `--warmup` steps, then `--steps` timed ones (a step: TRL samples the batch, rewards it,
one optimizer step; timed from `on_step_begin` to `on_step_end` by the last callback). The reading is the median
over pairs of the integration's mean step over stock TRL's, with the pairs' range.

Also, `--plugin`: the replay plug-in at y 2 with capacity B (x 2: each rollout trained in the two steps after its
birth) against stock TRL reusing the same way by its own knob (`num_iterations` 2): the same work on average (half a
batch sampled and its behaviour log-probs scored a step, a whole batch trained), so the ratio is the plug-in's own
cost (the strategy's draw, the collate) plus the protocol's.

    .venv/bin/python benchmarks/trl_overhead.py [--pairs 3] [--steps 20] [--warmup 3] [--batch 128] [--plugin]
    .venv/bin/python benchmarks/trl_overhead.py --table reports/trl_overhead/*.txt > reports/trl_overhead/runs.csv
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from transformers import TrainerCallback  # noqa: E402

from workbench import tracking  # noqa: E402
from workbench.config import build_config  # noqa: E402
from workbench.integrations.trl.trial import build  # noqa: E402


class StepTimer(TrainerCallback):
    """Each step's seconds, less the held-out evaluation the protocol ran inside it (the budget's last step
    evaluates; stock TRL evaluates nothing)."""

    def __init__(self, evaluations=None):
        self.evaluations, self.times, self.t, self.eval_s = evaluations, [], 0.0, 0.0

    def _evaluated(self) -> float:
        return self.evaluations.seconds if self.evaluations is not None else 0.0

    def on_step_begin(self, *a, **k):
        self.t, self.eval_s = time.perf_counter(), self._evaluated()

    def on_step_end(self, *a, **k):
        self.times.append(time.perf_counter() - self.t - (self._evaluated() - self.eval_s))


def trial(args, tmp: str, side: str):
    replay, trainer = {"ratio": 1, "capacity": args.batch}, {"kind": "trl"}
    if side == "plugin":
        replay["ratio"] = 2
    elif args.plugin:  # stock TRL, reusing by its own knob as the plug-in does
        trainer["trl"] = {"num_iterations": 2}
    return build_config(
        {
            "trainer": trainer,
            "threads": args.threads,
            "batch_size": args.batch,
            "group_size": args.group,
            "replay": replay,
            "compute": {"mu": 0.509},
            "budget": {"steps": args.warmup + args.steps, "compute_units": None},
            "eval": {"every": 10**6, "pass_k_every": None},
            "generation": {"decode": "static"},
            "tracking": {"uri": f"sqlite:///{tmp}/mlflow.db"},
        }
    )


def one(args, side: str, tmp: str) -> list[float]:
    cfg = trial(args, tmp, side)
    run = tracking.RunLogger(cfg.tracking.uri, "trl_overhead", run_name=side)
    run.flush()
    with tempfile.TemporaryDirectory() as out:
        built = build(cfg, run.run_id, out, protocol=side != "stock")
        timer = StepTimer(built.callback.evaluations if side != "stock" else None)
        built.trainer.add_callback(timer)
        built.trainer.train()
    if side == "plugin":
        print(
            f"  the plug-in's draw and collation: {1000 * built.ledger.draw_seconds / len(timer.times):.1f} ms a step"
        )
    return timer.times[args.warmup :]


def table(paths: list[str]) -> None:
    """The per-pair table (CSV on stdout) of saved outputs: each one's last line is its JSON."""
    out = csv.writer(sys.stdout)
    out.writerow(["file", "side", "batch", "steps", "pair", "first", "stock_step_s", "side_step_s", "ratio"])
    for path in paths:
        result = json.loads(Path(path).read_text().strip().splitlines()[-1])
        for row, ratio in zip(result["pairs"], result["ratios"]):
            side = result["side"]
            out.writerow(
                [Path(path).name, side, result["batch"], result["steps"], row["pair"], row["first"],
                 row["stock_step_s"], row[f"{side}_step_s"], round(ratio, 4)]
            )  # fmt: skip


def main() -> None:
    if sys.argv[1:2] == ["--table"]:
        return table(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--plugin", action="store_true", help="the replay plug-in at y 2 against TRL's num_iterations 2")
    args = ap.parse_args()
    side = "plugin" if args.plugin else "integration"
    ratios, rows = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(args.pairs):
            order = ["stock", side] if pair % 2 == 0 else [side, "stock"]
            means = {s: statistics.fmean(one(args, s, tmp)) for s in order}  # the mean: TRL's own reuse alternates
            # sampling and training-only steps
            ratios.append(means[side] / means["stock"])
            rows.append({"pair": pair, "first": order[0], **{f"{s}_step_s": round(m, 4) for s, m in means.items()}})
            print(
                f"pair {pair}: stock {means['stock']:.4f} s/step, {side} {means[side]:.4f} s/step,"
                f" ratio {ratios[-1]:.3f}",
                flush=True,
            )
    print(
        f"{side} / stock TRL, mean step (median over pairs): {statistics.median(ratios):.3f} (pairs {min(ratios):.3f} - {max(ratios):.3f})"
    )
    print(json.dumps({"side": side, "batch": args.batch, "steps": args.steps, "pairs": rows, "ratios": ratios}))


if __name__ == "__main__":
    main()
