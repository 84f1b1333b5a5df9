"""`workbench analyze` and `workbench report`: fit, compare predicted against empirical optimum, write reports.

`analyze` reads a study from MLflow and returns everything the report shows as one `analysis.result.Analysis`
(written as `analysis.json`, its `to_json()`); `write_report` writes the report beside it, as Markdown and as one self-contained HTML page
(figures embedded as data URIs, every user string escaped). The report reads top to bottom: its bottom line
(`analysis.bottom_line`), the figures with their captions (`analysis.plots`), then the tables (`analysis.sections`).
Where it is written: `analysis.destination`.
"""

from __future__ import annotations

import base64
import html
import math
from dataclasses import asdict, fields, replace
from pathlib import Path

import numpy as np
import pandas as pd
from markdown_it import MarkdownIt
from threadpoolctl import threadpool_limits

from analysis import laws, null_models, phases, plots, predictions
from analysis.bottom_line import bottom_line, runs_line
from analysis.data import StudyData, load_study, reaccount, retarget
from analysis.fit import Fit, fit_runs, predicted_optimum
from analysis.models import compare, optimum
from analysis.runs_table import write_runs_table
from analysis.pipeline import device_time_to_target, is_async, mapped_split, split_table
from analysis.result import (
    Analysis,
    Configuration,
    Confirmation,
    Estimate,
    FitSummary,
    FittedOptimum,
    ModelSummary,
    LossModels,
    Predicted,
    ProbeVerified,
    Replicate,
    Savings,
    Verified,
    dumps,
)
from analysis.resolution import by_checkpoint, by_estimator, by_reading, resolution
from analysis.sections import tables
from analysis.sharpness import skill_or_sharpness
from analysis.stale_signals import stale_signals
from analysis.theory import to_knobs
from analysis.tuned_lr import baseline_objective, is_on_policy, tuned_lr

FIGURES = (
    "savings",
    "accuracy_vs_compute",
    "heatmap",
    "pareto_front",
    "predicted_vs_measured",
    "entropy_vs_compute",
    "staleness_histogram",
)
"""The report's figures, in the order it shows them (each `analysis.plots.<name>`, written as `<name>.png`)."""
OUTPUT_FILES = ("report.md", "report.html", "analysis.json", "runs.csv", *(f"{name}.png" for name in FIGURES))
"""Every file `write_report` writes into its folder (`analysis.destination` checks none of them is tracked)."""


def _config_fields(row) -> dict:
    """A configuration row of `StudyData.configs()` as `analysis.result.Configuration`'s fields."""
    variant = row.get("variant")
    return {
        "trial_number": int(row["trial_number"]),
        "x": float(row["x"]),
        "y": float(row["y"]),
        "capacity": int(row["capacity"]),
        "ratio": float(row["ratio"]),
        "baseline": bool(row["baseline"]),
        "strategy": str(row.get("strategy", "uniform")),
        "variant": str(variant) if isinstance(variant, str) and variant else None,
        "compute_to_target": float(row["compute_to_target"]),
        "ci_low": float(row["ci_low"]),
        "ci_high": float(row["ci_high"]),
        "ratio_to_baseline": float(row["ratio_to_baseline"]),
        "ratio_ci_low": float(row["ratio_ci_low"]),
        "ratio_ci_high": float(row["ratio_ci_high"]),
        "verdict": str(row["verdict"]),
        "best_accuracy": float(row["best_accuracy"]),
        "best_reading": float(row["best_reading"]),
        "seeds": int(row["seeds"]),
        "censored_seeds": int(row["censored_seeds"]),
        "arm": str(row.get("arm", "sampler")),
        **{k: int(row[k]) for k in ("informative_pairs", "one_censored_pairs", "both_censored_pairs") if k in row},
        "lr": float(row["lr"]) if "lr" in row and pd.notna(row["lr"]) else None,
    }


def _config_record(row) -> Configuration:
    return Configuration(**_config_fields(row))


def _pareto(configs: pd.DataFrame) -> tuple[Configuration, ...]:
    """The configurations no other reaches a higher best reading of the study's curve with less compute than."""
    front, best = [], -math.inf
    for _, r in configs.sort_values("compute_to_target").iterrows():
        if r["best_reading"] > best:
            front.append(_config_record(r))
            best = r["best_reading"]
    return tuple(front)


def _nearest(configs: pd.DataFrame, x: float, y: float):
    d = (np.log(configs["x"]) - math.log(x)) ** 2 + (np.log(configs["y"]) - math.log(y)) ** 2
    return configs.loc[d.idxmin()]


def _bounds(configs: pd.DataFrame) -> tuple[tuple[float, float], tuple[float, float]]:
    """The (x, y) range an optimum is searched in: the grid and twice beyond it, at least x <= 64, y <= 8."""
    return (1.0, max(64.0, 2 * float(configs["x"].max()))), (1.0, max(8.0, 2 * float(configs["y"].max())))


def _optimum_block(data: StudyData, bootstrap: int, seed: int, bar: bool = False) -> tuple[FittedOptimum, Fit]:
    """The fitted (thm45) and the empirical optimum, the baseline and the savings against it, the Pareto front, and
    the trials `study verify` ran; `bootstrap` refits for the fit's intervals (counted on stderr). The compared
    models are added by `analyze_data`."""
    configs = data.configs()
    selection = configs[configs["arm"] != "confirm"]  # fresh-seed re-runs are reported beside, never selected
    batch = int(data.runs["batch_size"].iloc[0])
    # The model is uniform replay's (Arnal et al.): other strategies are compared in the tables, never fitted.
    uniform = data.runs[data.runs["strategy"] == "uniform"]
    fit = fit_runs(uniform, data.reference_mu, bootstrap=bootstrap, seed=seed, bar=bar)
    xb, yb = _bounds(configs)
    x_star, y_star, c_star = predicted_optimum(fit, xb, yb)
    ranked = selection.assign(censored_share=selection["censored_seeds"] / selection["seeds"]).sort_values(
        ["censored_share", "compute_to_target"]
    )
    best = ranked.iloc[0]
    base = selection[selection["baseline"]]
    nearest = _nearest(selection, x_star, y_star)
    baseline, savings = None, None
    if len(base):
        b = base.iloc[0]
        baseline = Estimate(**_config_fields(b), predicted_compute_to_target=float(fit.predict(b["x"], b["y"])))
        savings = Savings(  # paired by seed (geometric mean of per-seed ratios), with its 95% interval and verdict
            measured=1 - float(best["ratio_to_baseline"]) if not best["baseline"] else 0.0,
            measured_ci=(1 - float(best["ratio_ci_high"]), 1 - float(best["ratio_ci_low"]))
            if not best["baseline"]
            else (0.0, 0.0),
            verdict=str(best["verdict"]),
            predicted=1 - c_star / float(fit.predict(b["x"], b["y"])),
        )
    block = FittedOptimum(
        mu=data.reference_mu,
        fit=FitSummary.from_json(fit.summary()),
        fit_configurations=int(uniform.groupby(["x", "y"]).ngroups),
        other_strategies=tuple(sorted(set(data.runs["strategy"]) - {"uniform"})),
        predicted=Predicted(
            x=x_star,
            y=y_star,
            compute_to_target=c_star,
            knobs=to_knobs(x_star, y_star, batch, data.reference_mu).__dict__,
            nearest_measured=_config_record(nearest),
            on_policy_optimal=y_star < 1.05 and x_star < 1.05,
        ),
        empirical=Estimate(
            **_config_fields(best), predicted_compute_to_target=float(fit.predict(best["x"], best["y"]))
        ),
        measured_ratio_nearest_predicted_to_empirical=float(nearest["compute_to_target"] / best["compute_to_target"]),
        pareto_front=_pareto(selection),
        verified=_verified(configs, fit),
        probe_verified=_probe_verified(data, configs, best),
        baseline=baseline,
        savings_vs_on_policy=savings,
    )
    return block, fit


def _verified(configs: pd.DataFrame, fit: Fit) -> tuple[Verified, ...]:
    """The fitted optimum as `study verify` ran it: measured, predicted when run and by this fit."""
    return tuple(
        Verified(
            **_config_fields(r),
            predicted_when_run=float(r["predicted_when_run"]),
            predicted_now=float(fit.predict(r["x"], r["y"])),
        )
        for _, r in configs[configs["arm"] == "predicted"].iterrows()
    )


def _probe_verified(data: StudyData, configs: pd.DataFrame, best) -> tuple[ProbeVerified, ...]:
    """`study verify --probe`: the probe's optimum, measured against the empirical best and its own lr sweep."""
    return tuple(
        ProbeVerified(
            **_config_fields(r),
            predicted_when_run=float(r["predicted_when_run"]),
            ratio_to_empirical_best=float(r["compute_to_target"] / best["compute_to_target"]),
            against_sweep=null_models.probe_arm_against_on_policy(data.runs, int(r["trial_number"])),
        )
        for _, r in configs[configs["arm"] == "probe"].iterrows()
    )


MODEL_MIN_CONFIGURATIONS = 4
"""Fewer uniform configurations than this: the models are not compared (most would have more parameters than
configurations)."""
MODEL_BOOTSTRAP = 30
"""Bootstrap refits per compared model (at most; fewer when the report is asked for fewer)."""


def _models(uniform: pd.DataFrame, mu: float, xb, yb, bootstrap: int, seed: int, bar: bool = False) -> list[dict]:
    """Every registered model fitted to uniform replay's runs, best first (`analysis.models.compare`), each with its
    optimum or the reason it refuses one."""
    if uniform.groupby(["x", "y"]).ngroups < MODEL_MIN_CONFIGURATIONS:
        return []
    lr_bounds = (
        (float(uniform["lr"].min()), float(uniform["lr"].max())) if "lr" in uniform else None
    )  # never extrapolated
    return [
        {**f.summary(), "optimum": optimum(f, xb, yb, lr_bounds=lr_bounds)}
        for f in compare(uniform, mu, bootstrap=min(bootstrap, MODEL_BOOTSTRAP), seed=seed, bar=bar)
    ]


def _by_loss(
    uniform: pd.DataFrame, mu: float, bounds, bootstrap: int, seed: int, bar: bool = False
) -> tuple[LossModels, ...] | None:
    """A study of several losses: every registered model and the null predictors fitted to each loss's uniform runs
    apart, each with the on-policy baseline's runs (the anchor at y 1, x 1 every loss is compared with; PPO-clip's,
    which on fresh rollouts every ratio-based loss equals up to its clip), or with its own runs at y 1, x 1 where the
    study ran the loss on fresh rollouts (OAPL's differ from GRPO's there). None for a study of one loss."""
    objectives = sorted(uniform["objective"].unique())
    if len(objectives) < 2:
        return None
    baseline = uniform[uniform["baseline"]]
    out = []
    for name in objectives:
        with phases.phase(f"the models fitted to the {name} runs alone"):
            own = uniform[(uniform["objective"] == name) & ~uniform["baseline"]]
            # another loss on fresh rollouts, where the study ran one, is that loss's own anchor
            fresh = (own["x"] == 1) & (own["y"] == 1) & (name not in set(baseline["objective"]))
            runs = own if fresh.any() else pd.concat([baseline, own])
            summaries = _models(runs, mu, *bounds, bootstrap, seed, bar)
            nulls = null_models.against_nulls(runs, summaries, seed=seed) if summaries else None
        out.append(
            LossModels(
                loss_name=name,
                n_runs=len(runs),
                n_configurations=runs.groupby(["x", "y", "lr"]).ngroups,
                models=tuple(ModelSummary.from_json(m) for m in summaries),
                null_models=nulls,
            )
        )
    return tuple(out)


def _laws(data: StudyData, models: tuple[ModelSummary, ...]) -> list[dict]:
    """The paper's laws (`analysis.laws`), each with its verdict, `not testable` ones with the reason; F2's predicted
    minimum uses thm45's fitted rho."""
    rho = next((m.params.get("rho") for m in models if m.model == "thm45"), None)
    shared = laws.Reaccounted(data)  # the three laws re-account the same runs at overlapping mu
    verdicts = []
    for what, law in (
        ("F1, the optimal y against mu", lambda: laws.f1_sqrt_mu(data, reaccounted=shared)),
        ("F2, the U-shape in y", lambda: laws.f2_u_shape(data, rho=rho, reaccounted=shared)),
        ("F3, the best lr against y", lambda: laws.f3_lr_falls_with_y(data, reaccounted=shared)),
    ):
        with phases.phase(what):
            verdicts.append(law())
    return [asdict(v) | {"line": v.line()} for v in verdicts]


def _confirmations(data: StudyData, configs: pd.DataFrame) -> tuple[Confirmation, ...]:
    """Each configuration re-run on fresh seeds (`study confirm`): its selection record beside its replication."""
    out = []

    def by_knobs(r) -> tuple:  # NaN (no horizon) never equals itself: key it as None
        return tuple(
            None if isinstance(v, float) and math.isnan(v) else v
            for v in (
                r["x"],
                r["y"],
                r["capacity"],
                r["ratio"],
                r["horizon"],
                r["strategy"],
                r.get("variant") or "",
                bool(r["baseline"]),
                r.get("lr"),
            )
        )

    selection = {by_knobs(r): r for _, r in configs[configs["arm"] != "confirm"].iterrows()}
    for _, r in configs[configs["arm"] == "confirm"].iterrows():
        sel = selection.get(by_knobs(r))
        if sel is not None:  # the baseline too: its replication is what every other replication is paired against
            seeds = lambda n: sorted(int(s) for s in data.runs.loc[data.runs["trial_number"] == n, "seed"])  # noqa: E731
            out.append(
                Confirmation(
                    selection=Replicate(**_config_fields(sel), seed_list=tuple(seeds(sel["trial_number"]))),
                    replicated=Replicate(**_config_fields(r), seed_list=tuple(seeds(r["trial_number"]))),
                )
            )
    return tuple(out)


def analyze(
    name: str,
    tracking_uri: str,
    whatif_mu: list[float] = (5.28,),
    bootstrap: int = 200,
    seed: int = 0,
    target: float | None = None,
    estimator: str | None = None,
    bar: bool = False,
) -> tuple[Analysis, StudyData, Fit]:
    """Everything the report needs, as an `analysis.result.Analysis` (`to_json()`: `analysis.json`); also returns the data and the fit for plotting.
    `target`, `estimator`: read compute-to-target at this accuracy, with this estimator, instead of the study's.
    Each phase is logged as it starts and ends; the refits are counted (a bar when `bar`)."""
    with phases.phase(f"reading study {name} from MLflow"):
        data = load_study(name, tracking_uri)
    if target is not None or estimator is not None:
        data = retarget(data, target if target is not None else data.target, estimator)
    return analyze_data(data, whatif_mu, bootstrap, seed, bar)


def analyze_data(
    data: StudyData, whatif_mu: list[float] = (5.28,), bootstrap: int = 200, seed: int = 0, bar: bool = False
) -> tuple[Analysis, StudyData, Fit]:
    """`analyze` on a study already read (`analysis.data.StudyData`)."""
    # One BLAS thread: the fits are thousands of small L-BFGS-B solves, which OpenBLAS's threads only slow down
    # (20 refits on 2 shared cores: 35 s with its default threads, 12 s with one).
    with threadpool_limits(1):
        configs = data.configs()
        uniform = data.runs[data.runs["strategy"] == "uniform"]
        with phases.phase(
            f"fitting the model to {len(uniform)} runs ({bootstrap} bootstrap refits, then one per configuration left out)"
        ):
            block, fit = _optimum_block(data, bootstrap, seed, bar)
        models, nulls = (), None
        if uniform.groupby(["x", "y"]).ngroups >= MODEL_MIN_CONFIGURATIONS:
            with phases.phase(
                f"comparing the registered models ({min(bootstrap, MODEL_BOOTSTRAP)} bootstrap refits each)"
            ):
                summaries = _models(uniform, data.reference_mu, *_bounds(configs), bootstrap, seed, bar)
                nulls = null_models.against_nulls(uniform, summaries, seed=seed)  # each model's `skill`
                models = tuple(ModelSummary.from_json(m) for m in summaries)
        block = replace(block, models=models, null_models=nulls)
        by_loss = _by_loss(uniform, data.reference_mu, _bounds(configs), bootstrap, seed, bar)
        noise = _noise(data)
        with phases.phase(f"the paper's laws ({laws.N_BOOT} bootstrap draws over seeds)"):
            verdicts = _laws(data, models)
        batch = int(data.runs["batch_size"].iloc[0])
        pipeline = split_table(data)
        prediction = predictions.fitted(block, fit, batch)  # what `study verify` runs
        whatif = {}
        if whatif_mu:
            with phases.phase("what if: the same runs re-accounted at mu " + ", ".join(f"{mu:g}" for mu in whatif_mu)):
                for mu in whatif_mu:
                    whatif[f"{mu:g}"], _ = _optimum_block(reaccount(data, mu), bootstrap=0, seed=seed)
        result = Analysis(
            study=data.name,
            target_accuracy=data.target,
            metric=data.metric,
            estimator=data.estimator,
            **noise,
            reference_mu=data.reference_mu,
            n_runs=len(data.runs),
            n_configurations=len(configs),
            n_censored_runs=int(data.runs["censored"].sum()),
            variance_form="distinct draws (uniform strategy): V = sigma_bar²(x)(1/B + rho/R)",
            noise_model="sigma²(tau) = sigma0² (1 + tau/tau0)^(2 alpha)",
            **{f.name: getattr(block, f.name) for f in fields(FittedOptimum)},
            configurations=tuple(_config_record(r) for _, r in configs.iterrows()),
            confirmations=_confirmations(data, configs),
            tuned_lr=tuned_lr(data.runs, device_time_to_target(data) if is_async(data) else None),
            whatif=whatif,
            laws=verdicts,
            pipeline=pipeline,
            # the predicted optimum as an asynchronous split (W/T ≈ mu / y*, N = x*·B / y*)
            pipeline_mapped=mapped_split(block.predicted.x, block.predicted.y, data.reference_mu, batch)
            if pipeline
            else None,
            prediction=prediction,
            by_loss=by_loss,
            stale_signals=stale_signals(data.runs, seed=seed),
        )
    return result, data, fit


def _noise(data: StudyData) -> dict:
    """The per-run noise by estimator, by curve and by checkpoint, and skill or sharpness (plain JSON blocks)."""
    with phases.phase("per-run noise by estimator and by curve"):
        noise = {
            "resolution": resolution(data.runs),
            "noise_by_estimator": by_estimator(data.curves, data.runs, data.target),
            "by_reading": by_reading(
                data.curves, data.runs, data.metric, data.target, data.estimator, data.gain_fraction
            ),
            "by_checkpoint": by_checkpoint(data.curves, data.runs, data.estimator, data.gain_fraction),
        }
    with phases.phase(
        "skill or sharpness: each comparison at equal entropy and at each arm's best decoding temperature"
    ):
        noise["skill_or_sharpness"] = skill_or_sharpness(
            data.curves, data.entropy, data.runs, data.metric, data.estimator, noise["by_reading"]
        )
        noise["skill_or_sharpness_tuned"] = _sharpness_against_tuned(data)
    return noise


def _sharpness_against_tuned(data: StudyData) -> dict | None:
    """Skill or sharpness with on-policy at its best learning rate as the baseline (`tuned_lr`), for the selection
    arms that are not on-policy; None where on-policy ran at one lr or its best is the baseline itself."""
    tuned = tuned_lr(data.runs)
    if tuned is None:
        return None
    best = tuned["on_policy_best_trial"]
    sampler = data.runs["arm"] == "sampler"
    if data.runs.loc[sampler & data.runs["baseline"].astype(bool), "trial_number"].eq(best).all():
        return None
    runs = data.runs.assign(
        baseline=np.where(sampler, data.runs["trial_number"] == best, data.runs["baseline"].astype(bool))
    )
    readings = by_reading(data.curves, runs, data.metric, data.target, data.estimator, data.gain_fraction)
    result = skill_or_sharpness(data.curves, data.entropy, runs, data.metric, data.estimator, readings)
    on_policy = {a["trial_number"] for a in tuned["on_policy_by_lr"]}
    replay = set(data.runs.loc[sampler, "trial_number"].astype(int)) - on_policy
    result["comparisons"] = [c for c in result["comparisons"] if c["trial_number"] in replay]
    return {
        **result,
        "baseline_trial": int(best),
        "baseline_lr": float(tuned["on_policy_best_lr"]),
        "bounded": bool(tuned["on_policy_best_lr_bounded"]),
    }


def write_figures(data: StudyData, fit: Fit, result: Analysis, out: Path) -> dict[str, plots.Figure]:
    """Every figure of `FIGURES`, in that order, drawn into `out`."""
    configs = data.configs()
    selection = configs[configs["arm"] != "confirm"]
    # The figures set the baseline beside the best replay configuration, even where on-policy is the best overall
    # (on-policy at another lr is not a replay configuration).
    objective = baseline_objective(data.runs)
    on_policy = selection.apply(lambda r: is_on_policy(r, objective), axis=1).astype(bool)
    replay = selection[~on_policy].sort_values("compute_to_target")
    best_trial = int(replay["trial_number"].iloc[0]) if len(replay) else result.empirical.trial_number
    drawn = {
        "savings": lambda: plots.savings(configs, out),
        "accuracy_vs_compute": lambda: plots.accuracy_vs_compute(data, out, best_trial),
        "heatmap": lambda: plots.heatmap(selection, out, (result.predicted.x, result.predicted.y), data.reference_mu),
        "pareto_front": lambda: plots.pareto_front(selection, out, data.metric),
        "predicted_vs_measured": lambda: plots.predicted_vs_measured(configs, fit, out),
        "entropy_vs_compute": lambda: plots.entropy_vs_compute(data, out, best_trial),
        "staleness_histogram": lambda: plots.staleness_histogram(data, best_trial, out),
    }
    return {name: drawn[name]() for name in FIGURES}


def _head(result: Analysis, spec: str | None) -> str:
    return "\n".join([bottom_line(result, spec), "", runs_line(result), ""])


def markdown(result: Analysis, figures: dict[str, plots.Figure], spec: str | None = None) -> str:
    """The report as Markdown: title, bottom line, figures with their captions, tables."""
    lines = [f"# Study `{result.study}`", "", _head(result, spec), "## Figures", ""]
    for i, (name, f) in enumerate(figures.items(), 1):
        lines += [f"![{name.replace('_', ' ')}]({f.path.name})", "", f"*Figure {i}.* {f.caption}", ""]
    return "\n".join(lines) + "\n" + tables(result)


STYLE = (
    "body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222;line-height:1.45}"
    "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;font-size:14px}"
    "#bottom-line{font-size:17px;background:#f3f6fa;border-left:4px solid #2a6ebb;padding:.2em 1em}"
    "figure{margin:1.5em 0}figure img{max-width:100%;height:auto;display:block}"
    "figcaption{font-size:14px;color:#444;max-width:760px;margin-top:.4em}"
)


def html_page(result: Analysis, figures: dict[str, plots.Figure], spec: str | None = None) -> str:
    """The report as one self-contained page, in the Markdown's order, each part in its own section (`bottom-line`,
    `figures`, `tables`): figures inlined as data URIs in <figure> with a <figcaption>. Every user string escaped:
    Markdown is rendered with raw HTML off, so HTML in a study's name or a caption is shown, never run."""
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    shown = []
    for i, (name, f) in enumerate(figures.items(), 1):
        data = base64.b64encode(f.path.read_bytes()).decode()
        shown.append(
            f'<figure id="figure-{html.escape(name)}"><img src="data:image/png;base64,{data}" alt="{html.escape(name.replace("_", " "))}">'
            f"<figcaption><b>Figure {i}.</b> {md.renderInline(f.caption)}</figcaption></figure>"
        )
    title = html.escape(f"replay-workbench: {result.study}")
    heading = md.render(f"# Study `{result.study}`")
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title><style>{STYLE}</style></head><body>{heading}"
        f'<section id="bottom-line">{md.render(_head(result, spec))}</section>'
        f'<section id="figures"><h2>Figures</h2>{"".join(shown)}</section>'
        f'<section id="tables">{md.render(tables(result))}</section></body></html>\n'
    )


def write_report(result: Analysis, data: StudyData, fit: Fit, out: Path, spec: str | None = None) -> dict[str, Path]:
    """`OUTPUT_FILES` written into `out` (a folder chosen by `analysis.destination`)."""
    with phases.phase(f"drawing {len(FIGURES)} figures"):
        figures = write_figures(data, fit, result, out)
    (out / "report.md").write_text(markdown(result, figures, spec))
    (out / "report.html").write_text(html_page(result, figures, spec))
    (out / "analysis.json").write_text(dumps(result))
    write_runs_table(data, out)
    return {
        "markdown": out / "report.md",
        "html": out / "report.html",
        "json": out / "analysis.json",
        **{name: f.path for name, f in figures.items()},
    }
