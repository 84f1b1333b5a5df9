"""Skill or sharpness (`analysis.sharpness`), on synthetic studies: two arms that differ only in how fast they
sharpen, and two that differ in what they learn."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.resolution import by_reading
from analysis.report import analyze_data
from analysis.result import dumps
from analysis.sections import sharpness_section, tables
from analysis.sharpness import best_temperature, entropy_at_evaluations, equal_entropy, skill_or_sharpness
from workbench import tracking

from support.analysis_result import analysis

STEPS = 150
"""Optimizer steps of every run, one compute unit each; an evaluation every 5."""
EVAL_EVERY, SAMPLE_EVERY = 5, 3
"""Evaluations every this many steps; pass@1 at each temperature at every third one (as `eval.pass_k_every`)."""
SEEDS = range(6)
TEMPERATURES = (0.5, 1.0)


def demo_prob(h, skill: float = 1.0):
    """The demonstrations' probability as a function of entropy alone (times `skill`)."""
    return 0.9 * skill * np.exp(-2.5 * h)


def greedy(units, learn: float):
    """Greedy accuracy rises with compute (not with entropy); `learn` is the arm's speed."""
    return 0.3 + 0.45 * (1 - np.exp(-units * learn / 50.0))


def study(arm: str) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """On-policy (trial 0) and one arm (trial 1), paired seeds. `arm`: `sharper` lowers its entropy ~1.7x faster
    per unit of compute and knows nothing more (its demonstrations' probability is the same function of entropy,
    its greedy accuracy the same function of compute); `skilled` sharpens at the baseline's pace but reads 1.35x the
    demonstrations' probability at every entropy and learns greedy accuracy 1.6x faster. Returns runs, curves
    (units, greedy accuracy, demo_prob, pass@1 at each temperature where sampled) and the training steps' entropy."""
    rng = np.random.default_rng(7)
    runs, curves, entropy = [], [], []
    for trial, baseline in ((0, True), (1, False)):
        for seed in SEEDS:
            shared = np.random.default_rng(100 + seed)  # what seed s gives both arms
            pace, learn = math.exp(0.1 * shared.standard_normal()), math.exp(0.1 * shared.standard_normal())
            pace *= math.exp(0.03 * rng.standard_normal())
            learn *= math.exp(0.05 * rng.standard_normal())
            tau = 60.0 * pace / (1.7 if trial and arm == "sharper" else 1.0)
            skill = 1.35 if trial and arm == "skilled" else 1.0
            learn *= 1.6 if trial and arm == "skilled" else 1.0
            run_id = f"t{trial}s{seed}"
            runs.append({"run_id": run_id, "trial_number": trial, "seed": seed, "baseline": baseline, "arm": "sampler"})
            steps = np.arange(STEPS + 1, dtype=float)
            h = 0.2 + np.exp(-steps / tau)
            entropy += [
                {"run_id": run_id, "step": int(s), "entropy": float(v)}
                for s, v in zip(steps, h + 0.01 * rng.standard_normal(len(steps)))
            ]
            for i, step in enumerate(range(0, STEPS + 1, EVAL_EVERY)):
                row = {
                    "run_id": run_id,
                    "step": step,
                    "units": float(step),
                    "accuracy": float(greedy(step, learn) + 0.008 * rng.standard_normal()),
                    "demo_prob": float(demo_prob(h[step], skill) * math.exp(0.01 * rng.standard_normal())),
                }
                for t in TEMPERATURES:  # sampling at T costs accuracy in proportion to T times the entropy
                    value = row["accuracy"] - 0.25 * t * h[step]
                    row[tracking.CURVE_MEAN_AT_K_AT_T.format(t)] = (
                        value if i % SAMPLE_EVERY == 0 or step == STEPS else None
                    )
                curves.append(row)
    curves = pd.DataFrame(curves)
    curves["reading"] = curves["demo_prob"]
    return pd.DataFrame(runs), curves, pd.DataFrame(entropy)


TARGET = 0.17
"""The study's target on the demonstrations' probability (entropy ~0.67 on `demo_prob`'s curve)."""


def read(arm: str) -> dict:
    runs, curves, entropy = study(arm)
    readings = by_reading(curves, runs, "demo_prob", TARGET, "interpolated", gain_fraction=0.7)
    return skill_or_sharpness(curves, entropy, runs, "demo_prob", "interpolated", readings)


def test_arms_that_differ_only_in_sharpness_read_the_same_at_equal_entropy_though_one_saves_compute():
    runs, curves, entropy = study("sharper")
    saving = next(
        r
        for r in by_reading(curves, runs, "demo_prob", TARGET, "interpolated", 0.7)
        if r["reading"] == "demo_prob" and not r["baseline"]
    )
    assert saving["ratio"] < 0.7 and saving["ratio_ci_high"] < 1  # on the study's curve: a resolved "saving"
    h, source = entropy_at_evaluations(curves, entropy)
    assert source == "training steps' fresh rollouts"
    (same,) = equal_entropy(curves, h, runs, "demo_prob")
    assert abs(same["difference"]) < 0.005 and same["low"] < 0 < same["high"] and same["direction"] == 0
    assert same["seeds"] == len(SEEDS) and same["seeds_unread"] == 0
    low, high = same["entropy_range"]
    assert 0.25 < low < 0.35 and high > 1.1  # the range both arms of a seed cover: the baseline's end to the start
    # at equal entropy the sharper arm has had less compute, so less greedy accuracy (the finding)
    (greedy_row,) = equal_entropy(curves, h, runs, "accuracy")
    assert greedy_row["high"] < 0 and greedy_row["direction"] == -1


def test_arms_that_differ_in_skill_differ_at_equal_entropy():
    runs, curves, entropy = study("skilled")
    h, _ = entropy_at_evaluations(curves, entropy)
    (row,) = equal_entropy(curves, h, runs, "demo_prob")
    assert row["low"] > 0.01 and row["direction"] == 1
    expected = float(np.mean(demo_prob(np.linspace(row["entropy_range"][0], row["entropy_range"][1], 25), 1.35 - 1.0)))
    assert row["difference"] == pytest.approx(expected, rel=0.15)  # 0.35x the baseline's, averaged over the range


def test_the_verdict_names_sharpness_and_skill():
    sharper = read("sharper")["comparisons"][0]
    assert sharper["verdict"] == "sharpness"
    assert sharper["study_curve"]["ratio_ci_high"] < 1
    assert sharper["greedy"]["ratio_ci_low"] < 1 < sharper["greedy"]["ratio_ci_high"]
    assert "vanishes where entropy is held equal" in sharper["why"]
    skilled = read("skilled")["comparisons"][0]
    assert skilled["verdict"] == "skill"
    assert skilled["greedy"]["ratio_ci_high"] < 1 and "on greedy accuracy it saves too" in skilled["why"]


def test_a_ratio_of_censored_runs_is_a_bound_and_no_verdict():
    """A target no run reaches: the study's ratio is of total computes, so neither skill nor sharpness is named."""
    runs, curves, entropy = study("sharper")
    readings = by_reading(curves, runs, "demo_prob", 0.95, "interpolated", gain_fraction=0.7)
    (c,) = skill_or_sharpness(curves, entropy, runs, "demo_prob", "interpolated", readings)["comparisons"]
    assert c["study_curve"]["bound"] and c["verdict"] == "unresolved" and "censored" in c["why"]
    assert not c["greedy"]["bound"]  # greedy accuracy keeps its own, reachable target


def test_each_arm_is_read_at_its_best_temperature():
    runs, curves, _ = study("sharper")
    rows = {r["trial_number"]: r for r in best_temperature(curves, runs, 0.55, "interpolated")}
    for r in rows.values():
        assert set(r["by_temperature"]) == {"0", "0.5", "1"}
        assert r["best_temperature"] == 0.0  # sampling costs accuracy in this study: greedy decoding is best
        assert r["by_temperature"]["0"] < r["by_temperature"]["0.5"] < r["by_temperature"]["1"]
    # the sharper arm loses less by sampling (its entropy is lower), but at each arm's best there is no saving
    assert rows[1]["by_temperature"]["1"] < rows[0]["by_temperature"]["1"]
    assert rows[1]["ratio_ci_low"] < 1 < rows[1]["ratio_ci_high"] and rows[1]["baseline_best_temperature"] == 0.0
    # where a temperature reaches the target first, it is that arm's best
    faster = curves.assign(
        **{tracking.CURVE_MEAN_AT_K_AT_T.format(0.5): curves[tracking.CURVE_MEAN_AT_K_AT_T.format(0.5)] + 0.3}
    )
    rows = {r["trial_number"]: r for r in best_temperature(faster, runs, 0.55, "interpolated")}
    assert rows[0]["best_temperature"] == rows[1]["best_temperature"] == 0.5


def test_the_held_out_samples_entropy_is_read_where_every_evaluation_logged_it():
    runs, curves, entropy = study("sharper")
    h, source = entropy_at_evaluations(curves.assign(**{tracking.CURVE_SAMPLE_ENTROPY: 0.5}), entropy)
    assert source == "held-out samples" and (h == 0.5).all()
    # otherwise the training steps' entropy, smoothed over 5 steps, at each evaluation's step
    h, _ = entropy_at_evaluations(curves, entropy)
    one = entropy[entropy["run_id"] == "t0s0"].set_index("step")["entropy"]
    at_50 = h[(curves["run_id"] == "t0s0") & (curves["step"] == 50)].iloc[0]
    assert at_50 == pytest.approx(one.loc[48:52].mean())
    assert entropy_at_evaluations(curves, pd.DataFrame())[1] == "none"


def test_a_store_without_entropy_or_temperatures_gets_what_can_be_read_and_says_what_is_missing():
    runs, curves, _ = study("sharper")
    curves = curves.drop(columns=[tracking.CURVE_MEAN_AT_K_AT_T.format(t) for t in TEMPERATURES])
    readings = by_reading(curves, runs, "demo_prob", TARGET, "interpolated", gain_fraction=0.7)
    result = skill_or_sharpness(curves, pd.DataFrame(), runs, "demo_prob", "interpolated", readings)
    assert result["temperatures"] == [] and result["entropy_source"] == "none"
    assert any("eval.temperatures" in m for m in result["missing"]) and any("entropy" in m for m in result["missing"])
    (c,) = result["comparisons"]
    assert c["verdict"] == "unresolved" and c["equal_entropy"] == []
    assert set(c["best_temperature"]["by_temperature"]) == {"0"}  # greedy accuracy alone


def test_the_report_section_gives_every_reading_and_the_verdict_in_words():
    lines = "\n".join(sharpness_section(analysis({"configurations": [], "skill_or_sharpness": read("sharper")})))
    assert lines.startswith("## Skill or sharpness")
    row = next(line for line in lines.splitlines() if line.startswith("| 1 |"))
    assert row.endswith("| **sharpness** |") and "greedy / greedy" in row
    assert "- Trial 1 (-): **sharpness**: the saving vanishes where entropy is held equal" in lines
    assert "| 0 (on-policy) |" in lines and "T 0.5" in lines  # compute to target at each temperature
    assert "Not logged" not in lines
    missing = sharpness_section(
        analysis({"configurations": [], "skill_or_sharpness": read("sharper") | {"missing": ["the sampling entropy"]}})
    )
    assert "Not logged by these runs: the sampling entropy." in missing


def test_the_report_reads_skill_or_sharpness_from_a_study(study):
    """`analyze_data` on an in-memory study (training-step entropy, no `eval.temperatures`): the section is there
    with what can be read, and says what is missing."""
    result, _, _ = analyze_data(study(metric="demo_prob"), whatif_mu=[], bootstrap=0)
    s = result.skill_or_sharpness
    assert s["entropy_source"] == "training steps' fresh rollouts" and s["temperatures"] == []
    assert {c["trial_number"] for c in s["comparisons"]} == {1, 2}
    assert all(c["verdict"] in ("skill", "sharpness", "unresolved") and c["why"] for c in s["comparisons"])
    text = tables(result)
    assert (
        "## Skill or sharpness" in text
        and "Not logged by these runs: sampled pass@1 at other decoding temperatures" in text
    )
    dumps(result)  # analysis.json holds it


def test_the_report_also_reads_skill_or_sharpness_against_on_policy_at_its_best_lr(study):
    """On-policy at two learning rates: the readings are repeated against the faster one (a saving against the
    default lr may be the learning rate's), for the replay arms only."""
    data = study(grid={(1.0, 1.0): 1.0, (4.0, 2.0): 1.1, (2.0, 1.0): 0.8}, metric="demo_prob")
    fast = data.runs["trial_number"] == 2  # run at y 1: on-policy at twice the lr, learning 1.25x faster
    data.runs.loc[fast, ["x", "capacity", "lr"]] = [1.0, data.runs["batch_size"].iloc[0], 5e-5]
    result, _, _ = analyze_data(data, whatif_mu=[], bootstrap=0)
    tuned = result.skill_or_sharpness_tuned
    assert (tuned["baseline_trial"], tuned["baseline_lr"], tuned["bounded"]) == (2, 5e-5, False)
    assert [c["trial_number"] for c in tuned["comparisons"]] == [1]
    assert tuned["comparisons"][0]["study_curve"]["ratio"] > 1.2  # slower than the tuned baseline, ~1.1 / 0.8
    text = tables(result)
    assert (
        "Against on-policy at its best learning rate (lr 5e-05, trial 2; at an end of the learning rates tried" in text
    )
    dumps(result)
