"""The report's tables, as Markdown sections (`tables`): every configuration with its interval, what the study can
resolve, the fitted optimum against the empirical one, the re-accounting at another mu, the paper's laws, the fit
and the compared models, the asynchronous pipeline, the Pareto front. Each section says in words what its numbers
are; the report puts them after its bottom line and its figures (`analysis.report`)."""

from __future__ import annotations

import json
import math

from analysis import null_models
from analysis.data import strategy_shown
from analysis.result import Analysis, Configuration
from analysis.sharpness import difference_text
from workbench import censoring
from workbench.estimators import METRICS
from workbench.verdicts import knob_label


def _fmt(v, digits=3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}g}" if math.isfinite(v) else "-"
    return str(v)


def _ci_of(value: float, low: float, high: float) -> str:
    if not math.isfinite(low):
        return _fmt(value)
    return f"{_fmt(value)} [{_fmt(low)}, {_fmt(high)}]"


def _ci(c: Configuration) -> str:
    return _ci_of(c.compute_to_target, c.ci_low, c.ci_high)


def _ci_row(r: dict) -> str:
    """`_ci` of a plain table row (the tuned learning rate's)."""
    return _ci_of(r["compute_to_target"], r.get("ci_low", math.nan), r.get("ci_high", math.nan))


def _ratio(c: Configuration) -> str:
    if not c.compared:
        return "-"
    return f"{c.ratio_to_baseline:.2f} [{c.ratio_ci_low:.2f}, {c.ratio_ci_high:.2f}]" + c.comparison.counts_text()


def _label(baseline: bool, x: float, y: float, shown: dict, lr: float | None) -> str:
    """A configuration in the outputs' one format (`workbench.verdicts.knob_label`): `y=2 x=8`, `on-policy lr=0.0001`."""
    at = {"lr": float(lr)} if lr is not None else {}
    if baseline:
        return " ".join(["on-policy", knob_label(at)]).strip()
    return knob_label({"replay.ratio": float(y), "x": float(x), **shown, **at})


def _what(c: Configuration, show_lr: bool = False) -> str:
    return _label(c.baseline, c.x, c.y, c.strategy_shown(), c.lr if show_lr else None)


def _what_row(r: dict, show_lr: bool = False) -> str:
    """`_what` of a plain table row (the tuned learning rate's), never on-policy's."""
    return _label(False, r["x"], r["y"], strategy_shown(r), r.get("lr") if show_lr else None)


def _comparison_section(result: Analysis) -> list[str]:
    lines = [
        "## Every configuration, with its uncertainty",
        "",
        "Compute to target: geometric mean over seeds with its 95% interval. Ratio: compute to target over"
        " on-policy's on the same seeds (paired), 95% interval; a difference is resolved only when that interval"
        " excludes 1. A run that never reached the target is censored, not valued at its total"
        " (`workbench.censoring`): a pair where both never did is left out and counted, a pair where one did is a"
        " bound (a log-normal model with a random effect per seed); an arm with fewer than two runs at the target"
        " has no estimate.",
        "",
        "| trial | arm | configuration | seeds (censored) | compute to target [95% CI] | ratio to on-policy [95% CI] | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in sorted(result.configurations, key=lambda r: (r.arm == "confirm", r.compute_to_target)):
        lines.append(
            f"| {r.trial_number} | {'baseline' if r.baseline and r.arm == 'sampler' else r.arm} | {_what(r, result.lr_varies)} | {r.seeds} ({r.censored_seeds}) | {_ci(r)} | {_ratio(r)} | {r.verdict} |"
        )
    return lines + [""]


def _pair(p: dict | None) -> str:
    return (
        "-"
        if not p or not math.isfinite(p["ratio"])
        else f"{p['ratio']:.2f} [{_fmt(p['low'])}, {_fmt(p['high'])}]{censoring.counts_text(p)}: {p['verdict']}"
    )


def _tuned_lr_section(result: Analysis) -> list[str]:
    t = result.tuned_lr
    if not t:
        return []
    lines = [
        "## At a matched learning rate",
        "",
        "The ratios above set every configuration against on-policy at one learning rate, so a saving there may"
        " come from the learning rate alone. On-policy ran at "
        + ", ".join(
            f"lr {_fmt(o['lr'])} (trial {o['trial_number']}: {_fmt(o['compute_to_target'])} [{_fmt(o['ci_low'])}, {_fmt(o['ci_high'])}])"
            for o in t["on_policy_by_lr"]
        )
        + f"; its best, lr {_fmt(t['on_policy_best_lr'])}, is a selection estimate"
        + (
            "."
            if t.get("on_policy_best_lr_bounded", True)
            else ", and it lies at an end of the range tried: on-policy is not tuned (a learning rate beyond it may be faster),"
            " so a saving against it is an upper bound."
        )
        + (f" Protocol: {t['protocol']}." if t.get("protocol") else ""),
        "",
        "Each configuration against on-policy at its own learning rate (paired by seed):",
        "",
        "| trial | configuration | ratio to on-policy at the same lr [95% CI]: verdict |",
        "|---|---|---|",
    ]
    lines += [f"| {r['trial_number']} | {_what_row(r, True)} | {_pair(r['same_lr'])} |" for r in t["same_lr"]]
    lines += [
        "",
        f"Each (x, y) at its best learning rate against on-policy at its best (lr {_fmt(t['on_policy_best_lr'])}), the"
        " comparison the paper makes (lr re-tuned per configuration); both sides selected on the same seeds:",
        "",
        "| trial | configuration (its best lr) | compute to target [95% CI] | ratio to tuned on-policy [95% CI]: verdict |"
        + (
            " device time to target (wall x W + T), same pairing [95% CI]: verdict |"
            if any("against_tuned_device_time" in r for r in t["tuned"])
            else ""
        ),
        "|---|---|---|---|" + ("---|" if any("against_tuned_device_time" in r for r in t["tuned"]) else ""),
    ]
    lines += [
        f"| {r['trial_number']} | {_what_row(r, True)} | {_ci_row(r)} | {_pair(r['against_tuned'])} |"
        + (
            f" {_pair(r.get('against_tuned_device_time'))} |"
            if any("against_tuned_device_time" in q for q in t["tuned"])
            else ""
        )
        for r in t["tuned"]
    ]
    if t.get("between_tuned"):
        lines += [
            "",
            "Between the configurations, each at its best learning rate (paired by seed; the faster first):",
            "",
            "| trials | configuration (its best lr) | against (its best lr) | ratio [95% CI]: verdict |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {r['trial_number']}/{r['against_trial']} | {_what_row(r, True)}"
            f" | {_what_row({**r['against'], 'lr': r['against_lr']}, True)} | {_pair(r['ratio'])} |"
            for r in t["between_tuned"]
        ]
    return lines + [""]


def _resolution_section(result: Analysis) -> list[str]:
    z = result.resolution or {}
    lines = ["## What this study can and cannot resolve", ""]
    sd = z.get("per_run_log_sd", math.nan)
    if not math.isfinite(sd):
        lines.append(
            "No configuration has two uncensored seeds: the per-run noise is not measured, and no difference"
            " between configurations can be resolved."
        )
    else:
        lines.append(
            f"Per-run noise: the standard deviation of log compute-to-target between seeds of one configuration is "
            f"{sd:.3f} (pooled over configurations, {z['per_run_log_sd_df']} degrees of freedom): one run is uncertain by "
            f"about x{math.exp(sd):.2f}. Paired by seed against on-policy, the log ratio varies by "
            f"{_fmt(z.get('paired_log_sd', math.nan))} between seeds."
        )
        if z.get("checkpoints"):
            lines.append(
                f"The seeds start from {z['checkpoints']} warm starts; between seeds that share one, the per-run noise is "
                f"{_fmt(z['within_checkpoint_log_sd'])} ({z['within_checkpoint_log_sd_df']} degrees of freedom): the rest of the"
                " pooled figure is the checkpoints' own spread, which pairing by seed (and so by checkpoint) removes."
            )
    if "smallest_resolvable_saving" in z:
        lines.append(
            f"With {z['seeds_per_configuration']} seeds per configuration, savings smaller than about "
            f"{z['smallest_resolvable_saving']:.0%} cannot be told apart from none; resolving a 10% saving would take "
            f"about {z.get('seeds_to_resolve_10pct') or 'more than 1000'} paired seeds, a 25% saving about "
            f"{z.get('seeds_to_resolve_25pct') or 'more than 1000'}."
        )
    noise = result.noise_by_estimator or []
    if noise:
        lines += [
            "",
            f"Per-run noise by estimator at target {result.target_accuracy:g} (the study uses "
            f"`{result.estimator}`): sd of log compute-to-target over seeds (censored seeds left out), and "
            "each configuration's paired ratio to on-policy with its 95% interval.",
            "",
            "| estimator | trial | seeds (censored) | log sd | geometric mean | paired log sd | ratio to on-policy [95% CI] |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in noise:
            ratio = (
                "-"
                if not math.isfinite(r.get("ratio", math.nan))
                else f"{r['ratio']:.2f} [{r['ratio_ci_low']:.2f}, {r['ratio_ci_high']:.2f}]" + censoring.counts_text(r)
            )
            lines.append(
                f"| {r['estimator']} | {r['trial_number']}{' (on-policy)' if r['baseline'] else ''} | {r['seeds']} ({r['censored']}) "
                f"| {_fmt(r['log_sd'])} | {_fmt(r['geo_mean'])} | {_fmt(r.get('paired_log_sd', math.nan))} | {ratio} |"
            )
        lines.append("")
    resolved = [r for r in result.configurations if r.verdict.startswith("resolved")]
    unresolved = [r for r in result.configurations if r.verdict.startswith("unresolved")]
    lines.append(
        f"Of the {len(resolved) + len(unresolved)} configurations compared with on-policy, {len(resolved)} differ resolvably "
        f"and {len(unresolved)} are unresolved (their intervals contain 1): for those this study says nothing either way."
    )
    return lines + [""]


def _readings_section(result: Analysis) -> list[str]:
    rows = result.by_reading or []
    if len({r["reading"] for r in rows}) < 2:
        return []
    lines = [
        "## The same comparisons read on another curve",
        "",
        f"The runs logged more than one held-out curve at every evaluation. Each comparison with on-policy read on each"
        f" of them by `{result.estimator}`: the study's own curve at its target, the others at the"
        " level the baseline's seeds reach by the study's auto-target rule there. Where the verdicts differ, whether"
        ' a setting saves compute depends on what the user reads (docs/measurement.md, "Reading a smooth curve").',
        "",
        "| curve read (target) | trial | seeds (censored) | log sd | paired log sd | ratio to on-policy [95% CI] | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: (r["trial_number"], not r["study_reading"])):
        ratio = (
            "-"
            if not math.isfinite(r.get("ratio", math.nan))
            else f"{r['ratio']:.2f} [{r['ratio_ci_low']:.2f}, {r['ratio_ci_high']:.2f}]" + censoring.counts_text(r)
        )
        lines.append(
            f"| {r['reading']} at {r['target']:g}{' (the study)' if r['study_reading'] else ''} | {r['trial_number']}"
            f"{' (on-policy)' if r['baseline'] else ''} | {r['seeds']} ({r['censored']}) | {_fmt(r['log_sd'])} "
            f"| {_fmt(r.get('paired_log_sd', math.nan))} | {ratio} | {r.get('verdict', '-')} |"
        )
    verdicts: dict[int, set[str]] = {}
    for r in rows:
        if "verdict" in r:  # the verdict's kind: resolved less, resolved more, or unresolved
            verdicts.setdefault(r["trial_number"], set()).add(
                " ".join(r["verdict"].replace(":", " ").split()[:2])
                if r["verdict"].startswith("resolved")
                else "unresolved"
            )
    split = sorted(n for n, v in verdicts.items() if len(v) > 1)
    lines += [
        "",
        (
            "The curves disagree about trial" + ("s " if len(split) > 1 else " ") + ", ".join(map(str, split)) + ": "
            "read both rows of each before taking a verdict."
        )
        if split
        else "Every comparison gets the same verdict on every curve read.",
        "",
    ]
    return lines


def _checkpoints_section(result: Analysis) -> list[str]:
    rows = result.by_checkpoint or []
    if not rows:
        return []
    lines = [
        "## Each warm start at its own target",
        "",
        "The seeds start from several warm starts (`seeds_per_checkpoint`), and one target can suit one checkpoint and"
        " censor every run of another. Here each checkpoint's seeds are read on the study's curve at that checkpoint's"
        " own target, the auto-target rule applied to its baseline seeds; comparisons stay paired within a checkpoint.",
        "",
        "| checkpoint (model.init_seed) | target | trial | seeds (censored) | log sd | ratio to on-policy [95% CI] | verdict |"
        " ratio to on-policy at its best lr on these seeds [95% CI]: verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: (r["trial_number"], r["checkpoint"])):
        ratio = (
            "-"
            if not math.isfinite(r.get("ratio", math.nan))
            else f"{r['ratio']:.2f} [{r['ratio_ci_low']:.2f}, {r['ratio_ci_high']:.2f}]" + censoring.counts_text(r)
        )
        tuned = (
            "-"
            if "ratio_to_tuned" not in r
            else (
                f"{r['ratio_to_tuned']:.2f} [{r['ratio_to_tuned_low']:.2f}, {r['ratio_to_tuned_high']:.2f}] (lr {r['tuned_lr']:g}):"
                f" {r['verdict_to_tuned']}"
            )
        )
        lines.append(
            f"| {r['checkpoint']} | {r['target']:.3g} | {r['trial_number']}{' (on-policy)' if r['baseline'] else ''} "
            f"| {r['seeds']} ({r['censored']}) | {_fmt(r['log_sd'])} | {ratio} | {r.get('verdict', '-')} | {tuned} |"
        )
    return lines + [""]


def _ratio_cell(r: dict | None) -> str:
    if not r or not math.isfinite(r.get("ratio", math.nan)):
        return "-"
    if not math.isfinite(r.get("ratio_ci_low", math.nan)):
        return f"{r['ratio']:.2f} (one seed)"
    return f"{r['ratio']:.2f} [{r['ratio_ci_low']:.2f}, {r['ratio_ci_high']:.2f}]" + censoring.counts_text(r)


def _difference_cell(r: dict | None) -> str:
    return difference_text(r, missing="-", one_seed="(one seed)")


def _temperature(t: float) -> str:
    return "greedy" if t == 0 else f"T {t:g}"


def sharpness_section(result: Analysis) -> list[str]:
    """Skill or sharpness (`analysis.sharpness`): each comparison with on-policy on the study's curve, on greedy
    accuracy, at equal sampling entropy and at each arm's best decoding temperature, and the verdict in words."""
    s = result.skill_or_sharpness
    if not s or not s["comparisons"]:
        return []
    metric, configs = s["metric"], {c.trial_number: c for c in result.configurations}
    label = lambda n: _what(configs[n], result.lr_varies) if n in configs else "-"  # noqa: E731
    temps = ", ".join(f"{t:g}" for t in s["temperatures"]) or "none logged"
    target = f"{s['greedy_target']:g}" if s["greedy_target"] is not None else "-"
    lines = [
        "## Skill or sharpness",
        "",
        "A curve read by sampling at the generation temperature (`demo_prob`, `mean_at_k`) rises when the policy"
        " learns and also when it only sharpens (its sampling entropy falls): a lower decoding temperature moves it"
        " on the same weights, and an arm that trains on its successes more often sharpens faster. Each comparison"
        f" with on-policy, read four ways: the ratio of compute to target on the study's curve (`{metric}`); on"
        f" greedy accuracy (target {target}); the"
        f" difference from on-policy at equal entropy (entropy of the {s['entropy_source']}; each run's curve"
        " against its own entropy, compared over the range both runs of a seed cover, mean over seeds with its 95%"
        f" interval; 0: no difference); and the ratio with each arm at its own best temperature (greedy, or sampled"
        f" pass@1 at T {temps}, to the greedy target; both bests selected on the same seeds). *Skill*: the saving"
        " also holds where sharpening cannot make it (greedy, best temperature, or at equal entropy), with no"
        " reading against it; *sharpness*: it vanishes at equal entropy and on greedy accuracy; *unresolved*: the"
        ' readings disagree or cannot tell (docs/measurement.md, "Skill or sharpness").',
        "",
        f"| trial | configuration | {metric}: ratio [95% CI] | greedy accuracy: ratio | at equal entropy: {metric}"
        " | at equal entropy: greedy accuracy | best temperature (arm / on-policy): ratio | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += _sharpness_rows(s, label)
    lines += _against_tuned_sharpness(result.skill_or_sharpness_tuned, label)
    others = [
        (c["trial_number"], r)
        for c in s["comparisons"]
        for r in c["equal_entropy"]
        if r["reading"] not in (metric, "accuracy")
    ]
    if others:
        lines += [
            "",
            "At equal entropy, the other curves the runs logged (difference from on-policy; seeds read, and seeds"
            " whose two runs' entropy ranges do not overlap):",
            "",
            "| trial | curve | at equal entropy [95% CI] | seeds (not read) | entropy range |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {n} | {r['reading']} | {_difference_cell(r)} | {r['seeds']} ({r['seeds_unread']}) | "
            + (f"{r['entropy_range'][0]:.3g} to {r['entropy_range'][1]:.3g}" if r["entropy_range"] else "-")
            + " |"
            for n, r in others
        ]
    rows = [r for r in [*s["baseline_best_temperature"], *(c["best_temperature"] for c in s["comparisons"])] if r]
    if rows:
        ts = list(dict.fromkeys(t for r in rows for t in r["by_temperature"]))
        lines += [
            "",
            f"Compute to the greedy target {target} (geometric mean over seeds; censored seeds at their total) at each"
            " decoding temperature, by `" + s["estimator"] + "`:",
            "",
            "| trial | " + " | ".join(_temperature(float(t)) for t in ts) + " | best |",
            "|---|" + "---|" * (len(ts) + 1),
        ]
        lines += [
            f"| {r['trial_number']}{' (on-policy)' if r['baseline'] else ''} | "
            + " | ".join(
                _fmt(r["by_temperature"].get(t))
                + (f" ({r['censored_by_temperature'][t]} censored)" if r["censored_by_temperature"].get(t) else "")
                for t in ts
            )
            + f" | {_temperature(r['best_temperature'])} |"
            for r in rows
        ]
    if s["missing"]:
        lines += ["", "Not logged by these runs: " + "; ".join(s["missing"]) + "."]
    return lines + [""]


def _sharpness_rows(s: dict, label) -> list[str]:
    """The skill-or-sharpness table's rows (its header written by the caller) and the verdicts in words."""
    metric, lines = s["metric"], []
    for c in s["comparisons"]:
        at = {r["reading"]: r for r in c["equal_entropy"]}
        b = c["best_temperature"] or {}
        best = (
            f"{_temperature(b['best_temperature'])} / {_temperature(b['baseline_best_temperature'])}: {_ratio_cell(b)}"
            if "baseline_best_temperature" in b
            else "-"
        )
        lines.append(
            f"| {c['trial_number']} | {label(c['trial_number'])} | {_ratio_cell(c['study_curve'])} | {_ratio_cell(c['greedy'])} "
            f"| {_difference_cell(at.get(metric))} | {_difference_cell(at.get('accuracy'))} | {best} | **{c['verdict']}** |"
        )
    lines.append("")
    return lines + [
        f"- Trial {c['trial_number']} ({label(c['trial_number'])}): **{c['verdict']}**: {c['why']}."
        for c in s["comparisons"]
    ]


def _against_tuned_sharpness(t: dict | None, label) -> list[str]:
    """The same readings against on-policy at its best learning rate (`analysis.report`'s `skill_or_sharpness_tuned`)."""
    if not t or not t["comparisons"]:
        return []
    bounded = (
        "bounded on both sides by the learning rates tried"
        if t["bounded"]
        else "at an end of the learning rates tried, so not bounded: a saving against it is an upper bound"
    )
    metric = t["metric"]
    return [
        "",
        f"Against on-policy at its best learning rate (lr {t['baseline_lr']:g}, trial {t['baseline_trial']}; {bounded};"
        " selected on the same seeds, so a selection estimate), the same four readings. This is the comparison a"
        " claim rests on: a saving against on-policy at its default learning rate may be the learning rate's.",
        "",
        f"| trial | configuration | {metric}: ratio [95% CI] | greedy accuracy: ratio | at equal entropy: {metric}"
        " | at equal entropy: greedy accuracy | best temperature (arm / on-policy): ratio | verdict |",
        "|---|---|---|---|---|---|---|---|",
        *_sharpness_rows(t, label),
    ]


def _pipeline_section(result: Analysis) -> list[str]:
    rows = result.pipeline or []
    if not rows:
        return []
    lines = [
        "## The asynchronous pipeline",
        "",
        "Each configuration's split (W generators, T trainers), the replay ratio that emerged (K_train / K_gen), mu"
        " by the paper's estimator (K_train/T)/(K_gen/W) (App. D.4; a cost ratio only where neither side stalls),"
        " each side's idle fraction, and the wall time to the target (evaluations excluded; geometric mean over seeds"
        " with its 95% interval), paired by seed against the on-policy baseline (the synchronous trial; in an asynchronous"
        " study, the queue). `y from split` is"
        " mu·T/W at the synchronous runs' measured mu: the replay ratio the theory's mapping expects of that split.",
        "",
        "| trial | pipeline | strategy | W | T | capacity | seeds (censored) | replay ratio | y from split | mu (D.4) |"
        " trainer idle | generator idle | wall to target, s [95% CI] | / baseline on the same seeds [95% CI] | compute to target |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        wall = f"{_fmt(r['wall_to_target'])} [{_fmt(r['wall_ci'][0])}, {_fmt(r['wall_ci'][1])}]"
        ratio = (
            "baseline"
            if r["baseline"]
            else (
                f"{_fmt(r.get('wall_ratio_to_baseline', r.get('wall_ratio_to_sync')))} [{_fmt(r.get('wall_ratio_ci', [None, None])[0])}, "
                f"{_fmt(r.get('wall_ratio_ci', [None, None])[1])}]: {r.get('wall_verdict', '-')}"
            )
        )
        lines.append(
            f"| {r['trial_number']} | {r['pipeline']} | {r['strategy']} | {r['generators']} | {r['trainers']} | {r['capacity']} "
            f"| {r['seeds']} ({r['censored_seeds']}) | {_fmt(r['replay_ratio'])} | {_fmt(r.get('replay_ratio_from_split'))} "
            f"| {_fmt(r['mu_d4'])} | {_fmt(r['trainer_idle'])} | {_fmt(r['generator_idle'])} | {wall} | {ratio} "
            f"| {_fmt(r['compute_to_target'])} |"
        )
    m = result.pipeline_mapped
    if m:
        lines += [
            "",
            f"The fitted optimum (x* {_fmt(m['x'])}, y* {_fmt(m['y'])}) as an asynchronous split at mu {_fmt(result.reference_mu)}:"
            f" W/T ≈ {_fmt(m['workers_per_trainer'])}, a buffer of N ≈ {m['capacity']} rollouts (docs/pipeline.md).",
        ]
    return lines + [""]


def _confirmation_section(result: Analysis) -> list[str]:
    if not result.confirmations:
        return [
            "No configuration of this study has been re-run on fresh seeds yet (`workbench study confirm SPEC`): "
            "the best configuration's estimate is a selection estimate.",
            "",
        ]
    lines = [
        "## Replication on fresh seeds (`workbench study confirm`)",
        "",
        "The best configurations and the baseline re-run on seeds never used in selection: the selection estimate"
        " beside the replicated one (the winner's curse made visible).",
        "",
        "| trial | configuration | estimate | seeds | compute to target [95% CI] | ratio to on-policy [95% CI] | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in result.confirmations:
        for what, r in (("selection", c.selection), ("replicated", c.replicated)):
            lines.append(
                f"| {r.trial_number} | {_what(r, result.lr_varies)} | {what} | {','.join(map(str, r.seed_list))} | {_ci(r)} | {_ratio(r)} | {r.verdict} |"
            )
    return lines + [""]


def _models_section(result: Analysis) -> list[str]:
    models = result.models
    if not models:
        return []
    lines = [
        "## Models compared",
        "",
        'Every registered model of compute-to-target (`analysis.models`; equations in docs/theory.md, "Models of '
        'compute-to-target") fitted to the same runs with the same censored likelihood, best first by the '
        "leave-one-configuration-out error (a model's prediction for a configuration it was not fitted on, against that "
        "configuration's median), then AIC. A parameter is *unidentified* when its 95% profile-likelihood interval runs into "
        "a bound; an optimum is refused when the predicted compute is flat around it.",
        "",
        "| model | parameters | AIC | LOCO median abs log error (configurations) | R² (log) | unidentified | predicted optimum |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in models:
        loco = m.loco
        held = f"{_fmt(loco['median_abs_log_error'])} ({loco['n']})" if loco.get("n") else "-"
        o = m.optimum
        at_lr = f", lr {_fmt(o.lr)}" if o.lr is not None else ""
        best = f"refused: {o.refused}" if o.refused else f"x {_fmt(o.x)}, y {_fmt(o.y)}{at_lr}: {_fmt(o.compute)}"
        if o.ridge_point is not None:
            r = o.ridge_point
            best += (
                f"; the ridge's simplest point x {_fmt(r.x)}, y {_fmt(r.y)}"
                + (f", lr {_fmt(r.lr)}" if r.lr is not None else "")
                + f": {_fmt(r.compute)} (`study verify --model {m.model} --ridge`)"
            )
        params = ", ".join(f"{k} {_fmt(v)}" for k, v in m.params.items() if k != "scale")
        lines.append(
            f"| `{m.model}` | {params} | {_fmt(m.aic)} | {held} | {_fmt(m.r2_log)} | "
            f"{', '.join(m.unidentified) or 'none'} | {best} |"
        )
    return lines + [""]


def _by_loss_section(result: Analysis) -> list[str]:
    """A study of several losses: the models and the null predictors fitted to each loss's runs apart."""
    if not result.by_loss:
        return []
    lines = [
        "## Models per loss",
        "",
        "Every registered model and the null predictors fitted to each loss's uniform runs apart (with the on-policy"
        " baseline's runs, the anchor every loss is compared with), scored out of sample as above: does any loss give"
        " the model something to predict? A model *beats the nulls* when its leave-one-configuration-out error is"
        " below every null predictor's with the paired 95% interval (`analysis.null_models`).",
        "",
        "| loss | runs | configurations | best model by LOCO (median abs log error) | its verdict against the nulls |"
        " models that beat every null |",
        "|---|---|---|---|---|---|",
    ]
    for o in result.by_loss:
        best = o.models[0] if o.models else None
        if best is None:
            lines.append(f"| `{o.loss_name}` | {o.n_runs} | {o.n_configurations} | too few configurations | - | - |")
            continue
        words = best.skill.words if best.skill is not None else "-"
        selected = ", ".join(f"`{m.model}`" for m in o.selected) or "none"
        lines.append(
            f"| `{o.loss_name}` | {o.n_runs} | {o.n_configurations} | `{best.model}` ({_fmt(best.loco_error)}) |"
            f" {words} | {selected} |"
        )
    return lines + [""]


def _stale_signals_section(result: Analysis) -> list[str]:
    """Whether the staleness diagnostics rank with the saving (`analysis.stale_signals`)."""
    if not result.stale_signals:
        return []
    lines = [
        "## Do the staleness diagnostics predict the saving?",
        "",
        "Each replay configuration (one trial: its strategy, loss, y and x at one lr) has a paired ratio against"
        " on-policy at the same lr (below 1: a saving) and its runs' means of three per-step diagnostics: the"
        " importance weights' effective sample size, the cosine between consecutive gradients and the batch's mean age."
        " Spearman's rho between a diagnostic and the log ratio, with a 95% interval from resampling configurations"
        " (configurations of one arm at several lrs are not independent: a resolved link is a candidate for an"
        " adaptive reuse rule, to be tested, not a law).",
        "",
        "| diagnostic | over | configurations | rho [95% CI] | reading |",
        "|---|---|---|---|---|",
    ]
    for link in result.stale_signals:
        lines.append(
            f"| {link.diagnostic_words} (`{link.diagnostic}`) | {link.scope} | {link.n_configurations} |"
            f" {link.rho:+.2f} [{link.low:+.2f}, {link.high:+.2f}] | {link.words()} |"
        )
    return lines + [""]


def _against(d: dict) -> str:
    if not math.isfinite(d.get("difference", math.nan)):
        return "-"
    return f"{d['difference']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]"


def skill_section(result: Analysis) -> list[str]:
    """The models against the null predictors (`analysis.null_models`): each model's LOCO median |log error| beside
    the nulls', the paired differences with their intervals, selected or which null it did not beat; then the probe
    against its own null, the on-policy lr sweep. `benchmarks/predictor_skill.py` prints it for a committed report."""
    nulls, models = result.null_models or {}, [m for m in result.models if m.skill is not None]
    probes = [v for v in result.probe_verified if v.against_sweep is not None]
    if not (nulls and models) and not probes:
        return []
    lines = ["## Predictors against null models", ""]
    if nulls and models:
        med = lambda o: f"{_fmt(o['median_abs_log_error'])} ({o['n']})" if o.get("n") else "-"  # noqa: E731
        lines += [
            "A model earns its parameters only by predicting a configuration it was not fitted on better than a"
            " trivial guess, scored the same way (leave-one-configuration-out, LOCO): *constant*, the mean log"
            " compute of the other configurations; *lr-only*, the mean of the others at the same learning rate (x and"
            " y ignored); *nearest*, the nearest measured configuration in (log x, log y, log lr). Columns: LOCO median"
            " |log error| (configurations); for each null, the model's |log error| minus the null's, averaged over the"
            " configurations both predicted (paired), with its 95% interval. A model is *selected* only when it beats"
            " all three: every interval below 0.",
            "",
            "| model | LOCO median abs log error | "
            + " | ".join(f"{null_models.TITLES[n]}" for n in nulls)
            + " | "
            + " | ".join(f"model - {null_models.TITLES[n]} [95% CI]" for n in nulls)
            + " | selected |",
            "|---|---|" + "---|" * (2 * len(nulls)) + "---|",
        ]
        for m in models:
            sk = m.skill
            lines.append(
                f"| `{m.model}` | {med(m.loco)} | "
                + " | ".join(med(nulls[n]) for n in nulls)
                + " | "
                + " | ".join(_against((sk.against or {}).get(n, {})) for n in nulls)
                + f" | {'yes' if sk.selected else 'no'} |"
            )
        lines.append("")
        lines += [f"- `{m.model}`: {m.skill.words}." for m in models]
        how = nulls.get("lr_only", {}).get("how", {})
        if len({e["lr"] for e in nulls.get("lr_only", {}).get("errors", [])}) <= 1:
            lines.append("- One learning rate: lr-only is the constant here.")
        elif set(how) - {"same lr"}:
            lines.append(
                "- lr-only: "
                + ", ".join(
                    f"{n} from the same lr"
                    if h == "same lr"
                    else f"{n} {h}"
                    if h != "constant"
                    else f"{n} by the constant"
                    for h, n in how.items()
                )
                + " (where no other configuration ran its learning rate)."
            )
        selected = [m.model for m in models if m.skill.selected]
        lines += [
            "",
            f"Selected: {', '.join(f'`{n}`' for n in selected)}."
            if selected
            else "No model is selected: none predicts held-out configurations resolvably better than every trivial guess,"
            " so its optimum is a reading of the grid, not a prediction.",
            "",
        ]
    if probes:
        lines += [
            "The probe's own null is its on-policy learning-rate sweep run alone: sweep on-policy's lr and stay"
            " on-policy. The probe's cost includes that sweep, so its point counts as a prediction only where it beats"
            " that (at equal compute, its gradient phase included; `analysis.null_models.probe_against_sweep`).",
            "",
        ]
        lines += [
            f"- trial {v.trial_number} (x {_fmt(v.x)}, y {_fmt(v.y)}{', lr ' + _fmt(v.lr) if v.lr is not None else ''}):"
            f" {'claims' if v.against_sweep['claims'] else 'no claim'}: {v.against_sweep['reason'].rstrip('.')}."
            for v in probes
        ]
        lines.append("")
    return lines


def _laws_section(result: Analysis) -> list[str]:
    verdicts = result.laws or []
    if not verdicts:
        return []
    lines = [
        "## The paper's laws",
        "",
        "Falsification tests of the theory's predictions (docs/theory.md, \"The paper's laws as tests\"; `analysis.laws`),"
        " with a bootstrap over the seeds every configuration ran: *holds*, *falsified*, *unresolved* when the data"
        " cannot tell, *cannot separate* (F1: the interval admits a linear law as well as sqrt(mu)), or *not testable*"
        " when this study's grid could not decide it whatever the data.",
        "",
    ]
    lines += [f"- **{v['law']}** ({v['claim']}): *{v['verdict']}*: {v['reason'].rstrip('.')}." for v in verdicts]
    f1 = next((v for v in verdicts if v["law"] == "F1" and v["rows"]), None)
    if f1:
        lines += [
            "",
            "F1: one grid re-accounted at each mu (the learning curves do not depend on mu in the synchronous setting;"
            " not new measurements).",
            "",
            "| mu | optimum x | optimum y | its compute | y 95% interval | share of draws where each (x, y) is optimal |",
            "|---|---|---|---|---|---|",
        ]
        for r in f1["rows"]:
            share = ", ".join(f"({k}) {100 * v:.0f}%" for k, v in r["optimum_share"].items())
            lines.append(
                f"| {_fmt(r['mu'])} | {_fmt(r['x'])} | {_fmt(r['y'])} | {_fmt(r['compute_to_target'])} | "
                f"[{_fmt(r['y_low'])}, {_fmt(r['y_high'])}] | {share} |"
            )
    return lines + [""]


def _fit_section(result: Analysis) -> list[str]:
    f = result.fit
    iv = f.intervals or {}
    ci = lambda k: f" [{_fmt(iv[k][0])}, {_fmt(iv[k][1])}]" if k in iv else ""  # noqa: E731
    return [
        "## Fit of the bias-variance-compute model",
        "",
        *(
            [
                f"The model describes uniform replay: it is fitted to the {result.fit_configurations} (x, y) configurations of the"
                f" uniform strategy (on-policy included); {', '.join(result.other_strategies)} are compared in the tables above,"
                " not modelled.",
                "",
            ]
            if result.other_strategies
            else []
        ),
        *(
            [
                f"With {result.fit_configurations} configurations for 5 free parameters the fit is underdetermined: read it as an"
                " illustration of the pipeline, not as an estimate (a grid of six or more (x, y) configurations gives a real fit).",
                "",
            ]
            if result.fit_configurations < 6
            else []
        ),
        f"Model: log C = log s + log J(x, y), {result.variance_form}, {result.noise_model}; censored runs enter as lower"
        " bounds (Tobit). Equations: docs/theory.md.",
        "",
        "| parameter | estimate | 95% bootstrap interval |",
        "|---|---|---|",
        f"| alpha | {_fmt(f.alpha)} |{ci('alpha')} |",
        f"| tau0 | {_fmt(f.tau0)} |{ci('tau0')} |",
        f"| rho | {_fmt(f.rho)} |{ci('rho')} |",
        f"| scale s | {_fmt(f.scale)} |{ci('scale')} |",
        f"| noise sigma (log) | {_fmt(f.sigma)} |{ci('sigma')} |",
        "",
        f"Goodness of fit: R² (log, uncensored) = {_fmt(f.r2_log)}, median |log error| = {_fmt(f.median_abs_log_error)}; "
        f"leave-one-configuration-out: {json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in f.loco.items()})}.",
        "",
    ]


def _optimum_section(result: Analysis) -> list[str]:
    p, e, near = result.predicted, result.empirical, result.predicted.nearest_measured
    lines = [
        "## Predicted against empirical optimum",
        "",
        "| | x = N/R | y = B/R | capacity | compute to target (measured) | predicted |",
        "|---|---|---|---|---|---|",
        f"| predicted optimum | {_fmt(p.x)} | {_fmt(p.y)} | {p.knobs['capacity']} | nearest measured (x={_fmt(near.x)}, y={_fmt(near.y)}): {_fmt(near.compute_to_target)} | {_fmt(p.compute_to_target)} |",
        f"| empirical optimum (trial {e.trial_number}, selection estimate) | {_fmt(e.x)} | {_fmt(e.y)} | {e.capacity} | {_ci(e)} | {_fmt(e.predicted_compute_to_target)} |",
    ]
    if result.baseline is not None:
        b = result.baseline
        lines.append(
            f"| on-policy baseline (trial {b.trial_number}) | 1 | 1 | {b.capacity} | {_ci(b)} | {_fmt(b.predicted_compute_to_target)} |"
        )
    lines += [
        "",
        f"Measured compute of the configuration nearest the predicted optimum / empirical optimum: "
        f"{_fmt(result.measured_ratio_nearest_predicted_to_empirical)}.",
    ]
    if result.savings_vs_on_policy is not None:
        s = result.savings_vs_on_policy
        ci = s.measured_ci
        lines.append(
            f"Savings of the empirical optimum against on-policy, paired by seed: measured {s.measured:.1%} "
            f"(95% CI {ci[0]:.1%} to {ci[1]:.1%}; {s.verdict}), predicted {s.predicted:.1%}. "
            "The empirical optimum is the best of the configurations tried, so its estimate is biased in its favour "
            "(the winner's curse); only a confirmation on fresh seeds removes that bias."
        )
    if p.on_policy_optimal:
        lines.append("The fitted model predicts that on-policy training is optimal on this task at this mu.")
    return lines + _verified_sections(result) + [""]


def _verified_sections(result: Analysis) -> list[str]:
    """The fitted and the probe's optimum, run as trials of the study (`study verify`)."""
    lines = []
    if result.verified:
        lines += [
            "",
            "## The fitted optimum, run as trials of the study (`workbench study verify`)",
            "",
            "| trial | x | y | capacity | seeds (censored) | compute to target (measured) | predicted when run | predicted by this fit | measured / predicted when run |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for v in result.verified:
            lines.append(
                f"| {v.trial_number} | {_fmt(v.x)} | {_fmt(v.y)} | {v.capacity} | {v.seeds} ({v.censored_seeds}) "
                f"| {_fmt(v.compute_to_target)} | {_fmt(v.predicted_when_run)} | {_fmt(v.predicted_now)} "
                f"| {_fmt(v.compute_to_target / v.predicted_when_run)} |"
            )
        lines += [
            "",
            "These runs are part of the data this fit was made from (the fit when they were run did not include them).",
        ]
    if result.probe_verified:
        lines += [
            "",
            "## The probe's optimum, run as trials of the study (`workbench study verify --probe`)",
            "",
            "| trial | x | y | capacity | seeds (censored) | compute to target (measured) | predicted when run | measured / empirical best |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for v in result.probe_verified:
            lines.append(
                f"| {v.trial_number} | {_fmt(v.x)} | {_fmt(v.y)} | {v.capacity} | {v.seeds} ({v.censored_seeds}) "
                f"| {_fmt(v.compute_to_target)} | {_fmt(v.predicted_when_run)} | {_fmt(v.ratio_to_empirical_best)} |"
            )
    return lines


def _whatif_section(result: Analysis) -> list[str]:
    if not result.whatif:
        return []
    lines = [
        "## What if generation cost more: the same runs, re-accounted (not new measurements)",
        "",
        f"Nothing here was run again. Each run's curve is the one measured at mu {_fmt(result.reference_mu)}; only"
        " the compute charged for it is counted again at another mu, each generated rollout costing mu times a"
        " trained one (in the synchronous loop the curve in optimizer steps does not depend on mu). Savings are"
        " paired by seed with their 95% interval, as above; the best configuration is again a selection estimate.",
        "",
        "| mu (re-accounted) | predicted x* | predicted y* | empirical best (x, y) | its savings vs on-policy [95% CI] | verdict | predicted savings |",
        "|---|---|---|---|---|---|---|",
    ]
    for mu, w in result.whatif.items():
        s = w.savings_vs_on_policy
        measured, predicted = (s.measured, s.predicted) if s else (math.nan, math.nan)
        ci = s.measured_ci if s else (math.nan, math.nan)
        lines.append(
            f"| {mu} | {_fmt(w.predicted.x)} | {_fmt(w.predicted.y)} | ({_fmt(w.empirical.x)}, {_fmt(w.empirical.y)}) "
            f"| {measured:.1%} [{ci[0]:.1%}, {ci[1]:.1%}]{w.empirical.comparison.counts_text()} | {s.verdict if s else '-'} | {predicted:.1%} |"
        )
    return lines + [""]


def _pareto_section(result: Analysis) -> list[str]:
    metric = result.metric
    lines = [
        f"## Pareto front (best `{metric}` against compute to target)",
        "",
        f"The configurations no other reaches a higher best `{metric}` ({METRICS[metric]}, mean over seeds) with less"
        " compute than.",
        "",
        f"| trial | x | y | compute to target | best {metric} |",
        "|---|---|---|---|---|",
    ]
    for r in result.pareto_front:
        lines.append(
            f"| {r.trial_number} | {_fmt(r.x)} | {_fmt(r.y)} | {_fmt(r.compute_to_target)} | {_fmt(r.best_reading)} |"
        )
    return lines + [""]


def tables(result: Analysis) -> str:
    """Every table section of the report, as Markdown, the comparisons first and the model's details after."""
    return "\n".join(
        [
            *_comparison_section(result),
            *_tuned_lr_section(result),
            *_confirmation_section(result),
            *_resolution_section(result),
            *_readings_section(result),
            *_checkpoints_section(result),
            *sharpness_section(result),
            *_optimum_section(result),
            *_whatif_section(result),
            *_laws_section(result),
            *_fit_section(result),
            *_models_section(result),
            *skill_section(result),
            *_by_loss_section(result),
            *_stale_signals_section(result),
            *_pipeline_section(result),
            *_pareto_section(result),
        ]
    )
