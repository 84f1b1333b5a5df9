"""`model.source: directory`: a Hugging Face causal-LM directory at `model.path` (a downloaded model, or one
`workbench build-model` wrote: `workbench.trial.subword`), loaded with `from_pretrained` as it is."""

from __future__ import annotations

from pathlib import Path

from workbench.config import TrialConfig
from workbench.trial.model_sources.base import ModelSource, register_model_source
from workbench.trial.tasks import Task


@register_model_source("directory")
class Directory(ModelSource):
    """The model directory at `model.path` (the source an unset `model.source` means when `model.path` is set)."""

    @classmethod
    def validate(cls, cfg: TrialConfig) -> None:
        path = cfg.model.path
        if path is None:
            raise ValueError("model.path: required when model.source is directory (a HF causal-LM directory)")
        if not Path(path).expanduser().is_dir():
            raise ValueError(f"model.path: no model directory at {path}")

    @classmethod
    def checkpoint(cls, cfg: TrialConfig, task: Task) -> Path:
        return Path(cfg.model.path)
