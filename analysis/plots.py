"""Figures of a study (matplotlib, PNG): each function draws one figure from tidy frames and returns it as a
`Figure`: its file and its caption (what is plotted, on which curve, what each mark means), written next to the
drawing so the two cannot drift apart."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.ticker  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from scipy import stats  # noqa: E402

from analysis.data import StudyData, strategy_shown  # noqa: E402
from analysis.fit import Fit  # noqa: E402
from workbench.estimators import METRICS  # noqa: E402
from workbench.verdicts import knob_label  # noqa: E402

DPI = 110


@dataclass(frozen=True)
class Figure:
    path: Path
    caption: str
    """Markdown (inline code for names); the report escapes it in the HTML page."""


def _label(row) -> str:
    return "on-policy" if row["baseline"] else knob_label({"replay.ratio": float(row["y"]), "x": float(row["x"])})


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def _plain(value: float, _pos=None) -> str:
    return f"{value:g}"


def _plain_log_ticks(axis) -> None:
    """Tick labels of a log axis as plain numbers (30, not 3x10^1). Minor ticks are labelled where the decades alone
    would leave the axis bare: every one on an axis of less than a decade, 2, 3 and 5 x 10^k on one of less than two."""
    axis.set_major_formatter(matplotlib.ticker.FuncFormatter(_plain))
    low, high = sorted(axis.get_view_interval())
    decades = math.log10(high / low) if low > 0 else math.inf
    shown = tuple(range(2, 10)) if decades < 1 else (2, 3, 5) if decades < 2 else ()

    def minor(value: float, _pos=None) -> str:
        lead = round(value / 10 ** math.floor(math.log10(value) + 1e-9))
        return f"{value:g}" if lead in shown else ""

    axis.set_minor_formatter(matplotlib.ticker.FuncFormatter(minor))


def _curve_name(data: StudyData) -> str:
    return f"`{data.metric}` ({METRICS[data.metric]})"


def _ci_band(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean over seeds (rows) and its 95% t interval, pointwise."""
    mean = values.mean(0)
    if len(values) < 2:
        return mean, mean, mean
    half = stats.t.ppf(0.975, len(values) - 1) * values.std(0, ddof=1) / np.sqrt(len(values))
    return mean, mean - half, mean + half


def _xerr(
    configs: pd.DataFrame, col: str = "compute_to_target", low: str = "ci_low", high: str = "ci_high"
) -> np.ndarray | None:
    """Asymmetric error bars from interval columns (zero where there is no interval)."""
    if low not in configs:
        return None
    v = configs[col].to_numpy(float)
    lo = np.nan_to_num(v - configs[low].to_numpy(float), nan=0.0)
    hi = np.nan_to_num(configs[high].to_numpy(float) - v, nan=0.0)
    return np.vstack([np.maximum(lo, 0), np.maximum(hi, 0)])


def accuracy_vs_compute(data: StudyData, out: Path, best_trial: int | None) -> Figure:
    """The study's curve against compute units: the on-policy baseline against the best replay setting, mean over
    seeds with its pointwise 95% band, and each seed's curve faintly behind."""
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    curves = data.curves.merge(data.runs[["run_id", "trial_number", "baseline", "x", "y"]], on="run_id")
    groups = [("on-policy baseline", curves[curves["baseline"]], "tab:gray")]
    best_label = None
    if best_trial is not None:
        best = curves[curves["trial_number"] == best_trial]
        if len(best) and not best["baseline"].iloc[0]:
            best_label = f"y={best['y'].iloc[0]:g}, x={best['x'].iloc[0]:g}"
            groups.append((f"best replay ({best_label})", best, "tab:blue"))
    for label, g, color in groups:
        if g.empty:
            continue
        grid = np.linspace(0, g.groupby("run_id")["units"].max().min(), 60)
        interp = np.array(
            [np.interp(grid, r["units"], r["reading"]) for _, r in g.sort_values("step").groupby("run_id")]
        )
        mean, lo, hi = _ci_band(interp)
        for row in interp:
            ax.plot(grid, row, color=color, alpha=0.15, lw=0.6)
        ax.plot(
            grid,
            mean,
            color=color,
            label=f"{label}: mean of {len(interp)} seed(s)" + (", 95% band" if len(interp) > 1 else ""),
        )
        if len(interp) > 1:
            ax.fill_between(grid, lo, hi, color=color, alpha=0.25)
    ax.axhline(data.target, color="k", ls=":", lw=1, label=f"target {data.target:g}")
    ax.set_xlabel(f"compute units (mu = {data.reference_mu:.3g})")
    ax.set_ylabel(METRICS[data.metric])
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(f"{data.metric} against compute")
    who = f"on-policy (gray) and the best replay setting, {best_label} (blue)" if best_label else "on-policy (gray)"
    caption = (
        f"The study's curve, {_curve_name(data)}, against compute units at mu {data.reference_mu:.3g}: {who}. "
        "Solid: the mean over seeds with its pointwise 95% band; faint: each seed. Dotted: the target "
        f"{data.target:g}, where compute-to-target is read."
    )
    return Figure(_save(fig, out / "accuracy_vs_compute.png"), caption)


def pareto_front(configs: pd.DataFrame, out: Path, metric: str) -> Figure:
    """Each configuration's best reading of the study's curve (mean over seeds) against its compute-to-target; the
    non-dominated ones joined."""
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    c = configs.sort_values("compute_to_target")
    front, best = [], -math.inf
    for _, r in c.iterrows():
        if r["best_reading"] > best:
            front.append(r)
            best = r["best_reading"]
    ax.errorbar(c["compute_to_target"], c["best_reading"], xerr=_xerr(c), fmt="none", ecolor="0.6", lw=1, capsize=2)
    ax.scatter(
        c["compute_to_target"],
        c["best_reading"],
        c=np.where(c["censored_seeds"] > c["seeds"] / 2, "tab:red", "tab:blue"),
        s=30,
        zorder=3,
    )
    for _, r in c.iterrows():
        ax.annotate(
            _label(r),
            (r["compute_to_target"], r["best_reading"]),
            fontsize=7,
            xytext=(3, 3),
            textcoords="offset points",
        )
    f = pd.DataFrame(front)
    ax.plot(f["compute_to_target"], f["best_reading"], "k--", lw=1, label="Pareto front")
    ax.set_xlabel("compute to target (geometric mean over seeds, 95% CI)")
    ax.set_ylabel(f"best {metric} (mean over seeds)")
    ax.legend(fontsize=8)
    ax.set_title(f"Pareto front on {metric}")
    caption = (
        f"Each configuration's best `{metric}` ({METRICS[metric]}, the study's curve; mean over seeds) against its "
        "compute to target (geometric mean over seeds, with its 95% interval). Dashed: the Pareto front, the "
        "configurations no other reaches a higher best with less compute than. Blue: most seeds reached the target; "
        "red: most seeds never did (their level is a censored estimate, or none)."
    )
    return Figure(_save(fig, out / "pareto_front.png"), caption)


def _grid_position(value: float, cells: list[float]) -> tuple[float, int]:
    """Where `value` falls on a heatmap axis whose cells (centres 0, 1, ...) hold the sorted `cells`, log-interpolated
    between them; a value beyond the grid is put on the frame's edge (-0.5 or len - 0.5), with the side it lies on
    (-1 below, +1 above, 0 inside)."""
    if value < cells[0] * (1 - 1e-9):
        return -0.5, -1
    if value > cells[-1] * (1 + 1e-9):
        return len(cells) - 0.5, 1
    if len(cells) == 1:
        return 0.0, 0
    return float(np.interp(math.log(value), np.log(cells), range(len(cells)))), 0


def heatmap(configs: pd.DataFrame, out: Path, predicted: tuple[float, float] | None, mu: float) -> Figure:
    """Compute-to-target over (x, y), log colour, with the fitted optimum marked where it lies (on the frame's edge,
    with an arrow pointing its way, when it lies beyond the grid)."""
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    xs, ys = sorted(configs["x"].unique()), sorted(configs["y"].unique())
    grid = np.full((len(ys), len(xs)), np.nan)
    for _, r in configs.iterrows():
        grid[ys.index(r["y"]), xs.index(r["x"])] = r["compute_to_target"]
    im = ax.imshow(np.log10(grid), origin="lower", cmap="viridis_r", aspect="auto")
    for i in range(len(ys)):
        for j in range(len(xs)):
            if np.isfinite(grid[i, j]):
                bright = np.log10(grid[i, j]) < np.nanmean(np.log10(grid))
                ax.text(j, i, f"{grid[i, j]:.3g}", ha="center", va="center", fontsize=8, color="k" if bright else "w")
    ax.set_xticks(range(len(xs)), [f"{v:g}" for v in xs])
    ax.set_yticks(range(len(ys)), [f"{v:g}" for v in ys])
    ax.set_xlabel("staleness horizon x = N/R")
    ax.set_ylabel("replay ratio y = B/R")
    marker = ""
    if predicted is not None:
        (px, side_x), (py, side_y) = _grid_position(predicted[0], xs), _grid_position(predicted[1], ys)
        where = f"x*={predicted[0]:.3g}, y*={predicted[1]:.3g}"
        if side_x or side_y:
            ax.plot(
                px,
                py,
                marker="*",
                color="tab:red",
                ms=16,
                mec="w",
                clip_on=False,
                zorder=5,
                label=f"fitted optimum ({where}), beyond the grid: on its edge",
            )
            ax.annotate(
                "",
                xy=(px, py),
                xytext=(24 * side_x, 24 * side_y),
                textcoords="offset points",
                annotation_clip=False,
                arrowprops={"arrowstyle": "<-", "color": "tab:red", "lw": 2, "shrinkA": 0, "shrinkB": 8},
            )
            marker = (
                f" Star: the fitted model's optimum ({where}) lies beyond the grid; it is drawn on the frame's edge "
                "on its side, the arrow pointing towards it."
            )
        else:
            ax.plot(px, py, marker="*", color="tab:red", ms=16, mec="w", zorder=5, label=f"fitted optimum ({where})")
            marker = f" Star: the fitted model's optimum ({where}), placed between the cells on log axes."
        ax.legend(
            fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False
        )  # below: off the cells and the edge
    fig.colorbar(im, ax=ax, label="log10 compute to target")
    ax.set_title("Compute to target over (x, y)", pad=34 if predicted is not None and side_y > 0 else 8)
    caption = (
        f"Compute to target of each configuration over x = N/R (staleness horizon) and y = B/R (replay ratio), at "
        f"mu {mu:.3g}: the geometric mean over seeds, in compute units, colour on a log scale (yellow: cheapest, dark purple: dearest); "
        "blank: not run." + marker
    )
    return Figure(_save(fig, out / "heatmap.png"), caption)


def predicted_vs_measured(configs: pd.DataFrame, fit: Fit, out: Path) -> Figure:
    fig, ax = plt.subplots(figsize=(5.6, 4.4))
    pred = fit.predict(configs["x"].to_numpy(), configs["y"].to_numpy())
    cens = configs["censored_seeds"] > configs["seeds"] / 2
    err = _xerr(configs)
    if err is not None:
        ax.errorbar(pred, configs["compute_to_target"], yerr=err, fmt="none", ecolor="0.6", lw=1, capsize=2)
    ax.scatter(
        pred[~cens],
        configs["compute_to_target"][~cens],
        label="reached target (95% CI over seeds)",
        color="tab:blue",
        zorder=3,
    )
    ax.scatter(pred[cens], configs["compute_to_target"][cens], label="mostly censored", color="tab:red", marker="^")
    lo = min(pred.min(), configs["compute_to_target"].min()) * 0.8
    hi = max(pred.max(), configs["compute_to_target"].max()) * 1.25
    ax.plot([lo, hi], [lo, hi], "k:", lw=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    _plain_log_ticks(ax.xaxis)
    _plain_log_ticks(ax.yaxis)
    ax.set_xlabel("predicted compute to target")
    ax.set_ylabel("measured (geometric mean over seeds)")
    ax.legend(fontsize=8)
    ax.set_title(f"Fit: R² (log) = {fit.r2_log:.2f}")
    caption = (
        "The fitted model's compute to target against the measured one, per configuration (log axes, compute units): "
        "the geometric mean over seeds with its 95% interval. Dotted: prediction = measurement. Blue: most seeds "
        "reached the target; red triangles: most never did (a censored estimate)."
    )
    return Figure(_save(fig, out / "predicted_vs_measured.png"), caption)


def savings(configs: pd.DataFrame, out: Path) -> Figure:
    """Each configuration's compute-to-target relative to on-policy on the same seeds, with its 95% interval: a
    difference is resolved only where the interval misses 1."""
    c = configs[np.isfinite(configs["ratio_to_baseline"].to_numpy(float))].sort_values("ratio_to_baseline")
    fig, ax = plt.subplots(figsize=(6.4, max(3.0, 1.6 + 0.35 * len(c))))
    labels = [
        f"trial {int(r['trial_number'])} {_label(r)}"
        + (f" ({knob_label(strategy_shown(r))})" if strategy_shown(r) else "")
        + (" [confirm]" if r.get("arm") == "confirm" else "")
        for _, r in c.iterrows()
    ]
    pos = np.arange(len(c))
    resolved = (c["ratio_ci_high"] < 1) | (c["ratio_ci_low"] > 1)
    err = _xerr(c, "ratio_to_baseline", "ratio_ci_low", "ratio_ci_high")
    ax.errorbar(c["ratio_to_baseline"], pos, xerr=err, fmt="none", ecolor="0.5", capsize=3)
    ax.scatter(c["ratio_to_baseline"], pos, c=np.where(resolved, "tab:blue", "tab:orange"), zorder=3)
    ax.axvline(1.0, color="k", ls=":", lw=1)
    ax.set_xscale("log")
    _plain_log_ticks(ax.xaxis)
    ax.tick_params(axis="x", which="minor", labelsize=7)
    ax.set_yticks(pos, labels, fontsize=8)
    ax.set_ylim(-0.7, len(c) - 0.3)
    ax.set_xlabel("compute to target / on-policy's, paired by seed (95% CI)")
    ax.set_title("Savings against on-policy")
    caption = (
        "Each configuration's compute to target over on-policy's on the same seeds (paired; geometric mean of the "
        "per-seed ratios, log axis), with its 95% interval. Left of the dotted line at 1: less compute than "
        "on-policy. Blue: resolved (the interval misses 1); orange: unresolved (the study cannot tell it from "
        "on-policy)."
    )
    return Figure(_save(fig, out / "savings.png"), caption)


def entropy_vs_compute(data: StudyData, out: Path, best_trial: int | None) -> Figure:
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    e = data.entropy.merge(data.runs[["run_id", "trial_number", "baseline"]], on="run_id")
    for trial, g in e.groupby("trial_number"):
        base = bool(g["baseline"].iloc[0])
        if not base and trial != best_trial:
            continue
        color = "tab:gray" if base else "tab:blue"
        for i, (_, r) in enumerate(g.sort_values("step").groupby("run_id")):
            smooth = r["entropy"].rolling(10, min_periods=1).mean()
            ax.plot(
                r["units_logged"],
                smooth,
                color=color,
                alpha=0.7,
                lw=1,
                label=("on-policy" if base else f"best replay (trial {trial})") if i == 0 else None,
            )
    ax.set_xlabel("compute units")
    ax.set_ylabel("token entropy of fresh samples (nats)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    ax.set_title("Policy entropy against compute")
    caption = (
        "Token entropy of the freshly generated samples (nats; a rolling mean over 10 steps) against compute units: "
        "on-policy (gray) and the best replay setting (blue), one line per seed. A collapse shows as a fall towards 0."
    )
    return Figure(_save(fig, out / "entropy_vs_compute.png"), caption)


def staleness_histogram(data: StudyData, trial: int, out: Path) -> Figure:
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
    caption = (
        f"How old the rollouts trial {trial} trained on were: optimizer steps between a rollout's generation and "
        "each step that trained on it, counted over all its seeds (age 0: trained in the step that generated it)."
    )
    return Figure(_save(fig, out / "staleness_histogram.png"), caption)
