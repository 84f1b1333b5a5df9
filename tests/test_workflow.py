"""The workflow below the command line (`workbench.workflow`): what each step hands on, without training (the steps
run end to end through the CLI: tests/e2e/test_analysis_cli.py, test_probe_cli.py, test_confirm_cli.py,
test_theory_cli.py)."""

import math

import optuna
import pytest

from workbench import knobs
from workbench.config import ConfigError
from workbench.prediction import Prediction
from workbench.study import attrs
from workbench.study.context import context
from workbench.study.spec import load_spec
from workbench.trial.probe import ProbeResult
from workbench.workflow import verify
from workbench.workflow.probe import Probed
from workbench.workflow.theory import theory

from analysis.models import MODELS, ModelFit

from support.toy import toy_spec


def _result(**fields) -> dict:
    """An analysis result as `analysis.report.analyze` returns it, with the fields `study verify` reads."""
    configurations = [
        {"trial_number": 0, "y": 1.0, "capacity": 16, "compute_to_target": 50.0, "baseline": True, "lr": 1e-4},
        {"trial_number": 3, "y": 2.0, "capacity": 64, "compute_to_target": 41.0, "baseline": False, "lr": 1e-4},
    ]
    return {"configurations": configurations, "models": [], "prediction": None} | fields


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
    fit = ModelFit(name, params, mu=0.9, lr_ref=1e-4, n_points=6, n_censored=0, log_likelihood=-1.0,
                   loco={"n": 6, "median_abs_log_error": loco})
    return fit.summary() | {"optimum": optimum}


def test_a_compared_models_optimum_is_chosen_or_its_refusal_kept():
    ridge = {"x": 2.0, "y": 1.0, "compute": 30.0}
    models = [_summary("thm45", {"x": 6.0, "y": 2.0, "compute": 33.0}, 0.04),
              _summary("extended", {"x": 64.0, "y": 8.0, "compute": 20.0, "refused": "a flat ridge", "ridge_point": ridge}, 0.08)]
    result = _result(models=models)
    best = verify.choose_model(result, "best", ridge=False, batch_size=16)
    assert best.summary["model"] == "thm45" and best.loco == 0.04 and best.fitted == ("thm45", "extended")
    assert (best.prediction.x, best.prediction.y, best.prediction.batch_size) == (6.0, 2.0, 16)
    assert best.prediction.provenance["model"] == "thm45" and "ridge" not in best.prediction.provenance
    refused = verify.choose_model(result, "extended", ridge=False, batch_size=16)
    assert refused.prediction is None and refused.optimum["refused"] == "a flat ridge" and refused.ridge_point == ridge
    on_ridge = verify.choose_model(result, "extended", ridge=True, batch_size=16)
    assert (on_ridge.prediction.x, on_ridge.prediction.y) == (2.0, 1.0) and on_ridge.prediction.provenance["ridge"] is True
    absent = verify.choose_model(result, "extended_lr", ridge=False, batch_size=16)
    assert absent.summary is None and absent.prediction is None and math.isnan(absent.loco)


def test_the_probes_alignment_has_an_interval_over_its_resampled_groups():
    terms = [{"x": x, "signal": 2.0, "cross": 2.0 / x, "sigma2_bar": 1.0, "mixed": 0.0} for x in range(1, 5)]
    draws = [[{**t, "cross": t["cross"] * f} for t in terms] for f in (0.9, 1.0, 1.1)]
    res = ProbeResult("run", 0.9, 4.0, 2.0, 14, 10.0, 4, horizon=terms, horizon_draws=draws)
    shares = Probed(None, res, "run", {}, {}).alignment()
    assert [(x, share) for x, share, _ in shares] == [(1, 1.0), (2, 0.5), (4, 0.25)]  # horizons 1, 2, 4 of 1-4
    low, high = shares[1][2]
    assert low == pytest.approx(0.45 + 0.05 * 0.05, rel=1e-6) and high == pytest.approx(0.55 - 0.05 * 0.05, rel=1e-6)
    flat = ProbeResult("run", 0.9, 4.0, 2.0, 14, 10.0, 4, horizon=[{**terms[0], "signal": 0.0}])
    assert Probed(None, flat, "run", {}, {}).alignment() == []


def test_theory_gives_the_closed_form_optimum_as_the_knobs_that_run_it():
    out, k = theory(5.28, 0.1, 0.3, 128)
    assert k == knobs.to_knobs(out["x_star"], out["y_star"], 128, 5.28)
    assert out["capacity"] == k.capacity and out["on_policy_optimal"] is (out["y_star"] <= 1.0)
