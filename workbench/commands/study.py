"""`workbench study run|worker|status|compare|pack|unpack`: create, run, join, read and move an Optuna study."""

from __future__ import annotations

import argparse
from pathlib import Path

from workbench import progress, tracking
from workbench.commands import flags
from workbench.commands.base import Command, devices, err, study_context
from workbench.config import ConfigError


class Run(Command):
    name = "run"
    help = "create or resume a study and run it with local worker processes"
    flags = (flags.spec, flags.stores)

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--n-trials", type=int, help="trials to complete (default: the spec's n_trials)")
        p.add_argument("--workers", type=int, default=1, help="local worker processes (default 1)")
        p.add_argument(
            "--devices",
            help="GPU ids (CPU: core ids) split among the workers, e.g. 0-7: one per synchronous"
            " trial, W + T per asynchronous one",
        )

    def run(self, args: argparse.Namespace) -> int:
        from workbench.study.driver import run_study
        from workbench.study.failfast import verdict
        from workbench.study.summary import closing_lines, summary_lines

        ctx = study_context(args)
        study = run_study(
            ctx,
            args.n_trials or ctx.spec.n_trials,
            args.workers,
            show_progress=progress.bars_wanted(),
            devices=devices(args.devices),
        )
        for line in summary_lines(study):
            print(line)
        storage, uri = tracking.redact_url(ctx.storage_url), tracking.redact_url(ctx.tracking_uri)
        print(f"Optuna storage: {storage}; MLflow: {uri}")
        print(f"Open both: workbench ui --tracking-uri {uri} --storage {storage}")
        for line in closing_lines(study, args.spec):
            print(line)
        stop = verdict(study, ctx.spec)  # its failures stopped the study, or it completed no trial
        if stop is not None:
            err(stop.reason)
            return stop.exit_code
        return 0


class Worker(Command):
    name = "worker"
    help = "join an existing study from any machine and run its trials"
    flags = (flags.spec, flags.stores, flags.threads)

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--n-trials", type=int, help="trials to complete (default: the spec's n_trials)")
        p.add_argument("--baseline-threads", type=int, help="torch threads for the baseline trial (default: --threads)")
        p.add_argument("--quiet", action="store_true", help="warnings only (no per-trial progress lines)")
        p.add_argument(
            "--devices",
            help="the GPU ids (CPU: core ids) this worker may use, e.g. 0,1; it uses no other "
            "(more than one trial needs: a configuration's seeds run side by side)",
        )
        p.add_argument(
            "--baseline-devices",
            help="the devices of the on-policy baseline, run side by side over them "
            "(default: --devices; the driver gives every device to a baseline that runs alone)",
        )

    def run(self, args: argparse.Namespace) -> int:
        from workbench.study.worker import run_worker

        ctx = study_context(args)
        stop = run_worker(
            ctx,
            args.n_trials or ctx.spec.n_trials,
            threads=args.threads,
            baseline_threads=args.baseline_threads,
            devices=devices(args.devices),
            baseline_devices=devices(args.baseline_devices),
        )
        return stop.exit_code if stop is not None else 0  # the worker logged why its study stopped


class Status(Command):
    name = "status"
    help = "trials by state, the best configuration, the Pareto front"
    flags = (flags.stores,)

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("spec", nargs="?", help="the study spec YAML (or give --study)")
        p.add_argument("--study", help="study name (instead of a spec file)")
        p.add_argument("--table", action="store_true", help="print the trial table (CSV)")
        p.add_argument("--fail-stale", action="store_true", help="first mark trials of dead workers as failed")

    def run(self, args: argparse.Namespace) -> int:
        import optuna

        from workbench.study.context import load_study
        from workbench.study.storage import default_storage_url
        from workbench.study.summary import closing_lines, summary_lines, trial_table

        if args.spec:
            ctx = study_context(args)
            name, url = ctx.spec.name, ctx.storage_url
        elif args.study:
            name, url = args.study, args.storage or default_storage_url()
        else:
            raise ConfigError("study status: give a SPEC file or --study NAME")
        study = load_study(name, url)
        if args.fail_stale:
            optuna.storages.fail_stale_trials(study)
        for line in summary_lines(study):
            print(line)
        if args.table:
            print(trial_table(study), end="")
        for line in closing_lines(study, args.spec):
            print(line)
        return 0


class Compare(Command):
    """Every configuration with its interval and paired savings; `--noise`: the per-run noise of each estimator."""

    name = "compare"
    help = "every configuration with its 95%% interval and paired savings against on-policy"
    flags = (flags.spec, flags.stores)

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--noise", action="store_true", help="per estimator: the per-run noise (sd of log compute-to-target)"
        )
        p.add_argument(
            "--runs-csv",
            metavar="FILE",
            help="also write the per-run table of the complete trials from the Optuna"
            " record (the columns of a report's runs.csv)",
        )

    def run(self, args: argparse.Namespace) -> int:
        from workbench.study.compare import comparison_lines, confirmation_lines, noise_lines
        from workbench.study.context import load_existing
        from workbench.study.summary import closing_lines, reading_lines

        ctx = study_context(args)
        study = load_existing(ctx)
        if args.runs_csv:
            from workbench.study import runs

            n = runs.write(study, ctx.spec, Path(args.runs_csv))
            print(
                f"wrote {args.runs_csv}: {n} runs of the complete trials (the per-run table `workbench results` reads)"
            )
        rows = noise_lines(study) if args.noise else comparison_lines(study) + confirmation_lines(study)
        for line in (reading_lines(study) + rows if rows else []) + closing_lines(study, args.spec):
            print(line)
        return 0


PACKED = Path("studies/packed")
"""Where `study pack` writes and `study unpack` reads by default: `studies/packed/NAME.tar.xz`, beside the specs."""


class Pack(Command):
    name = "pack"
    help = "save a stopped study's SQLite stores to one file (resume it elsewhere with unpack)"
    flags = (flags.spec, flags.stores)

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--out", type=Path, help="the file to write (default: studies/packed/NAME.tar.xz)")

    def run(self, args: argparse.Namespace) -> int:
        from workbench.study.context import load_existing
        from workbench.study.pack import Stores, pack, trials_line

        ctx = study_context(args)
        out = args.out or PACKED / f"{ctx.spec.name}.tar.xz"
        m = pack(load_existing(ctx), Stores.of(ctx.storage_url, ctx.tracking_uri), out)
        rows = m["metric_rows"]
        print(
            f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB): study {m['study']}, trials {trials_line(m)};"
            f" metric rows kept {rows['kept']}, dropped {rows['dropped']} (histories the analysis does not read)"
        )
        print(f"Resume elsewhere: workbench study unpack {args.spec} --from {out}; workbench study run {args.spec}")
        return 0


class Unpack(Command):
    name = "unpack"
    help = "restore a study packed by `study pack` into the spec's stores (never over existing ones)"
    flags = (flags.spec, flags.stores)

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--from", dest="source", type=Path, help="the pack (default: studies/packed/NAME.tar.xz)")

    def run(self, args: argparse.Namespace) -> int:
        from workbench.study.pack import Stores, trials_line, unpack

        ctx = study_context(args)
        source = args.source or PACKED / f"{ctx.spec.name}.tar.xz"
        stores = Stores.of(ctx.storage_url, ctx.tracking_uri)
        m = unpack(source, ctx.spec.name, stores)
        print(
            f"restored study {m['study']} (packed {m['packed_at']}; trials {trials_line(m)})"
            f" into {stores.optuna_db.parent}"
        )
        print(f"Next: workbench study status {args.spec}; workbench study run {args.spec} resumes it")
        return 0
