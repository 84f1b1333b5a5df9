"""The paper's laws (analysis.laws) on a study whose compute-to-target is known by hand."""

import math

import pandas as pd
import pytest

from analysis import laws
from analysis.data import StudyData, compute_to_target

STEPS = {1: 10, 2: 14, 4: 22}
"""Steps each replay ratio needs to reach the target: the learning curve is the same at every mu (synchronous)."""


def _study(steps=STEPS, seeds=(0, 1, 2), x=8.0, jitter=0) -> StudyData:
    """B = 1: a step trains one rollout and generates 1/y; accuracy rises linearly and reaches 0.8 at step S(y)."""
    runs, curves = [], []
    for y, s_needed in steps.items():
        for seed in seeds:
            run_id = f"y{y}-s{seed}"
            need = s_needed + jitter * seed
            runs.append(
                {
                    "run_id": run_id,
                    "arm": "sampler",
                    "strategy": "uniform",
                    "x": x,
                    "y": float(y),
                    "seed": seed,
                    "baseline": y == 1,
                }
            )
            for step in range(0, 2 * need + 1):
                curves.append(
                    {
                        "run_id": run_id,
                        "batch_size": 1,
                        "step": step,
                        "accuracy": 0.5 + 0.3 * step / need,
                        "train_rollouts": float(step),
                        "gen_rollouts": step / y,
                    }
                )
    curves = pd.DataFrame(curves)
    curves["reading"] = curves["accuracy"]
    runs = pd.DataFrame(runs).merge(compute_to_target(curves, 0.8, 1.0, "first"), on="run_id")
    return StudyData("hand", 1.0, 0.8, "first", runs, curves, pd.DataFrame(), {})


def _by_hand(mu: float) -> dict[float, float]:
    """Compute to target at mu: S(y) steps at (1 + mu/y)/(1 + mu) units each."""
    return {y: s * (1 + mu / y) / (1 + mu) for y, s in STEPS.items()}


def test_f1_reaccounts_one_grid_at_every_mu_as_computed_by_hand():
    v = laws.f1_sqrt_mu(_study())
    assert [r["mu"] for r in v.rows] == list(laws.MUS)
    for r in v.rows:
        hand = _by_hand(r["mu"])
        best = min(hand, key=hand.get)
        assert r["y"] == best
        assert r["compute_to_target"] == pytest.approx(hand[best], rel=1e-9)
    # y_opt: 1 at mu 0.5 and 1, 2 at mu 2 and 5.28, 4 at mu 10 (by hand above): it rises with mu
    assert [r["y"] for r in v.rows] == [1, 1, 2, 2, 4]
    assert v.numbers["slope"] > 0
    assert v.verdict in ("holds", "falsified", "unresolved")


def test_f1_is_falsified_when_the_optimum_never_moves():
    v = laws.f1_sqrt_mu(_study(steps={1: 10, 2: 30, 4: 90}, jitter=1))  # replay far too slow at every mu
    assert {r["y"] for r in v.rows} == {1}
    assert v.verdict == "falsified" and "does not move" in v.reason


def test_f1_on_a_grid_of_one_replay_ratio_is_not_testable():
    # on-policy and replay at y 2 only (the quickstart's grid): the optimum can only switch once, whatever the law
    v = laws.f1_sqrt_mu(_study(steps={1: 10, 2: 14}))
    assert v.verdict == "not testable" and "one ratio (y 2)" in v.reason and not v.rows


def test_f1_where_the_law_cannot_move_on_the_grid_is_not_testable_not_falsified_by_float_noise():
    # replay at y 4 so fast that it is the optimum at every mu; the sqrt law (a large c) sits at y 4 as well. Both
    # slopes are 0 up to float noise (+-1e-17), which a strict comparison read as "falsified".
    v = laws.f1_sqrt_mu(_study(steps={1: 30, 2: 12, 4: 5}, jitter=1))
    assert {r["y"] for r in v.rows} == {4}
    assert v.numbers["slope"] == v.numbers["law"] == v.numbers["slope_low"] == v.numbers["slope_high"] == 0
    assert v.verdict == "not testable" and "stays at y 4" in v.reason


def test_f2_finds_the_interior_minimum_and_checks_it_against_the_law():
    v = laws.f2_u_shape(_study(steps={1: 10, 2: 11, 4: 30}, jitter=1), rho=0.3, mus=(5.28,))
    (row,) = v.rows
    assert row["y_best"] == 2 and row["interior_share"] == 1.0
    assert row["y_predicted"] == pytest.approx(math.sqrt(5.28 / 0.3))  # 4.2: twice 2 or more away
    assert v.verdict == "falsified" and "predicted 4.20" in v.reason
    assert laws.f2_u_shape(_study(steps={1: 10, 2: 11, 4: 30}, jitter=1), rho=2.0, mus=(5.28,)).verdict == "holds"


def test_f2_monotone_where_the_law_puts_the_minimum_inside_the_grid_is_falsified():
    v = laws.f2_u_shape(_study(steps={1: 10, 2: 30, 4: 90}, jitter=1), rho=2.0, mus=(5.28,))
    assert v.verdict == "falsified" and "monotone" in v.reason
    # the same data where the law itself puts the minimum at the grid's edge: no contradiction
    assert (
        laws.f2_u_shape(_study(steps={1: 10, 2: 30, 4: 90}, jitter=1), rho=100.0, mus=(5.28,)).verdict == "unresolved"
    )


def _lr_study(best_lr: dict[float, float], seeds=(0, 1, 2)) -> StudyData:
    """Every (y, lr) cell of a grid at x 8: compute-to-target is smallest at best_lr[y] and grows with
    |log(lr / best)|; a little seed noise."""
    runs = []
    for y, best in best_lr.items():
        for lr in (1e-5, 2e-5, 4e-5):
            for seed in seeds:
                c = 20 * y**0.3 * (1 + abs(math.log(lr / best))) * (1 + 0.01 * seed)
                runs.append(
                    {
                        "run_id": f"{y}-{lr}-{seed}",
                        "arm": "sampler",
                        "strategy": "uniform",
                        "x": 8.0,
                        "y": float(y),
                        "lr": lr,
                        "seed": seed,
                        "baseline": False,
                        "compute_to_target": c,
                        "censored": 0,
                        "total_units": 200.0,
                        "low_units": c,
                        "high_units": c,
                    }
                )
    return StudyData("lr", 1.0, 0.8, "first", pd.DataFrame(runs), pd.DataFrame(), pd.DataFrame(), {})


def test_f3_the_best_learning_rate_falling_with_y_holds_and_a_constant_one_is_falsified(monkeypatch):
    # compute-to-target read straight from the runs (no curves to re-account in this synthetic study)
    monkeypatch.setattr(laws, "reaccount", lambda data, mu: data)
    v = laws.f3_lr_falls_with_y(_lr_study({1: 4e-5, 2: 2e-5, 4: 1e-5}))
    assert v.verdict == "holds" and v.numbers["slope"] == pytest.approx(-1.0)
    assert [r["lr_best"] for r in v.rows] == pytest.approx([4e-5, 2e-5, 1e-5])
    v = laws.f3_lr_falls_with_y(_lr_study({1: 2e-5, 2: 2e-5, 4: 2e-5}))
    assert v.verdict == "falsified" and v.numbers["slope"] == 0
    assert laws.f3_lr_falls_with_y(_study()).verdict == "not testable"  # one learning rate


def _two_lr_study(seeds=range(6)) -> StudyData:
    """On-policy and (16, 4) slow; (8, 2) fast at both of two learning rates, which of the two wins changing from seed
    to seed: (8, 2) is the optimum in every draw, at lr 1e-5 in some and at 2e-5 in the others."""
    runs = []
    for (x, y), lrs in {
        (1.0, 1.0): {1e-5: 100.0},
        (8.0, 2.0): {1e-5: 50.0, 2e-5: 50.0},
        (16.0, 4.0): {1e-5: 100.0},
    }.items():
        for lr, base in lrs.items():
            for seed in seeds:
                wobble = 1 + 0.05 * (1 if (seed + (lr > 1.5e-5)) % 2 else -1)
                c = base * wobble
                runs.append(
                    {
                        "run_id": f"{x}-{y}-{lr}-{seed}",
                        "arm": "sampler",
                        "strategy": "uniform",
                        "x": x,
                        "y": y,
                        "lr": lr,
                        "seed": seed,
                        "baseline": (x, y) == (1.0, 1.0),
                        "compute_to_target": c,
                        "censored": 0,
                        "total_units": 200.0,
                        "low_units": c,
                        "high_units": c,
                    }
                )
    return StudyData("two-lr", 1.0, 0.8, "first", pd.DataFrame(runs), pd.DataFrame(), pd.DataFrame(), {})


def test_f1_share_of_draws_adds_up_an_optimum_over_its_learning_rates(monkeypatch):
    # keyed by (x, y) while the compared configurations include lr, the share at lr 2e-5 overwrote the one at 1e-5:
    # (8, 2), optimal in every draw, read about 50%
    monkeypatch.setattr(laws, "reaccount", lambda data, mu: data)
    v = laws.f1_sqrt_mu(_two_lr_study(), n_boot=400)
    for r in v.rows:
        assert r["optimum_share"] == {"8,2": pytest.approx(1.0)}
        assert sum(r["optimum_share"].values()) <= 1 + 1e-9


CLOSE = (0.9, 1.3, 0.92, 1.2)
"""A rival's compute per seed relative to the optimum's: dearer on the whole (geometric mean 1.07), cheaper on seeds
0 and 2, so the bootstrap draws that favour those seeds move the optimum."""


def _optimum_moving(y_opt: list[float], close: dict[int, float] | None = None, seeds=(0, 1, 2, 3)) -> StudyData:
    """Compute-to-target chosen so that the optimum at each mu of `laws.MUS` is y_opt[i]: at mu index i, y_opt[i]
    costs 50 on every seed, a rival `close[i]` 50 x `CLOSE` per seed and every other y 100 (the study read straight
    from its runs: one (x, y) per y, x 2y)."""
    close = close or {}
    runs = []
    for i, mu in enumerate(laws.MUS):
        for y in (1.0, 2.0, 4.0):
            for seed in seeds:
                c = 50.0 if y == y_opt[i] else 50.0 * CLOSE[seed] if y == close.get(i) else 100.0
                runs.append(
                    {
                        "run_id": f"{mu}-{y}-{seed}",
                        "mu": mu,
                        "arm": "sampler",
                        "strategy": "uniform",
                        "x": 2 * y if y > 1 else 1.0,
                        "y": float(y),
                        "seed": seed,
                        "baseline": y == 1,
                        "compute_to_target": c,
                        "censored": 0,
                        "total_units": 200.0,
                        "low_units": c,
                        "high_units": c,
                    }
                )
    return StudyData("moving", 1.0, 0.8, "first", pd.DataFrame(runs), pd.DataFrame(), pd.DataFrame(), {})


def _by_mu(data: StudyData, mu: float) -> StudyData:
    return StudyData(
        data.name,
        mu,
        data.target,
        data.estimator,
        data.runs[data.runs["mu"] == mu].drop(columns="mu"),
        data.curves,
        data.entropy,
        data.ages,
    )


def test_f1_on_a_1_2_4_grid_cannot_separate_the_sqrt_law_from_a_linear_one(monkeypatch):
    # the reading: y_opt 1, 2, 4, 4, 4 at mu 0.5 .. 10 fits a linear law exactly (c = 2, capped at 4) and
    # the sqrt law's grid slope too; the verdict must not be "holds"
    monkeypatch.setattr(laws, "reaccount", _by_mu)
    v = laws.f1_sqrt_mu(_optimum_moving([1.0, 2.0, 4.0, 4.0, 4.0], close={1: 1.0, 2: 2.0}), n_boot=400)
    assert [r["y"] for r in v.rows] == [1, 2, 4, 4, 4]
    e = v.numbers["exponent"]
    assert v.verdict == "cannot separate" and not e["separates"]
    assert 0.5 in e["consistent"] and 1.0 in e["consistent"]
    assert e["best_fit"][0] <= 1.0 <= e["best_fit"][1]  # the linear law reproduces the optimum exactly
    need = e["grid_needed"]
    assert (
        max(need["y"]) > 4 and need["linear_slope"] - need["sqrt_slope"] > 0.3
    )  # a finer, wider grid tells them apart
    assert "cannot separate exponent 0.5 from 1" in v.reason


def test_f1_where_the_interval_excludes_the_linear_law_the_sqrt_law_holds(monkeypatch):
    # y_opt 1, 2, 2, 4, 4: the sqrt law on this grid exactly (slope 0.46); a linear law, capped at 4, reaches 4 by
    # mu 2 (slope 0.55), outside an interval this tight (the optimum is the same in every draw)
    monkeypatch.setattr(laws, "reaccount", _by_mu)
    v = laws.f1_sqrt_mu(_optimum_moving([1.0, 2.0, 2.0, 4.0, 4.0]), n_boot=400)
    e = v.numbers["exponent"]
    assert v.numbers["slope_low"] == pytest.approx(v.numbers["slope_high"])
    assert e["separates"] and 0.5 in e["consistent"] and 1.0 not in e["consistent"]
    assert v.verdict == "holds"


def test_laws_sharing_one_reaccounting_refit_each_mu_once_and_give_the_same_verdicts(monkeypatch):
    data = _study(steps={1: 10, 2: 11, 4: 30}, jitter=1)
    alone = [laws.f1_sqrt_mu(data, n_boot=200), laws.f2_u_shape(data, rho=0.3, n_boot=200)]
    asked = []
    real = laws.reaccount
    monkeypatch.setattr(laws, "reaccount", lambda d, mu: asked.append(mu) or real(d, mu))
    shared = laws.Reaccounted(data)
    together = [
        laws.f1_sqrt_mu(data, n_boot=200, reaccounted=shared),
        laws.f2_u_shape(data, rho=0.3, n_boot=200, reaccounted=shared),
    ]
    # F1 re-accounts at its five mu; F2 at the reference mu (1.0, one of F1's) and 5.28 (another): nothing new
    assert sorted(asked) == sorted(laws.MUS)
    assert [(v.verdict, v.reason) for v in together] == [(v.verdict, v.reason) for v in alone]
    # a Reaccounted of other data is not used for this one
    asked.clear()
    laws.f2_u_shape(data, rho=0.3, n_boot=200, reaccounted=laws.Reaccounted(_study()))
    assert sorted(asked) == [1.0, 5.28]
