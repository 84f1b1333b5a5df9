"""What to run: the buffer settings, learning rate and W:T split a study or a probe supports at the user's mu, with
the saving it predicts against lr-tuned on-policy and its interval (`workbench recommend`).

A recommendation is a measured configuration, never a fitted model's point, unless a model beats every null
predictor out of sample (`analysis.null_models.skill`): no model has yet, and an optimum read off a model without
skill is the null's within the noise. Replay is recommended only where its paired interval against on-policy at its
best learning rate excludes 1; otherwise on-policy at that learning rate is, and the line says why. Where the data
cannot carry a recommendation (one configuration, one seed, a baseline that never reached the target) it says so.
"""

from __future__ import annotations

import math
from typing import Any

from workbench import knobs

from analysis.result import (
    Analysis,
    BestReplay,
    Comparison,
    Configuration,
    Recommendation,
    Recommended,
    Saving,
    Split,
)

SPLIT_MU_TOLERANCE = 1.5
"""A study measured at mu m supports a recommendation at the user's mu within this factor of m; beyond it the line
says the answer is extrapolated (a synchronous study is re-accounted at the user's mu by the workflow; an
asynchronous one cannot be: its staleness came from its own split)."""


def mu_from_seconds(gen_seconds: float, train_seconds: float, batch_size: int) -> float:
    """mu from measured seconds: generating one rollout (on one generator device) over training on one (a training
    step of B rollouts / B)."""
    return gen_seconds / (train_seconds / batch_size)


def _split(mu: float, y: float, split: tuple[int, int] | None) -> dict[str, Any]:
    """The W:T split that runs replay ratio `y` at `mu` (W/T ≈ mu/y, the paper's no-stall mapping, first order: its
    Fig. 2 exceeds it by up to 2.6x at aggressive replay), and what a given split would give."""
    out: dict[str, Any] = {"workers_per_trainer": knobs.workers_per_trainer(y, mu)}
    if split is not None:
        w, t = split
        out["given"] = Split(generators=w, trainers=t, replay_ratio=knobs.replay_ratio_of_split(mu, w, t))
    return out


def _on_policy(result: Analysis) -> dict | None:
    """On-policy at its best learning rate (`tuned_lr`), else the baseline at its one lr; with whether it was tuned."""
    tuned = result.tuned_lr
    if tuned:
        best = next(o for o in tuned["on_policy_by_lr"] if o["trial_number"] == tuned["on_policy_best_trial"])
        return {**best, "tuned": True, "bounded": bool(tuned.get("on_policy_best_lr_bounded", True))}
    base = result.baseline
    if base is None:
        return None
    return {
        "trial_number": base.trial_number,
        "lr": base.lr,
        "compute_to_target": base.compute_to_target,
        "ci_low": base.ci_low,
        "ci_high": base.ci_high,
        "tuned": False,
        "bounded": False,
        "censored_seeds": base.censored_seeds,
        "seeds": base.seeds,
    }


def _best_pair(result: Analysis) -> tuple[int, Comparison, Comparison | None] | None:
    """The cheapest replay configuration with its paired ratio against the on-policy of `_on_policy` (and in wall
    time, for an asynchronous study)."""
    tuned = result.tuned_lr
    if tuned:
        rows = [r for r in tuned["tuned"] if r.get("against_tuned") and math.isfinite(r["against_tuned"]["ratio"])]
        if not rows:
            return None
        r = rows[0]
        wall = r.get("against_tuned_device_time")
        return r["trial_number"], Comparison.from_json(r["against_tuned"]), Comparison.from_json(wall) if wall else None
    rows = [c for c in result.configurations if not c.baseline and c.arm == "sampler" and c.compared]
    if not rows:
        return None
    c = min(rows, key=lambda c: c.compute_to_target)
    return c.trial_number, c.comparison, None


def _held(result: Analysis, number: int) -> str:
    """Whether the configuration was re-run on fresh seeds (`study confirm`), and its ratio to on-policy there."""
    for c in result.confirmations:
        if c.selection.trial_number == number:
            r = c.replicated
            return (
                f"re-run on seeds {', '.join(map(str, r.seed_list))}: {r.ratio_to_baseline:.2f}x"
                f" [{r.ratio_ci_low:.2f}, {r.ratio_ci_high:.2f}] of on-policy there ({r.verdict})"
            )
    return "not re-run on fresh seeds (`workbench study confirm`)"


def _skill(result: Analysis) -> tuple[bool, str]:
    models = [m for m in result.models if m.skill is not None]
    if not models:
        return False, (
            "no model compared with the null predictors (fewer configurations than a fit needs): the"
            " recommendation is a measured configuration"
        )
    selected = [m.model for m in models if m.selected]
    if selected:
        return True, f"`{selected[0]}` beats every null predictor out of sample"
    return False, (
        "no model beats the null predictors out of sample (a constant, the mean at the same lr, the nearest"
        " measured setting): the recommendation is a measured configuration, not a model's optimum"
    )


def from_study(
    result: Analysis, mu: float | None = None, split: tuple[int, int] | None = None, measured_mu: float | None = None
) -> Recommendation:
    """A recommendation from a study's analysis (`analysis.report.analyze`'s result, re-accounted at the user's mu
    for a synchronous study); its `recommended` is None where the data cannot support one (`refused` says why)."""
    study_mu = float(measured_mu if measured_mu is not None else result.reference_mu)
    mu = float(mu if mu is not None else study_mu)
    notes = [n for n in [_mu_note(mu, study_mu, bool(result.pipeline))] if n]
    head = {"source": "study", "study": result.study, "mu": mu, "study_mu": study_mu, "metric": result.metric}
    head["target"] = result.target_accuracy
    configs = [c for c in result.configurations if c.arm == "sampler"]
    on = _on_policy(result)
    refused = _refusal(result, configs, on)
    if refused:
        return Recommendation(**head, notes=tuple(notes), refused=refused)
    notes += [n for n in [_lr_note(on)] if n]
    has_skill, skill_line = _skill(result)
    found = _best_pair(result)
    best = None
    if found is not None:
        number, pair, wall = found
        best = BestReplay(
            trial_number=number,
            pair=pair,
            wall=wall,
            configuration=result.configuration(number),
            fresh_seeds=_held(result, number),
        )
    chosen = (
        _replay_recommended(best, on, mu, split)
        if best is not None and best.pair.high < 1
        else _on_policy_recommended(best, on, mu, split)
    )
    return Recommendation(
        **head,
        notes=tuple(notes),
        on_policy=on,
        best_replay=best,
        skill=skill_line,
        model_has_skill=has_skill,
        **chosen,
    )


def _refusal(result: Analysis, configs: list[Configuration], on: dict | None) -> str | None:
    """Why the study supports no recommendation at all, or None."""
    if len(configs) < 2 or on is None:
        return (
            f"the study has {len(configs)} configuration(s) and no on-policy baseline to compare"
            " with: nothing to recommend against"
        )
    if max(c.seeds for c in configs) < 2:
        return "one seed per configuration: no interval, so no comparison is a claim (run more `seeds`)"
    on_cfg = result.configuration(on["trial_number"])
    if on_cfg.censored_seeds * 2 >= on_cfg.seeds:
        return (
            f"on-policy (trial {on['trial_number']}) missed the target on {on_cfg.censored_seeds}"
            f" of {on_cfg.seeds} seeds: its compute to target is a bound, no saving can be read"
            " against it (a lower target or a larger budget)"
        )
    return None


def _mu_note(mu: float, study_mu: float, asynchronous: bool) -> str | None:
    """What reading the study at another mu than it ran at assumes."""
    if max(mu, study_mu) / min(mu, study_mu) <= SPLIT_MU_TOLERANCE:
        return None
    if asynchronous:
        return (
            f"extrapolated: the study ran at mu {study_mu:.3g}, the asynchronous runs' staleness came from"
            f" that split; run it at mu {mu:.3g} (`pipeline.generator_slowdown`) to measure yours"
        )
    return (
        f"re-accounted: the study's runs priced at mu {mu:.3g} (measured at {study_mu:.3g}), their learning"
        " curves in steps taken as they were; the staleness a slow generator adds is not in them"
        " (an asynchronous study at your mu measures it)"
    )


def _lr_note(on: dict) -> str | None:
    """Whether on-policy's learning rate was tuned, where it was not."""
    if not on["tuned"]:
        return (
            f"on-policy ran at one learning rate ({on['lr']:.3g}): a saving against it may be the learning rate's"
            " (give `lr` a few values in the study)"
        )
    if not on["bounded"]:
        return (
            f"on-policy's best learning rate ({on['lr']:.3g}) is at an end of the range tried: it may not be"
            " tuned, so a saving against it is an upper bound"
        )
    return None


def _replay_recommended(best: BestReplay, on: dict, mu: float, split: tuple[int, int] | None) -> dict[str, Any]:
    """The best replay configuration, recommended: its knobs and split, its saving with the interval."""
    c, p = best.configuration, best.pair
    out: dict[str, Any] = {
        "recommended": Recommended(
            strategy=c.strategy,
            capacity=int(c.capacity),
            horizon=None,
            replay_ratio=float(c.y),
            x=float(c.x),
            lr=c.lr,
            trial_number=c.trial_number,
            **_split(mu, float(c.y), split),
        ),
        "saving": Saving(
            share=1 - p.ratio,
            low=1 - p.high,
            high=1 - p.low,
            seeds=p.seeds,
            pairs=p.counts_text().strip(" ()"),
            against="on-policy at its best lr" if on["tuned"] else "on-policy at the baseline's lr",
        ),
    }
    w = best.wall
    if w is not None and math.isfinite(w.ratio):
        out["saving_device_time"] = Saving(share=1 - w.ratio, low=1 - w.high, high=1 - w.low, seeds=w.seeds)
    return out


def _on_policy_recommended(
    best: BestReplay | None, on: dict, mu: float, split: tuple[int, int] | None
) -> dict[str, Any]:
    """On-policy, recommended: no replay configuration saved compute within its interval."""
    why = (
        "no replay configuration ran"
        if best is None
        else f"the best replay configuration (trial {best.trial_number}) is {best.pair.ratio:.2f}x"
        f" [{best.pair.low:.2f}, {best.pair.high:.2f}]{best.pair.counts_text()} of on-policy's compute:"
        f" {best.pair.verdict}"
    )
    recommended = Recommended(
        strategy="on-policy",
        replay_ratio=1.0,
        x=1.0,
        lr=on["lr"],
        trial_number=on["trial_number"],
        **_split(mu, 1.0, split),
    )
    return {"recommended": recommended, "saving": None, "why_on_policy": why}


def from_probe(recorded: dict, mu: float | None = None, split: tuple[int, int] | None = None) -> Recommendation:
    """A recommendation from a probe run (`probe/probe.json`): its point where it claims one against its own
    on-policy lr sweep (`analysis.null_models.probe_against_sweep`), else on-policy at the sweep's lr*. A probe
    gives no interval against tuned on-policy: `study verify --probe` measures one."""
    probe_mu = float(recorded["mu"])
    mu = float(mu if mu is not None else probe_mu)
    p = recorded.get("predicted") or {}
    against = p.get("against_sweep") or {}
    head = {
        "source": "probe",
        "mu": mu,
        "study_mu": probe_mu,
        "skill": "a probe's prediction is not scored against null predictors; it is held against its own lr sweep",
    }
    notes = []
    if max(mu, probe_mu) / min(mu, probe_mu) > SPLIT_MU_TOLERANCE:
        notes.append(f"extrapolated: the probe measured mu {probe_mu:.3g}; probe at mu {mu:.3g} to measure yours")
    if not p.get("lr_sweep") or "lr" not in (p.get("lr_optimum") or {}):
        return Recommendation(
            **head,
            notes=tuple(notes),
            refused="the probe ran no on-policy learning-rate sweep (`workbench probe --lr-sweep --target T`):"
            " without tuned on-policy there is nothing to price its point against",
        )
    if not against.get("claims"):
        recommended = Recommended(
            strategy="on-policy", replay_ratio=1.0, x=1.0, lr=p["lr_optimum"]["lr"], **_split(mu, 1.0, split)
        )
        why = against.get("reason", "the probe claims no point against its sweep")
        return Recommendation(**head, recommended=recommended, notes=tuple(notes), why_on_policy=why)
    y = float(p["y"])
    recommended = Recommended(
        strategy="uniform",
        capacity=int(p["capacity"]),
        replay_ratio=y,
        x=float(p["x"]),
        lr=p.get("lr"),
        **_split(mu, y, split),
    )
    saving = Saving(share=1 - against["probe_path"] / against["sweep_path"], against="on-policy at the sweep's lr*")
    notes.append("no interval: one probe run's prediction; `workbench study verify --probe` measures it on seeds")
    return Recommendation(**head, recommended=recommended, saving=saving, notes=tuple(notes))
