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

from workbench import censoring, knobs

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
        out["given"] = {"generators": w, "trainers": t, "replay_ratio": knobs.replay_ratio_of_split(mu, w, t)}
    return out


def _on_policy(result: dict) -> dict | None:
    """On-policy at its best learning rate (`tuned_lr`), else the baseline at its one lr; with whether it was tuned."""
    tuned = result.get("tuned_lr")
    if tuned:
        best = next(o for o in tuned["on_policy_by_lr"] if o["trial_number"] == tuned["on_policy_best_trial"])
        return {**best, "tuned": True, "bounded": bool(tuned.get("on_policy_best_lr_bounded", True))}
    base = result.get("baseline")
    if not base:
        return None
    return {
        "trial_number": base["trial_number"],
        "lr": base.get("lr"),
        "compute_to_target": base["compute_to_target"],
        "ci_low": base["ci_low"],
        "ci_high": base["ci_high"],
        "tuned": False,
        "bounded": False,
        "censored_seeds": base.get("censored_seeds", 0),
        "seeds": base.get("seeds", 0),
    }


def _best_replay(result: dict) -> dict | None:
    """The cheapest replay configuration with its paired ratio against the on-policy of `_on_policy` (and in wall
    time, for an asynchronous study)."""
    tuned = result.get("tuned_lr")
    if tuned:
        rows = [r for r in tuned["tuned"] if r.get("against_tuned") and math.isfinite(r["against_tuned"]["ratio"])]
        if not rows:
            return None
        r = rows[0]
        return {
            "trial_number": r["trial_number"],
            "pair": r["against_tuned"],
            "wall": r.get("against_tuned_device_time"),
        }
    rows = [
        c
        for c in result.get("configurations") or []
        if not c["baseline"]
        and c.get("arm", "sampler") == "sampler"
        and math.isfinite(c.get("ratio_to_baseline", math.nan))
    ]
    if not rows:
        return None
    c = min(rows, key=lambda c: c["compute_to_target"])
    return {
        "trial_number": c["trial_number"],
        "pair": {
            "ratio": c["ratio_to_baseline"],
            "low": c["ratio_ci_low"],
            "high": c["ratio_ci_high"],
            "seeds": c["seeds"],
            "verdict": c["verdict"],
            **{k: c[k] for k in censoring.counts_of(None) if k in c},
        },
        "wall": None,
    }


def _config(result: dict, number: int) -> dict:
    return next(c for c in result["configurations"] if c["trial_number"] == number)


def _held(result: dict, number: int) -> str:
    """Whether the configuration was re-run on fresh seeds (`study confirm`), and its ratio to on-policy there."""
    for c in result.get("confirmations") or []:
        if c["selection"]["trial_number"] == number:
            r = c["replicated"]
            return (
                f"re-run on seeds {', '.join(map(str, r.get('seed_list', [])))}: {r['ratio_to_baseline']:.2f}x"
                f" [{r['ratio_ci_low']:.2f}, {r['ratio_ci_high']:.2f}] of on-policy there ({r['verdict']})"
            )
    return "not re-run on fresh seeds (`workbench study confirm`)"


def _skill(result: dict) -> tuple[bool, str]:
    models = [m for m in result.get("models") or [] if "skill" in m]
    if not models:
        return False, (
            "no model compared with the null predictors (fewer configurations than a fit needs): the"
            " recommendation is a measured configuration"
        )
    selected = [m["model"] for m in models if m["skill"]["selected"]]
    if selected:
        return True, f"`{selected[0]}` beats every null predictor out of sample"
    return False, (
        "no model beats the null predictors out of sample (a constant, the mean at the same lr, the nearest"
        " measured setting): the recommendation is a measured configuration, not a model's optimum"
    )


def from_study(
    result: dict, mu: float | None = None, split: tuple[int, int] | None = None, measured_mu: float | None = None
) -> dict[str, Any]:
    """A recommendation from a study's analysis (`analysis.report.analyze`'s result, re-accounted at the user's mu
    for a synchronous study). Returns {recommended, on_policy, best_replay, saving, notes, lines, ...};
    `recommended` is None where the data cannot support one (`refused` says why)."""
    out = _from_study(result, mu, split, measured_mu)
    return out | {"lines": lines(out)}


def _refusal(result: dict, configs: list[dict], on: dict | None) -> str | None:
    """Why the study supports no recommendation at all, or None."""
    if len(configs) < 2 or on is None:
        return (
            f"the study has {len(configs)} configuration(s) and no on-policy baseline to compare"
            " with: nothing to recommend against"
        )
    if max(c["seeds"] for c in configs) < 2:
        return "one seed per configuration: no interval, so no comparison is a claim (run more `seeds`)"
    on_cfg = _config(result, on["trial_number"])
    if on_cfg["censored_seeds"] * 2 >= on_cfg["seeds"]:
        return (
            f"on-policy (trial {on['trial_number']}) missed the target on {on_cfg['censored_seeds']}"
            f" of {on_cfg['seeds']} seeds: its compute to target is a bound, no saving can be read"
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


def _replay_recommended(best: dict, on: dict, mu: float, split: tuple[int, int] | None) -> dict[str, Any]:
    """The best replay configuration, recommended: its knobs and split, its saving with the interval."""
    c, p = best["configuration"], best["pair"]
    y = float(c["y"])
    out: dict[str, Any] = {
        "recommended": {
            "strategy": c.get("strategy", "uniform"),
            "capacity": int(c["capacity"]),
            "horizon": c.get("horizon"),
            "replay_ratio": y,
            "x": float(c["x"]),
            "lr": c.get("lr"),
            "trial_number": c["trial_number"],
            **_split(mu, y, split),
        },
        "saving": {
            "share": 1 - p["ratio"],
            "low": 1 - p["high"],
            "high": 1 - p["low"],
            "seeds": p["seeds"],
            "pairs": censoring.counts_text(p).strip(" ()"),
            "against": "on-policy at its best lr" if on["tuned"] else "on-policy at the baseline's lr",
        },
    }
    if best.get("wall") and math.isfinite(best["wall"]["ratio"]):
        w = best["wall"]
        out["saving_device_time"] = {
            "share": 1 - w["ratio"],
            "low": 1 - w["high"],
            "high": 1 - w["low"],
            "seeds": w["seeds"],
        }
    return out


def _on_policy_recommended(best: dict | None, on: dict, mu: float, split: tuple[int, int] | None) -> dict[str, Any]:
    """On-policy, recommended: no replay configuration saved compute within its interval."""
    why = (
        "no replay configuration ran"
        if best is None
        else f"the best replay configuration (trial {best['trial_number']}) is {best['pair']['ratio']:.2f}x"
        f" [{best['pair']['low']:.2f}, {best['pair']['high']:.2f}]{censoring.counts_text(best['pair'])} of on-policy's compute:"
        f" {best['pair']['verdict']}"
    )
    recommended = {"strategy": "on-policy", "capacity": None, "horizon": None, "replay_ratio": 1.0, "x": 1.0,
                   "lr": on["lr"], "trial_number": on["trial_number"], **_split(mu, 1.0, split)}  # fmt: skip
    return {"recommended": recommended, "saving": None, "why_on_policy": why}


def _from_study(
    result: dict, mu: float | None, split: tuple[int, int] | None, measured_mu: float | None
) -> dict[str, Any]:
    study_mu = float(measured_mu if measured_mu is not None else result["reference_mu"])
    mu = float(mu if mu is not None else study_mu)
    notes = [n for n in [_mu_note(mu, study_mu, bool(result.get("pipeline")))] if n]
    out: dict[str, Any] = {
        "source": "study",
        "study": result.get("study"),
        "mu": mu,
        "study_mu": study_mu,
        "metric": result.get("metric"),
        "target": result.get("target_accuracy"),
        "recommended": None,
        "saving": None,
        "notes": notes,
    }
    configs = [c for c in result.get("configurations") or [] if c.get("arm", "sampler") == "sampler"]
    on = _on_policy(result)
    refused = _refusal(result, configs, on)
    if refused:
        return out | {"refused": refused}
    notes += [n for n in [_lr_note(on)] if n]
    has_skill, skill_line = _skill(result)
    best = _best_replay(result)
    out |= {"on_policy": on, "best_replay": best, "skill": skill_line, "model_has_skill": has_skill}
    if best is not None:
        best["configuration"] = _config(result, best["trial_number"])
        best["fresh_seeds"] = _held(result, best["trial_number"])
    if best is not None and best["pair"]["high"] < 1:
        return out | _replay_recommended(best, on, mu, split)
    return out | _on_policy_recommended(best, on, mu, split)


def from_probe(recorded: dict, mu: float | None = None, split: tuple[int, int] | None = None) -> dict[str, Any]:
    """A recommendation from a probe run (`probe/probe.json`): its point where it claims one against its own
    on-policy lr sweep (`analysis.null_models.probe_against_sweep`), else on-policy at the sweep's lr*. A probe
    gives no interval against tuned on-policy: `study verify --probe` measures one."""
    out = _from_probe(recorded, mu, split)
    return out | {"lines": lines(out)}


def _from_probe(recorded: dict, mu: float | None, split: tuple[int, int] | None) -> dict[str, Any]:
    probe_mu = float(recorded["mu"])
    mu = float(mu if mu is not None else probe_mu)
    p = recorded.get("predicted") or {}
    against = p.get("against_sweep") or {}
    out: dict[str, Any] = {
        "source": "probe",
        "mu": mu,
        "study_mu": probe_mu,
        "recommended": None,
        "saving": None,
        "notes": [],
        "skill": "a probe's prediction is not scored against null predictors; it is held against its own lr sweep",
    }
    if max(mu, probe_mu) / min(mu, probe_mu) > SPLIT_MU_TOLERANCE:
        out["notes"].append(
            f"extrapolated: the probe measured mu {probe_mu:.3g}; probe at mu {mu:.3g} to measure yours"
        )
    if not p.get("lr_sweep") or "lr" not in (p.get("lr_optimum") or {}):
        return out | {
            "refused": "the probe ran no on-policy learning-rate sweep (`workbench probe --lr-sweep --target T`):"
            " without tuned on-policy there is nothing to price its point against"
        }
    if against.get("claims"):
        y = float(p["y"])
        out["recommended"] = {
            "strategy": "uniform",
            "capacity": int(p["capacity"]),
            "horizon": None,
            "replay_ratio": y,
            "x": float(p["x"]),
            "lr": p.get("lr"),
            **_split(mu, y, split),
        }
        out["saving"] = {
            "share": 1 - against["probe_path"] / against["sweep_path"],
            "low": None,
            "high": None,
            "seeds": None,
            "against": "on-policy at the sweep's lr*",
        }
        out["notes"].append(
            "no interval: one probe run's prediction; `workbench study verify --probe` measures it on seeds"
        )
    else:
        out["recommended"] = {
            "strategy": "on-policy",
            "capacity": None,
            "horizon": None,
            "replay_ratio": 1.0,
            "x": 1.0,
            "lr": p["lr_optimum"]["lr"],
            **_split(mu, 1.0, split),
        }
        out["why_on_policy"] = against.get("reason", "the probe claims no point against its sweep")
    return out


def _pct(v: float | None) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{100 * v:.0f}%"


def lines(rec: dict) -> list[str]:
    """The recommendation in words, one line per fact."""
    source = f"study {rec['study']}" if rec["source"] == "study" else "the probe"
    head = f"recommend at mu {rec['mu']:.3g} (from {source}, measured at mu {rec['study_mu']:.3g}"
    head += f"; {rec['metric']} to {rec['target']:g})" if rec.get("metric") and rec.get("target") is not None else ")"
    out = [head]
    if rec.get("refused"):
        return out + [f"  no recommendation: {rec['refused']}", *[f"  note: {n}" for n in rec.get("notes", [])]]
    r = rec["recommended"]
    lr = f"lr {r['lr']:.3g}" if r.get("lr") is not None and math.isfinite(r["lr"]) else "its lr"
    wt = r["workers_per_trainer"]
    split = f"W:T about {wt:.2g}:1 (W/T ≈ mu/y, first order)"
    if r["strategy"] == "on-policy":
        out.append(f"  run on-policy (no buffer; asynchronously the queue) at {lr}; {split}")
        out.append(f"  why: {rec['why_on_policy']}")
    else:
        horizon = f", horizon {r['horizon']}" if r.get("horizon") not in (None, "") else ""
        out.append(
            f"  run {r['strategy']} replay, buffer N {r['capacity']}{horizon}, replay ratio y {r['replay_ratio']:.3g}"
            f" (x {r['x']:.3g}), {lr}; {split}"
        )
        s = rec["saving"]
        iv = (
            ""
            if s["low"] is None
            else f" [{_pct(s['low'])}, {_pct(s['high'])}] (95%, {s.get('pairs') or str(s['seeds']) + ' paired seeds'})"
        )
        out.append(f"  predicted saving against {s['against']}: {_pct(s['share'])} of compute{iv}")
        if rec.get("saving_device_time"):
            w = rec["saving_device_time"]
            out.append(f"  and of device time (wall x W + T): {_pct(w['share'])} [{_pct(w['low'])}, {_pct(w['high'])}]")
        if rec.get("best_replay"):
            out.append(f"  fresh seeds: {rec['best_replay']['fresh_seeds']}")
    if "given" in r:
        g = r["given"]
        out.append(
            f"  your split W {g['generators']} : T {g['trainers']} gives y about {g['replay_ratio']:.3g} at this mu"
        )
    out.append(f"  models: {rec['skill']}")
    out += [f"  note: {n}" for n in rec.get("notes", [])]
    return out
