"""A study's per-run table from its Optuna record alone (`workbench study compare --runs-csv FILE`): the same columns
as the report's `runs.csv` (`analysis.runs_table`) that comparisons are made of, for a study whose MLflow store is
not at hand, or one still running (its complete trials).

Each trial stores every seed's values (`attrs.PER_SEED`): compute-to-target by every estimator with its censored
flag at the study's reference mu, the run's total units, its wall-clock mu. A censored run's compute-to-target is
left empty (its `total_units` is what it spent), never the sampler's penalised score.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import optuna

from workbench.estimators import ESTIMATORS
from workbench.study import attrs
from workbench.study.compare import arms
from workbench.study.spec import StudySpec
from workbench.verdicts import knob_label

COLUMNS = [
    "study",
    "trial_number",
    "arm",
    "baseline",
    "configuration",
    "strategy",
    "x",
    "y",
    "lr",
    "seed",
    "checkpoint",
    "curve",
    "target",
    "estimator",
    *(c for e in ESTIMATORS for c in (f"ctt_{e}", f"censored_{e}")),
    "total_units",
    "compute_to_target",
    "censored",
    "mu",
    "mu_measured",
    "wall_to_target",
]


def rows(study: optuna.Study, spec: StudySpec) -> list[dict[str, Any]]:
    """One row per seed run of every complete trial (race seeds under the trial they extend)."""
    base = spec.trial_config({}, 0)
    target, mu = study.user_attrs.get(attrs.TARGET), study.user_attrs.get(attrs.REFERENCE_MU)
    out = []
    for a in arms(study):
        knobs = a.knobs
        for p in sorted(a.per_seed, key=lambda p: int(p["seed"])):
            row = {
                "study": spec.name,
                "trial_number": a.number,
                "arm": a.kind,
                "baseline": a.baseline,
                "configuration": "on-policy" if a.baseline else knob_label(knobs),
                "strategy": knobs.get("replay.strategy", base.replay.strategy),
                "x": knobs.get("x", 1 if a.baseline else math.nan),
                "y": knobs.get("replay.ratio", base.replay.ratio),
                "lr": knobs.get("lr", base.lr),
                "seed": int(p["seed"]),
                "checkpoint": spec.checkpoint_of(int(p["seed"]), base.model.init_seed),
                "curve": base.eval.metric,
                "target": target,
                "estimator": spec.estimator,
            }
            for e in ESTIMATORS:
                cens = int(bool(p.get(f"censored_{e}", 0)))
                row[f"ctt_{e}"] = math.nan if cens else p.get(f"compute_to_target_{e}", math.nan)
                row[f"censored_{e}"] = cens
            row.update(
                total_units=p["total_units"],
                compute_to_target=row[f"ctt_{spec.estimator}"],
                censored=row[f"censored_{spec.estimator}"],
                mu=mu,
                mu_measured=p.get("mu_measured", math.nan),
                wall_to_target=p.get("wall_to_target", math.nan),
            )
            out.append(row)
    return out


def write(study: optuna.Study, spec: StudySpec, path: Path) -> int:
    """Write `rows` as CSV at `path`; returns the number of runs."""
    table = rows(study, spec)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        for r in table:
            w.writerow(
                {
                    k: (f"{v:.6g}" if isinstance(v, float) and math.isfinite(v) else "" if isinstance(v, float) else v)
                    for k, v in r.items()
                }
            )
    return len(table)
