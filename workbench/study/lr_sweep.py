"""Each arm at its own learning rate (`StudySpec.lr_sweep`, Arnal et al.'s protocol): after a trial, an arm whose
best lr so far is at an end of what it ran is queued once more at the next lr out, until its best is bounded on both
sides or `lr_extend` learning rates past that end of the sweep have been tried.

An arm is the knobs of a configuration but the lr; its level at each lr is its compute-to-target over its seeds with
censoring as censoring (`workbench.censoring`). The extensions queued are counted on the study
(`attrs.LR_EXTENSIONS`) and add to its `n_trials`.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import optuna
from optuna.trial import TrialState

from workbench import stats
from workbench.study import attrs
from workbench.study.compare import arms
from workbench.study.spec import StudySpec, lr_step

log = logging.getLogger(__name__)


def _key(params: dict[str, Any]) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in params.items() if k != "lr"))


def due(study: optuna.Study, spec: StudySpec) -> list[dict[str, Any]]:
    """The configurations (knobs with their next lr) to queue now: arms whose sweep has finished (no trial of theirs
    waiting or running), whose best lr is the lowest or highest they ran, and that have extensions left that side."""
    if spec.lr_sweep is None:
        return []
    pending = {
        _key(t.params)
        for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING, TrialState.RUNNING))
        if not t.user_attrs.get(attrs.ARM)
    }
    pending |= {
        _key(t.system_attrs.get("fixed_params", {}))
        for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    }
    by_arm: dict[tuple, dict[float, Any]] = {}
    knobs_of: dict[tuple, dict[str, Any]] = {}
    for a in arms(study):
        if a.kind not in ("baseline", "sampler") or "lr" not in a.knobs:
            continue
        by_arm.setdefault(_key(a.knobs), {})[float(a.knobs["lr"])] = a
        knobs_of[_key(a.knobs)] = {k: v for k, v in a.knobs.items() if k != "lr"}
    lo, hi, step = spec.lr_sweep[0], spec.lr_sweep[-1], lr_step(spec.lr_sweep)
    out = []
    for key, at in by_arm.items():
        ran = sorted(at)
        if key in pending or not all(any(math.isclose(v, r, rel_tol=1e-6) for r in ran) for v in spec.lr_sweep):
            continue  # its sweep is still running, or it is a proposal of the sampler's at one lr
        best = min(ran, key=lambda lr: stats.finite_or_inf(at[lr].level().estimate))
        below = sum(r < lo * (1 - 1e-6) for r in ran)
        above = sum(r > hi * (1 + 1e-6) for r in ran)
        if best == ran[0] and below < spec.lr_extend:
            out.append({**knobs_of[key], "lr": ran[0] / step})
        elif best == ran[-1] and above < spec.lr_extend:
            out.append({**knobs_of[key], "lr": ran[-1] * step})
    return out


def extend(study: optuna.Study, spec: StudySpec) -> int:
    """Queue what `due` names; returns how many were queued."""
    todo = due(study, spec)
    for params in todo:
        study.enqueue_trial(params, user_attrs={attrs.POINT: True, attrs.LR_EXTENSION: True})
        log.info(
            f"study {spec.name}: best lr at an end of the sweep; queued {', '.join(f'{k}={v:g}' if isinstance(v, float) else f'{k}={v}' for k, v in params.items())}"
        )
    if todo:
        study.set_user_attr(attrs.LR_EXTENSIONS, extensions(study) + len(todo))
    return len(todo)


def extensions(study: optuna.Study) -> int:
    """Learning rates queued past an end of the sweep so far (they add to the study's n_trials)."""
    return int(study.user_attrs.get(attrs.LR_EXTENSIONS, 0))
