"""Names a user types: "did you mean" for unknown keys and values, TRL and verl names, bare KEY=VALUE overrides,
and `workbench config`, which lists every key with its default and its doc."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.cli import run_cli
from support.toy import toy_spec

from workbench.cli import build_parser, parse_args
from workbench.config import ConfigError, TrialConfig, build_config, flatten, load_config, trial_keys
from workbench.config_names import FOREIGN, KeyDoc, closest_key, model_keys, section_docs, unknown_key, with_choices
from workbench.registry import REGISTRIES, STRATEGIES
from workbench.study.spec import StudySpec, load_spec

ROOT = Path(__file__).resolve().parents[1]


def test_a_mistyped_key_on_the_command_line_says_the_key_it_meant(tmp_path):
    proc = run_cli(["train", "--set", "replay.ratoi=2"], cwd=tmp_path, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "workbench: error: replay.ratoi: unknown key (did you mean replay.ratio?)"
    ]
    assert not (tmp_path / "mlflow.db").exists()  # stopped at the edge: nothing recorded


@pytest.mark.parametrize(
    "override, meant",
    [
        ("replay.ratoi=2", "replay.ratio"),
        ("replay.prioritized.tau_mx=3", "replay.prioritized.tau_max"),  # a strategy's own section
        ("replya.ratio=2", "replay.ratio"),  # the section mistyped
        ("ratio=2", "replay.ratio"),  # the right name in the wrong section
        ("max_new_tokens=64", "generation.max_new_tokens"),
        ("generation.temprature=0.7", "generation.temperature"),
    ],
)
def test_unknown_keys_name_the_closest_key(override, meant):
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    assert str(err.value) == f"{override.split('=')[0]}: unknown key (did you mean {meant}?)"


def test_the_same_hint_comes_from_a_yaml_config(tmp_path):
    path = tmp_path / "trial.yaml"
    path.write_text("replay:\n  ratoi: 2\n")
    with pytest.raises(ConfigError, match=r"^replay.ratoi: unknown key \(did you mean replay.ratio\?\)$"):
        load_config(path)


def test_nothing_close_gives_no_guess():
    with pytest.raises(ConfigError) as err:
        load_config(None, ["replay.bogus=1"])
    assert str(err.value) == "replay.bogus: unknown key"


@pytest.mark.parametrize(
    "override, expected",
    [
        ("num_iterations=2", "num_iterations: unknown key (TRL's num_iterations is replay.ratio here"),
        ("num_generations=4", "num_generations: unknown key (TRL's num_generations is group_size here"),
        (
            "actor_rollout_ref.actor.ppo_epochs=2",
            "actor_rollout_ref.actor.ppo_epochs: unknown key (verl's ppo_epochs is replay.ratio here",
        ),
        (
            "actor_rollout_ref.actor.clip_ratio_c=3",
            "actor_rollout_ref.actor.clip_ratio_c: unknown key (verl's clip_ratio_c is objective.dual_clip here",
        ),
        ("beta=0.04", "beta: unknown key (TRL's beta has no equivalent here"),
    ],
)
def test_trl_and_verl_names_say_what_they_are_here(override, expected):
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    assert str(err.value).startswith(expected) and str(err.value).endswith("docs/conventions.md)")


def test_every_foreign_name_maps_to_a_real_key_and_is_in_the_conventions_page():
    keys = {k.key for k in trial_keys()}
    page = (ROOT / "docs" / "conventions.md").read_text()
    for name in FOREIGN:
        assert name.ours is None or name.ours in keys, name
        assert re.search(rf"[`.]{re.escape(name.name)}`", page), name.name  # `name` or `section.name`


@pytest.mark.parametrize(
    "override, expected",
    [
        ("replay.strategy=unifrom", "replay.strategy: unknown 'unifrom' (did you mean 'uniform'?); known: "),
        ("objective.name=ppo_clp", "objective.name: unknown 'ppo_clp' (did you mean 'ppo_clip'?); known: "),
        ("generation.backend=vlm", "generation.backend: unknown 'vlm' (did you mean 'vllm'?); known: hf, vllm"),
        ("replay.dgg.signal=enrgy", "replay.dgg.signal: unknown 'enrgy' (did you mean 'energy'?); known: "),
    ],
)
def test_unknown_values_name_the_closest_value(override, expected):
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    assert str(err.value).startswith(expected), str(err.value)
    assert "\n" not in str(err.value)


def test_a_study_spec_with_seed_suggests_seeds(tmp_path):
    path = toy_spec(tmp_path)
    data = yaml.safe_load(path.read_text())
    data["seed"] = data.pop("seeds")
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as err:
        load_spec(path)
    assert str(err.value) == "seed: unknown key (did you mean seeds?)"


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"search_space": {"replay.ratoi": {"choices": [1, 2]}}},
            "search_space.replay.ratoi: unknown key (did you mean replay.ratio?)",
        ),
        (
            {"search_space": {"replay.ratio": {"lo": 1, "high": 2}}},
            "search_space.replay.ratio.lo: unknown key (did you mean search_space.replay.ratio.low?)",
        ),
        ({"sampler": "tpee"}, "sampler: unknown 'tpee' (did you mean 'tpe'?); known: "),
        (
            {"objective": "compute_to_targt"},
            "objective: unknown 'compute_to_targt' (did you mean 'compute_to_target'?)",
        ),
    ],
)
def test_study_specs_name_the_closest_key_or_value(tmp_path, change, message):
    with pytest.raises(ConfigError) as err:
        load_spec(toy_spec(tmp_path, **change))
    assert str(err.value).startswith(message), str(err.value)


def test_closest_key_prefers_the_section_typed():
    keys = ["replay.ratio", "replay.capacity", "generation.temperature", "objective.eps_high"]
    assert closest_key("replay.capcity", keys) == "replay.capacity"
    assert closest_key("objective.eps_hi", keys) == "objective.eps_high"
    assert closest_key("zzz", keys) is None
    assert unknown_key("seed", ["seeds", "sampler_seed"]) == "seed: unknown key (did you mean seeds?)"


@pytest.mark.parametrize(
    "argv, overrides",
    [
        (["train", "replay.ratio=2"], ["replay.ratio=2"]),
        (
            ["train", "--set", "budget.steps=1", "replay.ratio=2", "--quiet", "replay.capacity=512"],
            ["budget.steps=1", "replay.ratio=2", "replay.capacity=512"],
        ),
        (["probe", "replay.ratio=2"], ["replay.ratio=2"]),
        (["rlep-pool", "--out", "pool.jsonl", "replay.rlep.samples=4"], ["replay.rlep.samples=4"]),
    ],
)
def test_bare_overrides_are_taken_beside_set(argv, overrides):
    args = parse_args(build_parser(), argv)
    assert args.set == overrides
    assert load_config(None, args.set).replay.ratio == (2.0 if "replay.ratio=2" in overrides else 1.0)


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "foo"],
        ["study", "run", "spec.yaml", "n_trials=3"],
        ["theory", "--mu", "1", "--rho", "0", "--alpha", "0.3", "mu=2"],
    ],
)
def test_other_stray_arguments_stay_one_line_errors(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        parse_args(build_parser(), argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("workbench: error: unrecognized arguments: ")


def test_a_bare_override_with_a_typo_is_caught_like_set(tmp_path):
    proc = run_cli(["train", "replay.ratoi=2"], cwd=tmp_path, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "workbench: error: replay.ratoi: unknown key (did you mean replay.ratio?)"
    ]


def test_workbench_config_lists_every_key_with_its_default_and_doc(tmp_path):
    proc = run_cli(["config", "--json"], cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    listed = {row["key"]: row for row in json.loads(proc.stdout)}
    flat = flatten(build_config())
    assert set(listed) == set(flat) | {"tracking.uri"}  # flatten leaves the URI out (it may hold a password)
    for key, value in flat.items():
        assert listed[key]["default"] == listed[key]["value"] == value, key
        assert len(listed[key]["doc"]) > 10, f"{key} has no doc"
    assert {k for k in listed if k.startswith("replay.")} >= {
        "replay.dgg.tau",
        "replay.prioritized.tau_max",
        "replay.rlep.m",
    }
    assert listed["generation.decode"]["choices"] == ["auto", "compiled", "static", "hf"]  # a fixed set: its values
    registries = {r.field: r for r in REGISTRIES}
    assert set(registries) == {"replay.strategy", "objective.name", "task.name", "generation.backend", "model.source"}
    shipped = subprocess.run(  # the names a fresh process registers (this one may hold a test's own entries)
        [
            sys.executable,
            "-c",
            "import json; from workbench.registry import REGISTRIES as R; print(json.dumps({r.field: sorted(r) for r in R}))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    for key, names in json.loads(shipped.stdout).items():
        assert listed[key]["choices"] == names and "registered" in listed[key]["doc"], key
    assert listed["model.source"]["type"] == "directory | embedded | null"  # unset: what model.path implies
    assert {"hf", "vllm"} <= set(listed["generation.backend"]["choices"])
    assert "`hf`" in listed["generation.backend"]["doc"] and "`vllm`" in listed["generation.backend"]["doc"]


def test_a_registry_backed_key_takes_its_registered_names_as_choices_like_a_literal_field():
    keys = [
        KeyDoc("model.source", None, "str | null", "a registered model source"),
        KeyDoc("task.name", "arithmetic", "str", "a registered task"),
        KeyDoc("batch_size", 128, "int", "rollouts per step"),
    ]
    listed = with_choices(keys, {"model.source": ["embedded", "wheel", "directory"], "task.name": {"arithmetic"}})
    assert [(k.key, k.type, k.choices) for k in listed] == [
        ("model.source", "directory | embedded | wheel | null", ("directory", "embedded", "wheel")),  # null kept
        ("task.name", "arithmetic", ("arithmetic",)),
        ("batch_size", "int", ()),  # not registry-backed: as it was
    ]
    assert [k.doc for k in listed] == [k.doc for k in keys] and listed[0].default is None


def test_workbench_config_text_shows_resolved_values_and_what_changed(tmp_path):
    (tmp_path / "trial.yaml").write_text("batch_size: 64\n")
    proc = run_cli(
        [
            "config",
            "--config",
            "trial.yaml",
            "replay",
            "replay.ratio=2",
            "--set",
            "objective.eps_high=0.28",
            "objective.eps_high",
            "batch_size",
        ],
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "  replay.ratio = 2.0  (default 1.0)  [float]" in lines
    assert "  replay.capacity = 64  (default 128)  [int | null]" in lines  # resolved: the strategy's default, B
    assert "  objective.eps_high = 0.28  (default 0.2)  [float]" in lines
    assert "  batch_size = 64  (default 128)  [int]" in lines
    assert f"  replay.strategy = uniform  [{' | '.join(sorted(STRATEGIES))}]" in lines  # the registered strategies
    assert not any(line.startswith("  objective.eps_low") or line.startswith("  lr =") for line in lines)


def test_workbench_config_with_an_unknown_key_is_one_line(tmp_path):
    proc = run_cli(["config", "replay.ratoi"], cwd=tmp_path, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "workbench: error: replay.ratoi: unknown key (did you mean replay.ratio?)"
    ]


def test_workbench_config_study_lists_the_spec_keys(tmp_path):
    proc = run_cli(["config", "--study", "--json"], cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    listed = {row["key"]: row for row in json.loads(proc.stdout)}
    assert {"name", "seeds", "search_space.<name>.low", "search_space.<name>.choices", "n_trials"} <= set(listed)
    assert listed["name"]["default"] == "required" and listed["seeds"]["default"] == 1
    assert all(row["doc"] for row in listed.values()), [k for k, row in listed.items() if not row["doc"]]


def _helps(parser) -> list[str]:
    """The --help text of `parser` and of every subcommand under it."""
    out = [parser.format_help()]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                out += _helps(sub)
    return out


def test_no_printed_doc_cites_a_document_outside_the_repository():
    outside = re.compile(r"design(\.md)? §|replay-papers|issue \d+|\.\./shared")
    docs = [k.doc for k in trial_keys() + model_keys(StudySpec)] + list(section_docs(TrialConfig).values())
    helps = _helps(build_parser())
    assert len(helps) > 15  # workbench, its commands and the study subcommands
    for doc in docs + helps:
        assert not outside.search(doc), outside.search(doc).group(0)
