"""Paired seeds and the compute schedule: what makes arms of a study comparable run for run."""

import pytest

from workbench.config import build_config
from workbench.trial.loop import run_trial

from support.toy import toy_dict, tracked


def _prompts(records) -> list[int]:
    """The train prompts a trial drew, in order (one per group)."""
    out = []
    for rec in records:
        seen = []
        for r in rec.fresh:
            if r.group not in seen:
                seen.append(r.group)
                out.append(r.prompt_index)
    return out


def test_seed_s_gives_every_arm_the_same_prompts_held_out_set_and_start(tracking_uri):
    runs = {}
    for name, replay, seed in (
        ("on_policy", {"ratio": 1}, 3),
        ("replay", {"ratio": 2, "capacity": 64}, 3),
        ("other_seed", {"ratio": 1}, 4),
    ):
        records = []
        cfg = build_config(toy_dict(seed=seed, replay=replay, compute={"mu": 1.0}))
        result = run_trial(tracked(cfg, tracking_uri), observer=records.append)
        runs[name] = (_prompts(records), result.evals)
    on_policy, replay, other = runs["on_policy"][0], runs["replay"][0], runs["other_seed"][0]
    # The replay arm draws fewer fresh prompts per step, from the same stream: its prompts are a prefix of
    # on-policy's, in the same order.
    assert len(replay) < len(on_policy) and replay == on_policy[: len(replay)]
    assert other[: len(replay)] != on_policy[: len(replay)]
    # Same initial policy, same held-out set and the same evaluation draws: identical step-0 evaluations.
    first = {k: v for k, v in runs["on_policy"][1][0].items()}
    assert (
        runs["replay"][1][0]["accuracy"] == first["accuracy"]
        and runs["replay"][1][0]["pass_at_k"] == first["pass_at_k"]
    )


def test_eval_every_units_evaluates_arms_at_the_same_compute(tracking_uri):
    evals = {}
    for name, replay in (("on_policy", {"ratio": 1}), ("replay", {"ratio": 2, "capacity": 64})):
        cfg = build_config(
            toy_dict(
                replay=replay,
                compute={"mu": 1.0},
                budget={"compute_units": 6, "steps": None},
                eval={"every": 1000, "every_units": 2},
            )
        )
        evals[name] = [e["compute_units"] for e in run_trial(tracked(cfg, tracking_uri)).evals]
    # On-policy spends 1 unit per step, y = 2 spends 0.75 (16 trained + 8 generated at mu 1, over 16 * 2):
    # both are evaluated at 0 and at the first step at or past 2, 4 and 6 units, never in between.
    assert evals["on_policy"] == [0, 2, 4, 6]
    assert len(evals["replay"]) == 4
    for got, want in zip(evals["replay"], [0, 2, 4, 6]):
        assert want <= got < want + 0.75 + 1e-9


def test_eval_every_units_must_be_positive():
    with pytest.raises(Exception, match="eval.every_units"):
        build_config(toy_dict(eval={"every_units": 0}))
