"""The workflow below the command line (`workbench.workflow`): what each step hands on, without training (the steps
run end to end through the CLI: tests/e2e/test_analysis_cli.py, test_probe_cli.py, test_confirm_cli.py,
test_theory_cli.py)."""

import math

import optuna
import pytest

from workbench import knobs
from workbench.config import ConfigError
from workbench.prediction import LrOptimum, Prediction, ProbePrediction, SweepPoint
from workbench.study import attrs
from workbench.study.context import context
from workbench.study.spec import load_spec
from workbench.trial.probe import ProbeResult
from workbench.workflow import verify
from workbench.workflow.probe import Probed, against_sweep, claim_line, cost_words
from workbench.workflow.theory import theory

from analysis.models import MODELS, ModelFit
from analysis.result import Analysis

from support.analysis_result import analysis
from support.toy import toy_spec


def _result(**fields) -> Analysis:
    """An analysis result as `analysis.report.analyze` returns it, with the fields `study verify` reads."""
    configurations = [
        {"trial_number": 0, "y": 1.0, "capacity": 16, "compute_to_target": 50.0, "baseline": True, "lr": 1e-4},
        {"trial_number": 3, "y": 2.0, "capacity": 64, "compute_to_target": 41.0, "baseline": False, "lr": 1e-4},
    ]
    return analysis({"configurations": configurations, "models": [], "prediction": None} | fields)


def test_a_prediction_already_measured_is_named_not_trained(tmp_path):
    ctx = context(load_spec(toy_spec(tmp_path)))  # batch size 16, lr 1e-4
    study = optuna.create_study()
    prediction = Prediction.at("predicted", 8.0, 2.0, 16, lambda x, y: 40.0)
    assert prediction.knobs == {"replay.ratio": 2.0, "replay.capacity": 64, "replay.horizon": None}
    v = verify.run(ctx, study, prediction, _result())
    assert (v.same_as, v.trial_number, v.measured, v.predicted) == (3, 3, 41.0, 40.0) and v.x == 8.0
    assert study.user_attrs[attrs.PREDICTED_TWINS] == [3] and study.trials == []  # nothing was trained
    with pytest.raises(ConfigError, match="prediction: made for batch size 32"):
        verify.run(ctx, study, Prediction.at("predicted", 8.0, 2.0, 32, lambda x, y: 40.0), _result())


def test_the_fits_prediction_is_read_from_the_analysis_as_written():
    p = Prediction.at("predicted", 5.5, 1.7, 16, lambda x, y: x + y, provenance={"alpha": 0.3})
    assert verify.fitted(_result(prediction=p.to_json())) == p
    assert verify.fitted(_result()) is None
    with pytest.raises(ConfigError, match="--model: 'nope'"):
        verify.check_model("nope")
    verify.check_model("best")
    verify.check_model(None)


def _summary(name: str, optimum: dict, loco: float) -> dict:
    params = {p.name: p.start for p in MODELS[name].params} | {"log_scale": 3.0, "log_sigma": math.log(0.3)}
    fit = ModelFit(
        name,
        params,
        mu=0.9,
        lr_ref=1e-4,
        n_points=6,
        n_censored=0,
        log_likelihood=-1.0,
        loco={"n": 6, "median_abs_log_error": loco},
    )
    return fit.summary() | {"optimum": optimum}


def test_a_compared_models_optimum_is_chosen_or_its_refusal_kept():
    ridge = {"x": 2.0, "y": 1.0, "compute": 30.0}
    models = [
        _summary("thm45", {"x": 6.0, "y": 2.0, "compute": 33.0}, 0.04),
        _summary(
            "extended", {"x": 64.0, "y": 8.0, "compute": 20.0, "refused": "a flat ridge", "ridge_point": ridge}, 0.08
        ),
    ]
    result = _result(models=models)
    best = verify.choose_model(result, "best", ridge=False, batch_size=16)
    assert best.summary.model == "thm45" and best.loco == 0.04 and best.fitted == ("thm45", "extended")
    assert (best.prediction.x, best.prediction.y, best.prediction.batch_size) == (6.0, 2.0, 16)
    assert best.prediction.provenance["model"] == "thm45" and "ridge" not in best.prediction.provenance
    refused = verify.choose_model(result, "extended", ridge=False, batch_size=16)
    assert refused.prediction is None and refused.optimum.refused == "a flat ridge"
    assert refused.ridge_point.to_json() == ridge
    on_ridge = verify.choose_model(result, "extended", ridge=True, batch_size=16)
    assert (on_ridge.prediction.x, on_ridge.prediction.y) == (2.0, 1.0) and on_ridge.prediction.provenance[
        "ridge"
    ] is True
    absent = verify.choose_model(result, "extended_lr", ridge=False, batch_size=16)
    assert absent.summary is None and absent.prediction is None and math.isnan(absent.loco)


def _skill(selected: bool) -> dict:
    words = (
        "selected: it beats constant, lr-only, nearest out of sample"
        if selected
        else "not selected: it does not beat lr-only (|log error| +0.010 [-0.020, +0.040] against it, paired)"
    )
    return {"selected": selected, "not_beaten": [] if selected else ["lr_only"], "words": words}


def test_best_is_the_first_model_selected_against_the_null_predictors_else_the_first_by_loco_with_a_warning():
    first = _summary("thm45", {"x": 6.0, "y": 2.0, "compute": 33.0}, 0.04) | {"skill": _skill(False)}
    second = _summary("extended", {"x": 16.0, "y": 4.0, "compute": 30.0}, 0.06) | {"skill": _skill(True)}
    third = _summary("with_replacement", {"x": 8.0, "y": 2.0, "compute": 31.0}, 0.07) | {"skill": _skill(True)}
    chosen = verify.choose_model(_result(models=[first, second, third]), "best", ridge=False, batch_size=16)
    assert chosen.summary.model == "extended" and chosen.selected and chosen.warning is None  # not thm45: no skill
    assert (chosen.prediction.x, chosen.prediction.y) == (16.0, 4.0) and chosen.prediction.provenance[
        "model"
    ] == "extended"
    none = verify.choose_model(
        _result(models=[first, second | {"skill": _skill(False)}]), "best", ridge=False, batch_size=16
    )
    assert none.summary.model == "thm45" and not none.selected and none.prediction.x == 6.0  # runs, warned
    assert none.warning.startswith("no model is selected (none beats the constant, lr-only and nearest null predictors")
    assert (
        "falls back to the first by leave-one-configuration-out error, thm45" in none.warning
        and "\n" not in none.warning
    )
    unscored = verify.choose_model(
        _result(models=[_summary("thm45", {"x": 6.0, "y": 2.0, "compute": 33.0}, 0.04)]),
        "best",
        ridge=False,
        batch_size=16,
    )  # an analysis without skill: nothing selected
    assert unscored.summary.model == "thm45" and unscored.warning.startswith("no model is selected")
    named = verify.choose_model(_result(models=[first, second]), "thm45", ridge=False, batch_size=16)
    assert named.summary.model == "thm45" and named.warning == "thm45 is " + _skill(False)["words"]
    assert verify.choose_model(_result(models=[first, second]), "extended", ridge=False, batch_size=16).warning is None
    empty = verify.choose_model(_result(), "best", ridge=False, batch_size=16)
    assert empty.summary is None and empty.prediction is None and empty.warning is None


def test_the_probes_alignment_has_an_interval_over_its_resampled_groups():
    terms = [{"x": x, "signal": 2.0, "cross": 2.0 / x, "sigma2_bar": 1.0, "mixed": 0.0} for x in range(1, 5)]
    draws = [[{**t, "cross": t["cross"] * f} for t in terms] for f in (0.9, 1.0, 1.1)]
    res = ProbeResult("run", 0.9, 4.0, 2.0, 14, 10.0, 4, horizon=terms, horizon_draws=draws)
    shares = Probed(None, res, "run", ProbePrediction(), {}).alignment()
    assert [(x, share) for x, share, _ in shares] == [(1, 1.0), (2, 0.5), (4, 0.25)]  # horizons 1, 2, 4 of 1-4
    low, high = shares[1][2]
    assert low == pytest.approx(0.45 + 0.05 * 0.05, rel=1e-6) and high == pytest.approx(0.55 - 0.05 * 0.05, rel=1e-6)
    flat = ProbeResult("run", 0.9, 4.0, 2.0, 14, 10.0, 4, horizon=[{**terms[0], "signal": 0.0}])
    assert Probed(None, flat, "run", ProbePrediction(), {}).alignment() == []


SWEEP = (
    SweepPoint(2.5e-5, 60.0, False, 100.0),
    SweepPoint(5e-5, 38.0, False, 90.0),
    SweepPoint(1e-4, 35.0, False, 57.0),
    SweepPoint(2e-4, 52.0, True, 52.0),
)
"""An on-policy lr sweep as `workbench.workflow.probe.lr_sweep` returns it: 299 units, lr* between 5e-5 and 1e-4."""


def _probed(predicted: ProbePrediction, gradient_units: float) -> Probed:
    res = ProbeResult("run", 0.9, 4.0, 2.0, 14, gradient_units, 4)
    return Probed(None, res, "run", against_sweep(predicted, gradient_units), {})


def test_a_probe_whose_point_is_its_sweeps_answer_claims_nothing_beyond_the_sweep_and_counts_its_cost():
    best = LrOptimum(lr=7.9e-5, compute=34.0)
    on_policy = _probed(
        ProbePrediction(x=1.0, y=1.0, lr=7.9e-5, relative_compute=1.0, compute=34.0, lr_sweep=SWEEP, lr_optimum=best),
        43.5,
    )
    assert on_policy.units == pytest.approx(43.5 + 299.0) and not on_policy.against_sweep.claims
    assert on_policy.against_sweep.sweep_units == 299.0 and on_policy.against_sweep.gradient_units == 43.5
    assert (
        cost_words(43.5, SWEEP)
        == "43.5 compute units of gradient phase + 299.0 of its 4-run on-policy lr sweep = 342.5 in all"
    )
    assert cost_words(43.5, None) == "43.5 compute units"
    line = claim_line(on_policy.against_sweep)
    assert line.startswith("the probe claims nothing beyond its lr sweep: the probe's point is on-policy at lr 7.9e-05")
    assert "43.5 units" in line and "\n" not in line
    replay = ProbePrediction(
        x=4.0, y=2.0, lr=7.9e-5, relative_compute=0.5, compute=17.0, lr_sweep=SWEEP, lr_optimum=best
    )
    dear = _probed(replay, 43.5)  # 43.5 + 17 > 34: the sweep alone reaches the target for less
    assert claim_line(dear.against_sweep).startswith(
        "the probe claims nothing beyond its lr sweep: to reach the target once:"
        " 43.5 units of gradient phase + 17.0 predicted at x 4, y 2 = 60.5"
    )
    cheap = _probed(replay, 10.0)  # 10 + 17 < 34
    assert cheap.against_sweep.claims and claim_line(cheap.against_sweep).startswith(
        "against its lr sweep at equal compute, the probe claims its point: to reach the target once: 10.0 units"
    )
    refused = _probed(
        ProbePrediction(refused="the fresh gradient is not resolved", lr_sweep=SWEEP, lr_optimum=best), 43.5
    )
    assert claim_line(refused.against_sweep).startswith(
        "the probe claims nothing beyond its lr sweep: the probe refused a point"
    )
    unswept = _probed(ProbePrediction(x=4.0, y=2.0, lr=1e-4, relative_compute=0.5), 43.5)
    assert unswept.units == 43.5 and claim_line(unswept.against_sweep).startswith(
        "the probe claims nothing against tuned on-policy:"
    )


def test_theory_gives_the_closed_form_optimum_as_the_knobs_that_run_it():
    out, k = theory(5.28, 0.1, 0.3, 128)
    assert k == knobs.to_knobs(out["x_star"], out["y_star"], 128, 5.28)
    assert out["capacity"] == k.capacity and out["on_policy_optimal"] is (out["y_star"] <= 1.0)
