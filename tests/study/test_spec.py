"""Study specs: every bad spec stops with one line naming its field; the shipped specs are valid."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.toy import TOY, toy_spec

from workbench.config import ConfigError
from workbench.study.spec import load_spec

STUDIES = Path(__file__).resolve().parents[2] / "studies"


@pytest.mark.parametrize(
    "change, field",
    [
        ({"bogus": 1}, "bogus: unknown key"),
        ({"search_space": {}}, "search_space:"),
        ({"search_space": {"replay.ratio": {"low": 4, "high": 2}}}, "search_space.replay.ratio.low: must be <= high"),
        ({"search_space": {"replay.ratio": {"choices": []}}}, "search_space.replay.ratio.choices"),
        ({"search_space": {"replay.nope": {"choices": [1]}}}, "search_space.replay.nope"),
        ({"search_space": {"replay.ratio": {"low": 0.5, "high": 2}}}, "search_space.replay.ratio"),
        ({"sampler": "annealing"}, "sampler: unknown 'annealing'"),
        ({"objective": "fastest"}, "objective: unknown 'fastest'"),
        ({"objective": ["best_accuracy", "loss"]}, "objective: unknown 'loss'"),
        ({"seeds": 0}, "seeds"),
        ({"target_accuracy": 1.5}, "target_accuracy"),
        ({"base": {"replay": {"capacity": 0}}}, "base.replay.capacity"),
        ({"sampler": "grid", "search_space": {"replay.ratio": {"low": 1, "high": 2}}}, "search_space: step"),
        (
            {"search_space": {"replay.dgg.tau": {"low": 0.1, "high": 1, "when": {"replay.strategy": "dgg"}}}},
            "search_space.replay.dgg.tau.when: 'replay.strategy' must be a knob listed before",
        ),
        (
            {
                "search_space": {
                    "replay.strategy": {"choices": ["uniform", "dgg"]},
                    "replay.dgg.tau": {"low": 0.1, "high": 1, "when": {"replay.strategy": "rlep"}},
                }
            },
            "search_space.replay.dgg.tau.when: replay.strategy never takes the value 'rlep'",
        ),
        (
            {
                "search_space": {"replay.strategy": {"choices": ["uniform", "dgg"]}},
                "points": [{"replay.strategy": "per"}],
            },
            "points[0].replay.strategy: 'per' is not among the choices",
        ),
        (
            {
                "search_space": {
                    "replay.strategy": {"choices": ["uniform", "dgg"]},
                    "replay.dgg.tau": {"low": 0.1, "high": 1, "when": {"replay.strategy": "dgg"}},
                },
                "points": [{"replay.strategy": "uniform", "replay.dgg.tau": 0.5}],
            },
            "points[0].replay.dgg.tau: inactive here",
        ),
        (
            {
                "search_space": {
                    "replay.strategy": {"choices": ["uniform", "dgg"]},
                    "replay.dgg.tau": {"low": 0.1, "high": 1, "when": {"replay.strategy": "dgg"}},
                },
                "points": [{"replay.strategy": "dgg"}],
            },
            "points[0]: missing knob replay.dgg.tau",
        ),
        (
            {
                "search_space": {"replay.strategy": {"choices": ["uniform", "prioritized"]}},
                "points": [{"replay.strategy": "prioritized"}],
                "base": {**{k: v for k, v in TOY.items() if k != "threads"}, "replay": {"ratio": 2}},
            },
            "search_space.replay.strategy: value 'prioritized' gives an invalid trial (replay.ratio: must be 1",
        ),
    ],
)
def test_bad_specs_name_their_field(tmp_path, change, field):
    path = toy_spec(tmp_path, **change)
    with pytest.raises(ConfigError) as err:
        load_spec(path)
    assert field in str(err.value) and "\n" not in str(err.value)


def test_shipped_specs_are_valid():
    names = sorted(p.stem for p in STUDIES.glob("*.yaml"))
    assert {"quickstart", "replay_grid_demo_hi", "paper_repro", "strategies_demo"} <= set(names)
    assert {"replay_grid", "strategies"} <= {p.stem for p in STUDIES.glob("archive/*.yaml")}
    for path in [*STUDIES.glob("*.yaml"), *STUDIES.glob("archive/*.yaml")]:
        if path.stem in NEEDS_A_MODEL:
            continue
        spec = load_spec(path)
        assert spec.name == path.stem


NEEDS_A_MODEL = {"real_smollm2"}
"""Specs whose model a command puts in place (`workbench fetch-model`): checked with a stand-in at that path."""


def test_the_real_model_spec_is_valid_with_a_model_at_its_path(tmp_path, monkeypatch):
    """`studies/real_smollm2.yaml` trains the directory `workbench fetch-model smollm2-135m-instruct` writes; with a
    locally built Llama (with a chat template) there, it loads: each arm at every lr of its sweep, greedy accuracy."""
    from workbench.trial.subword import build_model_dir
    from workbench.trial.tasks import write_sample_jsonl

    monkeypatch.chdir(tmp_path)
    write_sample_jsonl("sample.jsonl", n=100)
    build_model_dir("models/smollm2-135m-instruct", "sample.jsonl", vocab_size=300)
    spec = load_spec(STUDIES / "real_smollm2.yaml")
    assert spec.name == "real_smollm2" and spec.base["task"] == {
        "name": "word_problems", "difficulty": 1, "chat_template": True, "n_eval": 64
    }  # fmt: skip
    assert {p["lr"] for p in spec.points} == {1.25e-5, 2.5e-5, 5e-5} and spec.target_accuracy == 0.40
    assert spec.base["eval"]["metric"] == "accuracy" and spec.base["eval"]["pass_k_every"] is None


def test_gpu_spec_is_valid_with_its_model_and_data_in_place(tmp_path, monkeypatch):
    """`studies/gpu/gsm8k_first.yaml` (docs/gpu.md) names a downloaded model and GSM8K's file; with a locally built
    BPE Llama and a sample file at those paths it loads, and its points run replay with the chat template."""
    from workbench.trial.subword import build_model_dir
    from workbench.trial.tasks import write_sample_jsonl

    monkeypatch.chdir(tmp_path)
    write_sample_jsonl("data/gsm8k_train.jsonl", n=700)
    build_model_dir("models/Qwen2.5-0.5B-Instruct", "data/gsm8k_train.jsonl", vocab_size=300)
    spec = load_spec(STUDIES / "gpu" / "gsm8k_first.yaml")
    assert spec.name == "gsm8k_first" and spec.base["task"]["chat_template"] is True
    assert spec.base["generation"]["backend"] == "vllm"


def test_seeds_per_checkpoint_gives_each_block_of_seeds_its_own_warm_start(tmp_path):
    base = {**{k: v for k, v in TOY.items() if k != "threads"}, "model": {**TOY["model"], "init_seed": 10}}
    spec = load_spec(toy_spec(tmp_path, base=base, seeds=8, seeds_per_checkpoint=4))
    params = spec.baseline_params()
    assert [spec.trial_config(params, seed=s).model.init_seed for s in range(12)] == [10] * 4 + [11] * 4 + [12] * 4
    # without it every seed shares the base checkpoint, as before
    shared = load_spec(toy_spec(tmp_path, base=base, seeds=8))
    assert {shared.trial_config(params, seed=s).model.init_seed for s in range(8)} == {10}


def test_warm_starts_name_each_block_and_fresh_seeds_take_the_init_seeds_left_out(tmp_path):
    spec = load_spec(toy_spec(tmp_path, seeds=8, seeds_per_checkpoint=4, warm_starts=[0, 2]))
    params = spec.baseline_params()
    assert [spec.trial_config(params, seed=s).model.init_seed for s in range(16)] == [0] * 4 + [2] * 4 + [1] * 4 + [
        3
    ] * 4
    assert spec.checkpoint_of(16) == 4


def test_warm_starts_need_seeds_per_checkpoint_and_distinct_seeds(tmp_path):
    with pytest.raises(ConfigError, match="^warm_starts: .*seeds_per_checkpoint"):
        load_spec(toy_spec(tmp_path, seeds=4, warm_starts=[0, 2]))
    with pytest.raises(ConfigError, match="warm_starts"):
        load_spec(toy_spec(tmp_path, seeds=4, seeds_per_checkpoint=2, warm_starts=[2, 2]))


def test_seeds_per_checkpoint_refuses_a_fixed_model(tmp_path):
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    base = {**{k: v for k, v in TOY.items() if k != "threads"}, "model": {"path": str(model_dir)}}
    with pytest.raises(ConfigError, match="^seeds_per_checkpoint: .* base.model.source directory is a fixed model$"):
        load_spec(toy_spec(tmp_path, base=base, seeds_per_checkpoint=2))


@pytest.fixture
def fixed_and_seeded_sources():
    """Two model sources without `model.path`, registered for one test: one fixed model, one built from a seed."""
    from workbench.registry import MODEL_SOURCES
    from workbench.trial.model_sources import ModelSource

    class Packaged(ModelSource):  # a model shipped in a package: the same one for every seed
        pass

    class Grown(ModelSource):
        seeded = True

    MODEL_SOURCES.register("packaged_for_test")(Packaged)
    MODEL_SOURCES.register("grown_for_test")(Grown)
    yield
    MODEL_SOURCES.pop("packaged_for_test")
    MODEL_SOURCES.pop("grown_for_test")


def test_seeds_per_checkpoint_asks_the_model_source_not_model_path(tmp_path, fixed_and_seeded_sources):
    """Whether the model varies with `model.init_seed` is the source's `seeded`, whether or not `model.path` is set."""
    no_threads = {k: v for k, v in TOY.items() if k != "threads"}
    fixed = {**no_threads, "model": {**TOY["model"], "source": "packaged_for_test"}}
    with pytest.raises(ConfigError, match="base.model.source packaged_for_test is a fixed model$"):
        load_spec(toy_spec(tmp_path, base=fixed, seeds_per_checkpoint=2))
    grown = {**no_threads, "model": {**TOY["model"], "source": "grown_for_test"}}
    spec = load_spec(toy_spec(tmp_path, base=grown, seeds_per_checkpoint=2))
    assert [spec.trial_config(spec.baseline_params(), seed=s).model.init_seed for s in range(4)] == [0, 0, 1, 1]


def test_an_asynchronous_studys_on_policy_baseline_is_the_queue(tmp_path):
    """Asynchronously a uniform buffer of B rollouts replays at whatever ratio the split gives: on-policy there is the
    queue (each rollout trained once), so that is the baseline the study enqueues and pairs every arm with."""
    base = {**{k: v for k, v in TOY.items() if k != "threads"}, "pipeline": {"mode": "async"}}
    space = {"replay.strategy": {"choices": ["queue", "uniform"]}, "replay.capacity": {"choices": [16, 64]}}
    spec = load_spec(toy_spec(tmp_path, base=base, search_space=space))
    assert spec.baseline_params() == {"replay.strategy": "queue", "replay.capacity": TOY["batch_size"]}
    sync = load_spec(toy_spec(tmp_path, search_space=space))
    assert sync.baseline_params()["replay.strategy"] == "uniform"
