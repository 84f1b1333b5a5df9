"""`workbench study verify|confirm|race`: commands that train new arms of an existing study (a predicted optimum,
fresh seeds, more seeds), all through `workbench.workflow`."""

from __future__ import annotations

import argparse
import json

from workbench.commands import flags
from workbench.commands.base import Command, devices, study_context
from workbench.config import ConfigError


class Verify(Command):
    """Fit the study, run its predicted optimum as new trials of the study, print measured against predicted."""

    name = "verify"
    help = "run the fitted optimum as new trials of the study: measured against predicted"
    flags = (flags.spec, flags.stores, flags.threads, flags.json_line)

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--bootstrap",
            type=int,
            default=0,
            help="bootstrap refits for the fit's intervals (default 0: the point fit decides)",
        )
        p.add_argument("--force", action="store_true", help="run it even when the same knobs were already measured")
        p.add_argument(
            "--probe",
            action="store_true",
            help="predict with one `workbench probe` run on the study's base config instead of the fitted model",
        )
        p.add_argument(
            "--probe-steps",
            type=int,
            default=48,
            help="with --probe: the probe run's optimizer steps (default 48; more probes"
            " where the fresh gradient is not resolved from its noise)",
        )
        p.add_argument(
            "--lr-sweep",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="with --probe: locate on-policy's best learning rate with a short sweep (default: when the study searches lr)",
        )
        p.add_argument(
            "--model",
            help="predict with this compared model (analysis.models: thm45, with_replacement, extended, "
            "extended_lr) instead of the distinct-draw fit; best = the first model selected (it beats the constant, "
            "lr-only and nearest null predictors out of sample) by leave-one-configuration-out error, and where none "
            "is selected the first by that error, run with a warning that its prediction has no demonstrated skill",
        )
        p.add_argument(
            "--ridge",
            action="store_true",
            help="with --model: where the model refuses a point because its optimum"
            " is a flat ridge, run the ridge's simplest point (smallest horizon, least reuse) to test the claim",
        )

    def run(self, args: argparse.Namespace) -> int:
        if args.bootstrap < 0:
            raise ConfigError(f"--bootstrap: must be >= 0 (got {args.bootstrap})")
        if args.ridge and not args.model:
            raise ConfigError("--ridge: runs a model's flat ridge; give it with --model NAME|best")
        from workbench.workflow import verify

        verify.check_model(args.model)  # before the fit: bad input stops at once, in one line
        ctx = study_context(args)
        study, result = verify.fit_study(ctx, args.bootstrap)
        if args.probe:
            return _verify_probe(args, ctx, study, result)
        if args.model:
            return _verify_model(args, ctx, study, result)
        prediction = verify.fitted(result)
        if prediction is None:
            print("no prediction: the fit found no optimum in the searched range")
            return 0
        _print_verification(args, verify.run(ctx, study, prediction, result, threads=args.threads, force=args.force))
        return 0


def _print_verification(args: argparse.Namespace, v) -> None:
    if args.json:
        print(json.dumps(v.__dict__, default=float))


def _verify_model(args: argparse.Namespace, ctx, study, result) -> int:
    """`study verify --model NAME|best`: the optimum of one of the compared models (`best`: the first selected against
    the null predictors by leave-one-configuration-out error, else the first by that error with a warning) run as the
    study's `predicted` arm, or why it is refused."""
    from workbench.workflow import verify

    choice = verify.choose_model(result, args.model, args.ridge, ctx.spec.trial_config({}, 0).batch_size)
    if choice.summary is None:
        print(
            f"no prediction: {args.model} was not fitted to this study (too few uniform configurations, or a"
            f" learning-rate model on a study with one learning rate; fitted: {', '.join(choice.fitted) or 'none'})"
        )
        return 0
    opt, ridge = choice.optimum, choice.ridge_point
    print(
        f"model {choice.summary.model} (leave-one-configuration-out median |log error| {choice.loco:.3g}):"
        f" x {opt.x:.3g}, y {opt.y:.3g}" + (f", lr {opt.lr:.3g}" if opt.lr is not None else "")
    )
    if choice.warning:
        print(f"  warning: {choice.warning}")
    if opt.refused:
        print(f"  no prediction: {opt.refused}")
        if ridge is None:
            return 0
        where = ridge.lines()[0]
        if not args.ridge:
            print(f"  the ridge's simplest point is {where} ({ridge.compute:.4g} units predicted); --ridge runs it")
            return 0
        print(f"  running the ridge's simplest point instead (--ridge): {where}, predicted {ridge.compute:.4g} units")
    _print_verification(args, verify.run(ctx, study, choice.prediction, result, threads=args.threads, force=args.force))
    return 0


def _verify_probe(args: argparse.Namespace, ctx, study, result) -> int:
    """`study verify --probe`: one probe run on the study's base config; its predicted optimum (at the study's
    reference mu) run as the study's `probe` arm, or the reason it was refused."""
    from workbench.workflow import verify
    from workbench.workflow.probe import claim_line, cost_words

    p = verify.probe_study(ctx, study, result, args.probe_steps, sweep=args.lr_sweep, threads=args.threads)
    res, o, sweep = p.measured, p.predicted, p.sweep
    print(
        f"probe: {res.steps} steps ({cost_words(res.compute_units, sweep)}), MLflow run {p.run_id}; at the study's mu {p.mu:.3g}:"
        + (
            f" x {o.x:g}, y {o.y:.3g}, lr {o.lr:.3g} ({o.lr_source}), {o.relative_compute:.2f}x on-policy's compute"
            if o.has_point
            else ""
        )
    )
    print(f"  {claim_line(p.against_sweep)}")
    if p.prediction is None:
        print(f"  no prediction: {o.refused}")
        return 0
    v = verify.run(ctx, study, p.prediction, result, threads=args.threads, force=args.force)
    print(
        f"  measured {v.measured:.4g} against predicted {v.predicted:.4g}"
        + (f" (already run as trial {v.same_as})" if v.same_as is not None else "")
    )
    _print_verification(args, v)
    return 0


class Confirm(Command):
    """Re-run the best configurations and the baseline on fresh seeds; print selection against replication, then the
    bottom line (whether the saving held on the fresh seeds) and the next command."""

    name = "confirm"
    help = "re-run the best configurations and the baseline on fresh seeds (replication)"
    flags = (flags.spec, flags.stores, flags.threads, flags.side_by_side)

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--top", type=int, default=2, help="configurations to confirm, best first (default 2)")
        p.add_argument("--seeds", type=int, default=4, help="fresh seeds each (default 4)")
        p.add_argument(
            "--predicted",
            action="store_true",
            help="also re-run the optima `study verify` predicted (model and probe arms) on the same fresh seeds",
        )
        p.add_argument("--json", action="store_true", help="print the confirmations as one JSON line")
        p.add_argument(
            "--trials",
            metavar="N,M",
            help="confirm these trials instead of the best --top (the arms a question"
            " needs: the best of each family, say); the baseline is always re-run",
        )

    def run(self, args: argparse.Namespace) -> int:
        from workbench.study.compare import confirmation_lines
        from workbench.study.summary import closing_lines
        from workbench.workflow.confirm import confirm

        study, done = confirm(
            study_context(args),
            args.top,
            args.seeds,
            threads=args.threads,
            predicted=args.predicted,
            devices=devices(args.devices),
            trials=_numbers("trials", args.trials),
        )
        for line in confirmation_lines(study) + closing_lines(study, args.spec):  # the bottom line: did the saving hold
            print(line)
        if args.json:  # last, on a line of its own
            print(json.dumps([d.__dict__ for d in done]))
        return 0


def _numbers(name: str, text: str | None) -> list[int] | None:
    """`3,5` as [3, 5]; anything else is one line naming the flag."""
    if text is None:
        return None
    try:
        return [int(n) for n in text.split(",")]
    except ValueError:
        raise ConfigError(f"--{name}: expected trial numbers separated by commas, e.g. 3,5 (got {text!r})") from None


class Race(Command):
    """Add seeds to the configurations still unresolved against the leader; print the comparison after, then the
    bottom line and the next command."""

    name = "race"
    help = "add seeds where the leader is not yet resolved against a contender (racing)"
    flags = (flags.spec, flags.stores, flags.threads, flags.side_by_side)

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--max-seeds", type=int, default=8, help="seeds per configuration at most (default 8)")
        p.add_argument("--step", type=int, default=2, help="seeds added per round (default 2)")

    def run(self, args: argparse.Namespace) -> int:
        from workbench.study.compare import comparison_lines
        from workbench.study.summary import closing_lines
        from workbench.workflow.race import race

        study, raced = race(
            study_context(args), args.max_seeds, args.step, threads=args.threads, devices=devices(args.devices)
        )
        for line in raced + comparison_lines(study) + closing_lines(study, args.spec):
            print(line)
        return 0
