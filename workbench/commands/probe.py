"""`workbench probe`: one short replay run that measures the model's parameters and predicts the optimum."""

from __future__ import annotations

import argparse
import json
import math

from workbench import progress, tracking, workflow
from workbench.commands import flags
from workbench.commands.base import Command
from workbench.config import ConfigError


class Probe(Command):
    """One short replay run that measures mu, sigma²(tau), kappa, the within-group correlation and rho, and the
    optimum they predict."""

    name = "probe"
    help = "one short replay run that measures the model's parameters and predicts the optimum"
    flags = (flags.overrides, flags.tracking_uri, flags.quiet)

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--x", type=float, default=16.0, help="buffer horizon N/R of the probe run (default 16)")
        p.add_argument("--ratio", type=float, default=2.0, help="replay ratio y of the probe run (default 2)")
        p.add_argument("--steps", type=int, default=48, help="optimizer steps (default 48)")
        p.add_argument(
            "--every", type=int, default=4, help="probe every k steps once the buffer holds every age (default 4)"
        )
        p.add_argument(
            "--lag",
            type=int,
            default=None,
            help="steps between a rollout's two gradients for rho (default x/y, the mean gap between two uses)",
        )
        p.add_argument("--sketch", type=int, default=2048, help="CountSketch size of a gradient (default 2048)")
        p.add_argument(
            "--lr-sweep",
            action="store_true",
            help="also locate on-policy's best learning rate with short on-policy runs at"
            " lr x 1, 2, 4 (extended while the cheapest is at an edge), each read as compute to --target",
        )
        p.add_argument(
            "--target", type=float, help="the accuracy (on the trial's eval.metric) the sweep's runs are read to"
        )
        p.add_argument(
            "--sweep-units",
            type=float,
            default=workflow.DEFAULT_SWEEP_UNITS,
            help="compute units of the sweep's first run (default 100)",
        )
        p.add_argument("--json", action="store_true", help="print the measurements and the prediction as one JSON line")

    def run(self, args: argparse.Namespace) -> int:
        from workbench.config import apply_overrides, load_yaml_mapping

        if args.lr_sweep and args.target is None:
            raise ConfigError(
                "--target: required with --lr-sweep (the accuracy, on the trial's eval.metric, each sweep run is read to)"
            )
        for name, low in (
            ("x", 1.0),
            ("ratio", 1.0),
            ("steps", 1),
            ("every", 1),
            ("lag", 1),
            ("sketch", 16),
            ("sweep_units", 1.0),
        ):
            value = getattr(args, name)
            if value is None and name == "lag":
                continue
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= low):
                raise ConfigError(f"--{name.replace('_', '-')}: must be >= {low:g} (got {value})")
        data = apply_overrides(load_yaml_mapping(args.config) if args.config else {}, args.set or [])
        data.setdefault("tracking", {}).setdefault("experiment", "probe")
        if args.tracking_uri:
            data["tracking"]["uri"] = args.tracking_uri
        from workbench.workflow.probe import probe

        probed = probe(
            data,
            x=args.x,
            ratio=args.ratio,
            steps=args.steps,
            every=args.every,
            lag=args.lag,
            sketch=args.sketch,
            sweep_target=args.target if args.lr_sweep else None,
            sweep_units=args.sweep_units,
            show_progress=progress.bars_wanted(args.json, args.quiet),
        )
        if args.json:
            print(json.dumps(probed.recorded, default=float))
            return 0
        _print_measured(probed)
        _print_predicted(probed)
        return 0


def _print_measured(probed) -> None:
    """What the probe run measured: mu, rho, the noise by age and its growth, the staleness bias, the alignment."""
    from workbench.workflow.probe import cost_words

    res, cfg = probed.measured, probed.config
    g = res.growth
    c = probed.predicted.c if probed.predicted.c is not None else math.nan
    print(
        f"probe: {res.steps} steps at x {res.x:g}, y {res.y:g} ({cost_words(res.compute_units, probed.predicted.lr_sweep)}), {res.probes} probes;"
        f" MLflow run {probed.run_id} in {tracking.redact_url(cfg.tracking.uri)}"
    )
    print(
        f"  mu {res.mu:.3g}; rho (a rollout's noise {res.rho_lag} step later) {res.rho:.3g}; within-group gradient correlation {res.group_correlation:.3g} -> c {c:.3g}"
    )
    print("  sigma²(tau): " + ", ".join(f"{a['age']}: {a['sigma2']:.3g}" for a in res.noise))
    if g:
        print(
            f"  fitted sigma0² {g['sigma0_sq']:.3g}, tau0 {g['tau0']:.3g}, alpha {g['alpha']:.3g};"
            f" F6 (noise non-decreasing with age): {'holds' if g['non_decreasing'] else 'falsified'}"
            f" (log sigma² per step of age {g['log_slope']:+.3f} ± {1.96 * g['log_slope_se']:.3f})"
        )
    resolved = {t: k for t, k in res.kappa.items() if math.isfinite(k)}
    print(
        "  kappa(tau), staleness bias: "
        + (
            ", ".join(f"{t}: {k:.2f}" for t, k in resolved.items())
            if resolved
            else "not resolved (the mean gradient at age 0 is within the noise of its estimate)"
        )
    )
    shares = probed.alignment()
    if shares:
        print(
            "  g_0·g_bar_x / |g_0|² (how much of a horizon-x batch's mean gradient points along the fresh one, 95% over"
            " resampled groups): "
            + ", ".join(
                f"x {x}: {share:.2f}" + (f" [{iv[0]:.2f}, {iv[1]:.2f}]" if iv else "") for x, share, iv in shares
            )
        )


def _print_predicted(probed) -> None:
    """What the measurements predict: the lr sweep, the optimum at a tuned lr, its stability, or the refusal, and
    what it claims against its sweep alone (`workbench.prediction.ProbePrediction.lines`)."""
    for line in probed.predicted.lines():
        print(f"  {line}")
