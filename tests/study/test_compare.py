"""The study summary's comparisons when lr is searched: the best replay configuration is also set against on-policy
at its own learning rate and at on-policy's best (workbench.study.compare), read from a real SQLite Optuna storage."""

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import create_trial

from workbench.study import attrs, compare, summary

SPACE = {
    "replay.ratio": CategoricalDistribution([1, 2]),
    "x": CategoricalDistribution([1, 2]),
    "lr": CategoricalDistribution([1e-5, 1e-4]),
}


def _study(tmp_path, table):
    study = optuna.create_study(study_name="lr", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    for i, ((y, x, lr), c) in enumerate(table.items()):
        per_seed = [
            {"seed": s, "compute_to_target": c * (1 + 0.02 * s), "total_units": 150.0, "censored": 0} for s in range(4)
        ]
        study.add_trial(
            create_trial(
                params={"replay.ratio": y, "x": x, "lr": lr},
                distributions=SPACE,
                value=c,
                user_attrs={attrs.PER_SEED: per_seed, attrs.BASELINE: i == 0},
            )
        )
    return study


def test_a_win_from_the_learning_rate_alone_is_shown_as_such(tmp_path):
    # on-policy 100 at lr 1e-5 (the baseline) and 50 at 1e-4; replay 60 at 1e-4: "40% saved" against the baseline.
    study = _study(tmp_path, {(1, 1, 1e-5): 100.0, (1, 1, 1e-4): 50.0, (2, 2, 1e-4): 60.0, (2, 2, 1e-5): 90.0})
    rows = compare.comparison(study)
    lead = compare.leader(rows)
    assert lead.arm.knobs == {"replay.ratio": 2, "x": 2, "lr": 1e-4}  # on-policy at 1e-4 is not a replay configuration
    text = "\n".join(summary.summary_lines(study))
    assert "resolved: less compute (40% saved" in text
    assert "against on-policy at the same lr (trial 1, lr 0.0001): 1.2" in text
    assert "against on-policy at its best lr (trial 1, lr 0.0001; a selection estimate too): 1.2" in text
    assert "resolved: more compute (x1.20" in text


def test_no_matched_lines_when_on_policy_ran_at_one_learning_rate(tmp_path):
    study = _study(tmp_path, {(1, 1, 1e-5): 100.0, (2, 2, 1e-4): 60.0})
    text = "\n".join(summary.summary_lines(study))
    assert "at the same lr" not in text and "matched learning rate" not in text
    bottom = summary.closing_lines(study)[0]
    assert "the compute of on-policy at another lr (1e-05: a saving may be the learning rate's)" in bottom


def test_seeds_censored_on_both_sides_give_no_verdict_whatever_their_totals(tmp_path):
    # Measured on skill_greedy_fresh: no run reached the target, the totals differed by float rounding (100.0 against
    # 100.0000001 units), and the summary read "resolved: more compute (x1.00)".
    study = optuna.create_study(study_name="cens", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    for i, (lr, total) in enumerate([(1e-5, 100.0), (1e-4, 100.0 + 1e-7)]):
        per_seed = [
            {"seed": s, "compute_to_target": total, "total_units": total * (1 + 1e-9 * s), "censored": 1}
            for s in range(4)
        ]
        study.add_trial(
            create_trial(
                params={"replay.ratio": 1 + i, "x": 1 + i, "lr": lr},
                distributions=SPACE,
                value=total,
                user_attrs={attrs.PER_SEED: per_seed, attrs.BASELINE: i == 0},
            )
        )
    rows = compare.comparison(study)
    assert rows[1].verdict == compare.NOTHING_MEASURED
    text = "\n".join(summary.summary_lines(study))
    assert "resolved" not in text and compare.NOTHING_MEASURED in text
    # one seed that did reach the target on one side: one informative pair, a bound, and no estimate from it alone
    arm, base = compare.arms(study)[1], compare.arms(study)[0]
    arm.per_seed[0] = {**arm.per_seed[0], "compute_to_target": 40.0, "censored": 0}
    ratio = arm.ratio(base)
    assert (ratio.n, ratio.one_censored, ratio.both_censored) == (1, 1, 3)
    verdict = compare.paired_verdict(arm, base, ratio)
    assert verdict == (
        f"{compare.NO_RATIO}; seed by seed, more compute on 0 of 4 seeds, less on 1, 3 unordered (sign test p = 1):"
        " unresolved"
    )
    assert "1 informative pair, 1 of them censored on one side; 3 both-censored left out" in ratio.fmt()


def test_the_bottom_line_reads_a_saving_again_against_on_policy_at_its_best_lr(tmp_path):
    # replay at the baseline's lr saves 20% against it, and on-policy at 1e-4 is faster still: the claim rests on
    # the comparison with on-policy at its best lr, where it costs more.
    study = _study(tmp_path, {(1, 1, 1e-5): 100.0, (1, 1, 1e-4): 70.0, (2, 2, 1e-5): 80.0})
    bottom = summary.closing_lines(study)[0]
    assert "0.80x" in bottom and "resolved, 20% saved" in bottom
    assert "against on-policy at its best lr (0.0001), 1.14x" in bottom
    assert "more compute there, so the saving is the learning rate's" in bottom
    # where the saving is already against on-policy at its best lr, nothing is added
    (tmp_path / "b").mkdir()
    lone = _study(tmp_path / "b", {(1, 1, 1e-5): 100.0, (1, 1, 1e-4): 120.0, (2, 2, 1e-5): 80.0})
    assert "at its best lr" not in summary.closing_lines(lone)[0]
