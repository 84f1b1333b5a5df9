"""Each arm at its own learning rate (`StudySpec.lr_sweep`, Arnal et al.'s protocol): after a trial, an arm whose
best lr so far is at an end of what it ran is queued once more at the next lr out, until its best is bounded on both
sides or `lr_extend` learning rates past that end of the sweep have been tried; and a point whose two nearer lrs on
its arm were resolved in the arm's disfavour is not trained (`held`, `StudySpec.lr_skip_past_decline`).

An arm is the knobs of a configuration but the lr; its level at each lr is its compute-to-target over its seeds with
censoring as censoring (`workbench.censoring`). The extensions queued are counted on the study
(`attrs.LR_EXTENSIONS`) and add to its `n_trials`; the points skipped past a decline (`attrs.LR_PAST_DECLINE`) are
taken off it (`to_run`).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Literal

import optuna
from optuna.trial import TrialState

from workbench import stats
from workbench.study import attrs
from workbench.study.compare import Arm, arms
from workbench.study.spec import StudySpec, lr_step

log = logging.getLogger(__name__)


def _key(params: dict[str, Any]) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in params.items() if k != "lr"))


def _params(t: optuna.trial.FrozenTrial) -> dict[str, Any]:
    """A trial's knobs: those it drew, or, while it waits, those it was queued with."""
    return t.params or t.system_attrs.get("fixed_params", {})


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
    skipped: dict[tuple, list[float]] = {}
    for t in study.get_trials(deepcopy=False, states=(TrialState.PRUNED,)):
        if t.user_attrs.get(attrs.LR_PAST_DECLINE):
            skipped.setdefault(_key(_params(t)), []).append(float(_params(t)["lr"]))
    out = []
    for key, at in by_arm.items():
        ran = sorted(at)
        passed = skipped.get(key, [])
        if key in pending or not all(
            any(math.isclose(v, r, rel_tol=1e-6) for r in ran + passed) for v in spec.lr_sweep
        ):
            continue  # its sweep is still running, or it is a proposal of the sampler's at one lr
        best = min(ran, key=lambda lr: stats.finite_or_inf(at[lr].level().estimate))
        below = sum(r < lo * (1 - 1e-6) for r in ran + passed)
        above = sum(r > hi * (1 + 1e-6) for r in ran + passed)
        if best == ran[0] and below < spec.lr_extend and not any(r < best for r in passed):
            out.append({**knobs_of[key], "lr": ran[0] / step})
        elif best == ran[-1] and above < spec.lr_extend and not any(r > best for r in passed):
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


def past_decline(study: optuna.Study) -> int:
    """Points not trained because their arm declined towards them (`held`; they come off the study's n_trials)."""
    return sum(
        1
        for t in study.get_trials(deepcopy=False, states=(TrialState.PRUNED,))
        if t.user_attrs.get(attrs.LR_PAST_DECLINE)
    )


def to_run(study: optuna.Study, n_trials: int) -> int:
    """The trials the study completes in all: `n_trials`, with the lrs queued past the sweep's ends, without the
    points skipped past a decline."""
    return n_trials + extensions(study) - past_decline(study)


@dataclass(frozen=True)
class Hold:
    """Why a point of an lr sweep is not trained now: `skip` (its arm declined towards it) or `wait` (the lrs that
    decide it are still running or waiting)."""

    kind: Literal["skip", "wait"]
    reason: str


class View:
    """One read of a study's trials and of its complete arms, for every `held` question asked at one moment (a
    worker checking each waiting trial asks as many questions as there are trials waiting)."""

    def __init__(self, study: optuna.Study):
        self.study = study
        self.trials = study.get_trials(deepcopy=False)
        self._arms: dict[int, Arm] | None = None

    @property
    def arms(self) -> dict[int, Arm]:
        """The complete arms, by trial number (built on first use)."""
        if self._arms is None:
            self._arms = {a.number: a for a in arms(self.study, self.trials)}
        return self._arms

    def waiting(self) -> list[optuna.trial.FrozenTrial]:
        return [t for t in self.trials if t.state == TrialState.WAITING]


def held(study: optuna.Study, spec: StudySpec, params: dict[str, Any], view: View | None = None) -> Hold | None:
    """Whether the point `params` (knobs with an lr) should not be trained: on its arm, the lr one step below needed
    more compute than the lr two steps below, paired by seed, resolved (the 95% interval of the ratio above 1,
    censoring as censoring; where censoring leaves the ratio no estimate, a sign test over the seeds, `_decline`). Under a unimodal response to the lr the arm's best lies below, so `params` cannot be its
    best (`skip`). While either of those lrs is still to be measured: `wait`. None: train it (no sweep, the rule off,
    or no two lrs below it on its arm). Only upward: a sweep's points run in ascending lr, and an extension below the
    sweep is queued only where the lowest lr was the arm's best (`due`), so no decline can point down to one.
    `view`: the study as already read (`View`), else read now."""
    if spec.lr_sweep is None or not spec.lr_skip_past_decline or "lr" not in params:
        return None
    view = view if view is not None else View(study)
    key, lr, step = _key(params), float(params["lr"]), lr_step(spec.lr_sweep)
    same = [
        t for t in view.trials if not t.user_attrs.get(attrs.ARM) and _key(_params(t)) == key and "lr" in _params(t)
    ]

    def at(v: float) -> list[optuna.trial.FrozenTrial]:
        return [
            t for t in same if math.isclose(float(_params(t)["lr"]), v, rel_tol=1e-6) and t.state != TrialState.FAIL
        ]

    near, far = at(lr / step), at(lr / step**2)
    if any(t.user_attrs.get(attrs.LR_PAST_DECLINE) for t in near):
        return Hold("skip", f"the lr below it on this arm ({lr / step:g}) was itself skipped past a decline")
    if not near or not far:
        return None  # no two lrs below it: nothing to decide from
    by_number = view.arms
    near_done = [by_number[t.number] for t in near if t.number in by_number]
    far_done = [by_number[t.number] for t in far if t.number in by_number]
    if not near_done or not far_done:
        return Hold("wait", f"lr {lr:g} waits for this arm at {lr / step:g} and {lr / step**2:g}")
    evidence = _decline(near_done[0], far_done[0])
    if evidence is None:
        return None
    return Hold(
        "skip",
        f"past a decline: this arm needed more compute at lr {lr / step:g} than at {lr / step**2:g}, {evidence},"
        " resolved; its best lr is below",
    )


def _decline(near: Arm, far: Arm) -> str | None:
    """How `near` resolvedly needed more compute than `far`, paired by seed, in words; else None. The ratio decides
    where it has an estimate (its 95% interval above 1). Where it has none (fewer than two seeds reached the target
    at both lrs: `near` censored on most of them), the pairs' orders do: a sign test over the seeds whose order the
    runs tell (`Comparison.orders`), so that an lr censored above the one below it counts as a decline."""
    c = near.ratio(far)
    if c.orders is None:
        return f"ratio {c.fmt()}" if math.isfinite(c.low) and c.low > 1 else None
    return c.orders.fmt() if c.orders.more_resolved() else None
