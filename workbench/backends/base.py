"""What a generation backend is (`generation.backend`): one class, registered by name.

A backend says which optional package it needs (`package`, looked up before a study starts: `check_installed`)
and how to install it, may check the trial config (`validate`, run when the config is validated), and starts the
engine that samples the trial's rollouts (`start`). A backend whose engine is the trainer's own decoder (`hf`)
starts none. The built-in ones are `workbench.backends.hf.HfBackend` and `workbench.backends.vllm.VllmBackend`;
one from outside the package registers itself the same way, before the config that names it is validated:

    @register_backend("mine")
    class Mine(GenerationBackend):
        @classmethod
        def start(cls, cfg, policy, task):
            return MyEngine(policy.path, ...)
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

from workbench.config import TrialConfig
from workbench.registry import GENERATION_BACKENDS


class Engine(Protocol):
    """What samples a trial's rollouts beside the trainer: its own copy of the weights, loaded from the trainer's."""

    version: int
    """Optimizer step whose weights the engine holds (0: the checkpoint it was started from)."""
    syncs: int
    """Weight loads so far."""

    def sample(self, tokenizer, prompt_ids: list[list[int]], *, max_new_tokens: int, temperature: float, generator):
        """One completion per row, as `Samples` (`workbench.backends.hf`), with the engine's log-probs."""

    def sync(self, model, version: int) -> None:
        """Load the trainer's weights; rollouts are born at `version` from then on."""


class GenerationBackend:
    """A generation backend: subclass it, set what applies, and register it (`register_backend("name")`)."""

    package: ClassVar[str | None] = None
    """The optional package the backend needs (`None`: none beyond the workbench's own)."""
    install: ClassVar[str] = ""
    """How to install `package`, as the error of an environment without it says."""

    @classmethod
    def validate(cls, cfg: TrialConfig) -> None:
        """Check the trial config for this backend (raise ValueError("field: ...")); nothing by default."""

    @classmethod
    def start(cls, cfg: TrialConfig, policy: Any, task: Any) -> Engine | None:
        """The engine that samples the rollouts of a trial (`workbench.trial.policy.Policy` calls it once its model
        is loaded: `policy` holds the model, tokenizer, device, path and `encode`; `task` the prompts). `None`:
        the trainer's own decoder (`generation.decode`) samples them."""
        return None


register_backend = GENERATION_BACKENDS.register
"""`@register_backend("name")` on a `GenerationBackend` class: `generation.backend: name` then picks it."""
