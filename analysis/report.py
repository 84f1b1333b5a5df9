"""`workbench analyze` and `workbench report`: fit, compare predicted against empirical optimum, write reports.

The analysis JSON (reports/<study>/analysis.json) holds everything the report shows; the report is Markdown plus a
self-contained HTML page (figures embedded as data URIs, every user string escaped).
"""

from __future__ import annotations

import base64
import html
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
from markdown_it import MarkdownIt

from analysis import plots
from analysis.data import StudyData, load_study, reaccount
from analysis.fit import fit_runs, predicted_optimum
from analysis.theory import to_knobs

def _config_record(row) -> dict:
    return {
        "trial_number": int(row["trial_number"]), "x": float(row["x"]), "y": float(row["y"]), "capacity": int(row["capacity"]),
        "ratio": float(row["ratio"]), "baseline": bool(row["baseline"]), "compute_to_target": float(row["compute_to_target"]),
        "best_accuracy": float(row["best_accuracy"]), "seeds": int(row["seeds"]), "censored_seeds": int(row["censored_seeds"]),
        "arm": str(row.get("arm", "sampler")),
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


def _optimum_block(data: StudyData, bootstrap: int, seed: int) -> dict:
    configs = data.configs()
    batch = int(data.runs["batch_size"].iloc[0])
    fit = fit_runs(data.runs, data.reference_mu, bootstrap=bootstrap, seed=seed)
    xb = (1.0, max(64.0, 2 * float(configs["x"].max())))
    yb = (1.0, max(8.0, 2 * float(configs["y"].max())))
    x_star, y_star, c_star = predicted_optimum(fit, xb, yb)
    ranked = configs.assign(censored_share=configs["censored_seeds"] / configs["seeds"]).sort_values(["censored_share", "compute_to_target"])
    best = ranked.iloc[0]
    base = configs[configs["baseline"]]
    nearest = _nearest(configs, x_star, y_star)
    block = {
        "mu": data.reference_mu,
        "fit": fit.summary(),
        "predicted": {
            "x": x_star, "y": y_star, "compute_to_target": c_star,
            "knobs": to_knobs(x_star, y_star, batch, data.reference_mu).__dict__,
            "nearest_measured": _config_record(nearest),
            "on_policy_optimal": y_star < 1.05 and x_star < 1.05,
        },
        "empirical": {**_config_record(best), "predicted_compute_to_target": float(fit.predict(best["x"], best["y"]))},
        "measured_ratio_nearest_predicted_to_empirical": float(nearest["compute_to_target"] / best["compute_to_target"]),
        "pareto_front": _pareto(configs),
        "verified": [
            {**_config_record(r), "predicted_when_run": float(r["predicted_when_run"]), "predicted_now": float(fit.predict(r["x"], r["y"]))}
            for _, r in configs[configs["arm"] == "predicted"].iterrows()
        ],
    }
    if len(base):
        b = base.iloc[0]
        block["baseline"] = {**_config_record(b), "predicted_compute_to_target": float(fit.predict(b["x"], b["y"]))}
        block["savings_vs_on_policy"] = {
            "measured": 1 - float(best["compute_to_target"] / b["compute_to_target"]),
            "predicted": 1 - c_star / float(fit.predict(b["x"], b["y"])),
        }
    return block, fit


def analyze(name: str, tracking_uri: str, whatif_mu: list[float] = (5.28,), bootstrap: int = 200, seed: int = 0) -> tuple[dict, StudyData, object]:
    """Everything the report needs, as a JSON-able dict; also returns the data and the fit for plotting."""
    data = load_study(name, tracking_uri)
    block, fit = _optimum_block(data, bootstrap, seed)
    configs = data.configs()
    result = {
        "study": name,
        "target_accuracy": data.target,
        "reference_mu": data.reference_mu,
        "n_runs": len(data.runs),
        "n_configurations": len(configs),
        "n_censored_runs": int(data.runs["censored"].sum()),
        "variance_form": "distinct draws (uniform strategy): V = sigma_bar²(x)(1/B + rho/R)",
        "noise_model": "sigma²(tau) = sigma0² (1 + tau/tau0)^(2 alpha)",
        **block,
        "configurations": [_config_record(r) for _, r in configs.iterrows()],
        "whatif": {},
    }
    for mu in whatif_mu:
        w, _ = _optimum_block(reaccount(data, mu), bootstrap=0, seed=seed)
        result["whatif"][f"{mu:g}"] = w
    return result, data, fit


def write_figures(data: StudyData, fit, result: dict, out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    configs = data.configs()
    best_trial = result["empirical"]["trial_number"]
    return {
        "accuracy_vs_compute": plots.accuracy_vs_compute(data, out, best_trial),
        "pareto_front": plots.pareto_front(configs, out),
        "heatmap": plots.heatmap(configs, out, (result["predicted"]["x"], result["predicted"]["y"])),
        "predicted_vs_measured": plots.predicted_vs_measured(configs, fit, out),
        "entropy_vs_compute": plots.entropy_vs_compute(data, out, best_trial),
        "staleness_histogram": plots.staleness_histogram(data, best_trial, out),
    }


def _fmt(v, digits=3) -> str:
    if isinstance(v, float):
        return f"{v:.{digits}g}"
    return str(v)


def markdown(result: dict, figures: dict[str, Path]) -> str:
    f, p, e = result["fit"], result["predicted"], result["empirical"]
    iv = f.get("intervals", {})
    ci = lambda k: f" [{_fmt(iv[k][0])}, {_fmt(iv[k][1])}]" if k in iv else ""  # noqa: E731
    lines = [
        f"# Study `{result['study']}`",
        "",
        f"{result['n_runs']} runs in {result['n_configurations']} configurations, {result['n_censored_runs']} censored "
        f"(target accuracy {result['target_accuracy']:g} never reached); compute at the study's reference mu = {result['reference_mu']:.3g}.",
        "",
        "## Fit of the bias-variance-compute model",
        "",
        *([f"With {result['n_configurations']} configurations for 5 free parameters the fit is underdetermined: read it as an"
           " illustration of the pipeline, not as an estimate (run studies/replay_grid.yaml for a real fit).", ""]
          if result["n_configurations"] < 6 else []),
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
        "## Predicted against empirical optimum",
        "",
        "| | x = N/R | y = B/R | capacity | compute to target (measured) | predicted |",
        "|---|---|---|---|---|---|",
        f"| predicted optimum | {_fmt(p['x'])} | {_fmt(p['y'])} | {p['knobs']['capacity']} | nearest measured (x={_fmt(p['nearest_measured']['x'])}, y={_fmt(p['nearest_measured']['y'])}): {_fmt(p['nearest_measured']['compute_to_target'])} | {_fmt(p['compute_to_target'])} |",
        f"| empirical optimum (trial {e['trial_number']}) | {_fmt(e['x'])} | {_fmt(e['y'])} | {e['capacity']} | {_fmt(e['compute_to_target'])} | {_fmt(e['predicted_compute_to_target'])} |",
    ]
    if "baseline" in result:
        b = result["baseline"]
        lines.append(f"| on-policy baseline (trial {b['trial_number']}) | 1 | 1 | {b['capacity']} | {_fmt(b['compute_to_target'])} | {_fmt(b['predicted_compute_to_target'])} |")
    lines += [
        "",
        f"Measured compute of the configuration nearest the predicted optimum / empirical optimum: "
        f"{_fmt(result['measured_ratio_nearest_predicted_to_empirical'])}.",
    ]
    if "savings_vs_on_policy" in result:
        s = result["savings_vs_on_policy"]
        lines.append(f"Savings against on-policy: measured {s['measured']:.1%}, predicted {s['predicted']:.1%}.")
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
    lines += ["", "## What if generation cost more (re-accounted curves)", "", "| mu | predicted x* | predicted y* | empirical best (x, y) | savings vs on-policy, measured | predicted |", "|---|---|---|---|---|---|"]
    for mu, w in result["whatif"].items():
        s = w.get("savings_vs_on_policy", {})
        lines.append(f"| {mu} | {_fmt(w['predicted']['x'])} | {_fmt(w['predicted']['y'])} | ({_fmt(w['empirical']['x'])}, {_fmt(w['empirical']['y'])}) "
                     f"| {s.get('measured', float('nan')):.1%} | {s.get('predicted', float('nan')):.1%} |")
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
