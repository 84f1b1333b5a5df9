"""The null predictors (analysis.null_models) on configurations whose answer is known: in a world where only the
learning rate matters lr-only beats the constant; a model that knows the truth is selected; a model no better than
lr-only is not; the probe's point against its own sweep."""

import math

import numpy as np
import pandas as pd
import pytest
from threadpoolctl import threadpool_limits

from analysis import null_models
from analysis.models import ModelFit, leave_one_configuration_out

GRID = [(x, y) for x in (1.0, 2.0, 4.0, 8.0, 16.0) for y in (1.0, 2.0, 4.0) if x >= y]
LRS = (1e-5, 2e-5, 4e-5)


def _table(truth, noise: float = 0.03, seed: int = 0, lrs=LRS) -> pd.DataFrame:
    """One row per (x, y, lr): log compute = truth(x, y, lr) + N(0, noise²), 4 seeds, all measured."""
    rng = np.random.default_rng(seed)
    rows = [
        {
            "x": x,
            "y": y,
            "lr": lr,
            "log_c": truth(x, y, lr) + noise * rng.standard_normal(),
            "seeds": 4,
            "measured": True,
        }
        for lr in lrs
        for x, y in GRID
    ]
    return pd.DataFrame(rows)


def lr_world(x, y, lr):
    return 4.0 - 0.8 * math.log(lr / 1e-5)


def knob_world(x, y, lr):
    """lr matters, and so do x and y, by amounts no neighbour or lr average reproduces."""
    return 4.0 - 1.0 * math.log(lr / 1e-5) + 0.3 * math.log(x) * math.cos(3 * math.log(y) + 1) - 0.25 * math.log(y) ** 2


def test_in_an_lr_only_world_lr_only_beats_the_constant():
    nulls = null_models.null_loco(_table(lr_world))
    assert nulls["lr_only"]["n"] == nulls["constant"]["n"] == len(GRID) * len(LRS)
    assert nulls["lr_only"]["how"] == {"same lr": len(GRID) * len(LRS)}
    assert nulls["lr_only"]["median_abs_log_error"] < 0.05 < 0.4 < nulls["constant"]["median_abs_log_error"]
    s = null_models.difference(nulls["lr_only"]["errors"], nulls["constant"]["errors"])
    assert s["beats"] and s["high"] < 0


def _truth_errors(table: pd.DataFrame, truth) -> list[dict]:
    """The errors of a model that predicts `truth` exactly: only the measurement noise is left."""
    return [{"x": r.x, "y": r.y, "lr": r.lr, "error": truth(r.x, r.y, r.lr) - r.log_c} for r in table.itertuples()]


def test_a_model_that_knows_the_truth_is_selected_and_one_no_better_than_lr_only_is_not():
    table = _table(knob_world)
    nulls = null_models.null_loco(table)
    assert nulls["lr_only"]["median_abs_log_error"] > 0.1 and nulls["nearest"]["median_abs_log_error"] > 0.1
    knows = null_models.skill(_truth_errors(table, knob_world), nulls)
    assert knows["selected"] and knows["not_beaten"] == [] and knows["words"].startswith("selected")
    assert all(d["n"] == len(table) and d["high"] < 0 for d in knows["against"].values())
    # a model whose errors are lr-only's, up to a little jitter: it beats the constant, not lr-only
    rng = np.random.default_rng(1)
    like_lr = [{**e, "error": e["error"] + 0.01 * rng.standard_normal()} for e in nulls["lr_only"]["errors"]]
    no_better = null_models.skill(like_lr, nulls)
    assert not no_better["selected"] and "lr_only" in no_better["not_beaten"]
    assert no_better["against"]["constant"]["beats"]
    assert "does not beat lr-only" in no_better["words"]


def test_lr_only_interpolates_in_log_lr_or_falls_back_to_the_constant_and_says_which():
    rows = [
        {"x": 1.0, "y": 1.0, "lr": lr, "log_c": v, "seeds": 4, "measured": True}
        for lr, v in ((1e-5, 5.0), (4e-5, 3.0), (2e-5, 9.0), (8e-5, 1.0))
    ]
    nulls = null_models.null_loco(pd.DataFrame(rows))
    errors = {e["lr"]: e["error"] for e in nulls["lr_only"]["errors"]}
    # lr 2e-5 alone at its lr, inside the others' range: halfway in log between 1e-5 (5) and 4e-5 (3)
    assert errors[2e-5] == pytest.approx(4.0 - 9.0)
    # lr 1e-5 outside the others' range: the constant (mean of 3, 9, 1)
    assert errors[1e-5] == pytest.approx((3.0 + 9.0 + 1.0) / 3 - 5.0)
    assert nulls["lr_only"]["how"] == {"interpolated in log lr": 2, "constant": 2}


def test_nearest_takes_the_closest_measured_configuration_in_the_varied_knobs_and_skips_censored_ones():
    rows = [
        {"x": 1.0, "y": 1.0, "lr": 1e-5, "log_c": 1.0, "measured": True},
        {"x": 2.0, "y": 1.0, "lr": 1e-5, "log_c": 2.0, "measured": True},
        {"x": 16.0, "y": 1.0, "lr": 1e-5, "log_c": 9.0, "measured": True},
        {"x": 1.5, "y": 1.0, "lr": 1e-5, "log_c": 50.0, "measured": False},
    ]  # mostly censored: no measurement
    nulls = null_models.null_loco(pd.DataFrame(rows).assign(seeds=4))
    errors = {e["x"]: e["error"] for e in nulls["nearest"]["errors"]}
    assert set(errors) == {1.0, 2.0, 16.0}
    assert errors[1.0] == pytest.approx(2.0 - 1.0) and errors[16.0] == pytest.approx(2.0 - 9.0)


def test_a_fitted_model_s_loco_errors_pair_with_the_nulls_on_a_study_s_runs():
    # runs drawn from Theorem 4.5 at one learning rate: the model that made them beats all three nulls out of sample
    truth = ModelFit(
        "thm45",
        {
            "log_scale": 2.0,
            "alpha": 0.25,
            "log_tau0": math.log(3.0),
            "log_rho": math.log(0.4),
            "log_sigma": math.log(0.05),
        },
        0.85,
        1.0,
        0,
        0,
        0.0,
    )
    rng = np.random.default_rng(0)
    runs = pd.DataFrame(
        [
            {
                "x": x,
                "y": y,
                "seed": s,
                "compute_to_target": float(truth.predict(x, y)) * math.exp(0.05 * rng.standard_normal()),
                "censored": 0,
                "total_units": 1e3,
            }
            for x, y in GRID
            for s in range(4)
        ]
    )
    with threadpool_limits(1):  # many small solves (as analysis.report runs them)
        loco = leave_one_configuration_out("thm45", runs, 0.85, init=truth.params, lr_ref=1.0)
    assert {(e["x"], e["y"]) for e in loco["errors"]} == set(GRID) and all(e["lr"] is None for e in loco["errors"])
    models = [{"model": "thm45", "loco": loco}]
    nulls = null_models.against_nulls(runs, models)
    assert nulls["lr_only"]["how"] == {"constant": len(GRID)}  # one learning rate: lr-only is the constant
    assert all(d["n"] == len(GRID) for d in models[0]["skill"]["against"].values())
    assert models[0]["skill"]["selected"], models[0]["skill"]["words"]


def test_skill_from_a_report_pools_a_configuration_s_arms_and_refits_the_models():
    records = [
        {
            "x": x,
            "y": y,
            "lr": 2.5e-5,
            "strategy": "uniform",
            "arm": "sampler",
            "seeds": 4,
            "censored_seeds": 0,
            "compute_to_target": 40.0 * x**0.2 * (1 + 0.4 / y),
        }
        for x, y in GRID[:8]
    ]
    records.append({**records[0], "arm": "confirm", "compute_to_target": 60.0})  # its fresh-seed re-run
    records.append({**records[1], "strategy": "rlep"})  # another strategy: not a model's
    out = null_models.skill_from_report(
        {"configurations": records, "reference_mu": 0.85, "models": []}, models=["thm45", "extended_lr"]
    )
    table = null_models.configuration_table_from_records(records)
    assert len(table) == 8
    first = table[(table["x"] == records[0]["x"]) & (table["y"] == records[0]["y"])].iloc[0]
    assert first["seeds"] == 8 and first["log_c"] == pytest.approx(
        (math.log(records[0]["compute_to_target"]) + math.log(60.0)) / 2
    )
    assert out["null_models"]["constant"]["n"] == 8
    assert [m["model"] for m in out["models"]] == ["thm45"]  # one learning rate: no extended_lr
    assert all(m["loco"]["n"] == 8 and set(m["skill"]["against"]) == set(null_models.NULLS) for m in out["models"])


SWEEP = [
    {"lr": 2.5e-5, "compute_to_target": 60.0, "censored": False, "budget": 100.0},
    {"lr": 5e-5, "compute_to_target": 38.0, "censored": False, "budget": 90.0},
    {"lr": 1e-4, "compute_to_target": 35.0, "censored": False, "budget": 57.0},
    {"lr": 2e-4, "compute_to_target": 52.0, "censored": True, "budget": 52.0},
]
OPTIMUM = {"lr": 7.9e-5, "compute": 34.0}


def test_a_probe_that_predicts_on_policy_claims_nothing_beyond_its_sweep():
    o = {
        "x": 1.0,
        "y": 1.0,
        "lr": 7.9e-5,
        "relative_compute": 1.0,
        "compute": 34.0,
        "lr_sweep": SWEEP,
        "lr_optimum": OPTIMUM,
    }
    out = null_models.probe_against_sweep(o, gradient_units=45.5)
    assert not out["claims"] and out["sweep_units"] == pytest.approx(299.0)
    assert "the answer of the sweep alone" in out["reason"] and "45.5 units" in out["reason"]


def test_a_probe_replay_point_claims_only_where_its_saving_pays_for_its_gradient_phase():
    o = {
        "x": 4.0,
        "y": 2.0,
        "lr": 7.9e-5,
        "relative_compute": 0.5,
        "compute": 17.0,
        "lr_sweep": SWEEP,
        "lr_optimum": OPTIMUM,
    }
    assert null_models.probe_against_sweep(o, gradient_units=10.0)["claims"]  # 10 + 17 < 34
    out = null_models.probe_against_sweep(o, gradient_units=45.5)  # 45.5 + 17 > 34: the sweep alone is cheaper
    assert not out["claims"] and out["probe_path"] == pytest.approx(62.5) and out["sweep_path"] == 34.0
    assert not null_models.probe_against_sweep({**o, "lr_sweep": None, "lr_optimum": None})[
        "claims"
    ]  # no sweep: no claim


def test_a_probe_arm_on_policy_is_the_sweep_s_answer_and_a_replay_arm_is_paired_with_tuned_on_policy():
    rows = []
    for trial, (x, y, lr, arm, c) in enumerate(
        [
            (1.0, 1.0, 5e-5, "sampler", 40.0),
            (1.0, 1.0, 1e-4, "sampler", 30.0),
            (1.0, 1.0, 8e-5, "probe", 31.0),
            (4.0, 2.0, 8e-5, "probe", 24.0),
        ]
    ):
        for seed in range(4):
            rows.append(
                {
                    "trial_number": trial,
                    "seed": seed,
                    "x": x,
                    "y": y,
                    "lr": lr,
                    "arm": arm,
                    "strategy": "uniform",
                    "censored": 0,
                    "compute_to_target": c * (1 + 0.02 * seed),
                }
            )
    runs = pd.DataFrame(rows)
    on = null_models.probe_arm_against_on_policy(runs, 2)
    assert not on["claims"] and "what sweeping on-policy's lr and staying on-policy gives" in on["reason"]
    replay = null_models.probe_arm_against_on_policy(runs, 3)
    assert replay["on_policy_trial"] == 1 and replay["ratio"] == pytest.approx(0.8) and replay["claims"]


def test_the_report_gives_every_model_its_skill_and_a_section_that_says_which_null_it_did_not_beat(study):
    from analysis.report import analyze_data
    from analysis.sections import tables

    data = study({(1.0, 1.0): 1.0, (2.0, 2.0): 1.05, (4.0, 2.0): 1.1, (8.0, 4.0): 1.4}, seeds=2, steps=50)
    result, _, _ = analyze_data(data, whatif_mu=(), bootstrap=2)
    assert set(result.null_models) == set(null_models.NULLS)
    assert result.models and all(set(m.skill.against) == set(null_models.NULLS) for m in result.models)
    section = tables(result).split("## Predictors against null models")[1].split("\n## ")[0]
    for m in result.models:
        assert f"`{m.model}`: {m.skill.words}." in section
        assert m.skill.selected or m.skill.not_beaten
    assert "One learning rate: lr-only is the constant here." in section


def test_a_study_of_several_losses_fits_the_models_and_nulls_to_each_loss_apart(study):
    """Each loss's runs with the baseline's: a section per loss says which model beats the nulls on which loss."""
    import dataclasses

    import pandas as pd

    from analysis.report import analyze_data
    from analysis.result import Analysis
    from analysis.sections import tables

    grid = {(1.0, 1.0): 1.0, (2.0, 2.0): 1.05, (4.0, 2.0): 1.1, (8.0, 4.0): 1.4}
    clip, other = study(grid, seeds=2, steps=50), study({**grid, (2.0, 2.0): 0.9, (8.0, 4.0): 2.0}, seeds=2, steps=50)
    clip.runs["objective"] = "ppo_clip"
    moved = other.runs[~other.runs["baseline"]].assign(
        objective="oapl", trial_number=lambda r: r["trial_number"] + 10, run_id=lambda r: "oapl-" + r["run_id"]
    )
    curves = other.curves[other.curves["run_id"].isin(other.runs.loc[~other.runs["baseline"], "run_id"])]
    data = dataclasses.replace(
        clip,
        runs=pd.concat([clip.runs, moved], ignore_index=True),
        curves=pd.concat([clip.curves, curves.assign(run_id="oapl-" + curves["run_id"])], ignore_index=True),
    )
    result, _, _ = analyze_data(data, whatif_mu=(), bootstrap=2)
    assert [o.loss_name for o in result.by_loss] == ["oapl", "ppo_clip"]
    for o in result.by_loss:
        assert o.n_runs == 4 * 2 and o.n_configurations == 4  # its 3 arms and the baseline, 2 seeds each
        assert o.models and all(m.skill is not None for m in o.models) and set(o.null_models) == set(null_models.NULLS)
    section = tables(result).split("## Models per loss")[1].split("\n## ")[0]
    assert "| `oapl` | 8 | 4 |" in section and "| `ppo_clip` | 8 | 4 |" in section
    # written and read back with the rest of analysis.json; a study of one loss writes no such block
    assert Analysis.from_json(result.to_json()).by_loss == result.by_loss
    one, _, _ = analyze_data(clip, whatif_mu=(), bootstrap=2)
    assert one.by_loss is None and "by_loss" not in one.to_json()
    # where the study ran OAPL on fresh rollouts too, that run is OAPL's anchor at y 1, x 1 in place of GRPO's
    fresh = other.runs[other.runs["baseline"]].assign(
        objective="oapl", baseline=False, trial_number=99, run_id=lambda r: "oapl-" + r["run_id"]
    )
    anchored = dataclasses.replace(data, runs=pd.concat([data.runs, fresh], ignore_index=True))
    anchored = dataclasses.replace(
        anchored,
        curves=pd.concat(
            [
                data.curves,
                other.curves[other.curves["run_id"].isin(other.runs.loc[other.runs["baseline"], "run_id"])].assign(
                    run_id=lambda c: "oapl-" + c["run_id"]
                ),
            ],
            ignore_index=True,
        ),
    )
    both, _, _ = analyze_data(anchored, whatif_mu=(), bootstrap=2)
    oapl, clip_only = both.by_loss
    assert oapl.n_runs == 4 * 2 and clip_only.n_runs == 4 * 2  # not OAPL's 8 and GRPO's baseline's 2 besides


def test_in_a_study_of_several_losses_the_loss_labels_each_configuration():
    import pandas as pd

    from analysis.data import strategy_shown, variants
    from workbench.verdicts import knob_label

    runs = pd.DataFrame(
        {
            "strategy": ["uniform", "uniform", "prioritized"],
            "strategy_knobs": [{}, {}, {"alpha": "0.5"}],
            "objective": ["ppo_clip", "oapl", "ppo_clip"],
        }
    )
    out = variants(runs)
    assert list(out["variant"]) == ["loss=ppo_clip", "loss=oapl", "loss=ppo_clip"]
    assert knob_label({"y": 2.0, "x": 4.0, **strategy_shown(out.iloc[1])}) == "x=4 y=2 loss=oapl"
    assert strategy_shown(out.iloc[2]) == {"strategy": "prioritized", "loss": "ppo_clip"}
    one = variants(runs.assign(objective="ppo_clip"))  # one loss: no label, as before
    assert list(one["variant"]) == ["", "", ""] and strategy_shown(one.iloc[0]) == {}
