"""How a replayed rollout's importance weights spread with its reuse: the per-rollout ESS (`Rollout.ess`, the
normalised effective sample size of its tokens' weights pi_theta / pi_behaviour, set each time it is trained) by how
many times it had been trained, on the embedded default at one replay ratio and several learning rates. What to
choose `replay.uniform.min_ess` from (docs/strategies/uniform.md).

    .venv/bin/python benchmarks/rollout_ess.py [--lr 2.5e-5 5e-5 1e-4] [--ratio 4] [--x 8] [--steps 16] > reports/rollout_ess/runs.csv
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import numpy as np  # noqa: E402

from workbench.config import build_config  # noqa: E402
from workbench.trial.loop import run_trial  # noqa: E402


def ess_by_use(lr: float, ratio: int, x: int, steps: int) -> dict[int, np.ndarray]:
    """Every trained rollout's ESS at each training, keyed by its use (1: the first time it was trained)."""
    batch = 128
    cfg = build_config(
        {
            "threads": 1,
            "lr": lr,
            "batch_size": batch,
            "replay": {"ratio": ratio, "capacity": x * batch // ratio},
            "budget": {"steps": steps, "compute_units": None},
            "eval": {"every": steps * 10},
        }
    )
    seen: dict[int, list[float]] = {}

    def observe(rec) -> None:
        for r in rec.batch:  # observed after the step: `uses` already counts it
            seen.setdefault(r.uses, []).append(r.ess)

    run_trial(cfg, observer=observe)
    return {use: np.array(v) for use, v in sorted(seen.items())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lr", type=float, nargs="+", default=[2.5e-5, 5e-5, 1e-4])
    ap.add_argument("--ratio", type=int, default=4)
    ap.add_argument("--x", type=int, default=8, help="staleness horizon N / R in steps")
    ap.add_argument("--steps", type=int, default=16)
    args = ap.parse_args()
    print(f"# embedded default, B 128, y {args.ratio}, x {args.x}, {args.steps} steps from the shipped warm start")
    print("lr,use,rollouts,ess_p1,ess_p10,ess_p50,share_below_0.99,share_below_0.995")
    for lr in args.lr:
        for use, v in ess_by_use(lr, args.ratio, args.x, args.steps).items():
            q = np.percentile(v, [1, 10, 50])
            print(
                f"{lr:g},{use},{len(v)},{q[0]:.4f},{q[1]:.4f},{q[2]:.4f},"
                f"{(v < 0.99).mean():.3f},{(v < 0.995).mean():.3f}"
            )


if __name__ == "__main__":
    main()
