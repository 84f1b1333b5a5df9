"""Verify: fit a study, turn a predicted optimum into a `workbench.prediction.Prediction` and run it as trials of the
study (`workbench study verify`).

Three predictions can be verified: the fit's (the report's distinct-draw model, `analysis.json`'s `prediction`), a
compared model's (`--model NAME|best`, or the simplest point of its flat ridge with `--ridge`) and the probe's
(`--probe`: one probe run on the study's base config, priced by an on-policy learning-rate sweep where the study
searches lr). The analysis builds the prediction (`analysis.predictions`); `workbench.study.verify` runs it.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import optuna

from workbench.config import ConfigError
from workbench.prediction import AgainstSweep, Prediction, ProbePrediction, SweepPoint
from workbench.study import attrs
from workbench.study.context import StudyContext
from workbench.study.verify import Verification, open_for_verify, run_prediction
from workbench.trial.probe import ProbeResult, probe_config, record, run_probe
from workbench.workflow import DEFAULT_SWEEP_UNITS
from workbench.workflow.probe import against_sweep, lr_sweep, sweep_units

from analysis import predictions
from analysis.models import MODELS, probe_lr, probe_prediction
from analysis.report import analyze
from analysis.result import Analysis, ModelSummary, Optimum, Point


def check_model(name: str | None) -> None:
    """`--model`: a registered model or `best` (checked before the fit, so bad input stops at once)."""
    if name and name != "best" and name not in MODELS:
        raise ConfigError(f"--model: {name!r} is not a registered model ({', '.join(MODELS)}, or best)")


def fit_study(ctx: StudyContext, bootstrap: int) -> tuple[optuna.Study, Analysis]:
    """The study, checked to be one whose optimum can be predicted and run, and its analysis (`bootstrap` refits)."""
    study = open_for_verify(ctx)
    result, _, _ = analyze(ctx.spec.name, ctx.tracking_uri, whatif_mu=[], bootstrap=bootstrap)
    return study, result


def run(
    ctx: StudyContext,
    study: optuna.Study,
    prediction: Prediction,
    result: Analysis,
    threads: int | None = None,
    force: bool = False,
) -> Verification:
    """Run `prediction` as trials of the study, unless one of the configurations the analysis `result` measured runs
    the same knobs (`force`: run it anyway)."""
    return run_prediction(ctx, study, prediction, predictions.measured(result), threads=threads, force=force)


def fitted(result: Analysis) -> Prediction | None:
    """The fit's predicted optimum, as the analysis wrote it (None: the fit found none)."""
    return result.prediction


@dataclass(frozen=True)
class ModelChoice:
    """A compared model's optimum, chosen for `study verify --model`, or why there is nothing to run."""

    name: str
    """The model asked for (a registered name, or `best`)."""
    fitted: tuple[str, ...]
    """The models the analysis fitted to this study, best first."""
    summary: ModelSummary | None = None
    """The chosen model's entry in the analysis (None: it was not fitted)."""
    prediction: Prediction | None = None
    """What runs: its optimum, or with `ridge` the simplest point of its flat ridge; None: nothing runs."""
    warning: str | None = None
    """One line where the chosen model has shown no skill beyond the null predictors (`analysis.null_models`): `best`
    fell back to the first by leave-one-configuration-out error because no model is selected, or the model named is
    not selected."""

    @property
    def optimum(self) -> Optimum | None:
        """Its optimum: a point, or the reason it refuses one."""
        return self.summary.optimum if self.summary else None

    @property
    def loco(self) -> float:
        """Its leave-one-configuration-out median |log error|."""
        return self.summary.loco_error if self.summary else math.nan

    @property
    def ridge_point(self) -> Point | None:
        return self.summary.optimum.ridge_point if self.summary else None

    @property
    def selected(self) -> bool:
        """It beats all three null predictors out of sample (`analysis.null_models.skill`)."""
        return self.summary.selected if self.summary else False


def _best(models: tuple[ModelSummary, ...]) -> tuple[ModelSummary | None, str | None]:
    """`--model best`: the first selected model by leave-one-configuration-out error (the analysis ranks them so);
    where none is selected, the first by that error, with a warning."""
    if not models:
        return None, None
    chosen = next((m for m in models if m.selected), None)
    if chosen is not None:
        return chosen, None
    return models[0], (
        f"no model is selected (none beats the constant, lr-only and nearest null predictors out of sample):"
        f" best falls back to the first by leave-one-configuration-out error, {models[0].model}, whose"
        " prediction has shown no skill beyond a trivial guess"
    )


def choose_model(result: Analysis, name: str, ridge: bool, batch_size: int) -> ModelChoice:
    """The optimum of model `name` at the study's batch size; with `ridge`, the simplest point of its flat ridge where
    it refuses one for that reason. `best`: the first model selected against the null predictors (it beats all three
    out of sample, `analysis.null_models.skill`) by leave-one-configuration-out error, the report's ranking; where
    none is selected, the first by that error, with a `warning` (a verification still measures its point; the user
    sees that the prediction has no demonstrated skill). A model named that is not selected gets a warning too."""
    check_model(name)
    models = result.models
    if name == "best":
        chosen, warning = _best(models)
    else:
        chosen = next((m for m in models if m.model == name), None)
        words = chosen.skill.words if chosen is not None and chosen.skill is not None else None
        warning = f"{name} is {words}" if chosen is not None and not chosen.selected and words else None
    fitted = tuple(m.model for m in models)
    if chosen is None:
        return ModelChoice(name, fitted)
    opt = chosen.optimum
    point = opt.point or (opt.ridge_point if ridge else None)
    on_ridge = opt.point is None
    prediction = predictions.of_model(chosen, point, batch_size, ridge=on_ridge) if point is not None else None
    return ModelChoice(name, fitted, chosen, prediction, warning)


@dataclass
class StudyProbe:
    """`study verify --probe`: the probe run on the study's base config and the optimum it predicts at the study's mu."""

    measured: ProbeResult
    run_id: str
    mu: float
    """The study's reference mu, at which the probe's measurements predict."""
    predicted: ProbePrediction
    """`analysis.models.probe_lr`'s prediction (with the sweep where one ran), or `refused` and why; `against_sweep`:
    whether it beats the sweep alone at equal compute (`workbench.workflow.probe.against_sweep`)."""
    sweep: list[SweepPoint] | None
    units: float
    """The probe's cost in compute units, its sweep included."""
    prediction: Prediction | None
    """What runs; None where the probe refused a point."""

    @property
    def against_sweep(self) -> AgainstSweep:
        """Whether the probe's point beats its sweep alone at equal compute (`analysis.null_models.probe_against_sweep`)."""
        return self.predicted.against_sweep


def probe_study(
    ctx: StudyContext,
    study: optuna.Study,
    result: Analysis,
    steps: int,
    sweep: bool | None = None,
    threads: int | None = None,
) -> StudyProbe:
    """One probe run of `steps` steps on the study's base config (its own MLflow experiment, NAME-probe), its optimum
    predicted at the study's reference mu; `sweep` (default: when the study searches lr) prices it with an on-policy
    learning-rate sweep to the study's target, the first run at the study's budget."""
    base = copy.deepcopy(ctx.spec.base)
    base.pop("pipeline", None)  # the probe and its sweep are synchronous measurements, priced at the study's mu; an
    # asynchronous study runs their optimum as a split (`Prediction.split_knobs`), as it runs a fitted model's
    base["tracking"] = {**base.get("tracking", {}), "uri": ctx.tracking_uri, "experiment": f"{ctx.spec.name}-probe"}
    if threads:
        base["threads"] = threads
    cfg = probe_config(base, steps=steps)
    res, run_result = run_probe(cfg, show_progress=False)
    mu = float(study.user_attrs[attrs.REFERENCE_MU])
    o = probe_prediction(
        res.horizon, res.horizon_draws, res.group_correlation, res.rho, mu, cfg.group_size, cfg.batch_size
    )
    sweeping = sweep if sweep is not None else "lr" in ctx.spec.search_space
    study_cfg = ctx.spec.trial_config({}, 0)
    budget = study_cfg.budget.compute_units or DEFAULT_SWEEP_UNITS
    points = (
        lr_sweep(base, float(study.user_attrs[attrs.TARGET]), mu, budget, threads) if sweeping and o.has_point else None
    )
    o = against_sweep(probe_lr(o, points, cfg.lr), res.compute_units)
    record(res, cfg.tracking.uri, o)
    units = res.compute_units + sweep_units(points)
    prediction = None
    if o.refused is None:
        base_ctt = next((m.compute_to_target for m in predictions.measured(result) if m.baseline), math.nan)
        sweep_json = [p.to_json() for p in points] if points else None  # `analysis.predictions` reads JSON
        prediction = predictions.of_probe(
            o.to_json(), sweep_json, run_result.run_id, mu, units, base_ctt, study_cfg.batch_size
        )
    return StudyProbe(res, run_result.run_id, mu, o, points, units, prediction)
