"""The policy of a trial: a HF causal LM and its tokenizer, loaded with `from_pretrained`, and how it samples.

Where the model comes from is its model source (`model.source`, `workbench.trial.model_sources`): any local HF
directory at `model.path`, or without one the embedded tiny Llama, built once and loaded the same way
(`workbench.trial.checkpoint`). What samples the rollouts is the generation backend (`generation.backend`,
`workbench.backends.base`): the trainer's own decoder (`hf`), or an engine the backend starts beside the trainer
(`vllm`: a colocated vLLM engine samples while the trainer scores and trains the transformers model).
"""

from __future__ import annotations

import torch

from workbench.backends.allocator import keep_freed_memory
from workbench.backends import packed
from workbench.backends.decode import make_sampler, use_compile_cache
from workbench.backends.hf import encode_prompts
from workbench.config import ConfigError, TrialConfig
from workbench.cache import cache_root
from workbench.registry import GENERATION_BACKENDS
from workbench.trial.model_sources import load_policy, model_source
from workbench.trial.tasks import Task

__all__ = ["Policy", "autocast_on", "count_parameters", "load_policy", "resolve_device", "resolve_dtype"]


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def resolve_dtype(name: str) -> torch.dtype:
    """The trainer's weights: `auto` is float32 on every device (`model.dtype`: bf16 weights would round Adam's
    updates away; on a GPU the matmuls run in bf16 through `train.autocast`)."""
    return torch.float32 if name == "auto" else getattr(torch, name)


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())


def autocast_on(device: torch.device, model, setting: str) -> bool:
    """Whether the trainer runs under bf16 autocast (`train.autocast`): `bfloat16`, or `auto` on a CUDA device that
    supports it over float32 weights."""
    weights = next(model.parameters()).dtype
    return setting == "bfloat16" or (
        setting == "auto" and device.type == "cuda" and weights == torch.float32 and torch.cuda.is_bf16_supported()
    )


class Policy:
    """The model, its tokenizer and the sampling settings of a trial."""

    def __init__(self, cfg: TrialConfig, task: Task):
        keep_freed_memory()  # this process trains or samples from here on (the warm start included)
        device = resolve_device(cfg.model.device)
        if device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = True  # fp32 matmuls outside autocast (sampling, scoring,
            torch.backends.cudnn.allow_tf32 = True  # evaluation) on the tensor cores, as every GPU trainer runs them
        source = model_source(cfg.model)
        path = source.checkpoint(cfg, task)
        self.model, self.tokenizer = source.load(path, device, resolve_dtype(cfg.model.dtype))
        self.device, self.path = device, str(path)
        self.chat = cfg.task.chat_template
        """Prompts are framed by the tokenizer's chat template (`task.chat_template`)."""
        if self.chat and not getattr(self.tokenizer, "chat_template", None):
            raise ConfigError(f"task.chat_template: the tokenizer in {path} has no chat template")
        if cfg.train.gradient_checkpointing:
            if hasattr(self.model, "activation_checkpointing_enable"):  # transformers >= 5.2x's name
                self.model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
            else:
                self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.compile_training = cfg.train.compile
        """The training step's packed layers run compiled (`train.compile`)."""
        if cfg.train.compile:
            was_training = self.model.training
            self.model.train()  # what training scores in (`packed.supports` looks at training-only settings)
            reason = packed.supports(self.model) or packed.compile_unavailable(device)
            self.model.train(was_training)
            if reason is not None:
                raise ConfigError(f"train.compile: {reason}")
            use_compile_cache(cache_root(cfg.model))
        self.max_new_tokens = cfg.generation.max_new_tokens or task.max_new_tokens
        self.temperature = cfg.generation.temperature
        self.pad_id = self.tokenizer.pad_token_id
        self.scoring_mib = cfg.train.scoring_mib  # no-grad scoring's logits bound
        self.sample = make_sampler(self.model, cfg.generation.decode, cache_root(cfg.model))
        """The trainer-side decoder (`generation.decode`): `sample(tokenizer, prompt_ids, *, max_new_tokens,
        temperature, greedy, generator) -> Samples`, used for hf-backend rollouts and for evaluation."""
        compiled_decode = bool(getattr(getattr(self.sample, "__self__", None), "compiled", False))
        self.generation_autocast = autocast_on(device, self.model, cfg.train.autocast) and (
            device.type == "cuda" or not compiled_decode
        )
        """Sampling, no-grad scoring and evaluation run in the trainer's precision (bf16 autocast): mu is measured
        in the precision the user trains with. On a GPU with `train.autocast` auto or bfloat16; on a CPU only with
        `train.autocast: bfloat16` (`auto` is off there: the embedded model's step was measured no faster) and an
        eager decoder (`static` or `hf`: the compiled decode step is built for float32). On this project's CPU
        (AVX512-BF16) bf16 decodes SmolLM2-135M's 100 held-out problems greedily in 17 s against 34 s in float32
        (`benchmarks/real_model_decode.py`)."""
        self.engine = GENERATION_BACKENDS.lookup(cfg.generation.backend).start(cfg, self, task)
        """The engine that samples the rollouts, as the generation backend started it (`vllm`: a colocated vLLM
        engine); `None` where the trainer's own decoder samples them with `self.model` (`hf`)."""

    def precision(self):
        """The context of this policy's sampling, no-grad scoring and evaluation (`generation_autocast`)."""
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16, enabled=self.generation_autocast)

    def encode(self, prompts: list[str]) -> list[list[int]]:
        """Token ids of prompts as this policy reads them (its tokenizer's framing, or its chat template)."""
        return encode_prompts(self.tokenizer, prompts, chat=self.chat)
