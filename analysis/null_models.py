"""Null predictors of compute-to-target, a model's skill against them, and the probe against its own null.

A model of compute-to-target (`analysis.models`) is worth its parameters only if it predicts a configuration it
was not fitted on better than a trivial guess does. Three guesses, scored by the same leave-one-configuration-out
(LOCO) error as the models (each configuration's log median compute-to-target predicted from the others):

- `constant`: the mean log compute-to-target of the other configurations;
- `lr_only`: the mean of the other configurations at the same learning rate, ignoring x and y; where no other
  configuration ran that lr, linear interpolation in log lr between the per-lr means of the others (inside their
  range), else the constant; each prediction records which (`how`);
- `nearest`: the measured configuration nearest in (log x, log y, log lr), over the knobs the study varies (ties
  averaged).

Skill (`skill`): a model's |log error| minus each null's, paired over the configurations both predicted: the mean
difference with its 95% interval over those configurations (`workbench.stats.mean_interval`), beside the two
median |log error|s. A model is **selected** only if every interval lies below 0; otherwise the null it did not beat
is named.

The probe's null (`probe_against_sweep`): its prediction includes an on-policy learning-rate sweep, and the
trivial alternative is to run that sweep alone and stay on-policy at its lr*. Both pay for the sweep; the probe
also pays for its gradient phase, so it claims a prediction only where its point, with that cost, reaches the
target with less compute than on-policy at the sweep's lr*.

docs/theory.md, "Predictors against null models".
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from analysis.models import MODELS, fit_model, leave_one_configuration_out
from workbench import censoring, stats

NULLS = {
    "constant": "the mean log compute of the other configurations",
    "lr_only": "the mean of the others at the same lr (x and y ignored)",
    "nearest": "the nearest measured configuration in (log x, log y, log lr)",
}
"""The null predictors, in the order reports show them."""
TITLES = {"constant": "constant", "lr_only": "lr-only", "nearest": "nearest"}
"""Their names in words."""
N_BOOT = stats.N_BOOT
CENSORED_SHARE = 0.5
"""A configuration with this share of its seeds censored or more is not a measurement (its median is a bound): it is
neither predicted nor used to predict, as in `analysis.models.leave_one_configuration_out`."""
TOL = 1e-12


def key(x, y, lr=None) -> tuple:
    """A configuration's key for pairing errors across predictors: (x, y, lr) rounded, lr None when not varied."""
    lr = None if lr is None or (isinstance(lr, float) and math.isnan(lr)) else float(f"{float(lr):.6g}")
    return round(float(x), 6), round(float(y), 6), lr


def configuration_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration (x, y, lr) of uniform replay's per-seed runs, as `analysis.models` groups them:
    `log_c`, the log of the median compute-to-target over its seeds (what a model's LOCO predicts), `seeds`, and
    `measured` (fewer than half its seeds censored)."""
    keys = ["x", "y", "lr"] if "lr" in runs else ["x", "y"]
    rows = []
    for k, g in runs.groupby(keys):
        k = k if isinstance(k, tuple) else (k,)
        rows.append(
            {
                "x": float(k[0]),
                "y": float(k[1]),
                "lr": float(k[2]) if len(k) > 2 else math.nan,
                "log_c": math.log(float(g["compute_to_target"].median())),
                "seeds": len(g),
                "measured": bool(g["censored"].astype(bool).mean() < CENSORED_SHARE),
            }
        )
    return pd.DataFrame(rows, columns=["x", "y", "lr", "log_c", "seeds", "measured"])


def configuration_table_from_records(records: list[dict]) -> pd.DataFrame:
    """The same table from a report's `configurations` (analysis.json, which holds no per-seed values): uniform
    replay's records, the arms of one (x, y, lr) (a selection run and its fresh-seed re-run) pooled as the
    seed-weighted mean of their log geometric means. A record's value is the geometric mean over its seeds with
    censored seeds at their total compute, where the per-seed table takes the median; `measured` as above."""
    pooled: dict[tuple, list] = {}
    for r in records:
        if r.get("strategy", "uniform") != "uniform":
            continue
        pooled.setdefault(key(r["x"], r["y"], r.get("lr")), []).append(r)
    rows = []
    for (x, y, lr), rs in pooled.items():
        seeds = sum(int(r["seeds"]) for r in rs)
        rows.append(
            {
                "x": x,
                "y": y,
                "lr": math.nan if lr is None else lr,
                "seeds": seeds,
                "log_c": sum(int(r["seeds"]) * math.log(float(r["compute_to_target"])) for r in rs) / seeds,
                "measured": sum(int(r["censored_seeds"]) for r in rs) / seeds < CENSORED_SHARE,
            }
        )
    return pd.DataFrame(rows, columns=["x", "y", "lr", "log_c", "seeds", "measured"])


def _lr_only(lr: np.ndarray, v: np.ndarray, i: int, others: np.ndarray) -> tuple[float, str]:
    if not math.isfinite(lr[i]):
        return float(v[others].mean()), "constant"
    same = others[np.isclose(lr[others], lr[i], rtol=1e-6)]
    if len(same):
        return float(v[same].mean()), "same lr"
    by_lr = pd.Series(v[others]).groupby(np.log(lr[others])).mean()
    if len(by_lr) >= 2 and by_lr.index.min() < math.log(lr[i]) < by_lr.index.max():
        return float(np.interp(math.log(lr[i]), by_lr.index.to_numpy(), by_lr.to_numpy())), "interpolated in log lr"
    return float(v[others].mean()), "constant"


def null_loco(table: pd.DataFrame) -> dict[str, dict]:
    """Each null predictor's leave-one-configuration-out result on a `configuration_table`: {name: {n,
    median_abs_log_error, rmse_log, bias_log, errors: [{x, y, lr, error}], how: {which prediction: count}}}, error =
    log predicted - log measured, over the measured configurations (each predicted from the other measured ones)."""
    t = table.reset_index(drop=True)
    v, lr = t["log_c"].to_numpy(float), t["lr"].to_numpy(float)
    knobs = np.log(t[["x", "y", "lr"]].to_numpy(float))
    varied = [j for j in range(3) if np.isfinite(knobs[:, j]).all() and np.ptp(knobs[:, j]) > TOL]
    measured = np.flatnonzero(t["measured"].to_numpy(bool))
    out = {name: {"errors": [], "how": {}} for name in NULLS}
    for i in measured:
        others = measured[measured != i]
        if len(others) == 0:
            continue
        d = ((knobs[np.ix_(others, varied)] - knobs[i, varied]) ** 2).sum(axis=1) if varied else np.zeros(len(others))
        lr_pred, lr_how = _lr_only(lr, v, i, others)
        predictions = {
            "constant": (float(v[others].mean()), "constant"),
            "lr_only": (lr_pred, lr_how),
            "nearest": (float(v[others[d <= d.min() + TOL]].mean()), "nearest"),
        }
        where = {
            "x": float(t.at[i, "x"]),
            "y": float(t.at[i, "y"]),
            "lr": None if not math.isfinite(lr[i]) else float(lr[i]),
        }
        for name, (pred, how) in predictions.items():
            out[name]["errors"].append({**where, "error": pred - float(v[i])})
            out[name]["how"][how] = out[name]["how"].get(how, 0) + 1
    for name, o in out.items():
        e = np.array([r["error"] for r in o["errors"]])
        o.update(
            {"n": len(e)}
            if not len(e)
            else {
                "n": len(e),
                "median_abs_log_error": float(np.median(np.abs(e))),
                "rmse_log": float(np.sqrt(np.mean(e**2))),
                "bias_log": float(np.mean(e)),
            }
        )
    return out


def _errors_by_key(errors: list[dict]) -> dict[tuple, float]:
    return {key(r["x"], r["y"], r.get("lr")): float(r["error"]) for r in errors}


def difference(model_errors: list[dict], null_errors: list[dict], n_boot: int = N_BOOT, seed: int = 0) -> dict:
    """A model's |log error| minus a null's, paired over the configurations both predicted: the mean of the
    per-configuration differences with its 95% interval (`workbench.stats.mean_interval`: expanded bootstrap,
    never narrower than Student's t), the forecast-comparison statistic with an absolute loss; `beats` when the
    interval lies below 0. Also each side's median |log error| over those configurations and their difference."""
    m, z = _errors_by_key(model_errors), _errors_by_key(null_errors)
    common = sorted(set(m) & set(z), key=str)
    if len(common) < 3:
        return {"n": len(common), "difference": math.nan, "low": math.nan, "high": math.nan, "beats": False}
    a, b = np.abs([m[k] for k in common]), np.abs([z[k] for k in common])
    iv = stats.mean_interval(a - b, n_boot=n_boot, seed=seed)
    return {
        "n": len(common),
        "model": float(np.median(a)),
        "null": float(np.median(b)),
        "median_difference": float(np.median(a) - np.median(b)),
        "difference": iv.estimate,
        "low": iv.low,
        "high": iv.high,
        "beats": iv.high < -TOL,
    }


def skill(model_errors: list[dict], nulls: dict[str, dict], n_boot: int = N_BOOT, seed: int = 0) -> dict:
    """A model's LOCO errors against every null's (`null_loco`): {against: {null: `difference`}, selected,
    not_beaten, words}. Selected only when every difference's interval lies below 0."""
    against = {name: difference(model_errors, nulls[name]["errors"], n_boot, seed) for name in NULLS if name in nulls}
    not_beaten = [name for name, d in against.items() if not d["beats"]]
    if not against:
        words = "not selected: no null predictor to compare with"
    elif not not_beaten:
        words = "selected: it beats " + ", ".join(TITLES[n] for n in against) + " out of sample"
    else:
        words = "not selected: " + "; ".join(_not_beaten(name, against[name]) for name in not_beaten)
    return {"against": against, "selected": bool(against) and not not_beaten, "not_beaten": not_beaten, "words": words}


def _not_beaten(name: str, d: dict) -> str:
    if not math.isfinite(d["difference"]):
        return f"not compared with {TITLES[name]} (fewer than 3 configurations in common)"
    how = "it is worse than" if d["low"] > TOL else "it does not beat"
    return f"{how} {TITLES[name]} (|log error| {_signed(d['difference'])} [{_signed(d['low'])}, {_signed(d['high'])}] against it, paired)"


def _signed(v: float) -> str:
    return f"{v:+.3f}" if math.isfinite(v) else "-"


def against_nulls(runs: pd.DataFrame, models: list[dict], n_boot: int = N_BOOT, seed: int = 0) -> dict:
    """The nulls' LOCO on uniform replay's `runs`, and every model summary (`ModelFit.summary()` with its loco
    `errors`) given its `skill` in place; returns the nulls' results (analysis.json `null_models`)."""
    nulls = null_loco(configuration_table(runs))
    for m in models:
        m["skill"] = skill(m.get("loco", {}).get("errors", []), nulls, n_boot, seed)
    return nulls


def skill_from_report(result: dict, n_boot: int = N_BOOT, seed: int = 0, models: list[str] | None = None) -> dict:
    """Skill read from a report's analysis.json alone (no MLflow store): the nulls on its `configurations`
    (`configuration_table_from_records`), and every registered model that applies (those using the learning rate
    only when it varies) fitted again to one point per configuration, in copies proportional to its seeds, and
    scored by the same LOCO. For uncensored configurations that is the per-seed fit's mean function (least squares
    on n copies of a mean = on the n values, up to the within-configuration spread); censored seeds enter through
    their configuration's geometric mean at the censoring total, and a configuration with half its seeds or more
    censored as one censored point. `models`: these registered models only. Returns {null_models, models: [{model,
    loco, committed_loco, skill}]}."""
    table = configuration_table_from_records(result.get("configurations") or [])
    nulls = null_loco(table)
    varies_lr = table["lr"].nunique() > 1
    unit = math.gcd(*map(int, table["seeds"]))  # n copies weigh as n seeds; a common factor changes no estimate
    runs = pd.DataFrame(
        [
            {
                "x": r.x,
                "y": r.y,
                **({"lr": r.lr} if math.isfinite(r.lr) else {}),
                "seed": s,
                "compute_to_target": math.exp(r.log_c),
                "total_units": math.exp(r.log_c),
                "censored": int(not r.measured),
            }
            for r in table.itertuples()
            for s in range(int(r.seeds) // unit)
        ]
    )
    lrs = runs["lr"] if "lr" in runs else None  # reports from before lr was recorded: no lr, keyed as None
    committed = {m["model"]: m.get("loco", {}) for m in result.get("models") or []}
    out = []
    for name, model in MODELS.items():
        if (model.uses_lr and not varies_lr) or (models is not None and name not in models):
            continue
        with threadpool_limits(1):  # thousands of small L-BFGS-B solves: BLAS threads only slow them (analysis.report)
            fit = fit_model(
                model,
                runs["x"],
                runs["y"],
                runs["compute_to_target"],
                runs["censored"],
                float(result["reference_mu"]),
                lrs,
                seed=seed,
            )
            loco = leave_one_configuration_out(
                model, runs, float(result["reference_mu"]), seed, init=fit.params, lr_ref=fit.lr_ref
            )
        out.append(
            {
                "model": name,
                "loco": loco,
                "committed_loco": committed.get(name),
                "skill": skill(loco["errors"], nulls, n_boot, seed),
            }
        )
    return {"null_models": nulls, "models": sorted(out, key=lambda m: m["loco"].get("median_abs_log_error", math.inf))}


# ---------------------------------------------------------------- the probe against its sweep


def _is_on_policy(x: float, y: float) -> bool:
    return abs(x - 1.0) < 0.05 and abs(y - 1.0) < 0.05


def probe_against_sweep(predicted: dict, gradient_units: float | None = None) -> dict:
    """A probe's prediction (`analysis.models.probe_lr`'s output, with its `lr_sweep` and `lr_optimum`) against the
    null it contains: run the sweep alone and stay on-policy at its lr*. Both pay the sweep; to reach the target
    once, the probe's path costs gradient_units + its point's predicted compute, the sweep's path on-policy's
    compute at lr*. The probe claims its point only where it differs from on-policy and its path is cheaper
    (where `gradient_units` is not given, only where the point is predicted cheaper). Returns {claims, reason,
    sweep_units, gradient_units, sweep_lr, sweep_compute, probe_compute, probe_path, sweep_path}."""
    sweep = predicted.get("lr_sweep") or []
    best = predicted.get("lr_optimum") or {}
    out = {
        "sweep_units": float(sum(p.get("budget", 0.0) for p in sweep)),
        "gradient_units": gradient_units,
        "sweep_lr": best.get("lr"),
        "sweep_compute": best.get("compute"),
    }
    if not sweep or "lr" not in best:
        return out | {
            "claims": False,
            "reason": "no on-policy learning-rate sweep with an lr*: the probe's point is not"
            " compared with tuned on-policy, so it claims nothing against it",
        }
    if "x" not in predicted:
        return out | {
            "claims": False,
            "reason": f"the probe refused a point ({predicted.get('refused', 'no point')}): what"
            f" it says is the sweep's, on-policy at lr {best['lr']:.3g}",
        }
    if _is_on_policy(predicted["x"], predicted["y"]):
        extra = (
            f"; its gradient phase ({gradient_units:.1f} units) adds nothing to it"
            if gradient_units is not None
            else ""
        )
        return out | {
            "claims": False,
            "probe_compute": predicted.get("compute"),
            "reason": f"the probe's point is on-policy at lr {predicted.get('lr', best['lr']):.3g}: the answer of the"
            f" sweep alone (on-policy at lr* {best['lr']:.3g}){extra}",
        }
    probe_compute = predicted.get("compute", predicted["relative_compute"] * best["compute"])
    probe_path = probe_compute + (gradient_units or 0.0)
    cheaper = probe_path < best["compute"]
    cost = f"{gradient_units:.1f} units of gradient phase + " if gradient_units is not None else ""
    reason = (
        f"to reach the target once: {cost}{probe_compute:.1f} predicted at x {predicted['x']:g}, y {predicted['y']:.3g}"
        f" = {probe_path:.1f}, against {best['compute']:.1f} for on-policy at the sweep's lr* {best['lr']:.3g}"
        f" (the sweep's {out['sweep_units']:.1f} units paid by both)"
    )
    if gradient_units is None:
        reason += "; the gradient phase's cost not given"
    return out | {
        "claims": bool(cheaper),
        "probe_compute": probe_compute,
        "probe_path": probe_path,
        "sweep_path": best["compute"],
        "reason": ("claims its point: " if cheaper else "no claim: ") + reason,
    }


def probe_arm_against_on_policy(runs: pd.DataFrame, probe_trial: int) -> dict:
    """A `study verify --probe` trial against the study's measured on-policy runs at their best measured lr (what
    the sweep's null deploys; a selection estimate), paired by seed with its 95% interval (`workbench.stats`). The
    probe's gradient phase and sweep are not in the study's runs (they are in the probe's own MLflow run), so this
    compares the deployed points only: {claims, reason, ratio, low, high, on_policy_lr, on_policy_trial}."""
    probe = runs[runs["trial_number"] == probe_trial]
    x, y = float(probe["x"].iloc[0]), float(probe["y"].iloc[0])
    lr = float(probe["lr"].iloc[0]) if "lr" in probe else math.nan
    if _is_on_policy(x, y):
        return {
            "claims": False,
            "reason": f"the probe's point is on-policy (lr {lr:.3g}): what sweeping on-policy's lr and"
            " staying on-policy gives; the probe's gradient phase adds nothing to it",
        }
    on = runs[
        (runs["arm"] == "sampler")
        & (runs["strategy"] == "uniform")
        & (runs["x"].sub(1).abs() < 0.05)
        & (runs["y"].sub(1).abs() < 0.05)
    ]
    on = on.groupby("trial_number").filter(lambda g: g["censored"].astype(bool).mean() < CENSORED_SHARE)
    if on.empty:
        return {"claims": False, "reason": "no measured on-policy configuration to compare the probe's point with"}
    best = on.groupby("trial_number")["compute_to_target"].apply(lambda c: float(np.exp(np.log(c).mean()))).idxmin()
    base = on[on["trial_number"] == best]
    iv = censoring.paired_ratio(censoring.from_frame(probe), censoring.from_frame(base))
    base_lr = float(base["lr"].iloc[0]) if "lr" in base else math.nan
    return {
        "claims": stats.direction(iv) < 0,
        "ratio": iv.estimate,
        "low": iv.low,
        "high": iv.high,
        "on_policy_trial": int(best),
        "on_policy_lr": base_lr,
        "reason": f"the probe's point (x {x:g}, y {y:.3g}) against on-policy at its best measured lr ({base_lr:.3g}, trial"
        f" {best}, a selection estimate), paired by seed: {iv.fmt()}, {stats.verdict(iv)}; the probe's gradient"
        " phase and sweep are not counted here",
    }


def probe_record_against_on_policy(records: list[dict], probe: dict) -> dict:
    """`probe_arm_against_on_policy` from a report's records alone (analysis.json holds no per-seed values): the
    probe arm's geometric mean over the best measured on-policy configuration's, unpaired, no interval."""
    if _is_on_policy(probe["x"], probe["y"]):
        return {
            "claims": False,
            "reason": f"the probe's point is on-policy (lr {probe.get('lr', math.nan):.3g}): what"
            " sweeping on-policy's lr and staying on-policy gives; the probe's gradient phase adds nothing to it",
        }
    on = [
        r
        for r in records
        if _is_on_policy(r["x"], r["y"])
        and r.get("arm") == "sampler"
        and r.get("strategy", "uniform") == "uniform"
        and r["censored_seeds"] < CENSORED_SHARE * r["seeds"]
    ]
    if not on:
        return {"claims": False, "reason": "no measured on-policy configuration to compare the probe's point with"}
    best = min(on, key=lambda r: r["compute_to_target"])
    ratio = probe["compute_to_target"] / best["compute_to_target"]
    return {
        "claims": False,
        "ratio": ratio,
        "reason": f"the probe's point measured {ratio:.2f}x on-policy at its best measured"
        f" lr ({best.get('lr', math.nan):.3g}; geometric means, unpaired: no interval without the store, so no claim)",
    }
