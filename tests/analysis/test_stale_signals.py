"""Whether the staleness diagnostics rank with replay's saving (analysis.stale_signals), on runs written by hand."""

import math

import numpy as np
import pandas as pd
import pytest

from analysis.result import Analysis, SignalLink
from analysis.sections import _stale_signals_section
from analysis.stale_signals import MIN_CONFIGURATIONS, stale_signals

LRS = (2.5e-5, 5e-5)
ON_POLICY = {2.5e-5: 40.0, 5e-5: 30.0}


def _row(number, seed, lr, y, ctt, ess, objective="ppo_clip", censored=False) -> dict:
    return {
        "trial_number": number,
        "seed": seed,
        "x": 1.0 if y == 1 else 4.0,
        "y": float(y),
        "horizon": math.nan,
        "strategy": "uniform",
        "objective": objective,
        "lr": lr,
        "baseline": number == 0,
        "censored": int(censored),
        "total_units": 150.0,
        "compute_to_target": math.nan if censored else ctt,
        "ess_mean": ess,
        "grad_cosine_mean": 0.1,
        "age_mean": 0.0 if y == 1 else 2.0,
    }


def _runs(cost_of_ess, n_configurations=8, seeds=(0, 1, 2, 3), objectives=("ppo_clip",)) -> pd.DataFrame:
    """On-policy at both lrs (trials 0, 1), then replay configurations whose ESS runs from 0.95 down to 0.3 and whose
    cost against on-policy at their lr is `cost_of_ess(ess)`, the same on every seed (paired ratios are exact)."""
    rows = [_row(i, s, lr, 1, ON_POLICY[lr] * (1 + 0.03 * s), 1.0) for i, lr in enumerate(LRS) for s in seeds]
    number = 2
    for objective in objectives:
        for k, ess in enumerate(np.linspace(0.95, 0.3, n_configurations)):
            lr = LRS[k % 2]
            for s in seeds:
                ctt = ON_POLICY[lr] * (1 + 0.03 * s) * cost_of_ess(float(ess))
                rows.append(_row(number, s, lr, 2, ctt, float(ess), objective))
            number += 1
    return pd.DataFrame(rows)


def test_a_saving_that_shrinks_with_the_effective_sample_size_is_read_as_a_resolved_link():
    links = stale_signals(_runs(lambda ess: 2.0 - ess))  # ESS 0.95: ratio 1.05; 0.3: 1.7
    ess = next(link for link in links if link.diagnostic == "ess_mean" and link.scope == "every loss")
    assert ess.n_configurations == 8
    assert ess.rho == pytest.approx(-1.0)  # the higher the ESS, the smaller the cost
    assert ess.high < 0 and ess.resolved
    assert ess.words() == "resolved: the higher it is, the larger the saving"
    # the age and the cosine are the same in every replay configuration here: no reading where nothing varies
    assert not any(link.diagnostic in ("grad_cosine_mean", "age_mean") for link in links)


def test_a_diagnostic_unrelated_to_the_saving_stays_unresolved():
    rng = np.random.default_rng(3)
    costs = {round(float(e), 6): float(c) for e, c in zip(np.linspace(0.95, 0.3, 8), rng.uniform(0.8, 1.2, 8))}
    links = stale_signals(_runs(lambda ess: costs[round(ess, 6)]))
    ess = next(link for link in links if link.diagnostic == "ess_mean")
    assert ess.low < 0 < ess.high and not ess.resolved and ess.words() == "unresolved"


def test_each_loss_is_read_alone_as_well_and_a_configuration_without_an_estimate_leaves_the_reading():
    runs = _runs(lambda ess: 2.0 - ess, objectives=("ppo_clip", "oapl"))
    links = stale_signals(runs)
    scopes = {link.scope for link in links if link.diagnostic == "ess_mean"}
    assert scopes == {"every loss", "loss oapl", "loss ppo_clip"}
    # a configuration whose runs all missed the target has no ratio: it leaves the reading, the others stay
    worst = runs["trial_number"].max()
    runs.loc[runs["trial_number"] == worst, ["censored", "compute_to_target"]] = [1, math.nan]
    again = next(link for link in stale_signals(runs) if link.scope == "every loss" and link.diagnostic == "ess_mean")
    assert again.n_configurations == 15


def test_no_reading_without_the_diagnostics_or_with_too_few_configurations():
    runs = _runs(lambda ess: 2.0 - ess)
    assert stale_signals(runs.drop(columns=["ess_mean", "grad_cosine_mean", "age_mean"])) is None
    assert stale_signals(runs.assign(ess_mean=math.nan, grad_cosine_mean=math.nan, age_mean=math.nan)) is None
    few = _runs(lambda ess: 2.0 - ess, n_configurations=MIN_CONFIGURATIONS - 1)
    assert not any(link.diagnostic == "ess_mean" for link in stale_signals(few) or ())


def test_the_reading_round_trips_through_analysis_json_and_has_a_report_section():
    link = stale_signals(_runs(lambda ess: 2.0 - ess))[0]
    assert SignalLink.from_json(link.to_json()) == link
    result = Analysis.__new__(Analysis)
    object.__setattr__(result, "stale_signals", (link,))
    section = "\n".join(_stale_signals_section(result))
    assert "## Do the staleness diagnostics predict the saving?" in section
    assert f"{link.rho:+.2f} [{link.low:+.2f}, {link.high:+.2f}]" in section
