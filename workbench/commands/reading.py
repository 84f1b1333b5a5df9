"""Commands that read studies from MLflow and the committed tables: `analyze`, `report`, `recommend`, `regime`,
`results`. They reach the analysis only through `workbench.workflow`."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from workbench import progress
from workbench.commands import flags
from workbench.commands.base import Command, analysis_inputs, positive, target
from workbench.config import ConfigError, resolve_tracking_uri


def _whatif(values: list[float] | None) -> list[float]:
    mus = values if values is not None else [5.28]
    for mu in mus:
        if not (math.isfinite(mu) and mu > 0):
            raise ConfigError(f"--whatif-mu: must be positive (got {mu})")
    return mus


def _fit_arguments(p: argparse.ArgumentParser) -> None:
    """What `analyze` and `report` both take: the re-accounting, the intervals, the reading."""
    p.add_argument("--whatif-mu", type=float, action="append", help="also re-account at this mu (default 5.28)")
    p.add_argument("--bootstrap", type=int, default=200, help="bootstrap refits for the intervals")
    p.add_argument(
        "--estimator",
        choices=["first", "interpolated", "sustained", "fitted"],
        help="read compute-to-target with this estimator instead of the study's",
    )


def _study_and_destination(args: argparse.Namespace) -> tuple[str, str, Path | None, bool]:
    """The study's name and tracking URI, the --out folder (None: the study's default) and --force."""
    name, uri = analysis_inputs(args)
    return name, uri, Path(args.out) if args.out else None, args.force


def _fit_options(args: argparse.Namespace) -> dict:
    """What `_fit_arguments` and --target set, as the fit's keyword arguments."""
    return dict(
        whatif_mu=_whatif(args.whatif_mu),
        bootstrap=args.bootstrap,
        target=target(args.target),
        estimator=args.estimator,
        bar=progress.bars_wanted(),
    )


class Analyze(Command):
    """Fit the model to a study's runs (MLflow), predict the optimum, compare; write the analysis JSON."""

    name = "analyze"
    help = "fit the closed-form model to a study and compare optima (analysis.json)"
    flags = (flags.spec_or_study, flags.tracking_uri, flags.out_force, flags.target, _fit_arguments)

    def run(self, args: argparse.Namespace) -> int:
        from workbench.workflow.predict import analysis_json

        result, path = analysis_json(*_study_and_destination(args), **_fit_options(args))
        for line in result.lines():  # the fit, the predicted and empirical optimum, the models, the laws
            print(line)
        print(f"wrote {path}")
        return 0


class Report(Command):
    """The study's report (Markdown, one self-contained HTML page, the analysis JSON, the figures) where
    `analysis.destination` says: --out, else reports-out/NAME/ beside the MLflow store; never over tracked files
    unless --force."""

    name = "report"
    help = "write a study's report: report.html (self-contained), report.md, analysis.json, figures"
    flags = (flags.spec_or_study, flags.tracking_uri, flags.out_force, flags.target, _fit_arguments)

    def run(self, args: argparse.Namespace) -> int:
        from workbench.workflow.predict import report

        line, paths = report(*_study_and_destination(args), **_fit_options(args), spec=args.spec)
        print(line)
        print(f"wrote {paths['html']} (open it in a browser), with report.md, analysis.json and the figures beside it")
        return 0


def _split(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    w, sep, t = text.partition(":")
    if not sep or not w.isdigit() or not t.isdigit() or int(w) < 1 or int(t) < 1:
        raise ConfigError(f"--split: must be W:T, two positive whole numbers (got {text!r})")
    return int(w), int(t)


class Recommend(Command):
    """The buffer settings, lr and W:T split a study or a probe supports at your mu, with the saving against
    lr-tuned on-policy and its interval, or why none is supported."""

    name = "recommend"
    help = (
        "the buffer settings, lr and W:T split a study or a probe supports at your mu, with the saving against"
        " lr-tuned on-policy and its interval"
    )
    flags = (flags.spec_or_study, flags.tracking_uri, flags.target)

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--probe", metavar="RUN_ID", help="a probe run (`workbench probe --lr-sweep`) instead of a study"
        )
        p.add_argument(
            "--mu",
            type=float,
            help="your mu: generating a rollout over training on one (default: the source's measured mu)",
        )
        p.add_argument(
            "--gen-seconds", type=float, help="instead of --mu: seconds to generate one rollout on a generator"
        )
        p.add_argument(
            "--train-seconds", type=float, help="with --gen-seconds: seconds of one training step (B rollouts)"
        )
        p.add_argument(
            "--split", metavar="W:T", help="your split of generators to trainers: the replay ratio it gives is shown"
        )
        p.add_argument("--json", action="store_true", help="print the recommendation as one JSON line")

    def run(self, args: argparse.Namespace) -> int:
        mu = positive("mu", args.mu)
        gen, train = positive("gen-seconds", args.gen_seconds), positive("train-seconds", args.train_seconds)
        if (gen is None) != (train is None):
            raise ConfigError(
                "--gen-seconds: give it with --train-seconds (seconds per generated rollout, per training step)"
            )
        if mu is not None and gen is not None:
            raise ConfigError("--mu: give either --mu or --gen-seconds with --train-seconds, not both")
        split = _split(args.split)
        from workbench.workflow import recommend

        if args.probe:
            out = recommend.from_probe(
                args.probe,
                resolve_tracking_uri(args.tracking_uri),
                mu=mu,
                gen_seconds=gen,
                train_seconds=train,
                split=split,
            )
        else:
            name, uri = analysis_inputs(args)
            out = recommend.from_study(
                name, uri, mu=mu, gen_seconds=gen, train_seconds=train, split=split, target=target(args.target)
            )
        if args.json:
            print(json.dumps(out.to_json(), default=float))
        else:
            print("\n".join(out.lines()))
        return 0


class Regime(Command):
    """The paper's regime across asynchronous studies at several mu: each arm against the lr-tuned queue in compute
    and wall time, the crossover, the confirmation on fresh seeds."""

    name = "regime"
    help = (
        "asynchronous studies at several generator slowdowns read together: the buffer against the lr-tuned queue at"
        " each mu, the crossover, the confirmation"
    )
    flags = (flags.tracking_uri, flags.out_force, flags.target)

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("specs", nargs="+", help="the study specs, one per slowdown")
        p.add_argument("--confirm", help="the spec of the confirmation study (fresh seeds and checkpoint)")
        p.add_argument("--sync", help="the spec of a synchronous study to re-account at each study's mu, beside it")

    def run(self, args: argparse.Namespace) -> int:
        from workbench.study.spec import load_spec
        from workbench.workflow.regime import report

        specs = [load_spec(p) for p in args.specs]
        uri = resolve_tracking_uri(args.tracking_uri or specs[0].tracking_uri)
        confirm = load_spec(args.confirm).name if args.confirm else None
        sync = load_spec(args.sync).name if args.sync else None
        result, paths = report(
            [s.name for s in specs],
            uri,
            Path(args.out) if args.out else None,
            args.force,
            confirm=confirm,
            target=target(args.target),
            sync=sync,
        )
        c = result["crossover"]
        where = lambda p: "none measured" if p is None else f"s {p['slowdown']:g} (mu {p['mu']:.2f})"  # noqa: E731
        print(
            f"crossover: compute {where(c['compute'])}, device time {where(c['device_time'])}; theory (mu·T/W > 1) {where(c['theory'])}"
            + (f"; the synchronous runs re-accounted: {where(c['reaccounted'])}" if sync else "")
        )
        print(f"wrote {paths['regime.md']}, with regime.json and the figures beside it")
        return 0


class Results(Command):
    """Recompute every marked number of a results page from the committed per-run tables (`analysis.recompute`);
    exit 1 when one does not hold."""

    name = "results"
    help = (
        "recompute every number docs/results.md states from the per-run tables committed beside the reports"
        " (reports/NAME/runs.csv)"
    )

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--docs", default="docs/results.md", help="the results page (default docs/results.md)")
        p.add_argument(
            "--reports", default="reports", help="the folder of reports with their runs.csv (default reports)"
        )

    def run(self, args: argparse.Namespace) -> int:
        from workbench.workflow.results import recompute_page

        checks = recompute_page(Path(args.docs), Path(args.reports))
        for c in checks:
            print(c.fmt())
        failed = [c for c in checks if not c.held]
        print(
            f"{len(checks) - len(failed)} of {len(checks)} numbers recomputed from {args.reports}/*/runs.csv"
            + (f"; {len(failed)} did not hold" if failed else "")
        )
        return 1 if failed or not checks else 0
