"""`workbench study verify`: run the fitted optimum as new trials of the same study, measured against predicted.

The fit (analysis/, run by the command line before this) predicts a compute-optimal (x*, y*) that usually lies
between the grid points a study sampled. This module maps it to knobs for the study's batch size (capacity
N = round(x* B / y*), ratio y*, no age limit), trains it once per seed of the spec exactly as a sampler proposal
would be trained (same reference mu, same censoring, same MLflow layout), and records it in Optuna as a trial of
the study with `arm = predicted`. Its knobs live in the trial's user attributes, not in `params`: a study's
categorical search space cannot hold a value like y* = 1.37, and the sampler must not learn from a point it did
not propose. The trial does not count towards `n_trials`; the next `workbench analyze` includes it in the data
and the report shows measured against predicted. Data flows one way: this module receives the fit's result and
never imports the analysis.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Callable

import optuna
from optuna.trial import TrialState

from workbench import knobs, tracking
from workbench.config import ConfigError
from workbench.study import attrs
from workbench.study.context import StudyContext, load_existing
from workbench.study.preflight import check_study
from workbench.study.objective import StudyObjective
from workbench.study.spec import fmt_params

log = logging.getLogger(__name__)


@dataclass
class Verification:
    trial_number: int | None
    knobs: dict[str, float]
    x: float
    y: float
    predicted: float
    """Fitted compute-to-target at the knobs actually run (after rounding the capacity to whole rollouts)."""
    measured: float | None
    censored_seeds: int | None
    same_as: int | None = None
    """An already measured trial with the same knobs (nothing new was run unless forced)."""


def predicted_knobs(result: dict, batch: int) -> tuple[dict[str, float], float, float]:
    """Knob values of the analysis's predicted optimum (ratio to 3 significant digits, capacity in whole rollouts,
    at least B) and the (x, y) they really give at batch size B."""
    ratio = knobs.runnable_ratio(result["predicted"]["y"])
    capacity = knobs.capacity(result["predicted"]["x"], ratio, batch)
    return {"replay.ratio": ratio, "replay.capacity": capacity, "replay.horizon": None}, knobs.staleness(capacity, ratio, batch), ratio


def _measured_twin(result: dict, knobs: dict, base_lr: float | None = None) -> int | None:
    """A measured configuration with these knobs, at the learning rate the prediction runs at (its own `lr` knob,
    else the study's base lr: a model that does not use the learning rate predicts at the base one)."""
    lr = knobs.get("lr", base_lr)
    for c in result["configurations"]:
        same_lr = lr is None or c.get("lr") is None or math.isclose(c["lr"], lr, rel_tol=1e-6)
        if math.isclose(c["y"], knobs["replay.ratio"], rel_tol=1e-6) and c["capacity"] == knobs["replay.capacity"] and same_lr:
            return int(c["trial_number"])
    return None


def open_for_verify(ctx: StudyContext) -> optuna.Study:
    """The study, checked to be one whose optimum can be predicted and run (raises ConfigError otherwise)."""
    # The study's own sampler is not consulted (the knobs come from the fit), and a grid sampler would call
    check_study(ctx.spec)  # this machine can run the study's trials (data, backend), before anything is recorded
    # study.stop() from `tell` once its grid is done: load the study with a plain sampler.
    study = load_existing(ctx, sampler=optuna.samplers.RandomSampler())
    if study.user_attrs.get(attrs.REFERENCE_MU) is None:
        raise ConfigError(f"study: {ctx.spec.name!r} has no reference mu yet (run its baseline first)")
    if len(ctx.spec.objectives) != 1 or ctx.spec.objectives[0] != "compute_to_target":
        raise ConfigError("objective: study verify needs a single compute_to_target objective (what the model predicts)")
    waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    if waiting:
        raise ConfigError(f"study: trial {waiting[0].number} is still queued; finish the study (`workbench study run`) before verifying")
    return study


def run_prediction(
    ctx: StudyContext,
    study: optuna.Study,
    result: dict,
    predict: Callable[[float, float], float],
    *,
    threads: int | None = None,
    force: bool = False,
    arm: str = "predicted",
    provenance: dict | None = None,
    lr: float | None = None,
) -> Verification:
    """Run the fit's predicted optimum (`result` of the analysis, `predict(x, y)` its fitted compute) as a trial.
    `arm` names what predicted it (`predicted`: the fitted model; `probe`: `workbench probe`), `provenance` what it
    was predicted from (default: the fit's parameters), `lr` the learning rate a learning-rate-aware model chose
    with (x, y) (run as the `lr` knob)."""
    base = ctx.spec.trial_config({}, 0)
    knobs, x, y = predicted_knobs(result, base.batch_size)
    if lr is not None:
        knobs["lr"] = float(f"{lr:.3g}")
    predicted = float(predict(x, y))
    twin = _measured_twin(result, knobs, base.lr)
    if twin is not None and not force:
        measured = next(c["compute_to_target"] for c in result["configurations"] if c["trial_number"] == twin)
        log.info(f"the fitted optimum {fmt_params(knobs)} (x {x:.3g}, y {y:.3g}) was already run as trial {twin}: "
                 f"measured {measured:.4g}, predicted {predicted:.4g} (use --force to run it again)")
        study.set_user_attr(attrs.PREDICTED_TWINS, sorted({*study.user_attrs.get(attrs.PREDICTED_TWINS, []), twin}))
        return Verification(twin, knobs, x, y, predicted, measured, None, same_as=twin)

    log.info(f"running the fitted optimum {fmt_params(knobs)} (x {x:.3g}, y {y:.3g}; predicted compute to target {predicted:.4g})"
             f" over seeds {ctx.spec.seed_list}")
    trial = study.ask()
    fit = provenance if provenance is not None else {k: result["fit"][k] for k in ("alpha", "tau0", "rho", "scale", "mu", "r2_log")}
    user_attrs = {attrs.ARM: arm, attrs.KNOBS: knobs, "x": x, "y": y, attrs.PREDICTED: predicted, "fit": fit}
    for k, v in user_attrs.items():
        trial.set_user_attr(k, v)
    objective = StudyObjective(ctx, study, threads)
    try:
        value = objective.evaluate(trial, knobs, is_baseline=False, mu=study.user_attrs[attrs.REFERENCE_MU], threads=threads,
                                   arm=arm, extra_metrics={tracking.PREDICTED_COMPUTE_TO_TARGET: predicted})
    except BaseException:
        study.tell(trial, state=TrialState.FAIL)
        raise
    frozen = study.tell(trial, value)
    censored = int(frozen.user_attrs.get(attrs.CENSORED_SEEDS, 0))
    log.info(f"{arm} optimum, trial {trial.number}: measured compute to target {value:.4g}, predicted {predicted:.4g}"
             f" (measured/predicted {value / predicted:.3g}; censored seeds {censored})")
    return Verification(trial.number, knobs, x, y, predicted, float(value), censored)
