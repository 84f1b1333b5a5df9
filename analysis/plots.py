"""Figures of a study (matplotlib, PNG): each function draws one figure from tidy frames and returns its path."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.ticker  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from scipy import stats  # noqa: E402

from analysis.data import StudyData  # noqa: E402
from analysis.fit import Fit  # noqa: E402
from workbench.estimators import METRICS  # noqa: E402

DPI = 110


def _label(row) -> str:
    return "on-policy" if row["baseline"] else f"y={row['y']:g}, x={row['x']:g}"


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def _ci_band(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean over seeds (rows) and its 95% t interval, pointwise."""
    mean = values.mean(0)
    if len(values) < 2:
        return mean, mean, mean
    half = stats.t.ppf(0.975, len(values) - 1) * values.std(0, ddof=1) / np.sqrt(len(values))
    return mean, mean - half, mean + half


def _xerr(configs: pd.DataFrame, col: str = "compute_to_target", low: str = "ci_low", high: str = "ci_high") -> np.ndarray | None:
    """Asymmetric error bars from interval columns (zero where there is no interval)."""
    if low not in configs:
        return None
    v = configs[col].to_numpy(float)
    lo = np.nan_to_num(v - configs[low].to_numpy(float), nan=0.0)
    hi = np.nan_to_num(configs[high].to_numpy(float) - v, nan=0.0)
    return np.vstack([np.maximum(lo, 0), np.maximum(hi, 0)])


def accuracy_vs_compute(data: StudyData, out: Path, best_trial: int | None) -> Path:
    """Held-out accuracy against compute units: the on-policy baseline against the best replay setting, mean over
    seeds with its pointwise 95% band, and each seed's curve faintly behind."""
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    curves = data.curves.merge(data.runs[["run_id", "trial_number", "baseline", "x", "y"]], on="run_id")
    groups = [("on-policy baseline", curves[curves["baseline"]], "tab:gray")]
    if best_trial is not None:
        best = curves[curves["trial_number"] == best_trial]
        if len(best) and not best["baseline"].iloc[0]:
            groups.append((f"best replay (y={best['y'].iloc[0]:g}, x={best['x'].iloc[0]:g})", best, "tab:blue"))
    for label, g, color in groups:
        if g.empty:
            continue
        grid = np.linspace(0, g.groupby("run_id")["units"].max().min(), 60)
        interp = np.array([np.interp(grid, r["units"], r["reading"]) for _, r in g.sort_values("step").groupby("run_id")])
        mean, lo, hi = _ci_band(interp)
        for row in interp:
            ax.plot(grid, row, color=color, alpha=0.15, lw=0.6)
        ax.plot(grid, mean, color=color, label=f"{label}: mean of {len(interp)} seed(s)" + (", 95% band" if len(interp) > 1 else ""))
        if len(interp) > 1:
            ax.fill_between(grid, lo, hi, color=color, alpha=0.25)
    ax.axhline(data.target, color="k", ls=":", lw=1, label=f"target {data.target:g}")
    ax.set_xlabel(f"compute units (mu = {data.reference_mu:.3g})")
    ax.set_ylabel(METRICS[data.metric])
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title("Accuracy against compute" if data.metric == "accuracy" else f"{data.metric} against compute")
    return _save(fig, out / "accuracy_vs_compute.png")


def pareto_front(configs: pd.DataFrame, out: Path) -> Path:
    """Median best accuracy against compute-to-target per configuration; the non-dominated ones joined."""
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    c = configs.sort_values("compute_to_target")
    front, best_acc = [], -1.0
    for _, r in c.iterrows():
        if r["best_accuracy"] > best_acc:
            front.append(r)
            best_acc = r["best_accuracy"]
    ax.errorbar(c["compute_to_target"], c["best_accuracy"], xerr=_xerr(c), fmt="none", ecolor="0.6", lw=1, capsize=2)
    ax.scatter(c["compute_to_target"], c["best_accuracy"], c=np.where(c["censored_seeds"] > c["seeds"] / 2, "tab:red", "tab:blue"), s=30, zorder=3)
    for _, r in c.iterrows():
        ax.annotate(_label(r), (r["compute_to_target"], r["best_accuracy"]), fontsize=7, xytext=(3, 3), textcoords="offset points")
    f = pd.DataFrame(front)
    ax.plot(f["compute_to_target"], f["best_accuracy"], "k--", lw=1, label="Pareto front")
    ax.set_xlabel("compute to target (geometric mean over seeds, 95% CI; red: mostly censored)")
    ax.set_ylabel("best held-out accuracy (mean)")
    ax.legend(fontsize=8)
    ax.set_title("Pareto front")
    return _save(fig, out / "pareto_front.png")


def heatmap(configs: pd.DataFrame, out: Path, predicted: tuple[float, float] | None) -> Path:
    """Compute-to-target over (x, y), log scale, with the predicted optimum marked."""
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    xs, ys = sorted(configs["x"].unique()), sorted(configs["y"].unique())
    grid = np.full((len(ys), len(xs)), np.nan)
    for _, r in configs.iterrows():
        grid[ys.index(r["y"]), xs.index(r["x"])] = r["compute_to_target"]
    im = ax.imshow(np.log10(grid), origin="lower", cmap="viridis_r", aspect="auto")
    for i in range(len(ys)):
        for j in range(len(xs)):
            if np.isfinite(grid[i, j]):
                bright = np.log10(grid[i, j]) < np.nanmean(np.log10(grid))
                ax.text(j, i, f"{grid[i, j]:.0f}", ha="center", va="center", fontsize=8, color="k" if bright else "w")
    ax.set_xticks(range(len(xs)), [f"{v:g}" for v in xs])
    ax.set_yticks(range(len(ys)), [f"{v:g}" for v in ys])
    ax.set_xlabel("staleness horizon x = N/R")
    ax.set_ylabel("replay ratio y = B/R")
    if predicted is not None and len(xs) > 1 and len(ys) > 1:
        # position on the log axes of the grid (clipped to its edge when the optimum lies outside the grid)
        px = np.interp(np.log(predicted[0]), np.log(xs), range(len(xs)))
        py = np.interp(np.log(predicted[1]), np.log(ys), range(len(ys)))
        outside = not (xs[0] <= predicted[0] <= xs[-1] and ys[0] <= predicted[1] <= ys[-1])
        ax.plot(px, py, marker="*", color="tab:red", ms=16, mec="w",
                label=f"predicted optimum (x={predicted[0]:.3g}, y={predicted[1]:.3g}){' beyond the grid' if outside else ''}")
        ax.legend(fontsize=8, loc="upper left")
    fig.colorbar(im, ax=ax, label="log10 compute to target")
    ax.set_title("Compute to target over (x, y)")
    return _save(fig, out / "heatmap.png")


def predicted_vs_measured(configs: pd.DataFrame, fit: Fit, out: Path) -> Path:
    fig, ax = plt.subplots(figsize=(5.2, 4.4))
    pred = fit.predict(configs["x"].to_numpy(), configs["y"].to_numpy())
    cens = configs["censored_seeds"] > configs["seeds"] / 2
    err = _xerr(configs)
    if err is not None:
        ax.errorbar(pred, configs["compute_to_target"], yerr=err, fmt="none", ecolor="0.6", lw=1, capsize=2)
    ax.scatter(pred[~cens], configs["compute_to_target"][~cens], label="reached target (95% CI over seeds)", color="tab:blue", zorder=3)
    ax.scatter(pred[cens], configs["compute_to_target"][cens], label="censored (lower bound)", color="tab:red", marker="^")
    lo = min(pred.min(), configs["compute_to_target"].min()) * 0.8
    hi = max(pred.max(), configs["compute_to_target"].max()) * 1.25
    ax.plot([lo, hi], [lo, hi], "k:", lw=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("predicted compute to target")
    ax.set_ylabel("measured (geometric mean over seeds)")
    ax.legend(fontsize=8)
    ax.set_title(f"Fit: R² (log) = {fit.r2_log:.2f}")
    return _save(fig, out / "predicted_vs_measured.png")


def savings(configs: pd.DataFrame, out: Path) -> Path:
    """Each configuration's compute-to-target relative to on-policy on the same seeds, with its 95% interval: a
    difference is resolved only where the interval misses 1."""
    c = configs[np.isfinite(configs["ratio_to_baseline"].to_numpy(float))].sort_values("ratio_to_baseline")
    fig, ax = plt.subplots(figsize=(6.4, 0.9 + 0.32 * max(len(c), 1)))
    labels = [f"trial {int(r['trial_number'])} {_label(r)}" + (f" ({r['strategy']})" if r.get("strategy", "uniform") != "uniform" else "")
              + (" [confirm]" if r.get("arm") == "confirm" else "") for _, r in c.iterrows()]
    pos = np.arange(len(c))
    resolved = (c["ratio_ci_high"] < 1) | (c["ratio_ci_low"] > 1)
    err = _xerr(c, "ratio_to_baseline", "ratio_ci_low", "ratio_ci_high")
    ax.errorbar(c["ratio_to_baseline"], pos, xerr=err, fmt="none", ecolor="0.5", capsize=3)
    ax.scatter(c["ratio_to_baseline"], pos, c=np.where(resolved, "tab:blue", "tab:orange"), zorder=3)
    ax.axvline(1.0, color="k", ls=":", lw=1)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax.xaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax.tick_params(axis="x", which="minor", labelsize=7)
    ax.set_yticks(pos, labels, fontsize=7)
    ax.set_xlabel("compute to target / on-policy's, paired by seed (95% CI; orange: unresolved)")
    ax.set_title("Savings against on-policy")
    return _save(fig, out / "savings.png")


def entropy_vs_compute(data: StudyData, out: Path, best_trial: int | None) -> Path:
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    e = data.entropy.merge(data.runs[["run_id", "trial_number", "baseline"]], on="run_id")
    for trial, g in e.groupby("trial_number"):
        base = bool(g["baseline"].iloc[0])
        if not base and trial != best_trial:
            continue
        color = "tab:gray" if base else "tab:blue"
        for i, (_, r) in enumerate(g.sort_values("step").groupby("run_id")):
            smooth = r["entropy"].rolling(10, min_periods=1).mean()
            ax.plot(r["units_logged"], smooth, color=color, alpha=0.7, lw=1, label=("on-policy" if base else f"best replay (trial {trial})") if i == 0 else None)
    ax.set_xlabel("compute units")
    ax.set_ylabel("token entropy of fresh samples (nats)")
    ax.legend(fontsize=8)
    ax.set_title("Policy entropy against compute")
    return _save(fig, out / "entropy_vs_compute.png")


def staleness_histogram(data: StudyData, trial: int, out: Path) -> Path:
    fig, ax = plt.subplots(figsize=(5.6, 3.6))
    counts: dict[int, int] = {}
    for run_id in data.runs.loc[data.runs["trial_number"] == trial, "run_id"]:
        for age, n in data.ages.get(run_id, {}).items():
            counts[age] = counts.get(age, 0) + n
    ages = sorted(counts)
    ax.bar(ages, [counts[a] for a in ages], color="tab:blue")
    ax.set_xlabel("age of trained rollouts (optimizer steps)")
    ax.set_ylabel("rollouts trained")
    ax.set_title(f"Staleness of trial {trial}")
    return _save(fig, out / "staleness_histogram.png")
