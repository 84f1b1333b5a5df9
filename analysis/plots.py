"""Figures of a study (matplotlib, PNG): each function draws one figure from tidy frames and returns its path."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from analysis.data import StudyData  # noqa: E402
from analysis.fit import Fit  # noqa: E402

DPI = 110


def _label(row) -> str:
    return "on-policy" if row["baseline"] else f"y={row['y']:g}, x={row['x']:g}"


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def accuracy_vs_compute(data: StudyData, out: Path, best_trial: int | None) -> Path:
    """Held-out accuracy against compute units: the on-policy baseline against the best replay setting, seed bands."""
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
        interp = np.array([np.interp(grid, r["units"], r["accuracy"]) for _, r in g.sort_values("step").groupby("run_id")])
        ax.plot(grid, np.median(interp, 0), color=color, label=f"{label}, {len(interp)} seed(s)")
        if len(interp) > 1:
            ax.fill_between(grid, interp.min(0), interp.max(0), color=color, alpha=0.2)
    ax.axhline(data.target, color="k", ls=":", lw=1, label=f"target {data.target:g}")
    ax.set_xlabel(f"compute units (mu = {data.reference_mu:.3g})")
    ax.set_ylabel("held-out accuracy (greedy pass@1)")
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title("Accuracy against compute")
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
    ax.scatter(c["compute_to_target"], c["best_accuracy"], c=np.where(c["censored_seeds"] > c["seeds"] / 2, "tab:red", "tab:blue"), s=30)
    for _, r in c.iterrows():
        ax.annotate(_label(r), (r["compute_to_target"], r["best_accuracy"]), fontsize=7, xytext=(3, 3), textcoords="offset points")
    f = pd.DataFrame(front)
    ax.plot(f["compute_to_target"], f["best_accuracy"], "k--", lw=1, label="Pareto front")
    ax.set_xlabel("compute to target (median over seeds; red: mostly censored)")
    ax.set_ylabel("best held-out accuracy (median)")
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
    ax.scatter(pred[~cens], configs["compute_to_target"][~cens], label="reached target", color="tab:blue")
    ax.scatter(pred[cens], configs["compute_to_target"][cens], label="censored (lower bound)", color="tab:red", marker="^")
    lo = min(pred.min(), configs["compute_to_target"].min()) * 0.8
    hi = max(pred.max(), configs["compute_to_target"].max()) * 1.25
    ax.plot([lo, hi], [lo, hi], "k:", lw=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("predicted compute to target")
    ax.set_ylabel("measured (median over seeds)")
    ax.legend(fontsize=8)
    ax.set_title(f"Fit: R² (log) = {fit.r2_log:.2f}")
    return _save(fig, out / "predicted_vs_measured.png")


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
