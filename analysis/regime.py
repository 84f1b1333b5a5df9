"""The paper's regime across studies: asynchronous studies at several generator slowdowns (several mu), read
together (`workbench regime`). For each mu: every arm's compute and wall time to the target against the queue at its
best learning rate (paired by seed), the replay ratio that emerged, and the fitted model's optimum; across mu, the
crossover (the smallest slowdown at which a buffer resolvably beats the tuned queue) set against the theory's
(replay pays where the split leaves the trainer idle without it: y ≈ mu·T/W > 1); and, given a confirmation study on
fresh seeds, the predicted against the confirmed ratios.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

from workbench import censoring, knobs, stats  # noqa: E402
from workbench.censoring import Outcome  # noqa: E402

from analysis import recommend  # noqa: E402
from analysis.data import StudyData, load_study, reaccount, retarget  # noqa: E402
from analysis.pipeline import device_time_to_target, split_table  # noqa: E402
from analysis.report import analyze_data  # noqa: E402
from analysis.result import Configuration, Recommendation  # noqa: E402
from analysis.tuned_lr import tuned_lr  # noqa: E402

OUTPUT_FILES = ("regime.md", "regime.json", "compute_vs_y.png", "crossover.png")
MIN_FIT_CONFIGURATIONS = 4
"""Distinct (x, y) a study needs before its fitted optimum is shown: the closed form has three parameters."""


def _device_pairs(
    runs, device: dict[str, float | Outcome], arm: int, base: int, what: str = "device time"
) -> dict | None:
    """An arm's per-run values (device-seconds to the target, or compute) against the tuned queue's, paired by seed."""

    def per_seed(n):
        g = runs[runs["trial_number"] == n]
        return {
            int(sd): device[r]
            for sd, r in zip(g["seed"], g["run_id"])
            if r in device and (isinstance(device[r], Outcome) or math.isfinite(device[r]))
        }

    mine, theirs = per_seed(arm), per_seed(base)
    if not mine or not theirs:
        return None
    wrap = lambda d: {sd: v if isinstance(v, Outcome) else Outcome(float(v)) for sd, v in d.items()}  # noqa: E731
    iv = censoring.paired_ratio(wrap(mine), wrap(theirs))
    words = censoring.verdict(iv) if not math.isfinite(iv.estimate) else stats.verdict(iv, what)
    return {
        "ratio": iv.estimate,
        "low": iv.low,
        "high": iv.high,
        "seeds": iv.n,
        "verdict": words,
        **censoring.counts_of(iv),
    }


def _compute_per_run(runs) -> dict[str, Outcome]:
    """Each run's compute to the target, a censored run as censored at its total (`workbench.censoring`), by run id."""
    return {
        r.run_id: Outcome(float(r.total_units), True) if r.censored else Outcome(float(r.compute_to_target))
        for r in runs.itertuples()
    }


def _arm_of(
    c: Configuration, data: StudyData, split: dict, device, tuned: dict, against: dict, base_number: int | None
) -> dict:
    """One configuration of an asynchronous study as an arm of the regime: its split, its compute and device time to
    the target, each against the tuned queue."""
    runs = data.runs
    g = runs[runs["trial_number"] == c.trial_number]
    s = split.get(c.trial_number, {})
    on_policy = bool(c.x == 1 and c.y == 1)
    pair = against.get(c.trial_number, {}).get("against_tuned")
    if pair is None and not on_policy and not tuned:  # the queue ran at one lr (its best elsewhere): the baseline
        pair = {
            "ratio": c.ratio_to_baseline,
            "low": c.ratio_ci_low,
            "high": c.ratio_ci_high,
            "seeds": c.seeds,
            "verdict": c.verdict,
        }
    W, T = int(g["generators"].iloc[0]), int(g["trainers"].iloc[0])
    arm = {
        "trial_number": c.trial_number,
        "strategy": str(g["strategy_run"].iloc[0]),
        "capacity": c.capacity,
        "lr": c.lr,
        "generators": W,
        "trainers": T,
        "y": c.y,
        "x": c.x,
        "y_of_split": knobs.replay_ratio_of_split(data.reference_mu, W, T),
        "seeds": c.seeds,
        "censored_seeds": c.censored_seeds,
        "compute_to_target": c.compute_to_target,
        "compute_ci": [c.ci_low, c.ci_high],
        "wall_to_target": s.get("wall_to_target"),
        "wall_ci": s.get("wall_ci"),
        "against_tuned": pair,
        "against_tuned_device_time": None
        if on_policy or base_number is None
        else _device_pairs(runs, device, c.trial_number, base_number),
        "baseline": c.baseline,
        "on_policy": on_policy,
        "tuned_queue": c.trial_number == base_number,
        "arm": c.arm,
    }
    if arm["arm"] != "sampler" and base_number is not None:  # `study verify`'s run: not in tuned_lr's cells
        arm["against_tuned"] = _device_pairs(runs, _compute_per_run(runs), c.trial_number, base_number, "compute")
    return arm


def _recommendation(rec: Recommendation) -> dict:
    """What regime.json keeps of `workbench recommend`'s answer: the settings, the savings or the refusal, the lines."""
    kept = ("recommended", "saving", "saving_device_time", "refused")
    return {k: v for k, v in rec.to_json().items() if k in kept} | {"lines": rec.lines()}


def _study(data: StudyData) -> dict:
    result, _, _ = analyze_data(data, whatif_mu=[], bootstrap=0)
    runs = data.runs
    fitted_configurations = int(result.fit_configurations)
    split = {r["trial_number"]: r for r in split_table(data)}
    device = device_time_to_target(data)
    tuned = result.tuned_lr or {}
    against = {r["trial_number"]: r for r in tuned.get("tuned", [])}
    base = result.baseline_configuration
    base_number = tuned.get("on_policy_best_trial", base.trial_number if base else None)
    arms = [
        _arm_of(c, data, split, device, tuned, against, base_number)
        for c in result.configurations
        if c.arm in ("sampler", "predicted", "probe")
    ]
    slowdowns = sorted(set(runs["slowdown"])) if "slowdown" in runs else [1.0]
    return {
        "study": data.name,
        "slowdown": slowdowns[0] if len(slowdowns) == 1 else slowdowns,
        "mu": data.reference_mu,
        "target": data.target,
        "metric": data.metric,
        "on_policy_best_lr": tuned.get("on_policy_best_lr", base.lr if base else None),
        "on_policy_best_lr_bounded": tuned.get("on_policy_best_lr_bounded"),
        "queue_lr_tuned_here": bool(tuned),
        "predicted": {
            "x": result.predicted.x,
            "y": result.predicted.y,
            "configurations": fitted_configurations,
            "identified": fitted_configurations >= MIN_FIT_CONFIGURATIONS,
        },
        "recommendation": _recommendation(recommend.from_study(result)),
        "arms": arms,
    }


def reaccounted(sync: StudyData, mu: float) -> list[dict]:
    """A synchronous study's buffers re-accounted at `mu` (the same runs priced at another mu), each cell at its
    best lr against on-policy at its best: what re-accounting predicts a slow generator's saving to be."""
    tuned = tuned_lr(reaccount(sync, mu).runs)
    if not tuned:
        return []
    return [
        {
            "trial_number": r["trial_number"],
            "strategy": r["strategy"],
            "x": r["x"],
            "y": r["y"],
            "lr": r["lr"],
            "capacity": int(round(r["x"] * sync.runs["batch_size"].iloc[0] / r["y"])),
            "compute_to_target": r["compute_to_target"],
            "compute_ci": [r["ci_low"], r["ci_high"]],
            "against_tuned": r["against_tuned"],
        }
        for r in tuned["tuned"]
    ]


def _resolved(pair: dict | None) -> bool:
    return bool(pair) and math.isfinite(pair["high"]) and pair["high"] < 1


def crossover(studies: list[dict]) -> dict:
    """The smallest slowdown (and its mu) at which some buffer's interval against the tuned queue lies below 1, in
    compute and in wall time; and the theory's: the smallest at which the split's y ≈ mu·T/W exceeds 1."""
    ordered = sorted(studies, key=lambda s: s["mu"])

    def first(key: str) -> dict | None:
        for s in ordered:
            if any(not a["on_policy"] and _resolved(a.get(key)) for a in s["arms"]):
                return {"slowdown": s["slowdown"], "mu": s["mu"]}
        return None

    theory = next(
        (
            {"slowdown": s["slowdown"], "mu": s["mu"]}
            for s in ordered
            if any(a["y_of_split"] > 1 for a in s["arms"] if not a["on_policy"])
        ),
        None,
    )
    sync = next(
        (
            {"slowdown": s["slowdown"], "mu": s["mu"]}
            for s in ordered
            if any(_resolved(a.get("against_tuned")) for a in s.get("reaccounted", []))
        ),
        None,
    )
    return {
        "compute": first("against_tuned"),
        "device_time": first("against_tuned_device_time"),
        "theory": theory,
        "reaccounted": sync if any(s.get("reaccounted") for s in ordered) else None,
    }


def _confirmed(confirm: StudyData | None) -> list[dict]:
    if confirm is None:
        return []
    c = _study(confirm)
    return [{**a, "study": c["study"], "mu": c["mu"]} for a in c["arms"]]


def build(
    names: list[str],
    tracking_uri: str,
    confirm: str | None = None,
    target: float | None = None,
    sync: str | None = None,
) -> dict:
    """Every study of `names` read and analysed (at `target` where given), the synchronous study `sync` re-accounted
    at each one's mu, the crossover, and the confirmation."""
    studies = []
    sync_data = load_study(sync, tracking_uri) if sync else None
    if sync_data is not None and target is not None:
        sync_data = retarget(sync_data, target)
    for name in names:
        data = load_study(name, tracking_uri)
        studies.append(_study(retarget(data, target) if target is not None else data))
        if sync_data is not None:
            studies[-1]["reaccounted"] = reaccounted(sync_data, studies[-1]["mu"])
    fresh = None
    if confirm:
        fresh = load_study(confirm, tracking_uri)
        fresh = retarget(fresh, target) if target is not None else fresh
    return {
        "studies": sorted(studies, key=lambda s: s["mu"]),
        "crossover": crossover(studies),
        "confirmed": _confirmed(fresh),
        "confirm_study": confirm,
        "sync_study": sync,
    }


def _pair(p: dict | None) -> str:
    if not p or not math.isfinite(p.get("ratio", math.nan)):
        return "-"
    return f"{p['ratio']:.2f} [{p['low']:.2f}, {p['high']:.2f}]" + censoring.counts_text(p)


def _arm(a: dict) -> str:
    what = "queue" if a["strategy"] in ("queue", "on-policy") else f"{a['strategy']} N {a['capacity']}"
    if a.get("arm", "sampler") != "sampler":
        what = f"{a['arm']} optimum ({'study verify' + (' --probe' if a['arm'] == 'probe' else '')}): {what}"
    return f"{what}, lr {a['lr']:.3g}" if a.get("lr") is not None else what


def _study_section(s: dict, sync_study: str | None) -> list[str]:
    """One slowdown's section: its target and lr, its arms against the tuned queue, the re-accounted synchronous
    runs, its recommendation."""
    lines: list[str] = []
    lines += [
        f"## s {s['slowdown']:g}: mu {s['mu']:.2f} (`{s['study']}`)",
        "",
        f"Target {s['target']:g} on {s['metric']}; the queue's best lr {s['on_policy_best_lr']}"
        + (
            " (not swept here: the queue ran at one lr, the best of a sweep at another slowdown; ratios are against it)"
            if not s.get("queue_lr_tuned_here", True)
            else ""
            if s.get("on_policy_best_lr_bounded")
            else " (at an end of the range tried: an upper bound on any saving)"
        )
        + (
            f"; the fitted model's optimum y {s['predicted']['y']:.2f}, x {s['predicted']['x']:.2f} (no model beats the null"
            " predictors: not a recommendation)."
            if s["predicted"].get("identified", True)
            else f"; no fitted optimum: {s['predicted'].get('configurations')} distinct (x, y) cannot identify the model."
        ),
        "",
        "| trial | arm | W:T | y (emerged) | mu·T/W | seeds (censored) | compute to target [95% CI] | / tuned queue, compute"
        " | wall to target, s [95% CI] | / tuned queue, device time |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for a in s["arms"]:
        wall = (
            "-"
            if a["wall_to_target"] is None
            else f"{a['wall_to_target']:.1f} [{a['wall_ci'][0]:.1f}, {a['wall_ci'][1]:.1f}]"
        )
        own = "tuned queue" if a.get("tuned_queue") else "-"
        lines.append(
            f"| {a['trial_number']} | {_arm(a)} | {a['generators']}:{a['trainers']} | {a['y']:.2f} | {a['y_of_split']:.2f} "
            f"| {a['seeds']} ({a['censored_seeds']}) "
            f"| {a['compute_to_target']:.1f} [{a['compute_ci'][0]:.1f}, {a['compute_ci'][1]:.1f}] "
            f"| {own if a['on_policy'] else _pair(a['against_tuned'])} | {wall} "
            f"| {own if a['on_policy'] else _pair(a['against_tuned_device_time'])} |"
        )
    if s.get("reaccounted"):
        lines += [
            "",
            f"The synchronous study `{sync_study}` re-accounted at mu {s['mu']:.2f} (its runs at this machine's"
            " mu, priced at this one: no slow generator's staleness in them), each cell at its best lr against on-policy at its best:",
            "",
            "| trial | arm | y (set) | x | compute to target [95% CI] | / tuned on-policy, compute |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {a['trial_number']} | {a['strategy']} N {a['capacity']}, lr {a['lr']:.3g} | {a['y']:g} | {a['x']:g} "
            f"| {a['compute_to_target']:.1f} [{a['compute_ci'][0]:.1f}, {a['compute_ci'][1]:.1f}] | {_pair(a['against_tuned'])} |"
            for a in s["reaccounted"]
        ]
    lines += [
        "",
        "`workbench recommend` on this study:",
        "",
        "```",
        *s["recommendation"].get("lines", []),
        "```",
        "",
    ]
    return lines


def _crossover_section(r: dict) -> list[str]:
    """Where a buffer first beats the tuned queue, measured and by the theory."""
    lines: list[str] = []
    c = r["crossover"]

    def where(p):
        return "none of the slowdowns measured" if p is None else f"s {p['slowdown']:g} (mu {p['mu']:.2f})"

    lines += [
        "## The crossover",
        "",
        f"- The smallest slowdown at which a buffer resolvably beats the tuned queue in compute: {where(c['compute'])};"
        f" in device time: {where(c['device_time'])}.",
        *(
            [f"- Re-accounting the synchronous runs at each mu puts it at {where(c['reaccounted'])}."]
            if r.get("sync_study")
            else []
        ),
        f"- The theory's: replay pays once a split leaves the trainer idle without it, y ≈ mu·T/W > 1: {where(c['theory'])}.",
        "",
    ]
    return lines


def _confirmed_section(r: dict) -> list[str]:
    """The predicted arms re-run on fresh seeds and a fresh checkpoint."""
    lines: list[str] = []
    if not r["confirmed"]:
        return lines
    lines += [
        f"## Predicted against confirmed (`{r['confirm_study']}`, fresh seeds and checkpoint)",
        "",
        "| arm | W:T | y | / tuned queue, compute [95% CI] | / tuned queue, device time [95% CI] | seeds (censored) |",
        "|---|---|---|---|---|---|",
    ]
    for a in r["confirmed"]:
        lines.append(
            f"| {_arm(a)} | {a['generators']}:{a['trainers']} | {a['y']:.2f} | {'tuned queue' if a.get('tuned_queue') else _pair(a['against_tuned'])} "
            f"| {'tuned queue' if a.get('tuned_queue') else _pair(a['against_tuned_device_time'])} | {a['seeds']} ({a['censored_seeds']}) |"
        )
    lines.append("")
    return lines


def markdown(r: dict) -> str:
    lines = [
        "# The paper's regime: a buffer against the lr-tuned queue as generation gets dearer",
        "",
        "Each study is the asynchronous pipeline at one generator slowdown s; mu is measured on its queue baseline (the"
        " emulated extra time counted as generation). Ratios are paired by seed against the queue at its best learning"
        " rate in the same study (geometric mean, 95% interval); below 1 saves, and a ratio whose interval contains 1 is"
        " unresolved. Compute is in units at the study's mu. Device time is the wall time to the target (evaluations and"
        " start-up excluded) x the W + T devices a split uses, the paper's count: arms with more generators are not"
        " cheaper for finishing sooner on more devices. `y` emerged (K_train/K_gen); `mu·T/W` is what the theory's"
        " no-stall mapping expects of the split.",
        "",
    ]
    for s in r["studies"]:
        lines += _study_section(s, r.get("sync_study"))
    lines += _crossover_section(r) + _confirmed_section(r)
    return "\n".join(lines)


def plot_compute_vs_y(r: dict, path: Path) -> None:
    studies = r["studies"]
    fig, axes = plt.subplots(1, len(studies), figsize=(3.6 * len(studies), 3.4), squeeze=False, sharey=False)
    for ax, s in zip(axes[0], studies):
        for a in s["arms"]:
            c, lo, hi = a["compute_to_target"], *a["compute_ci"]
            marker = "s" if a["strategy"] == "queue" else "o"
            ax.errorbar(
                [a["y"]],
                [c],
                yerr=[[c - lo], [hi - c]],
                fmt=marker,
                capsize=3,
                label=_arm(a) + f", W {a['generators']}" + (" *" if a["censored_seeds"] else ""),
            )
        if s["predicted"].get("identified", True):
            ax.axvline(
                s["predicted"]["y"], color="grey", ls="--", lw=1, label=f"fitted optimum y {s['predicted']['y']:.2f}"
            )
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _pos: f"{v:g}"))
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_title(f"s {s['slowdown']:g}, mu {s['mu']:.2f}", fontsize=9)
        ax.set_xlabel("replay ratio y (emerged)")
        ax.legend(fontsize=6)
    axes[0][0].set_ylabel("compute to target (units at the study's mu)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_crossover(r: dict, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(5.2, 3.4))
    plotted = False
    for key, label, color in (
        ("against_tuned", "compute", "tab:blue"),
        ("against_tuned_device_time", "device time", "tab:orange"),
    ):
        xs, ys, errs = [], [], [[], []]
        for s in r["studies"]:
            measured = [a for a in s["arms"] if not a["on_policy"] and a.get(key) and math.isfinite(a[key]["ratio"])]
            best = min(measured, key=lambda a: a[key]["ratio"], default=None)  # arms with no estimate: nothing to draw
            if best is None:
                continue
            p = best[key]
            xs.append(s["mu"])
            ys.append(p["ratio"])
            errs[0].append(p["ratio"] - p["low"])
            errs[1].append(min(p["high"], 1e6) - p["ratio"])  # an end the censored pairs leave open: drawn to the edge
        if xs:
            plotted = True
            ax.errorbar(
                xs, ys, yerr=errs, fmt="o-", capsize=3, color=color, label=f"best buffer / tuned queue, {label}"
            )
    ax.axhline(1, color="grey", lw=1)
    if not plotted:
        ax.text(
            0.5,
            0.6,
            "no arm has an estimate (too few runs reached the target)",
            ha="center",
            transform=ax.transAxes,
            fontsize=8,
        )
    ax.set_xscale("log" if plotted else "linear")
    ax.set_xticks([s["mu"] for s in r["studies"]])
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _pos: f"{v:.3g}"))
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("mu (measured, emulated slowdown counted)")
    ax.set_ylabel("ratio to the tuned queue (95% CI)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(r: dict, folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = {name: folder / name for name in OUTPUT_FILES}
    paths["regime.json"].write_text(json.dumps(r, indent=1, default=float))
    paths["regime.md"].write_text(markdown(r))
    plot_compute_vs_y(r, paths["compute_vs_y.png"])
    plot_crossover(r, paths["crossover.png"])
    return paths
