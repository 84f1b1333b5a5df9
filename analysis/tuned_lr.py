"""Replay against on-policy at a matched learning rate, when a study searches lr.

A study that varies lr beside (x, y) compares every configuration with *the* on-policy baseline, which ran at one lr.
A replay setting that wins there may win only by its learning rate: on the split task (x 2, y 2) at lr 1e-4 saved 39%
against on-policy at 2.5e-5, and on-policy at 1e-4 saved 32% too. Two fair comparisons separate the two effects:

- at the same lr: each configuration against the on-policy arm that ran its learning rate (paired by seed);
- tuned: each (x, y) cell at its best lr against on-policy at *its* best lr (the paper re-tunes lr per configuration).
  Both sides are selection estimates (the winner's curse cuts both ways); only fresh seeds remove that bias.

The tuned baseline counts as tuned only where its best lr is bounded on both sides (an lr below and one above it
were tried and were slower): `on_policy_best_lr_bounded`. `protocol` says whether the replay arms were tuned too.

Sampler arms only: confirmations and verify arms keep their own baselines (`StudyData.configs`).
"""

from __future__ import annotations

import math

import pandas as pd

from workbench import censoring, stats
from workbench.censoring import Outcome

CELL = ["x", "y", "capacity", "ratio", "horizon", "strategy", "variant"]
MAX_CELLS_PAIRED = 6
"""Up to this many replay cells, every two are also compared at their best learning rates (15 pairs at most)."""


def _per_seed(g: pd.DataFrame) -> dict[int, Outcome]:
    """Per seed: compute-to-target, censored seeds as censored (`workbench.censoring`)."""
    return censoring.from_frame(g)


def baseline_objective(runs: pd.DataFrame) -> str | None:
    """The loss the study's on-policy baseline trains with (None: no baseline, or no loss recorded)."""
    if "objective" not in runs or not runs["baseline"].any():
        return None
    return str(runs.loc[runs["baseline"].astype(bool), "objective"].iloc[0])


def is_on_policy(r: pd.Series | dict, objective: str | None = None) -> bool:
    """A run (or configuration) of on-policy GRPO: the study's baseline, or uniform at y 1, x 1 with no horizon,
    trained with the baseline's loss `objective` where one is given (in a study of several losses, another loss on
    fresh rollouts is an arm of its own, not the baseline)."""
    return bool(r["baseline"]) or bool(
        r["x"] == 1
        and r["y"] == 1
        and r.get("strategy", "uniform") == "uniform"
        and (r.get("horizon") is None or (isinstance(r.get("horizon"), float) and math.isnan(r["horizon"])))
        and (objective is None or r.get("objective", objective) == objective)
    )


def _ratio(mine: dict[int, Outcome | float], theirs: dict[int, Outcome | float]) -> dict:
    """Paired ratio with its pair counts; plain numbers (device seconds of runs that reached the target) are
    uncensored outcomes."""
    wrap = lambda d: {s: v if isinstance(v, Outcome) else Outcome(float(v)) for s, v in d.items()}  # noqa: E731
    iv = censoring.paired_ratio(wrap(mine), wrap(theirs))
    return {
        "ratio": iv.estimate,
        "low": iv.low,
        "high": iv.high,
        "seeds": iv.n,
        "verdict": censoring.verdict(iv),
        **censoring.counts_of(iv),
    }


def _wall_per_seed(g: pd.DataFrame, wall: dict[str, Outcome | float]) -> dict[int, Outcome | float]:
    return {
        int(s): wall[r]
        for s, r in zip(g["seed"], g["run_id"])
        if r in wall and (isinstance(wall[r], Outcome) or math.isfinite(wall[r]))
    }


def _arm(number: int, g: pd.DataFrame, wall: dict[str, float] | None, objective: str | None = None) -> dict:
    """One sampler trial's runs as an arm: its knobs, its cell (the configuration less lr), its level over seeds."""
    first = g.iloc[0]
    values = _per_seed(g)
    est = censoring.level_interval(list(values.values()))
    return {
        "trial_number": int(number),
        "lr": float(first["lr"]),
        "on_policy": is_on_policy(first, objective),
        "cell": tuple(None if isinstance(first.get(k), float) and math.isnan(first[k]) else first.get(k) for k in CELL),
        "x": float(first["x"]),
        "y": float(first["y"]),
        "strategy": first.get("strategy", "uniform"),
        "variant": first.get("variant", "") if isinstance(first.get("variant", ""), str) else "",
        "compute_to_target": est.estimate,
        "ci_low": est.low,
        "ci_high": est.high,
        "values": values,
        "wall": _wall_per_seed(g, wall) if wall else {},
    }


def _shown(a: dict) -> dict:
    """An arm as the result carries it (without its per-seed values)."""
    return {k: v for k, v in a.items() if k not in ("values", "cell", "wall")}


def _best_of_each_cell(arms: list[dict]) -> list[dict]:
    """Each replay cell at its best lr (the fastest of its arms), fastest first."""
    cells: dict[tuple, dict] = {}
    for a in arms:
        best = cells.get(a["cell"])
        if not a["on_policy"] and (best is None or a["compute_to_target"] < best["compute_to_target"]):
            cells[a["cell"]] = a
    return sorted(cells.values(), key=lambda a: stats.finite_or_inf(a["compute_to_target"]))


def _between(ranked: list[dict]) -> list[dict]:
    """Best against best between the replay cells: where a study splits one strategy into parts (prioritized replay
    against the same strategy with replay_fraction 0, the zero-variance skip alone), this is the split."""
    if len(ranked) > MAX_CELLS_PAIRED:
        return []
    knobs = ("x", "y", "strategy", "variant")
    return [
        {"trial_number": a["trial_number"], "against_trial": b["trial_number"], "lr": a["lr"], "against_lr": b["lr"],
         **{k: a[k] for k in knobs}, "against": {k: b[k] for k in knobs}, "ratio": _ratio(a["values"], b["values"])}
        for i, a in enumerate(ranked)
        for b in ranked[i + 1 :]
    ]  # fmt: skip


def tuned_lr(runs: pd.DataFrame, wall: dict[str, float] | None = None) -> dict | None:
    """The matched-lr comparisons of a study's sampler runs (`StudyData.runs`); None when lr does not vary or no
    on-policy arm ran at two learning rates. `wall` (each run's device-seconds to the target, wall x W + T, by run
    id; asynchronous studies): each arm is also paired in device time against on-policy at its best lr (the lr
    chosen on compute): `against_tuned_device_time`."""
    if "lr" not in runs or runs["lr"].nunique() < 2:
        return None
    objective = baseline_objective(runs)
    arms = [_arm(number, g, wall, objective) for number, g in runs[runs["arm"] == "sampler"].groupby("trial_number")]
    on_policy = {a["lr"]: a for a in arms if a["on_policy"]}
    if len(on_policy) < 2:
        return None
    same = [
        _shown(a) | {"same_lr": _ratio(a["values"], on_policy[a["lr"]]["values"]) if a["lr"] in on_policy else None}
        for a in arms
        if not a["on_policy"]
    ]
    best_base = min(on_policy.values(), key=lambda a: stats.finite_or_inf(a["compute_to_target"]))
    ranked = _best_of_each_cell(arms)
    tuned = [
        _shown(a)
        | {"against_tuned": _ratio(a["values"], best_base["values"])}
        | (
            {"against_tuned_device_time": _ratio(a["wall"], best_base["wall"])}
            if a["wall"] and best_base["wall"]
            else {}
        )
        for a in ranked
    ]
    lrs = sorted(on_policy)
    return {
        "on_policy_by_lr": [
            {k: v for k, v in a.items() if k in ("trial_number", "lr", "compute_to_target", "ci_low", "ci_high")}
            for a in sorted(on_policy.values(), key=lambda a: a["lr"])
        ],
        "on_policy_best_lr": best_base["lr"],
        "on_policy_best_trial": best_base["trial_number"],
        # A best lr at an end of the range tried is a bound, not a tuned baseline: the next lr out might be better.
        "on_policy_best_lr_bounded": lrs[0] < best_base["lr"] < lrs[-1],
        "protocol": "per-arm lr (each arm at its own best lr, the paper's protocol)"
        if len({a["lr"] for a in arms if not a["on_policy"]}) > 1
        else "shared lr (the replay arms ran at one lr; on-policy tuned over its own sweep)",
        "same_lr": sorted(same, key=lambda r: (r["x"], r["y"], r["lr"])),
        "tuned": tuned,
        "between_tuned": _between(ranked),
    }
