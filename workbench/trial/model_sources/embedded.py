"""`model.source: embedded`: the tiny Llama with a character tokenizer and a supervised warm start on the task,
shipped for the built-in tasks at their defaults (`workbench/trial/embedded/`) and otherwise built once and cached
(`workbench.trial.checkpoint`)."""

from __future__ import annotations

from pathlib import Path

from workbench.config import TrialConfig
from workbench.trial.model_sources.base import ModelSource, register_model_source
from workbench.trial.tasks import Task


@register_model_source("embedded")
class Embedded(ModelSource):
    """The embedded tiny Llama of `model.hidden_size` ... `model.init_seed`, warm-started on the task (the source
    an unset `model.source` means when `model.path` is unset)."""

    seeded = True

    @classmethod
    def validate(cls, cfg: TrialConfig) -> None:
        if cfg.model.path is not None:
            raise ValueError("model.path: must be null for model.source embedded (the tiny Llama is built, not read)")
        if cfg.task.chat_template:
            raise ValueError(
                "task.chat_template: needs model.path (the embedded model's character tokenizer has no chat template)"
            )

    @classmethod
    def checkpoint(cls, cfg: TrialConfig, task: Task) -> Path:
        # transformers and the warm start: loaded when a trial starts, not when its config is validated
        from workbench.trial.checkpoint import ensure_embedded_checkpoint

        return ensure_embedded_checkpoint(cfg.model, cfg.task, task)
