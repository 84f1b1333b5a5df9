"""Adding a generation backend or a model source is one registered class, from outside the package:
`generation.backend` / `model.source` then name it in a config, the policy starts its engine and loads its model,
and an unknown name is one line naming the field and the closest registered name."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from workbench.backends import check_installed
from workbench.backends.base import GenerationBackend
from workbench.config import ConfigError, TrialConfig, build_config
from workbench.registry import GENERATION_BACKENDS, MODEL_SOURCES
from workbench.trial.checkpoint import SHIPPED
from workbench.trial.model_sources import ModelSource, model_source, starting_checkpoint
from workbench.trial.policy import Policy
from workbench.trial.rollouts import generate_groups
from workbench.trial.tasks import Task, load_task

TINY = sorted(SHIPPED.glob("tiny-llama-*"))[0]
"""A real HF directory: one of the embedded checkpoints shipped with the package."""


class RecordingEngine:
    """An engine beside the trainer that samples with the trainer's own decoder and holds weights of step 7."""

    def __init__(self, policy):
        self.policy, self.version, self.syncs, self.calls = policy, 7, 0, 0

    def sample(self, tokenizer, prompt_ids, *, max_new_tokens, temperature, generator=None):
        self.calls += 1
        return self.policy.sample(
            tokenizer, prompt_ids, max_new_tokens=max_new_tokens, temperature=temperature, generator=generator
        )

    def sync(self, model, version: int) -> None:
        self.version, self.syncs = version, self.syncs + 1


class Recording(GenerationBackend):
    """A backend from outside the package: it starts a `RecordingEngine` and refuses a cold temperature."""

    @classmethod
    def validate(cls, cfg: TrialConfig) -> None:
        if cfg.generation.temperature < 0.5:
            raise ValueError("generation.temperature: the recording backend samples at 0.5 or above")

    @classmethod
    def start(cls, cfg: TrialConfig, policy, task: Task) -> RecordingEngine:
        return RecordingEngine(policy)


class Missing(GenerationBackend):
    """A backend whose optional package this environment lacks."""

    package = "no_such_package_for_the_workbench"
    install = "pip install no-such-package"


class ShippedCopy(ModelSource):
    """A model source from outside the package: a fixed directory, loaded by the default `from_pretrained`."""

    loaded: list[Path] = []

    @classmethod
    def checkpoint(cls, cfg: TrialConfig, task: Task) -> Path:
        return TINY

    @classmethod
    def load(cls, path, device, dtype):
        cls.loaded.append(Path(path))
        return super().load(path, device, dtype)


@pytest.fixture
def registered():
    """The test's backends and source registered for one test (so other tests see the registries as shipped)."""
    GENERATION_BACKENDS.register("recording")(Recording)
    GENERATION_BACKENDS.register("missing")(Missing)
    MODEL_SOURCES.register("shipped_copy")(ShippedCopy)
    yield
    GENERATION_BACKENDS.pop("recording")
    GENERATION_BACKENDS.pop("missing")
    MODEL_SOURCES.pop("shipped_copy")
    ShippedCopy.loaded.clear()


def small(**sections) -> TrialConfig:
    base = {"batch_size": 8, "group_size": 4, "task": {"n_eval": 8}, "generation": {"decode": "hf"}}
    for key, value in sections.items():
        base[key] = {**base.get(key, {}), **value}
    return build_config(base)


def test_a_backend_and_a_source_registered_from_outside_are_named_by_a_config_and_used_by_the_policy(registered):
    cfg = small(generation={"backend": "recording"}, model={"source": "shipped_copy"})
    assert cfg.generation.backend == "recording" and cfg.model.source_name == "shipped_copy"
    assert model_source(cfg.model) is ShippedCopy
    task = load_task(cfg.task)
    assert starting_checkpoint(cfg, task) == TINY
    check_installed("recording")  # needs no package

    policy = Policy(cfg, task)
    assert ShippedCopy.loaded == [TINY] and policy.path == str(TINY)
    assert isinstance(policy.engine, RecordingEngine) and policy.engine.policy is policy
    rollouts, _ = generate_groups(
        policy, task, [0, 1], 4, step=9, generator=torch.Generator().manual_seed(0), first_uid=0
    )
    assert policy.engine.calls == 1 and len(rollouts) == 8
    assert {r.birth_step for r in rollouts} == {7}  # born at the engine's weights, not at the trainer's step
    assert all(r.trainer_logprobs is not None for r in rollouts)  # beside an engine the trainer scores them too


def test_the_built_in_names_and_an_unset_source_resolve_as_before():
    assert {"hf", "vllm"} <= set(GENERATION_BACKENDS) and {"directory", "embedded"} <= set(MODEL_SOURCES)
    cfg = small()
    assert cfg.model.source is None and cfg.model.source_name == "embedded"
    assert small(model={"path": str(TINY)}).model.source_name == "directory"
    task = load_task(cfg.task)
    assert starting_checkpoint(small(model={"path": str(TINY)}), task) == TINY
    policy = Policy(small(model={"path": str(TINY)}), task)
    assert policy.engine is None  # hf: the trainer's own decoder samples


@pytest.mark.parametrize(
    "sections, field, closest",
    [
        ({"generation": {"backend": "recordin"}}, "generation.backend", "'recording'"),
        ({"generation": {"backend": "vlm"}}, "generation.backend", "'vllm'"),
        ({"model": {"source": "shipped_cpy"}}, "model.source", "'shipped_copy'"),
        ({"model": {"source": "embeded"}}, "model.source", "'embedded'"),
    ],
)
def test_an_unknown_backend_or_source_is_one_line_naming_the_field_and_the_closest_name(
    registered, sections, field, closest
):
    with pytest.raises(ConfigError) as err:
        small(**sections)
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"{field}: unknown ") and f"(did you mean {closest}?)" in line


def test_a_backend_and_a_source_check_the_config_that_names_them(registered, tmp_path):
    with pytest.raises(ConfigError, match=r"^generation\.temperature: the recording backend samples at 0\.5"):
        small(generation={"backend": "recording", "temperature": 0.1})
    with pytest.raises(ConfigError, match=r"^model\.path: no model directory at "):
        small(model={"path": str(tmp_path / "absent")})
    with pytest.raises(ConfigError, match=r"^model\.path: required when model\.source is directory"):
        small(model={"source": "directory"})
    with pytest.raises(ConfigError, match=r"^task\.chat_template: needs model\.path"):
        small(task={"chat_template": True})
    with pytest.raises(ConfigError) as err:
        check_installed(small(generation={"backend": "missing"}).generation.backend)
    assert (
        str(err.value)
        == "generation.backend: missing is not installed in this environment (pip install no-such-package)"
    )
