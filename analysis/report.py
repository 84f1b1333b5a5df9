"""`workbench analyze` and `workbench report`: fit, compare predicted against empirical optimum, write reports.

The analysis JSON (reports/<study>/analysis.json) holds everything the report shows; the report is Markdown plus a
self-contained HTML page (figures embedded as data URIs, every user string escaped).
"""

from __future__ import annotations

import base64
import html
import json
import math
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd
from markdown_it import MarkdownIt

from analysis import laws, plots
from analysis.data import StudyData, load_study, reaccount, retarget
from analysis.fit import fit_runs, predicted_optimum
from analysis.models import compare, optimum
from analysis.pipeline import mapped_split, split_table
from analysis.resolution import by_estimator, by_reading, resolution
from analysis.theory import to_knobs
from analysis.tuned_lr import tuned_lr
from workbench.estimators import METRICS

def _config_record(row) -> dict:
    return {
        "trial_number": int(row["trial_number"]), "x": float(row["x"]), "y": float(row["y"]), "capacity": int(row["capacity"]),
        "ratio": float(row["ratio"]), "baseline": bool(row["baseline"]), "strategy": str(row.get("strategy", "uniform")),
        "compute_to_target": float(row["compute_to_target"]), "ci_low": float(row["ci_low"]), "ci_high": float(row["ci_high"]),
        "ratio_to_baseline": float(row["ratio_to_baseline"]), "ratio_ci_low": float(row["ratio_ci_low"]),
        "ratio_ci_high": float(row["ratio_ci_high"]), "verdict": str(row["verdict"]),
        "best_accuracy": float(row["best_accuracy"]), "seeds": int(row["seeds"]), "censored_seeds": int(row["censored_seeds"]),
        "arm": str(row.get("arm", "sampler")),
        **({"lr": float(row["lr"])} if "lr" in row and pd.notna(row["lr"]) else {}),
    }


def _pareto(configs: pd.DataFrame) -> list[dict]:
    front, best = [], -1.0
    for _, r in configs.sort_values("compute_to_target").iterrows():
        if r["best_accuracy"] > best:
            front.append(_config_record(r))
            best = r["best_accuracy"]
    return front


def _nearest(configs: pd.DataFrame, x: float, y: float):
    d = (np.log(configs["x"]) - math.log(x)) ** 2 + (np.log(configs["y"]) - math.log(y)) ** 2
    return configs.loc[d.idxmin()]


def _optimum_block(data: StudyData, bootstrap: int, seed: int, models: bool = True) -> dict:
    configs = data.configs()
    selection = configs[configs["arm"] != "confirm"]  # fresh-seed re-runs are reported beside, never selected
    batch = int(data.runs["batch_size"].iloc[0])
    # The model is uniform replay's (Arnal et al.): other strategies are compared in the tables, never fitted.
    uniform = data.runs[data.runs["strategy"] == "uniform"]
    fit = fit_runs(uniform, data.reference_mu, bootstrap=bootstrap, seed=seed)
    xb = (1.0, max(64.0, 2 * float(configs["x"].max())))
    yb = (1.0, max(8.0, 2 * float(configs["y"].max())))
    x_star, y_star, c_star = predicted_optimum(fit, xb, yb)
    ranked = selection.assign(censored_share=selection["censored_seeds"] / selection["seeds"]).sort_values(["censored_share", "compute_to_target"])
    best = ranked.iloc[0]
    base = selection[selection["baseline"]]
    nearest = _nearest(selection, x_star, y_star)
    block = {
        "mu": data.reference_mu,
        "fit": fit.summary(),
        "fit_configurations": int(uniform.groupby(["x", "y"]).ngroups),
        "other_strategies": sorted(set(data.runs["strategy"]) - {"uniform"}),
        "predicted": {
            "x": x_star, "y": y_star, "compute_to_target": c_star,
            "knobs": to_knobs(x_star, y_star, batch, data.reference_mu).__dict__,
            "nearest_measured": _config_record(nearest),
            "on_policy_optimal": y_star < 1.05 and x_star < 1.05,
        },
        "empirical": {**_config_record(best), "predicted_compute_to_target": float(fit.predict(best["x"], best["y"]))},
        "measured_ratio_nearest_predicted_to_empirical": float(nearest["compute_to_target"] / best["compute_to_target"]),
        "pareto_front": _pareto(selection),
        "verified": [
            {**_config_record(r), "predicted_when_run": float(r["predicted_when_run"]), "predicted_now": float(fit.predict(r["x"], r["y"]))}
            for _, r in configs[configs["arm"] == "predicted"].iterrows()
        ],
        "probe_verified": [  # `study verify --probe`: the probe's optimum, measured against the empirical best
            {**_config_record(r), "predicted_when_run": float(r["predicted_when_run"]),
             "ratio_to_empirical_best": float(r["compute_to_target"] / best["compute_to_target"])}
            for _, r in configs[configs["arm"] == "probe"].iterrows()
        ],
        "models": _models(uniform, data.reference_mu, xb, yb, bootstrap, seed) if models else [],
    }
    if len(base):
        b = base.iloc[0]
        block["baseline"] = {**_config_record(b), "predicted_compute_to_target": float(fit.predict(b["x"], b["y"]))}
        block["savings_vs_on_policy"] = {
            # Paired by seed (geometric mean of per-seed ratios), with its 95% interval and verdict.
            "measured": 1 - float(best["ratio_to_baseline"]) if not best["baseline"] else 0.0,
            "measured_ci": [1 - float(best["ratio_ci_high"]), 1 - float(best["ratio_ci_low"])] if not best["baseline"] else [0.0, 0.0],
            "verdict": str(best["verdict"]),
            "predicted": 1 - c_star / float(fit.predict(b["x"], b["y"])),
        }
    return block, fit


MODEL_MIN_CONFIGURATIONS = 4
"""Fewer uniform configurations than this: the models are not compared (most would have more parameters than
configurations)."""


def _models(uniform: pd.DataFrame, mu: float, xb, yb, bootstrap: int, seed: int) -> list[dict]:
    """Every registered model fitted to uniform replay's runs, best first (`analysis.models.compare`), each with its
    optimum or the reason it refuses one."""
    if uniform.groupby(["x", "y"]).ngroups < MODEL_MIN_CONFIGURATIONS:
        return []
    lr_bounds = (float(uniform["lr"].min()), float(uniform["lr"].max())) if "lr" in uniform else None  # never extrapolated
    return [{**f.summary(), "optimum": optimum(f, xb, yb, lr_bounds=lr_bounds)} for f in compare(uniform, mu, bootstrap=min(bootstrap, 30), seed=seed)]


def _models_section(result: dict) -> list[str]:
    models = result.get("models") or []
    if not models:
        return []
    lines = [
        "## Models compared",
        "",
        "Every registered model of compute-to-target (`analysis.models`; equations in docs/theory.md, \"Models of "
        "compute-to-target\") fitted to the same runs with the same censored likelihood, best first by the "
        "leave-one-configuration-out error (a model's prediction for a configuration it was not fitted on, against that "
        "configuration's median), then AIC. A parameter is *unidentified* when its 95% profile-likelihood interval runs into "
        "a bound; an optimum is refused when the predicted compute is flat around it.",
        "",
        "| model | parameters | AIC | LOCO median abs log error (configurations) | R² (log) | unidentified | predicted optimum |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in models:
        loco = m["loco"]
        held = f"{_fmt(loco['median_abs_log_error'])} ({loco['n']})" if loco.get("n") else "-"
        o = m["optimum"]
        at_lr = f", lr {_fmt(o['lr'])}" if "lr" in o else ""
        best = f"refused: {o['refused']}" if "refused" in o else f"x {_fmt(o['x'])}, y {_fmt(o['y'])}{at_lr}: {_fmt(o['compute'])}"
        if "ridge_point" in o:
            r = o["ridge_point"]
            best += (f"; the ridge's simplest point x {_fmt(r['x'])}, y {_fmt(r['y'])}" + (f", lr {_fmt(r['lr'])}" if "lr" in r else "")
                     + f": {_fmt(r['compute'])} (`study verify --model {m['model']} --ridge`)")
        params = ", ".join(f"{k} {_fmt(v)}" for k, v in m["params"].items() if k != "scale")
        lines.append(f"| `{m['model']}` | {params} | {_fmt(m['aic'])} | {held} | {_fmt(m['r2_log'])} | "
                     f"{', '.join(m['unidentified']) or 'none'} | {best} |")
    return lines + [""]


def _laws(data: StudyData, models: list[dict]) -> list[dict]:
    """The paper's laws that this study can test (`analysis.laws`); F2's predicted minimum uses thm45's fitted rho."""
    rho = next((m["params"].get("rho") for m in models if m["model"] == "thm45"), None)
    verdicts = [laws.f1_sqrt_mu(data), laws.f2_u_shape(data, rho=rho), laws.f3_lr_falls_with_y(data)]
    return [asdict(v) | {"line": v.line()} for v in verdicts if v.verdict != "not testable"]


def _laws_section(result: dict) -> list[str]:
    verdicts = result.get("laws") or []
    if not verdicts:
        return []
    lines = ["## The paper's laws", "",
             "Falsification tests of replay-papers §6.4 (`analysis.laws`), with a bootstrap over the seeds every configuration "
             "ran: *holds*, *falsified*, or *unresolved* when the data cannot tell.", ""]
    lines += [f"- **{v['line']}**" for v in verdicts]
    f1 = next((v for v in verdicts if v["law"] == "F1"), None)
    if f1:
        lines += ["", "F1: one grid re-accounted at each mu (the learning curves do not depend on mu in the synchronous setting).", "",
                  "| mu | optimum x | optimum y | its compute | y 95% interval | share of draws where each (x, y) is optimal |",
                  "|---|---|---|---|---|---|"]
        for r in f1["rows"]:
            share = ", ".join(f"({k}) {100 * v:.0f}%" for k, v in r["optimum_share"].items())
            lines.append(f"| {_fmt(r['mu'])} | {_fmt(r['x'])} | {_fmt(r['y'])} | {_fmt(r['compute_to_target'])} | "
                         f"[{_fmt(r['y_low'])}, {_fmt(r['y_high'])}] | {share} |")
    return lines + [""]


def _confirmations(data: StudyData, configs: pd.DataFrame) -> list[dict]:
    """Each configuration re-run on fresh seeds (`study confirm`): its selection record beside its replication."""
    out = []
    def by_knobs(r) -> tuple:  # NaN (no horizon) never equals itself: key it as None
        return tuple(None if isinstance(v, float) and math.isnan(v) else v
                     for v in (r["x"], r["y"], r["capacity"], r["ratio"], r["horizon"], r["strategy"], bool(r["baseline"]), r.get("lr")))

    selection = {by_knobs(r): r for _, r in configs[configs["arm"] != "confirm"].iterrows()}
    for _, r in configs[configs["arm"] == "confirm"].iterrows():
        sel = selection.get(by_knobs(r))
        if sel is not None:  # the baseline too: its replication is what every other replication is paired against
            seeds = lambda n: sorted(int(s) for s in data.runs.loc[data.runs["trial_number"] == n, "seed"])  # noqa: E731
            out.append({"selection": {**_config_record(sel), "seed_list": seeds(sel["trial_number"])},
                        "replicated": {**_config_record(r), "seed_list": seeds(r["trial_number"])}})
    return out


def analyze(name: str, tracking_uri: str, whatif_mu: list[float] = (5.28,), bootstrap: int = 200, seed: int = 0,
            target: float | None = None, estimator: str | None = None) -> tuple[dict, StudyData, object]:
    """Everything the report needs, as a JSON-able dict; also returns the data and the fit for plotting.
    `target`, `estimator`: read compute-to-target at this accuracy, with this estimator, instead of the study's."""
    data = load_study(name, tracking_uri)
    if target is not None or estimator is not None:
        data = retarget(data, target if target is not None else data.target, estimator)
    block, fit = _optimum_block(data, bootstrap, seed)
    configs = data.configs()
    result = {
        "study": name,
        "target_accuracy": data.target,
        "metric": data.metric,
        "estimator": data.estimator,
        "resolution": resolution(data.runs),
        "noise_by_estimator": by_estimator(data.curves, data.runs, data.target),
        "by_reading": by_reading(data.curves, data.runs, data.metric, data.target, data.estimator, data.gain_fraction),
        "reference_mu": data.reference_mu,
        "n_runs": len(data.runs),
        "n_configurations": len(configs),
        "n_censored_runs": int(data.runs["censored"].sum()),
        "variance_form": "distinct draws (uniform strategy): V = sigma_bar²(x)(1/B + rho/R)",
        "noise_model": "sigma²(tau) = sigma0² (1 + tau/tau0)^(2 alpha)",
        **block,
        "configurations": [_config_record(r) for _, r in configs.iterrows()],
        "confirmations": _confirmations(data, configs),
        "tuned_lr": tuned_lr(data.runs),
        "whatif": {},
        "laws": _laws(data, block.get("models") or []),
        "pipeline": split_table(data),
    }
    if result["pipeline"]:  # the predicted optimum as an asynchronous split (W/T ≈ mu / y*, N = x*·B / y*)
        result["pipeline_mapped"] = mapped_split(block["predicted"]["x"], block["predicted"]["y"], data.reference_mu,
                                                 int(data.runs["batch_size"].iloc[0]))
    for mu in whatif_mu:
        w, _ = _optimum_block(reaccount(data, mu), bootstrap=0, seed=seed, models=False)
        result["whatif"][f"{mu:g}"] = w
    return result, data, fit


def write_figures(data: StudyData, fit, result: dict, out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    configs = data.configs()
    # The figures set the baseline beside the best replay configuration, even where on-policy is the best overall.
    replay = configs[~configs["baseline"].astype(bool) & (configs["arm"] != "confirm")].sort_values("compute_to_target")
    best_trial = int(replay["trial_number"].iloc[0]) if len(replay) else result["empirical"]["trial_number"]
    return {
        "accuracy_vs_compute": plots.accuracy_vs_compute(data, out, best_trial),
        "savings": plots.savings(configs, out),
        "pareto_front": plots.pareto_front(configs[configs["arm"] != "confirm"], out),
        "heatmap": plots.heatmap(configs[configs["arm"] != "confirm"], out, (result["predicted"]["x"], result["predicted"]["y"])),
        "predicted_vs_measured": plots.predicted_vs_measured(configs, fit, out),
        "entropy_vs_compute": plots.entropy_vs_compute(data, out, best_trial),
        "staleness_histogram": plots.staleness_histogram(data, best_trial, out),
    }


def _fmt(v, digits=3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}g}" if math.isfinite(v) else "-"
    return str(v)


def _ci(r: dict) -> str:
    if not math.isfinite(r.get("ci_low", math.nan)):
        return _fmt(r["compute_to_target"])
    return f"{_fmt(r['compute_to_target'])} [{_fmt(r['ci_low'])}, {_fmt(r['ci_high'])}]"


def _ratio(r: dict) -> str:
    if not math.isfinite(r.get("ratio_to_baseline", math.nan)):
        return "-"
    return f"{r['ratio_to_baseline']:.2f} [{r['ratio_ci_low']:.2f}, {r['ratio_ci_high']:.2f}]"


def _lr_varies(result: dict) -> bool:
    return len({c.get("lr") for c in result.get("configurations", [])}) > 1


def _what(r: dict, show_lr: bool = False) -> str:
    lr = f", lr {r['lr']:.3g}" if show_lr and "lr" in r else ""
    if r["baseline"]:
        return "on-policy" + lr
    return (f"{r['strategy']} " if r.get("strategy", "uniform") != "uniform" else "") + f"x {_fmt(r['x'])}, y {_fmt(r['y'])}" + lr


def _comparison_section(result: dict) -> list[str]:
    lines = ["## Every configuration, with its uncertainty", "",
             "Compute to target: geometric mean over seeds with its 95% interval (bootstrap over seeds, never narrower than"
             " Student's t). Ratio: compute to target over on-policy's on the same seeds (paired), 95% interval; a"
             " difference is resolved only when that interval excludes 1. Censored seeds enter at their total compute"
             " (a lower bound).", "",
             "| trial | arm | configuration | seeds (censored) | compute to target [95% CI] | ratio to on-policy [95% CI] | verdict |",
             "|---|---|---|---|---|---|---|"]
    for r in sorted(result["configurations"], key=lambda r: (r["arm"] == "confirm", r["compute_to_target"])):
        lines.append(f"| {r['trial_number']} | {'baseline' if r['baseline'] and r['arm'] == 'sampler' else r['arm']} | {_what(r, _lr_varies(result))} | {r['seeds']} ({r['censored_seeds']}) | {_ci(r)} | {_ratio(r)} | {r['verdict']} |")
    return lines + [""]


def _pair(p: dict | None) -> str:
    return "-" if not p or not math.isfinite(p["ratio"]) else f"{p['ratio']:.2f} [{_fmt(p['low'])}, {_fmt(p['high'])}]: {p['verdict']}"


def _tuned_lr_section(result: dict) -> list[str]:
    t = result.get("tuned_lr")
    if not t:
        return []
    lines = ["## At a matched learning rate", "",
             "The ratios above set every configuration against on-policy at one learning rate, so a saving there may"
             " come from the learning rate alone. On-policy ran at " + ", ".join(
                 f"lr {_fmt(o['lr'])} (trial {o['trial_number']}: {_fmt(o['compute_to_target'])} [{_fmt(o['ci_low'])}, {_fmt(o['ci_high'])}])"
                 for o in t["on_policy_by_lr"]) + f"; its best, lr {_fmt(t['on_policy_best_lr'])}, is a selection estimate.", "",
             "Each configuration against on-policy at its own learning rate (paired by seed):", "",
             "| trial | configuration | ratio to on-policy at the same lr [95% CI]: verdict |", "|---|---|---|"]
    lines += [f"| {r['trial_number']} | {_what({**r, 'baseline': False}, True)} | {_pair(r['same_lr'])} |" for r in t["same_lr"]]
    lines += ["", f"Each (x, y) at its best learning rate against on-policy at its best (lr {_fmt(t['on_policy_best_lr'])}), the"
              " comparison the paper makes (lr re-tuned per configuration); both sides selected on the same seeds:", "",
              "| trial | configuration (its best lr) | compute to target [95% CI] | ratio to tuned on-policy [95% CI]: verdict |", "|---|---|---|---|"]
    lines += [f"| {r['trial_number']} | {_what({**r, 'baseline': False}, True)} | {_ci(r)} | {_pair(r['against_tuned'])} |" for r in t["tuned"]]
    return lines + [""]


def _resolution_section(result: dict) -> list[str]:
    z = result.get("resolution") or {}
    lines = ["## What this study can and cannot resolve", ""]
    sd = z.get("per_run_log_sd", math.nan)
    if not math.isfinite(sd):
        lines.append("No configuration has two uncensored seeds: the per-run noise is not measured, and no difference"
                     " between configurations can be resolved.")
    else:
        lines.append(f"Per-run noise: the standard deviation of log compute-to-target between seeds of one configuration is "
                     f"{sd:.3f} (pooled over configurations, {z['per_run_log_sd_df']} degrees of freedom): one run is uncertain by "
                     f"about x{math.exp(sd):.2f}. Paired by seed against on-policy, the log ratio varies by "
                     f"{_fmt(z.get('paired_log_sd', math.nan))} between seeds.")
    if "smallest_resolvable_saving" in z:
        lines.append(f"With {z['seeds_per_configuration']} seeds per configuration, savings smaller than about "
                     f"{z['smallest_resolvable_saving']:.0%} cannot be told apart from none; resolving a 10% saving would take "
                     f"about {z.get('seeds_to_resolve_10pct') or 'more than 1000'} paired seeds, a 25% saving about "
                     f"{z.get('seeds_to_resolve_25pct') or 'more than 1000'}.")
    noise = result.get("noise_by_estimator") or []
    if noise:
        lines += ["", f"Per-run noise by estimator at target {result['target_accuracy']:g} (the study uses "
                  f"`{result.get('estimator', 'first')}`): sd of log compute-to-target over seeds (censored seeds left out), and "
                  "each configuration's paired ratio to on-policy with its 95% interval.", "",
                  "| estimator | trial | seeds (censored) | log sd | geometric mean | paired log sd | ratio to on-policy [95% CI] |",
                  "|---|---|---|---|---|---|---|"]
        for r in noise:
            ratio = "-" if not math.isfinite(r.get("ratio", math.nan)) else f"{r['ratio']:.2f} [{r['ratio_ci_low']:.2f}, {r['ratio_ci_high']:.2f}]"
            lines.append(f"| {r['estimator']} | {r['trial_number']}{' (on-policy)' if r['baseline'] else ''} | {r['seeds']} ({r['censored']}) "
                         f"| {_fmt(r['log_sd'])} | {_fmt(r['geo_mean'])} | {_fmt(r.get('paired_log_sd', math.nan))} | {ratio} |")
        lines.append("")
    resolved = [r for r in result["configurations"] if r["verdict"].startswith("resolved")]
    unresolved = [r for r in result["configurations"] if r["verdict"].startswith("unresolved")]
    lines.append(f"Of the {len(resolved) + len(unresolved)} configurations compared with on-policy, {len(resolved)} differ resolvably "
                 f"and {len(unresolved)} are unresolved (their intervals contain 1): for those this study says nothing either way.")
    return lines + [""]


def _readings_section(result: dict) -> list[str]:
    rows = result.get("by_reading") or []
    if len({r["reading"] for r in rows}) < 2:
        return []
    lines = ["## The same comparisons read on another curve", "",
             f"The runs logged more than one held-out curve at every evaluation. Each comparison with on-policy read on each"
             f" of them by `{result.get('estimator', 'first')}`: the study's own curve at its target, the others at the"
             " level the baseline's seeds reach by the study's auto-target rule there. Where the verdicts differ, whether"
             " a setting saves compute depends on what the user reads (docs/measurement.md, \"Reading a smooth curve\").", "",
             "| curve read (target) | trial | seeds (censored) | log sd | paired log sd | ratio to on-policy [95% CI] | verdict |",
             "|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["trial_number"], not r["study_reading"])):
        ratio = "-" if not math.isfinite(r.get("ratio", math.nan)) else f"{r['ratio']:.2f} [{r['ratio_ci_low']:.2f}, {r['ratio_ci_high']:.2f}]"
        lines.append(f"| {r['reading']} at {r['target']:g}{' (the study)' if r['study_reading'] else ''} | {r['trial_number']}"
                     f"{' (on-policy)' if r['baseline'] else ''} | {r['seeds']} ({r['censored']}) | {_fmt(r['log_sd'])} "
                     f"| {_fmt(r.get('paired_log_sd', math.nan))} | {ratio} | {r.get('verdict', '-')} |")
    verdicts: dict[int, set[str]] = {}
    for r in rows:
        if "verdict" in r:  # the verdict's kind: resolved less, resolved more, or unresolved
            verdicts.setdefault(r["trial_number"], set()).add(" ".join(r["verdict"].replace(":", " ").split()[:2]) if r["verdict"].startswith("resolved") else "unresolved")
    split = sorted(n for n, v in verdicts.items() if len(v) > 1)
    lines += ["", ("The curves disagree about trial" + ("s " if len(split) > 1 else " ") + ", ".join(map(str, split)) + ": "
                   "read both rows of each before taking a verdict.") if split else
              "Every comparison gets the same verdict on every curve read.", ""]
    return lines


def _pipeline_section(result: dict) -> list[str]:
    rows = result.get("pipeline") or []
    if not rows:
        return []
    lines = ["## The asynchronous pipeline", "",
             "Each configuration's split (W generators, T trainers), the replay ratio that emerged (K_train / K_gen), mu"
             " by the paper's estimator (K_train/T)/(K_gen/W) (App. D.4; a cost ratio only where neither side stalls),"
             " each side's idle fraction, and the wall time to the target (evaluations excluded; geometric mean over seeds"
             " with its 95% interval), paired by seed against the synchronous on-policy baseline. `y from split` is"
             " mu·T/W at the synchronous runs' measured mu: the replay ratio the theory's mapping expects of that split.", "",
             "| trial | pipeline | strategy | W | T | capacity | seeds (censored) | replay ratio | y from split | mu (D.4) |"
             " trainer idle | generator idle | wall to target, s [95% CI] | / sync on the same seeds [95% CI] | compute to target |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        wall = f"{_fmt(r['wall_to_target'])} [{_fmt(r['wall_ci'][0])}, {_fmt(r['wall_ci'][1])}]"
        ratio = "baseline" if r["baseline"] else (
            f"{_fmt(r.get('wall_ratio_to_sync'))} [{_fmt(r.get('wall_ratio_ci', [None, None])[0])}, "
            f"{_fmt(r.get('wall_ratio_ci', [None, None])[1])}]: {r.get('wall_verdict', '-')}")
        lines.append(f"| {r['trial_number']} | {r['pipeline']} | {r['strategy']} | {r['generators']} | {r['trainers']} | {r['capacity']} "
                     f"| {r['seeds']} ({r['censored_seeds']}) | {_fmt(r['replay_ratio'])} | {_fmt(r.get('replay_ratio_from_split'))} "
                     f"| {_fmt(r['mu_d4'])} | {_fmt(r['trainer_idle'])} | {_fmt(r['generator_idle'])} | {wall} | {ratio} "
                     f"| {_fmt(r['compute_to_target'])} |")
    m = result.get("pipeline_mapped")
    if m:
        lines += ["", f"The fitted optimum (x* {_fmt(m['x'])}, y* {_fmt(m['y'])}) as an asynchronous split at mu {_fmt(result['reference_mu'])}:"
                  f" W/T ≈ {_fmt(m['workers_per_trainer'])}, a buffer of N ≈ {m['capacity']} rollouts (replay-papers §6.2)."]
    return lines + [""]


def _confirmation_section(result: dict) -> list[str]:
    if not result.get("confirmations"):
        return ["No configuration of this study has been re-run on fresh seeds yet (`workbench study confirm SPEC`): "
                "the best configuration's estimate is a selection estimate.", ""]
    lines = ["## Replication on fresh seeds (`workbench study confirm`)", "",
             "The best configurations and the baseline re-run on seeds never used in selection: the selection estimate"
             " beside the replicated one (the winner's curse made visible).", "",
             "| trial | configuration | estimate | seeds | compute to target [95% CI] | ratio to on-policy [95% CI] | verdict |",
             "|---|---|---|---|---|---|---|"]
    for c in result["confirmations"]:
        for what in ("selection", "replicated"):
            r = c[what]
            lines.append(f"| {r['trial_number']} | {_what(r, _lr_varies(result))} | {what} | {','.join(map(str, r['seed_list']))} | {_ci(r)} | {_ratio(r)} | {r['verdict']} |")
    return lines + [""]


def markdown(result: dict, figures: dict[str, Path]) -> str:
    f, p, e = result["fit"], result["predicted"], result["empirical"]
    iv = f.get("intervals", {})
    ci = lambda k: f" [{_fmt(iv[k][0])}, {_fmt(iv[k][1])}]" if k in iv else ""  # noqa: E731
    lines = [
        f"# Study `{result['study']}`",
        "",
        f"{result['n_runs']} runs in {result['n_configurations']} configurations, {result['n_censored_runs']} censored "
        f"(target {result['target_accuracy']:g} never reached); compute at the study's reference mu = {result['reference_mu']:.3g}; "
        f"compute-to-target read by the `{result.get('estimator', 'first')}` estimator from the curve "
        f"`{result.get('metric', 'accuracy')}` ({METRICS[result.get('metric', 'accuracy')]}).",
        "",
        *_comparison_section(result),
        *_tuned_lr_section(result),
        *_resolution_section(result),
        *_readings_section(result),
        *_confirmation_section(result),
        *_pipeline_section(result),
        "## Fit of the bias-variance-compute model",
        "",
        *([f"The model describes uniform replay: it is fitted to the {result['fit_configurations']} (x, y) configurations of the"
           f" uniform strategy (on-policy included); {', '.join(result['other_strategies'])} are compared in the tables above,"
           " not modelled.", ""] if result.get("other_strategies") else []),
        *([f"With {result['fit_configurations']} configurations for 5 free parameters the fit is underdetermined: read it as an"
           " illustration of the pipeline, not as an estimate (run studies/replay_grid_demo_hi.yaml for a real fit).", ""]
          if result["fit_configurations"] < 6 else []),
        f"Model: log C = log s + log J(x, y), {result['variance_form']}, {result['noise_model']}; censored runs enter as lower bounds (Tobit).",
        "",
        "| parameter | estimate | 95% bootstrap interval |",
        "|---|---|---|",
        f"| alpha | {_fmt(f['alpha'])} |{ci('alpha')} |",
        f"| tau0 | {_fmt(f['tau0'])} |{ci('tau0')} |",
        f"| rho | {_fmt(f['rho'])} |{ci('rho')} |",
        f"| scale s | {_fmt(f['scale'])} |{ci('scale')} |",
        f"| noise sigma (log) | {_fmt(f['sigma'])} |{ci('sigma')} |",
        "",
        f"Goodness of fit: R² (log, uncensored) = {_fmt(f['r2_log'])}, median |log error| = {_fmt(f['median_abs_log_error'])}; "
        f"leave-one-configuration-out: {json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in f['loco'].items()})}.",
        "",
        *_models_section(result),
        *_laws_section(result),
        "## Predicted against empirical optimum",
        "",
        "| | x = N/R | y = B/R | capacity | compute to target (measured) | predicted |",
        "|---|---|---|---|---|---|",
        f"| predicted optimum | {_fmt(p['x'])} | {_fmt(p['y'])} | {p['knobs']['capacity']} | nearest measured (x={_fmt(p['nearest_measured']['x'])}, y={_fmt(p['nearest_measured']['y'])}): {_fmt(p['nearest_measured']['compute_to_target'])} | {_fmt(p['compute_to_target'])} |",
        f"| empirical optimum (trial {e['trial_number']}, selection estimate) | {_fmt(e['x'])} | {_fmt(e['y'])} | {e['capacity']} | {_ci(e)} | {_fmt(e['predicted_compute_to_target'])} |",
    ]
    if "baseline" in result:
        b = result["baseline"]
        lines.append(f"| on-policy baseline (trial {b['trial_number']}) | 1 | 1 | {b['capacity']} | {_ci(b)} | {_fmt(b['predicted_compute_to_target'])} |")
    lines += [
        "",
        f"Measured compute of the configuration nearest the predicted optimum / empirical optimum: "
        f"{_fmt(result['measured_ratio_nearest_predicted_to_empirical'])}.",
    ]
    if "savings_vs_on_policy" in result:
        s = result["savings_vs_on_policy"]
        ci = s.get("measured_ci", [math.nan, math.nan])
        lines.append(f"Savings of the empirical optimum against on-policy, paired by seed: measured {s['measured']:.1%} "
                     f"(95% CI {ci[0]:.1%} to {ci[1]:.1%}; {s.get('verdict', 'no interval')}), predicted {s['predicted']:.1%}. "
                     "The empirical optimum is the best of the configurations tried, so its estimate is biased in its favour "
                     "(the winner's curse); only a confirmation on fresh seeds removes that bias.")
    if p["on_policy_optimal"]:
        lines.append("The fitted model predicts that on-policy training is optimal on this task at this mu.")
    if result.get("verified"):
        lines += ["", "## The fitted optimum, run as trials of the study (`workbench study verify`)", "",
                  "| trial | x | y | capacity | seeds (censored) | compute to target (measured) | predicted when run | predicted by this fit | measured / predicted when run |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for v in result["verified"]:
            lines.append(f"| {v['trial_number']} | {_fmt(v['x'])} | {_fmt(v['y'])} | {v['capacity']} | {v['seeds']} ({v['censored_seeds']}) "
                         f"| {_fmt(v['compute_to_target'])} | {_fmt(v['predicted_when_run'])} | {_fmt(v['predicted_now'])} "
                         f"| {_fmt(v['compute_to_target'] / v['predicted_when_run'])} |")
        lines += ["", "These runs are part of the data this fit was made from (the fit when they were run did not include them)."]
    if result.get("probe_verified"):
        lines += ["", "## The probe's optimum, run as trials of the study (`workbench study verify --probe`)", "",
                  "| trial | x | y | capacity | seeds (censored) | compute to target (measured) | predicted when run | measured / empirical best |",
                  "|---|---|---|---|---|---|---|---|"]
        for v in result["probe_verified"]:
            lines.append(f"| {v['trial_number']} | {_fmt(v['x'])} | {_fmt(v['y'])} | {v['capacity']} | {v['seeds']} ({v['censored_seeds']}) "
                         f"| {_fmt(v['compute_to_target'])} | {_fmt(v['predicted_when_run'])} | {_fmt(v['ratio_to_empirical_best'])} |")
    lines += ["", "## What if generation cost more (re-accounted curves)", "",
              "The same curves, accounted at another mu: savings paired by seed with their 95% interval; the best"
              " configuration is again a selection estimate.", "",
              "| mu | predicted x* | predicted y* | empirical best (x, y) | savings vs on-policy, measured [95% CI] | verdict | predicted |",
              "|---|---|---|---|---|---|---|"]
    for mu, w in result["whatif"].items():
        s = w.get("savings_vs_on_policy", {})
        ci = s.get("measured_ci", [math.nan, math.nan])
        lines.append(f"| {mu} | {_fmt(w['predicted']['x'])} | {_fmt(w['predicted']['y'])} | ({_fmt(w['empirical']['x'])}, {_fmt(w['empirical']['y'])}) "
                     f"| {s.get('measured', math.nan):.1%} [{ci[0]:.1%}, {ci[1]:.1%}] | {s.get('verdict', '-')} | {s.get('predicted', math.nan):.1%} |")
    lines += ["", "## Pareto front (best accuracy against compute to target)", "", "| trial | x | y | compute to target | best accuracy |", "|---|---|---|---|---|"]
    for r in result["pareto_front"]:
        lines.append(f"| {r['trial_number']} | {_fmt(r['x'])} | {_fmt(r['y'])} | {_fmt(r['compute_to_target'])} | {_fmt(r['best_accuracy'])} |")
    lines += ["", "## Figures", ""]
    for name, path in figures.items():
        lines.append(f"![{name.replace('_', ' ')}]({path.name})")
    return "\n".join(lines) + "\n"


STYLE = ("body{font-family:sans-serif;max-width:980px;margin:2em auto;color:#222}table{border-collapse:collapse;margin:1em 0}"
         "td,th{border:1px solid #ccc;padding:4px 8px;font-size:14px}img{max-width:100%}figure{margin:1.5em 0}")


def html_page(result: dict, md: str, figures: dict[str, Path]) -> str:
    """The report's Markdown rendered as one self-contained page: figures inlined as data URIs, and every user
    string escaped (raw HTML in the Markdown is not rendered, only shown)."""
    inline = {path.name: base64.b64encode(path.read_bytes()).decode() for path in figures.values()}
    renderer = MarkdownIt("commonmark", {"html": False}).enable("table")
    default_image = renderer.renderer.rules["image"]

    def image(self, tokens, idx, options, env):
        src = tokens[idx].attrGet("src")
        if src in inline:
            tokens[idx].attrSet("src", f"data:image/png;base64,{inline[src]}")
        return default_image(tokens, idx, options, env)

    renderer.add_render_rule("image", image)
    body = renderer.render(md)
    title = html.escape(f"replay-workbench: {result['study']}")
    return f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title><style>{STYLE}</style></head><body>{body}</body></html>\n"


def write_report(result: dict, data: StudyData, fit, out: Path) -> dict[str, Path]:
    figures = write_figures(data, fit, result, out)
    md = markdown(result, figures)
    (out / "report.md").write_text(md)
    (out / "report.html").write_text(html_page(result, md, figures))
    (out / "analysis.json").write_text(json.dumps(result, indent=1, default=float))
    return {"markdown": out / "report.md", "html": out / "report.html", "json": out / "analysis.json", **figures}
