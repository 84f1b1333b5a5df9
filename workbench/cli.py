"""`workbench`: the command line. Bad input ends with one line on stderr and exit code 2, never a traceback."""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
from pathlib import Path

from workbench import interrupts, progress, tracking, workflow
from workbench.config import ConfigError, load_config, resolve_tracking_uri

# Each command imports what it runs when it runs (the model stack, Optuna, the analysis): start-up stays short.
EXIT_BAD_INPUT = 2
log = logging.getLogger("workbench.cli")


def _err(msg: str) -> None:
    print(f"workbench: error: {msg}", file=sys.stderr, flush=True)


def cmd_train(args: argparse.Namespace) -> int:
    cfg = load_config(args.config, args.set or [])
    if args.tracking_uri:
        cfg.tracking.uri = args.tracking_uri
    from workbench.trial.pipeline.distributed import check_launch, launched, run_peer

    launch = launched()  # started by torchrun: rank 0 runs the trial, every other rank is one of its processes
    if launch is not None:
        check_launch(cfg, launch)
        if launch.rank > 0:
            return run_peer(cfg, launch)
    from workbench.run_process import RunProcess

    # MLflow loads and creates the run in a helper process while this one imports the model stack
    run = RunProcess(cfg.tracking.uri, cfg.tracking.experiment, args.run_name, outage_s=cfg.tracking.outage_s)
    from workbench.trial.loop import run_trial  # deferred: the model stack loads after the config is validated

    result = run_trial(cfg, show_progress=progress.bars_wanted(args.json, args.quiet), run=run)
    m = result.metrics
    ctt = m.get(tracking.FINAL_COMPUTE_TO_TARGET)
    uri = cfg.tracking.uri
    log.info(
        f"done: accuracy {m['final/initial_accuracy']:.3f} -> {m['final/accuracy']:.3f} (best {m['final/best_accuracy']:.3f}),"
        f" compute-to-target {'%.1f units' % ctt if ctt is not None else 'not reached'},"
        f" {m['final/compute_units']:.1f} units, {m['final/steps']:.0f} steps, mu {m['final/mu']:.2f},"
        f" {m['final/wall_seconds']:.0f}s; MLflow run {result.run_id} in {tracking.redact_url(uri)}"
    )
    if args.json:
        clean = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in m.items()}
        print(json.dumps({"run_id": result.run_id, "tracking_uri": tracking.redact_url(uri), "metrics": clean}))
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    """Every key of the trial config (or, with --study, of a study spec) with its value, default, type and doc."""
    import textwrap

    from workbench.config import TrialConfig, build_config, trial_keys
    from workbench.config_names import model_keys, section_docs, unknown_key

    prefixes = [k for k in args.keys if "=" not in k]
    overrides = [k for k in args.keys if "=" in k] + (args.set or [])
    if args.study:
        from workbench.study.spec import StudySpec

        if overrides or args.config:
            raise ConfigError("--study: lists the keys of a study spec; --config and overrides set a trial's values")
        keys, sections = model_keys(StudySpec), section_docs(StudySpec)
        values = defaults = {k.key: "required" if k.required else k.default for k in keys}
    else:
        keys, sections = trial_keys(), section_docs(TrialConfig)
        defaults, values = _config_values(build_config()), _config_values(load_config(args.config, overrides))
    for p in prefixes:
        if not any(k.key == p or k.key.startswith(f"{p}.") for k in keys):
            raise ConfigError(unknown_key(p, [k.key for k in keys], foreign=not args.study))
    shown = [k for k in keys if not prefixes or any(k.key == p or k.key.startswith(f"{p}.") for p in prefixes)]
    if args.json:
        print(json.dumps([{"key": k.key, "value": values[k.key], "default": defaults[k.key], "type": k.type,
                           "choices": list(k.choices), "doc": k.doc} for k in shown], default=str))
        return 0
    wrap = textwrap.TextWrapper(width=116, break_on_hyphens=False)
    what, where = ("Study spec", "(studies/*.yaml)") if args.study else \
        ("Trial config", "(--config) or with --set KEY=VALUE or a bare KEY=VALUE (docs/conventions.md)")
    print(wrap.fill(f"{what} keys: value [type], then its doc. Set them in a YAML file {where}."))
    section = ""
    for k in shown:
        parent = k.key.rpartition(".")[0]
        if parent != section:
            section = parent
            doc = sections.get(parent, "")
            print("\n" + wrap.fill(f"{parent}: {doc}" if doc else parent))
        value, default = values[k.key], defaults[k.key]
        changed = f"  (default {_yaml_value(default)})" if value != default else ""
        print(f"  {k.key} = {_yaml_value(value)}{changed}  [{k.type}]")
        if k.doc:
            wrap.initial_indent = wrap.subsequent_indent = " " * 6
            print(wrap.fill(k.doc))
            wrap.initial_indent = wrap.subsequent_indent = ""
    return 0


def _config_values(cfg) -> dict:
    """`{dotted key: value}` of a resolved trial config, the tracking URI with any password redacted."""
    from workbench.config import flatten

    return {**flatten(cfg), "tracking.uri": tracking.redact_url(cfg.tracking.uri)}


def _yaml_value(value) -> str:
    """A value as it is written in a YAML config or after `--set key=`."""
    if isinstance(value, str):
        return value if value else '""'
    return json.dumps(value, default=str)


def _study_context(args: argparse.Namespace):
    from workbench.study.context import context
    from workbench.study.spec import load_spec

    return context(load_spec(args.spec), storage=args.storage, tracking_uri=args.tracking_uri, spec_path=args.spec)


def cmd_study_run(args: argparse.Namespace) -> int:
    from workbench.study.devices import parse_devices
    from workbench.study.driver import run_study
    from workbench.study.failfast import verdict
    from workbench.study.summary import closing_lines, summary_lines

    ctx = _study_context(args)
    n_trials = args.n_trials or ctx.spec.n_trials
    devices = parse_devices(args.devices) if args.devices else None
    study = run_study(ctx, n_trials, args.workers, show_progress=progress.bars_wanted(), devices=devices)
    for line in summary_lines(study):
        print(line)
    storage, uri = tracking.redact_url(ctx.storage_url), tracking.redact_url(ctx.tracking_uri)
    print(f"Optuna storage: {storage}; MLflow: {uri}")
    print(f"Open both: workbench ui --tracking-uri {uri} --storage {storage}")
    for line in closing_lines(study, args.spec):
        print(line)
    stop = verdict(study, ctx.spec)  # its failures stopped the study, or it completed no trial
    if stop is not None:
        _err(stop.reason)
        return stop.exit_code
    return 0


def cmd_study_worker(args: argparse.Namespace) -> int:
    from workbench.study.devices import parse_devices
    from workbench.study.worker import run_worker

    devices = parse_devices(args.devices) if args.devices else None
    baseline_devices = parse_devices(args.baseline_devices) if args.baseline_devices else None
    ctx = _study_context(args)
    stop = run_worker(ctx, args.n_trials or ctx.spec.n_trials, threads=args.threads, baseline_threads=args.baseline_threads,
                      devices=devices, baseline_devices=baseline_devices)
    return stop.exit_code if stop is not None else 0  # the worker logged why its study stopped


def cmd_study_status(args: argparse.Namespace) -> int:
    import optuna

    from workbench.study.context import load_study
    from workbench.study.storage import default_storage_url
    from workbench.study.summary import closing_lines, summary_lines, trial_table

    if args.spec:
        ctx = _study_context(args)
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


def cmd_study_verify(args: argparse.Namespace) -> int:
    """Fit the study, run its predicted optimum as new trials of the study, print measured against predicted."""
    if args.bootstrap < 0:
        raise ConfigError(f"--bootstrap: must be >= 0 (got {args.bootstrap})")
    if args.ridge and not args.model:
        raise ConfigError("--ridge: runs a model's flat ridge; give it with --model NAME|best")
    from workbench.workflow import verify

    verify.check_model(args.model)  # before the fit: bad input stops at once, in one line
    ctx = _study_context(args)
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


def _verify_model(args: argparse.Namespace, ctx, study, result: dict) -> int:
    """`study verify --model NAME|best`: the optimum of one of the compared models (`best`: the first selected against
    the null predictors by leave-one-configuration-out error, else the first by that error with a warning) run as the
    study's `predicted` arm, or why it is refused."""
    from workbench.workflow import verify

    choice = verify.choose_model(result, args.model, args.ridge, ctx.spec.trial_config({}, 0).batch_size)
    if choice.summary is None:
        print(f"no prediction: {args.model} was not fitted to this study (too few uniform configurations, or a"
              f" learning-rate model on a study with one learning rate; fitted: {', '.join(choice.fitted) or 'none'})")
        return 0
    opt, ridge = choice.optimum, choice.ridge_point
    print(f"model {choice.summary['model']} (leave-one-configuration-out median |log error| {choice.loco:.3g}):"
          + (f" x {opt['x']:.3g}, y {opt['y']:.3g}" + (f", lr {opt['lr']:.3g}" if "lr" in opt else "") if "x" in opt else ""))
    if choice.warning:
        print(f"  warning: {choice.warning}")
    if "refused" in opt:
        print(f"  no prediction: {opt['refused']}")
        if ridge is None:
            return 0
        where = f"x {ridge['x']:.3g}, y {ridge['y']:.3g}" + (f", lr {ridge['lr']:.3g}" if "lr" in ridge else "")
        if not args.ridge:
            print(f"  the ridge's simplest point is {where} ({ridge['compute']:.4g} units predicted); --ridge runs it")
            return 0
        print(f"  running the ridge's simplest point instead (--ridge): {where}, predicted {ridge['compute']:.4g} units")
    _print_verification(args, verify.run(ctx, study, choice.prediction, result, threads=args.threads, force=args.force))
    return 0


def _verify_probe(args: argparse.Namespace, ctx, study, result: dict) -> int:
    """`study verify --probe`: one probe run on the study's base config; its predicted optimum (at the study's
    reference mu) run as the study's `probe` arm, or the reason it was refused."""
    from workbench.workflow import verify
    from workbench.workflow.probe import claim_line, cost_words

    p = verify.probe_study(ctx, study, result, args.probe_steps, sweep=args.lr_sweep, threads=args.threads)
    res, o, sweep = p.measured, p.predicted, p.sweep
    print(f"probe: {res.steps} steps ({cost_words(res.compute_units, sweep)}), MLflow run {p.run_id}; at the study's mu {p.mu:.3g}:"
          + (f" x {o['x']:g}, y {o['y']:.3g}, lr {o['lr']:.3g} ({o['lr_source']}), {o['relative_compute']:.2f}x on-policy's compute" if "x" in o else ""))
    print(f"  {claim_line(p.against_sweep)}")
    if p.prediction is None:
        print(f"  no prediction: {o['refused']}")
        return 0
    v = verify.run(ctx, study, p.prediction, result, threads=args.threads, force=args.force)
    print(f"  measured {v.measured:.4g} against predicted {v.predicted:.4g}" + (f" (already run as trial {v.same_as})" if v.same_as is not None else ""))
    _print_verification(args, v)
    return 0


def cmd_study_confirm(args: argparse.Namespace) -> int:
    """Re-run the best configurations and the baseline on fresh seeds; print selection against replication, then the
    bottom line (whether the saving held on the fresh seeds) and the next command."""
    from workbench.study.compare import confirmation_lines
    from workbench.study.summary import closing_lines
    from workbench.workflow.confirm import confirm

    from workbench.study.devices import parse_devices

    study, done = confirm(_study_context(args), args.top, args.seeds, threads=args.threads, predicted=args.predicted,
                          devices=parse_devices(args.devices) if args.devices else None)
    for line in confirmation_lines(study) + closing_lines(study, args.spec):  # the bottom line: did the saving hold
        print(line)
    if args.json:  # last, on a line of its own
        print(json.dumps([d.__dict__ for d in done]))
    return 0


def cmd_study_race(args: argparse.Namespace) -> int:
    """Add seeds to the configurations still unresolved against the leader; print the comparison after, then the
    bottom line and the next command."""
    from workbench.study.compare import comparison_lines
    from workbench.study.confirm import open_for_confirm
    from workbench.study.devices import parse_devices
    from workbench.study.race import run_race
    from workbench.study.summary import closing_lines

    ctx = _study_context(args)
    study = open_for_confirm(ctx)
    raced = run_race(ctx, study, args.max_seeds, args.step, threads=args.threads,
                     devices=parse_devices(args.devices) if args.devices else None)
    for line in raced + comparison_lines(study) + closing_lines(study, args.spec):
        print(line)
    return 0


def cmd_study_compare(args: argparse.Namespace) -> int:
    """Every configuration with its interval and paired savings; `--noise`: the per-run noise of each estimator."""
    from workbench.study.compare import comparison_lines, confirmation_lines, noise_lines
    from workbench.study.context import load_existing
    from workbench.study.summary import closing_lines, reading_lines

    ctx = _study_context(args)
    study = load_existing(ctx)
    if args.runs_csv:
        from workbench.study import runs

        n = runs.write(study, ctx.spec, Path(args.runs_csv))
        print(f"wrote {args.runs_csv}: {n} runs of the complete trials (the per-run table `workbench results` reads)")
    rows = noise_lines(study) if args.noise else comparison_lines(study) + confirmation_lines(study)
    for line in (reading_lines(study) + rows if rows else []) + closing_lines(study, args.spec):
        print(line)
    return 0


def _analysis_inputs(args: argparse.Namespace) -> tuple[str, str]:
    if args.spec:
        from workbench.study.spec import load_spec

        spec = load_spec(args.spec)
        return spec.name, resolve_tracking_uri(args.tracking_uri or spec.tracking_uri)
    if not args.study:
        raise ConfigError("study: give --study NAME or a SPEC file")
    return args.study, resolve_tracking_uri(args.tracking_uri)


def _whatif(values: list[float] | None) -> list[float]:
    mus = values if values is not None else [5.28]
    for mu in mus:
        if not (math.isfinite(mu) and mu > 0):
            raise ConfigError(f"--whatif-mu: must be positive (got {mu})")
    return mus


def _target(value: float | None) -> float | None:
    if value is not None and not (math.isfinite(value) and 0 < value <= 1):
        raise ConfigError(f"--target: must be in (0, 1] (got {value})")
    return value


def cmd_analyze(args: argparse.Namespace) -> int:
    """Fit the model to a study's runs (MLflow), predict the optimum, compare; write the analysis JSON."""
    name, uri = _analysis_inputs(args)
    whatif_mu, target = _whatif(args.whatif_mu), _target(args.target)
    from workbench.workflow.predict import analysis_json

    result, path = analysis_json(name, uri, Path(args.out) if args.out else None, args.force, whatif_mu=whatif_mu,
                                 bootstrap=args.bootstrap, target=target, estimator=args.estimator, bar=progress.bars_wanted())
    f, p, e = result["fit"], result["predicted"], result["empirical"]
    print(f"fit: alpha {f['alpha']:.3g}, tau0 {f['tau0']:.3g}, rho {f['rho']:.3g}; R² (log) {f['r2_log']:.3g}; LOCO {f['loco']}")
    print(f"predicted optimum: x {p['x']:.3g}, y {p['y']:.3g} (capacity {p['knobs']['capacity']} at B); "
          f"empirical: trial {e['trial_number']} x {e['x']:.3g}, y {e['y']:.3g}, compute to target {e['compute_to_target']:.4g}")
    for m in result.get("models", []):  # best first (analysis.models.compare)
        o, loco = m["optimum"], m["loco"]
        where = f"refused ({o['refused']})" if "refused" in o else f"x {o['x']:.3g}, y {o['y']:.3g}" + (f", lr {o['lr']:.3g}" if "lr" in o else "")
        held = f"{loco['median_abs_log_error']:.3g} over {loco['n']}" if loco.get("n") else "-"
        print(f"model {m['model']}: AIC {m['aic']:.4g}, LOCO median |log error| {held}, unidentified "
              f"{', '.join(m['unidentified']) or 'none'}; optimum {where}")
    for law in result.get("laws", []):
        print(law["line"])
    print(f"wrote {path}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """The study's report (Markdown, one self-contained HTML page, the analysis JSON, the figures) where
    `analysis.destination` says: --out, else reports-out/NAME/ beside the MLflow store; never over tracked files
    unless --force."""
    name, uri = _analysis_inputs(args)
    whatif_mu, target = _whatif(args.whatif_mu), _target(args.target)
    from workbench.workflow.predict import report

    line, paths = report(name, uri, Path(args.out) if args.out else None, args.force, whatif_mu=whatif_mu, bootstrap=args.bootstrap,
                         target=target, estimator=args.estimator, bar=progress.bars_wanted(), spec=args.spec)
    print(line)
    print(f"wrote {paths['html']} (open it in a browser), with report.md, analysis.json and the figures beside it")
    return 0


def _positive(name: str, value: float | None) -> float | None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise ConfigError(f"--{name}: must be positive (got {value})")
    return value


def _parse_split(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    w, sep, t = text.partition(":")
    if not sep or not w.isdigit() or not t.isdigit() or int(w) < 1 or int(t) < 1:
        raise ConfigError(f"--split: must be W:T, two positive whole numbers (got {text!r})")
    return int(w), int(t)


def cmd_recommend(args: argparse.Namespace) -> int:
    """The buffer settings, lr and W:T split a study or a probe supports at your mu, with the saving against
    lr-tuned on-policy and its interval, or why none is supported."""
    mu = _positive("mu", args.mu)
    gen, train = _positive("gen-seconds", args.gen_seconds), _positive("train-seconds", args.train_seconds)
    if (gen is None) != (train is None):
        raise ConfigError("--gen-seconds: give it with --train-seconds (seconds per generated rollout, per training step)")
    if mu is not None and gen is not None:
        raise ConfigError("--mu: give either --mu or --gen-seconds with --train-seconds, not both")
    split = _parse_split(args.split)
    from workbench.workflow import recommend

    if args.probe:
        out = recommend.from_probe(args.probe, resolve_tracking_uri(args.tracking_uri), mu=mu, gen_seconds=gen,
                                   train_seconds=train, split=split)
    else:
        name, uri = _analysis_inputs(args)
        out = recommend.from_study(name, uri, mu=mu, gen_seconds=gen, train_seconds=train, split=split, target=_target(args.target))
    if args.json:
        print(json.dumps({k: v for k, v in out.items() if k != "lines"}, default=float))
    else:
        print("\n".join(out["lines"]))
    return 0


def cmd_regime(args: argparse.Namespace) -> int:
    """The paper's regime across asynchronous studies at several mu: each arm against the lr-tuned queue in compute
    and wall time, the crossover, the confirmation on fresh seeds."""
    from workbench.study.spec import load_spec
    from workbench.workflow.regime import report

    specs = [load_spec(p) for p in args.specs]
    uri = resolve_tracking_uri(args.tracking_uri or specs[0].tracking_uri)
    confirm = load_spec(args.confirm).name if args.confirm else None
    sync = load_spec(args.sync).name if args.sync else None
    result, paths = report([s.name for s in specs], uri, Path(args.out) if args.out else None, args.force,
                           confirm=confirm, target=_target(args.target), sync=sync)
    c = result["crossover"]
    where = lambda p: "none measured" if p is None else f"s {p['slowdown']:g} (mu {p['mu']:.2f})"  # noqa: E731
    print(f"crossover: compute {where(c['compute'])}, device time {where(c['device_time'])}; theory (mu·T/W > 1) {where(c['theory'])}"
          + (f"; the synchronous runs re-accounted: {where(c['reaccounted'])}" if sync else ""))
    print(f"wrote {paths['regime.md']}, with regime.json and the figures beside it")
    return 0


def cmd_probe(args: argparse.Namespace) -> int:
    """One short replay run that measures mu, sigma²(tau), kappa, the within-group correlation and rho, and the optimum they predict."""
    from workbench.config import apply_overrides, load_yaml_mapping

    if args.lr_sweep and args.target is None:
        raise ConfigError("--target: required with --lr-sweep (the accuracy, on the trial's eval.metric, each sweep run is read to)")
    for name, low in (("x", 1.0), ("ratio", 1.0), ("steps", 1), ("every", 1), ("lag", 1), ("sketch", 16), ("sweep_units", 1.0)):
        value = getattr(args, name)
        if value is None and name == "lag":
            continue
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= low):
            raise ConfigError(f"--{name.replace('_', '-')}: must be >= {low:g} (got {value})")
    data = apply_overrides(load_yaml_mapping(args.config) if args.config else {}, args.set or [])
    data.setdefault("tracking", {}).setdefault("experiment", "probe")
    if args.tracking_uri:
        data["tracking"]["uri"] = args.tracking_uri
    from workbench.workflow.probe import claim_line, cost_words, probe

    probed = probe(data, x=args.x, ratio=args.ratio, steps=args.steps, every=args.every, lag=args.lag, sketch=args.sketch,
                   sweep_target=args.target if args.lr_sweep else None, sweep_units=args.sweep_units,
                   show_progress=progress.bars_wanted(args.json, args.quiet))
    res, out, cfg = probed.measured, probed.recorded, probed.config
    g = res.growth
    c = probed.predicted.get("c", math.nan)
    if args.json:
        print(json.dumps(out, default=float))
        return 0
    print(f"probe: {res.steps} steps at x {res.x:g}, y {res.y:g} ({cost_words(res.compute_units, probed.predicted.get('lr_sweep'))}), {res.probes} probes;"
          f" MLflow run {probed.run_id} in {tracking.redact_url(cfg.tracking.uri)}")
    print(f"  mu {res.mu:.3g}; rho (a rollout's noise {res.rho_lag} step later) {res.rho:.3g}; within-group gradient correlation {res.group_correlation:.3g} -> c {c:.3g}")
    print("  sigma²(tau): " + ", ".join(f"{a['age']}: {a['sigma2']:.3g}" for a in res.noise))
    if g:
        print(f"  fitted sigma0² {g['sigma0_sq']:.3g}, tau0 {g['tau0']:.3g}, alpha {g['alpha']:.3g};"
              f" F6 (noise non-decreasing with age): {'holds' if g['non_decreasing'] else 'falsified'}"
              f" (log sigma² per step of age {g['log_slope']:+.3f} ± {1.96 * g['log_slope_se']:.3f})")
    resolved = {t: k for t, k in res.kappa.items() if math.isfinite(k)}
    print("  kappa(tau), staleness bias: " + (", ".join(f"{t}: {k:.2f}" for t, k in resolved.items()) if resolved else
                                              "not resolved (the mean gradient at age 0 is within the noise of its estimate)"))
    shares = probed.alignment()
    if shares:
        print("  g_0·g_bar_x / |g_0|² (how much of a horizon-x batch's mean gradient points along the fresh one, 95% over"
              " resampled groups): " + ", ".join(f"x {x}: {share:.2f}" + (f" [{iv[0]:.2f}, {iv[1]:.2f}]" if iv else "")
                                                 for x, share, iv in shares))
    p = out["predicted"]
    if "lr_sweep" in p:
        best = p["lr_optimum"]
        print("  on-policy lr sweep, compute to target: " + ", ".join(
            f"lr {q['lr']:.3g}: {'>' if q['censored'] else ''}{q['compute_to_target']:.3g}" for q in p["lr_sweep"])
            + (f"; no lr*: {best['refused']}" if "refused" in best else f"; lr* {best['lr']:.3g} ({best['compute']:.3g} units)"))
    if "x" in p:
        print(f"  {'best point measured' if 'refused' in p else 'predicted optimum'} at a tuned lr: x {p['x']:.3g}, y {p['y']:.3g}"
              f" (capacity {p['capacity']}), lr {p['lr']:.3g} ({p['lr_source']}; x{p['lr_factor']:.2f} on-policy's),"
              f" {p['relative_compute']:.2f}x on-policy's compute" + (f" ({p['compute']:.3g} units)" if "compute" in p else "")
              + f"; within 5%: x {p['near_x'][0]:g}-{p['near_x'][1]:g}, y {p['near_y'][0]:.3g}-{p['near_y'][1]:.3g}")
    if "stability" in p:
        st = p["stability"]
        print(f"  stability over {st['draws']} bootstrap resamples of the probe's groups: the same point in {st['same_point']:.0%};"
              f" 95% of draws within x {st['x_95'][0]:g}-{st['x_95'][1]:g}, y {st['y_95'][0]:.3g}-{st['y_95'][1]:.3g}")
    if "refused" in p:
        print(f"  no prediction: {p['refused']}")
    print(f"  {claim_line(probed.against_sweep)}")
    return 0


def cmd_results(args: argparse.Namespace) -> int:
    """Recompute every marked number of a results page from the committed per-run tables (`analysis.recompute`);
    exit 1 when one does not hold."""
    from workbench.workflow.results import recompute_page

    checks = recompute_page(Path(args.docs), Path(args.reports))
    for c in checks:
        print(c.fmt())
    failed = [c for c in checks if not c.held]
    print(f"{len(checks) - len(failed)} of {len(checks)} numbers recomputed from {args.reports}/*/runs.csv"
          + (f"; {len(failed)} did not hold" if failed else ""))
    return 1 if failed or not checks else 0


def cmd_theory(args: argparse.Namespace) -> int:
    """Closed-form optimum of Arnal et al. Theorem 4.5 under the power-law variance (App. C.3.2)."""
    for name in ("mu", "rho", "alpha"):
        value = getattr(args, name)
        if not math.isfinite(value) or value < 0 or (name != "rho" and value == 0):
            raise ConfigError(f"--{name}: must be a {'non-negative' if name == 'rho' else 'positive'} number (got {value})")
    if not args.alpha < 0.5:
        raise ConfigError(f"--alpha: must be < 1/2 (got {args.alpha}); at alpha >= 1/2 the optimum is on-policy (y* -> 0)")
    if args.batch_size < 1:
        raise ConfigError(f"--batch-size: must be >= 1 (got {args.batch_size})")
    from workbench.workflow.theory import theory

    out, k = theory(args.mu, args.rho, args.alpha, args.batch_size)
    x, y = out["x_star"], out["y_star"]
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"mu={args.mu:g} rho={args.rho:g} alpha={args.alpha:g} (Theorem 4.5, power-law variance, App. C.3.2)")
    print(f"  x* = N/R (staleness horizon)     {x:.4g}")
    print(f"  y* = B/R (replay ratio)          {y:.4g}")
    print(f"  fresh rollouts per step R = B/y* {k.fresh_per_step:.4g}   (B = {args.batch_size})")
    print(f"  buffer capacity N = x*·R         {k.exact_capacity:.4g}   (distinct draws need N >= B: {k.capacity})")
    print(f"  inference/trainer split W/T      {k.workers_per_trainer:.4g}   (≈ mu / y*)")
    if y <= 1.0:
        print("  y* <= 1: replay is not predicted to save compute here; stay on-policy")
    else:
        print(f"  as knobs: --set replay.ratio={y:.3g} --set replay.capacity={k.capacity}")
    return 0


def cmd_ui(args: argparse.Namespace) -> int:
    """MLflow UI (and optuna-dashboard when a storage is given) on the same stores, bound to 127.0.0.1."""
    import shutil
    import subprocess

    bindir = os.path.dirname(sys.executable)
    uri = resolve_tracking_uri(args.tracking_uri)
    procs = []
    if uri.startswith("http"):
        print(f"MLflow is served by the tracking server at {uri}")
    else:
        mlflow_bin = os.path.join(bindir, "mlflow")
        procs.append(subprocess.Popen([mlflow_bin, "ui", "--backend-store-uri", uri, "--host", "127.0.0.1", "--port", str(args.port)],
                                      env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}))
        print(f"MLflow UI: http://127.0.0.1:{args.port}  ({tracking.redact_url(uri)})")
    if args.storage:
        dash = shutil.which("optuna-dashboard", path=bindir) or shutil.which("optuna-dashboard")
        if dash is None:
            raise ConfigError("storage: optuna-dashboard is not installed (pip install optuna-dashboard)")
        procs.append(subprocess.Popen([dash, args.storage, "--host", "127.0.0.1", "--port", str(args.port + 1)]))
        print(f"optuna-dashboard: http://127.0.0.1:{args.port + 1}  ({tracking.redact_url(args.storage)})")
    try:
        for p in procs:
            p.wait()
    except KeyboardInterrupt:
        for p in procs:
            p.terminate()
    return 0


def cmd_rlep_pool(args: argparse.Namespace) -> int:
    """RLEP phases 0-1: a short RL run from the model, then its verified successes written as a pool file."""
    cfg = load_config(args.config, args.set or [])
    out = Path(args.out)
    if out.exists() and not args.force:
        raise ConfigError(f"--out: {out} exists (use --force to overwrite)")
    import torch

    from workbench.trial.strategies.rlep_pool import build_pool
    from workbench.trial.tasks import load_task

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    summary = build_pool(cfg, load_task(cfg.task), out)
    print(json.dumps({"pool": str(out), **summary}))
    return 0


def cmd_sample_data(args: argparse.Namespace) -> int:
    from workbench.trial.tasks import write_sample_jsonl

    path = write_sample_jsonl(args.path, n=args.n, seed=args.seed)
    print(path)
    return 0


def cmd_build_model(args: argparse.Namespace) -> int:
    from workbench.trial.subword import build_model_dir

    summary = build_model_dir(args.out, args.jsonl, size=args.size, vocab_size=args.vocab_size,
                              chat_template=not args.no_chat_template, pad_token=args.pad_token, seed=args.seed)
    print(json.dumps(summary))
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line (and exit 2), like every other bad input."""

    def error(self, message: str):  # type: ignore[override]
        _err(f"{message} (see `{self.prog} --help`)")
        raise SystemExit(EXIT_BAD_INPUT)


def _arm_parser(ssub, name: str, text: str) -> argparse.ArgumentParser:
    """A `study` subcommand that trains arms of an existing study (verify, confirm, race): spec, stores, threads."""
    p = ssub.add_parser(name, help=text)
    p.add_argument("spec", help="the study spec YAML")
    p.add_argument("--storage")
    p.add_argument("--tracking-uri")
    p.add_argument("--threads", type=int, help="torch threads for its trials")
    return p


SEEDS_SIDE_BY_SIDE = "GPU ids (CPU: core ids) to run on, e.g. 0-1: a configuration's seeds run side by side, one per trial's need"
SET_HELP = "override one config key (repeatable); a bare KEY=VALUE does the same (`workbench config` lists the keys)"


def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> argparse.Namespace:
    """The parsed command line. An argument that looks like KEY=VALUE (`replay.ratio=2`, as verl and hydra users
    type it) is an override beside the `--set` ones on every command that takes `--set`; anything else unknown is
    the usual one-line error."""
    from workbench.config import OVERRIDE

    args, extra = parser.parse_known_args(argv)
    bare = [a for a in extra if OVERRIDE.match(a)] if hasattr(args, "set") else []
    rest = [a for a in extra if a not in bare]
    if isinstance(getattr(args, "keys", None), list):  # `workbench config`: its KEY arguments may follow options
        args.keys += [a for a in rest if not a.startswith("-")]
        rest = [a for a in rest if a.startswith("-")]
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if bare:
        args.set = (args.set or []) + bare
    return args


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="workbench",
        description="Experience replay for GRPO-style RL post-training: trials, sweeps, analysis.",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    train = sub.add_parser("train", help="run one training trial (the embedded default unless configured)")
    train.add_argument("--config", help="YAML trial config (`workbench config` lists the keys: replay.ratio, ...)")
    train.add_argument("--set", action="append", metavar="KEY=VALUE", help=SET_HELP)
    train.add_argument("--tracking-uri", help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else ./mlflow.db)")
    train.add_argument("--run-name", help="MLflow run name")
    train.add_argument("--json", action="store_true", help="print a final JSON line with run_id and the final metrics")
    train.add_argument("--quiet", action="store_true", help="no progress lines")
    train.set_defaults(func=cmd_train)

    config = sub.add_parser("config", help="list every trial-config key with its value, default and doc",
                            description="Every key of the trial config with its default and its doc (each registered"
                            " strategy's replay.<name>.* included); with --config or overrides, the resolved values.")
    config.add_argument("keys", nargs="*", metavar="KEY|KEY=VALUE",
                        help="show only these keys or sections (replay, replay.ratio); KEY=VALUE overrides like --set")
    config.add_argument("--config", help="YAML trial config whose resolved values to show")
    config.add_argument("--set", action="append", metavar="KEY=VALUE", help=SET_HELP)
    config.add_argument("--study", action="store_true", help="list the keys of a study spec instead (studies/*.yaml)")
    config.add_argument("--json", action="store_true", help="one JSON list: key, value, default, type, choices, doc")
    config.set_defaults(func=cmd_config)

    study = sub.add_parser("study", help="Optuna studies over the replay knobs (run, worker, status, compare, verify, confirm, race)")
    ssub = study.add_subparsers(dest="study_command", required=True, parser_class=_Parser)
    run = ssub.add_parser("run", help="create or resume a study and run it with local worker processes")
    run.add_argument("spec", help="study spec YAML (studies/*.yaml)")
    run.add_argument("--n-trials", type=int, help="trials to complete (default: the spec's n_trials)")
    run.add_argument("--workers", type=int, default=1, help="local worker processes (default 1)")
    run.add_argument("--storage", help="Optuna storage URL (default: the spec's, else sqlite:///optuna.db)")
    run.add_argument("--tracking-uri", help="MLflow tracking URI (default: the spec's, else $MLFLOW_TRACKING_URI, else ./mlflow.db)")
    run.add_argument("--devices", help="GPU ids (CPU: core ids) split among the workers, e.g. 0-7: one per synchronous trial, W + T per asynchronous one")
    run.set_defaults(func=cmd_study_run)
    worker = ssub.add_parser("worker", help="join an existing study from any machine and run its trials")
    worker.add_argument("spec")
    worker.add_argument("--storage", help="Optuna storage URL shared by all workers")
    worker.add_argument("--tracking-uri")
    worker.add_argument("--n-trials", type=int)
    worker.add_argument("--threads", type=int, help="torch threads for this worker's trials")
    worker.add_argument("--baseline-threads", type=int, help="torch threads for the baseline trial (default: --threads)")
    worker.add_argument("--quiet", action="store_true", help="warnings only (no per-trial progress lines)")
    worker.add_argument("--devices", help="the GPU ids (CPU: core ids) this worker may use, e.g. 0,1; it uses no other "
                        "(more than one trial needs: a configuration's seeds run side by side)")
    worker.add_argument("--baseline-devices", help="the devices of the on-policy baseline, run side by side over them "
                        "(default: --devices; the driver gives every device to a baseline that runs alone)")
    worker.set_defaults(func=cmd_study_worker)
    status = ssub.add_parser("status", help="trials by state, the best configuration, the Pareto front")
    status.add_argument("spec", nargs="?")
    status.add_argument("--study", help="study name (instead of a spec file)")
    status.add_argument("--storage")
    status.add_argument("--tracking-uri")
    status.add_argument("--table", action="store_true", help="print the trial table (CSV)")
    status.add_argument("--fail-stale", action="store_true", help="first mark trials of dead workers as failed")
    status.set_defaults(func=cmd_study_status)
    verify = _arm_parser(ssub, "verify", "run the fitted optimum as new trials of the study: measured against predicted")
    verify.add_argument("--bootstrap", type=int, default=0, help="bootstrap refits for the fit's intervals (default 0: the point fit decides)")
    verify.add_argument("--force", action="store_true", help="run it even when the same knobs were already measured")
    verify.add_argument("--probe", action="store_true", help="predict with one `workbench probe` run on the study's base config instead of the fitted model")
    verify.add_argument("--probe-steps", type=int, default=48, help="with --probe: the probe run's optimizer steps (default 48; more probes"
                        " where the fresh gradient is not resolved from its noise)")
    verify.add_argument("--lr-sweep", action=argparse.BooleanOptionalAction, default=None,
                        help="with --probe: locate on-policy's best learning rate with a short sweep (default: when the study searches lr)")
    verify.add_argument("--model", help="predict with this compared model (analysis.models: thm45, with_replacement, extended, "
                        "extended_lr) instead of the distinct-draw fit; best = the first model selected (it beats the constant, "
                        "lr-only and nearest null predictors out of sample) by leave-one-configuration-out error, and where none "
                        "is selected the first by that error, run with a warning that its prediction has no demonstrated skill")
    verify.add_argument("--ridge", action="store_true", help="with --model: where the model refuses a point because its optimum"
                        " is a flat ridge, run the ridge's simplest point (smallest horizon, least reuse) to test the claim")
    verify.add_argument("--json", action="store_true", help="print the result as one JSON line")
    verify.set_defaults(func=cmd_study_verify)
    confirm = _arm_parser(ssub, "confirm", "re-run the best configurations and the baseline on fresh seeds (replication)")
    confirm.add_argument("--top", type=int, default=2, help="configurations to confirm, best first (default 2)")
    confirm.add_argument("--seeds", type=int, default=4, help="fresh seeds each (default 4)")
    confirm.add_argument("--predicted", action="store_true",
                         help="also re-run the optima `study verify` predicted (model and probe arms) on the same fresh seeds")
    confirm.add_argument("--json", action="store_true", help="print the confirmations as one JSON line")
    confirm.add_argument("--devices", help=SEEDS_SIDE_BY_SIDE)
    confirm.set_defaults(func=cmd_study_confirm)
    race = _arm_parser(ssub, "race", "add seeds where the leader is not yet resolved against a contender (racing)")
    race.add_argument("--max-seeds", type=int, default=8, help="seeds per configuration at most (default 8)")
    race.add_argument("--step", type=int, default=2, help="seeds added per round (default 2)")
    race.add_argument("--devices", help=SEEDS_SIDE_BY_SIDE)
    race.set_defaults(func=cmd_study_race)
    compare = ssub.add_parser("compare", help="every configuration with its 95%% interval and paired savings against on-policy")
    compare.add_argument("spec", help="the study spec YAML")
    compare.add_argument("--storage")
    compare.add_argument("--tracking-uri")
    compare.add_argument("--noise", action="store_true", help="per estimator: the per-run noise (sd of log compute-to-target)")
    compare.add_argument("--runs-csv", metavar="FILE", help="also write the per-run table of the complete trials from the Optuna"
                         " record (the columns of a report's runs.csv)")
    compare.set_defaults(func=cmd_study_compare)

    for cmd, func, text in (("analyze", cmd_analyze, "fit the closed-form model to a study and compare optima (analysis.json)"),
                            ("report", cmd_report, "write a study's report: report.html (self-contained), report.md, analysis.json, figures")):
        p = sub.add_parser(cmd, help=text)
        p.add_argument("spec", nargs="?", help="the study spec (or give --study)")
        p.add_argument("--study", help="study name (= its MLflow experiment)")
        p.add_argument("--tracking-uri")
        p.add_argument("--out", help="output folder (default: reports-out/NAME/ beside the study's MLflow store, e.g. next to"
                       " ./mlflow.db; a store on a server: in the working directory)")
        p.add_argument("--force", action="store_true", help="write even over files git tracks (refused otherwise)")
        p.add_argument("--whatif-mu", type=float, action="append", help="also re-account at this mu (default 5.28)")
        p.add_argument("--bootstrap", type=int, default=200, help="bootstrap refits for the intervals")
        p.add_argument("--target", type=float, help="read compute-to-target at this accuracy instead of the study's")
        p.add_argument("--estimator", choices=["first", "interpolated", "sustained", "fitted"],
                       help="read compute-to-target with this estimator instead of the study's")
        p.set_defaults(func=func)

    recommend = sub.add_parser("recommend", help="the buffer settings, lr and W:T split a study or a probe supports at your mu,"
                               " with the saving against lr-tuned on-policy and its interval")
    recommend.add_argument("spec", nargs="?", help="the study spec (or give --study, or --probe)")
    recommend.add_argument("--study", help="study name (= its MLflow experiment)")
    recommend.add_argument("--probe", metavar="RUN_ID", help="a probe run (`workbench probe --lr-sweep`) instead of a study")
    recommend.add_argument("--tracking-uri")
    recommend.add_argument("--mu", type=float, help="your mu: generating a rollout over training on one (default: the source's measured mu)")
    recommend.add_argument("--gen-seconds", type=float, help="instead of --mu: seconds to generate one rollout on a generator")
    recommend.add_argument("--train-seconds", type=float, help="with --gen-seconds: seconds of one training step (B rollouts)")
    recommend.add_argument("--split", metavar="W:T", help="your split of generators to trainers: the replay ratio it gives is shown")
    recommend.add_argument("--target", type=float, help="read compute-to-target at this accuracy instead of the study's")
    recommend.add_argument("--json", action="store_true", help="print the recommendation as one JSON line")
    recommend.set_defaults(func=cmd_recommend)

    regime = sub.add_parser("regime", help="asynchronous studies at several generator slowdowns read together: the buffer against"
                            " the lr-tuned queue at each mu, the crossover, the confirmation")
    regime.add_argument("specs", nargs="+", help="the study specs, one per slowdown")
    regime.add_argument("--confirm", help="the spec of the confirmation study (fresh seeds and checkpoint)")
    regime.add_argument("--sync", help="the spec of a synchronous study to re-account at each study's mu, beside it")
    regime.add_argument("--tracking-uri")
    regime.add_argument("--out", help="output folder (default: reports-out/regime-NAMES/ beside the MLflow store)")
    regime.add_argument("--force", action="store_true", help="write even over files git tracks")
    regime.add_argument("--target", type=float, help="read compute-to-target at this accuracy instead of each study's")
    regime.set_defaults(func=cmd_regime)

    probe = sub.add_parser("probe", help="one short replay run that measures the model's parameters and predicts the optimum")
    probe.add_argument("--config", help="YAML trial config (the probe sets the replay section and the step budget)")
    probe.add_argument("--set", action="append", metavar="KEY=VALUE", help=SET_HELP)
    probe.add_argument("--x", type=float, default=16.0, help="buffer horizon N/R of the probe run (default 16)")
    probe.add_argument("--ratio", type=float, default=2.0, help="replay ratio y of the probe run (default 2)")
    probe.add_argument("--steps", type=int, default=48, help="optimizer steps (default 48)")
    probe.add_argument("--every", type=int, default=4, help="probe every k steps once the buffer holds every age (default 4)")
    probe.add_argument("--lag", type=int, default=None, help="steps between a rollout's two gradients for rho (default x/y, the mean gap between two uses)")
    probe.add_argument("--sketch", type=int, default=2048, help="CountSketch size of a gradient (default 2048)")
    probe.add_argument("--lr-sweep", action="store_true", help="also locate on-policy's best learning rate with short on-policy runs at"
                       " lr x 1, 2, 4 (extended while the cheapest is at an edge), each read as compute to --target")
    probe.add_argument("--target", type=float, help="the accuracy (on the trial's eval.metric) the sweep's runs are read to")
    probe.add_argument("--sweep-units", type=float, default=workflow.DEFAULT_SWEEP_UNITS, help="compute units of the sweep's first run (default 100)")
    probe.add_argument("--tracking-uri", help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else ./mlflow.db)")
    probe.add_argument("--json", action="store_true", help="print the measurements and the prediction as one JSON line")
    probe.add_argument("--quiet", action="store_true", help="no progress lines")
    probe.set_defaults(func=cmd_probe)

    results = sub.add_parser("results", help="recompute every number docs/results.md states from the per-run tables committed"
                             " beside the reports (reports/NAME/runs.csv)")
    results.add_argument("--docs", default="docs/results.md", help="the results page (default docs/results.md)")
    results.add_argument("--reports", default="reports", help="the folder of reports with their runs.csv (default reports)")
    results.set_defaults(func=cmd_results)

    theory = sub.add_parser("theory", help="closed-form optimal staleness horizon and replay ratio (Arnal et al.)")
    theory.add_argument("--mu", type=float, required=True, help="generation cost / training cost of a rollout")
    theory.add_argument("--rho", type=float, required=True, help="sample-iterate coupling, >= 0")
    theory.add_argument("--alpha", type=float, required=True, help="noise growth exponent, sigma(tau) ~ tau^alpha, < 1/2")
    theory.add_argument("--batch-size", type=int, default=128)
    theory.add_argument("--json", action="store_true")
    theory.set_defaults(func=cmd_theory)

    ui = sub.add_parser("ui", help="MLflow UI and optuna-dashboard on the workbench's stores (127.0.0.1)")
    ui.add_argument("--tracking-uri")
    ui.add_argument("--storage", help="Optuna storage URL for optuna-dashboard (on port + 1)")
    ui.add_argument("--port", type=int, default=5000)
    ui.set_defaults(func=cmd_ui)

    pool = sub.add_parser("rlep-pool", help="collect RLEP's pool of verified successes from a seed policy (JSONL)")
    pool.add_argument("--config", help="YAML trial config (the model, task and replay.rlep.* collection settings)")
    pool.add_argument("--set", action="append", metavar="KEY=VALUE", help=SET_HELP)
    pool.add_argument("--out", required=True, help="pool file to write (use it with --set replay.rlep.pool=FILE)")
    pool.add_argument("--force", action="store_true", help="overwrite an existing file")
    pool.add_argument("--quiet", action="store_true")
    pool.set_defaults(func=cmd_rlep_pool)
    data = sub.add_parser("sample-data", help="write a small GSM8K-style JSONL sample task file")
    data.add_argument("path")
    data.add_argument("--n", type=int, default=200)
    data.add_argument("--seed", type=int, default=0)
    data.set_defaults(func=cmd_sample_data)
    build = sub.add_parser("build-model", help="a Llama with a byte-level BPE tokenizer trained on a JSONL task, saved as an HF directory")
    build.add_argument("out", help="directory to write (use it as model.path)")
    build.add_argument("--jsonl", required=True, help="JSONL task file whose questions and answers train the tokenizer")
    build.add_argument("--size", default="tiny", help="tiny (tests, CPU) or 100m (a first GPU run)")
    build.add_argument("--vocab-size", type=int, default=1000)
    build.add_argument("--no-chat-template", action="store_true", help="leave the tokenizer without a chat template")
    build.add_argument("--pad-token", action="store_true", help="give the tokenizer a pad token (default: none, EOS pads)")
    build.add_argument("--seed", type=int, default=0)
    build.set_defaults(func=cmd_build_model)
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    # multiprocessing's tracker frees the semaphores of a process that was killed, and warns about each batch on
    # stderr: two lines of noise after a SIGKILLed trial, whose run's helper has said what happened
    quiet = "ignore::UserWarning:multiprocessing.resource_tracker"
    os.environ["PYTHONWARNINGS"] = ",".join(w for w in (os.environ.get("PYTHONWARNINGS"), quiet) if w and quiet not in w) or quiet
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    parser = build_parser()
    args = parse_args(parser, argv)
    progress.setup_logging(quiet=getattr(args, "quiet", False))
    interrupts.install()  # a Ctrl-C that lands in a garbage-collector callback is delivered again, not lost
    try:
        return args.func(args)
    except ConfigError as err:
        _err(str(err))
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        _err("interrupted")
        return 130
    except tracking.TrackingUnavailable as err:  # the tracking server away past tracking.outage_s
        _err(str(err))
        return 1
    except tracking.StoresFull as err:  # said once, by the worker that found it (the driver's is empty)
        if str(err):
            _err(str(err))
        return tracking.EXIT_STORES_FULL


if __name__ == "__main__":
    sys.exit(main())
