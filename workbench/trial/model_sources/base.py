"""What a model source is (`model.source`): where a trial's starting model comes from, one class registered by name.

A source checks the trial config (`validate`, run when the config is validated), gives the local directory that
holds the starting model (`checkpoint`: a user's directory as it is, the embedded checkpoint built once and cached,
a model unpacked once from a package) and loads it (`load`: `from_pretrained`, unless the source's files need
more). The policy (`workbench.trial.policy.Policy`) starts from `starting_checkpoint`, loaded by its source. The
built-in sources are `directory` and `embedded`; one from outside the package registers itself the same way,
before the config that names it is validated:

    @register_model_source("mine")
    class Mine(ModelSource):
        @classmethod
        def checkpoint(cls, cfg, task):
            return unpack_once(...)
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import torch

from workbench.config import ModelConfig, TrialConfig
from workbench.registry import MODEL_SOURCES
from workbench.trial.tasks import Task


class ModelSource:
    """A model source: subclass it, write `checkpoint` (and `validate`, `load` where needed), register it
    (`register_model_source("name")`)."""

    seeded: ClassVar[bool] = False
    """The model is built from `model.init_seed` (the embedded one), so replicates of it differ by that seed;
    otherwise every trial starts from the one fixed model."""

    @classmethod
    def validate(cls, cfg: TrialConfig) -> None:
        """Check the trial config for this source (raise ValueError("field: ...")); nothing by default."""

    @classmethod
    def checkpoint(cls, cfg: TrialConfig, task: Task) -> Path:
        """The local directory that holds the starting model of a trial of `cfg` on `task` (built or unpacked
        once, and cached, where the source's model is not a directory already)."""
        raise NotImplementedError(f"{cls.__name__}.checkpoint")

    @classmethod
    def load(cls, path: str | Path, device: torch.device, dtype: torch.dtype):
        """The causal LM and its tokenizer at `path` (what `checkpoint` gave), ready for sampling on `device`."""
        return load_policy(path, device, dtype)


register_model_source = MODEL_SOURCES.register
"""`@register_model_source("name")` on a `ModelSource` class: `model.source: name` then picks it."""


def model_source(cfg: ModelConfig) -> type[ModelSource]:
    """The source `cfg` names (`model.source`, or what `model.path` implies: `ModelConfig.source_name`)."""
    return MODEL_SOURCES.lookup(cfg.source_name)


def starting_checkpoint(cfg: TrialConfig, task: Task) -> Path:
    """The directory of the model a trial of `cfg` starts from, from its model source."""
    return Path(model_source(cfg.model).checkpoint(cfg, task))


def load_policy(path: str | Path, device: torch.device, dtype: torch.dtype):
    """`from_pretrained` a causal LM and its tokenizer from a local directory, ready for sampling."""
    from transformers import AutoModelForCausalLM, AutoTokenizer  # the model stack, loaded only to load a model

    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=dtype).to(device)
    return model, tokenizer
