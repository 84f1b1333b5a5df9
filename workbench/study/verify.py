"""`workbench study verify`: run the fitted optimum as new trials of the same study, measured against predicted.

The analysis (run by `workbench.workflow` before this) predicts a compute-optimal (x*, y*) that usually lies
between the grid points a study sampled, and hands it over as a `workbench.prediction.Prediction`: the knobs that
run it at the study's batch size (capacity N = round(x* B / y*), ratio y*, no age limit; `workbench.knobs`), the
compute it predicts there and what predicted it. This module trains it once per seed of the spec exactly as a
sampler proposal would be trained (same reference mu, same censoring, same MLflow layout), and records it in Optuna
as a trial of the study with its arm (`predicted`: a fitted model's; `probe`: the probe's). Its knobs live in the
trial's user attributes, not in `params`: a study's categorical search space cannot hold a value like y* = 1.37,
and the sampler must not learn from a point it did not propose. The trial does not count towards `n_trials`; the
next `workbench analyze` includes it in the data and the report shows measured against predicted. Data flows one
way: this module receives the prediction and never imports the analysis.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

import optuna
from optuna.trial import TrialState

from workbench import interrupts, tracking
from workbench.config import ConfigError
from workbench.prediction import Measured, Prediction, twin
from workbench.study import attrs
from workbench.study.context import StudyContext, load_existing
from workbench.study.preflight import check_study
from workbench.study.objective import StudyObjective, run_arm
from workbench.study.spec import fmt_params

log = logging.getLogger(__name__)


@dataclass
class Verification:
    trial_number: int | None
    knobs: dict[str, float]
    x: float
    y: float
    predicted: float
    """Predicted compute-to-target at the knobs actually run (after rounding the capacity to whole rollouts)."""
    measured: float | None
    censored_seeds: int | None
    same_as: int | None = None
    """An already measured trial with the same knobs (nothing new was run unless forced)."""


def open_for_verify(ctx: StudyContext) -> optuna.Study:
    """The study, checked to be one whose optimum can be predicted and run (raises ConfigError otherwise)."""
    # The study's own sampler is not consulted (the knobs come from the fit), and a grid sampler would call
    check_study(ctx.spec)  # this machine can run the study's trials (data, backend), before anything is recorded
    # study.stop() from `tell` once its grid is done: load the study with a plain sampler.
    study = load_existing(ctx, sampler=optuna.samplers.RandomSampler())
    if study.user_attrs.get(attrs.REFERENCE_MU) is None:
        raise ConfigError(f"study: {ctx.spec.name!r} has no reference mu yet (run its baseline first)")
    if len(ctx.spec.objectives) != 1 or ctx.spec.objectives[0] != "compute_to_target":
        raise ConfigError(
            "objective: study verify needs a single compute_to_target objective (what the model predicts)"
        )
    waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    if waiting:
        raise ConfigError(
            f"study: trial {waiting[0].number} is still queued; finish the study (`workbench study run`) before verifying"
        )
    return study


def run_prediction(
    ctx: StudyContext,
    study: optuna.Study,
    prediction: Prediction,
    measured: Sequence[Measured] = (),
    *,
    threads: int | None = None,
    force: bool = False,
) -> Verification:
    """Run `prediction` (its knobs at the study's batch size, recorded as its arm with its provenance) as a trial of
    the study, unless one of the `measured` configurations already runs those knobs (then it is named, not run
    again, unless `force`)."""
    base = ctx.spec.trial_config({}, 0)
    if prediction.batch_size != base.batch_size:
        raise ConfigError(
            f"prediction: made for batch size {prediction.batch_size}, but study {ctx.spec.name!r} trains at {base.batch_size}"
        )
    knobs, x, y, predicted = prediction.knobs, prediction.run_x, prediction.ratio, prediction.compute
    asynchronous = base.pipeline.mode == "async"
    if asynchronous:  # y emerges from the split there: run (x*, y*) as the split and buffer that give it
        knobs = prediction.split_knobs(float(study.user_attrs[attrs.REFERENCE_MU]), base.pipeline.trainers)
    same = None if asynchronous else twin(measured, knobs, base.lr)
    if same is not None and not force:
        log.info(
            f"the fitted optimum {fmt_params(knobs)} (x {x:.3g}, y {y:.3g}) was already run as trial {same.trial_number}: "
            f"measured {same.compute_to_target:.4g}, predicted {predicted:.4g} (use --force to run it again)"
        )
        study.set_user_attr(
            attrs.PREDICTED_TWINS, sorted({*study.user_attrs.get(attrs.PREDICTED_TWINS, []), same.trial_number})
        )
        return Verification(
            same.trial_number, knobs, x, y, predicted, same.compute_to_target, None, same_as=same.trial_number
        )

    log.info(
        f"running the fitted optimum {fmt_params(knobs)} (x {x:.3g}, y {y:.3g}; predicted compute to target {predicted:.4g})"
        f" over seeds {ctx.spec.seed_list}"
    )
    arm = prediction.arm
    user_attrs = {
        attrs.ARM: arm,
        attrs.KNOBS: knobs,
        "x": x,
        "y": y,
        attrs.PREDICTED: predicted,
        "fit": prediction.provenance,
    }
    objective = StudyObjective(ctx, study, threads)
    with interrupts.terminate_as_interrupt():
        frozen = run_arm(
            study,
            objective,
            user_attrs,
            knobs,
            is_baseline=False,
            mu=study.user_attrs[attrs.REFERENCE_MU],
            threads=threads,
            arm=arm,
            extra_metrics={tracking.PREDICTED_COMPUTE_TO_TARGET: predicted},
        )
    value = frozen.value
    censored = int(frozen.user_attrs.get(attrs.CENSORED_SEEDS, 0))
    log.info(
        f"{arm} optimum, trial {frozen.number}: measured compute to target {value:.4g}, predicted {predicted:.4g}"
        f" (measured/predicted {value / predicted:.3g}; censored seeds {censored})"
    )
    return Verification(frozen.number, knobs, x, y, predicted, float(value), censored)
