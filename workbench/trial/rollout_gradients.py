"""Each rollout's own gradient of the trial's objective, CountSketch-compressed: what the probe measures.

A rollout's loss depends on the parameters only through its completion's log-probs, so its gradient is
J_iᵀ w_i, with w_i = dL_i/dlogp_i. `sketched_gradients` takes the two parts apart: the objective is differentiated
on each rollout's row of log-probs (no model involved), and the model's part, J_iᵀ w_i for a chunk of rollouts at
once, is one vectorised backward (`torch.func.vmap` over `torch.func.grad` of sum_t w_t logp_t). On the embedded
model a backward of one rollout is a few hundred operations on [~36, 128] tensors, so the per-rollout loop spent
its time on dispatch, not arithmetic; vectorised, the same operations run on [chunk, ~36, 128]
(docs/performance.md, "The probe's time").

The gradients run on one thread: operations this small gain nothing from a second one, and when another process
holds a core, every operation waits at OpenMP's barrier for the descheduled thread (measured 5-20x slower).

Models the packed scorer does not know (`packed.supports`), and models too large for a chunk of per-rollout
gradients in `CHUNK_BYTES`, take one forward and backward per rollout: the reference the vectorised path is tested
against (`vectorised=False`).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import fields
from typing import Callable, Iterator

import numpy as np
import torch
from torch.func import functional_call, grad, vmap

from workbench.backends import packed
from workbench.config import TrialConfig
from workbench.trial.objectives import OBJECTIVES, ObjectiveInput
from workbench.trial.policy import Policy
from workbench.trial.replay import Rollout
from workbench.trial.step import objective_input

CHUNK_MAX = 64
"""Rollouts per vectorised backward at most (the embedded model: 64 is ~2x faster per rollout than 16; more gains
little and holds more memory)."""
CHUNK_BYTES = 512 * 2**20
"""Memory for a chunk's per-rollout gradients (each the model's size, twice: the gradient and its signed copy)."""


def chunk_size(n_params: int, element_bytes: int = 4) -> int:
    """Rollouts per vectorised backward for a model of `n_params` parameters (1: one at a time)."""
    return int(max(1, min(CHUNK_MAX, CHUNK_BYTES // (2 * element_bytes * n_params))))


@contextmanager
def single_thread() -> Iterator[None]:
    """torch on one thread for the block, the caller's count restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


Sketch = tuple[torch.Tensor, torch.Tensor, int]
"""A CountSketch: each parameter's bucket and sign (`noise.count_sketch`, in `model.parameters()` order), and the
number of buckets k."""


def sketched_gradients(
    policy: Policy,
    rollouts: list[Rollout],
    cfg: TrialConfig,
    sketch: Sketch,
    on_done: Callable[[int], None] = lambda n: None,
    vectorised: bool = True,
) -> np.ndarray:
    """`[len(rollouts), k]`: each rollout's gradient of `cfg`'s objective at the current parameters, hashed by
    `sketch`. In eval mode, no random numbers drawn, the model left as found. `on_done(n)` after each n rollouts.
    `vectorised=False`: one forward and backward per rollout (the reference)."""
    model = policy.model
    params = [p for p in model.parameters() if p.requires_grad]
    chunk = chunk_size(sum(p.numel() for p in params), params[0].element_size())
    path = _vectorised if vectorised and chunk > 1 and packed.supports(model) is None else _one_by_one
    was_training = model.training
    model.eval()  # no dropout draws: the trial's random stream is the unprobed run's
    out = np.empty((len(rollouts), sketch[2]))
    try:
        with single_thread():
            for i in range(0, len(rollouts), chunk):
                piece = rollouts[i : i + chunk]
                out[i : i + len(piece)] = path(policy, piece, cfg, sketch)
                on_done(len(piece))
    finally:
        model.train(was_training)
    return out


def _correction_cap(cfg: TrialConfig) -> float | None:
    return cfg.generation.mismatch_cap if cfg.generation.mismatch_correction == "importance_sampling" else None


def _sketch(per_param: list[torch.Tensor], sketch: Sketch) -> np.ndarray:
    """Rows of per-parameter gradients `[n, *shape]` hashed into `[n, k]` (parameter by parameter: no concatenated
    copy of n model-sized rows)."""
    idx, sign, k = sketch
    n = per_param[0].shape[0]
    out = torch.zeros(n, k, dtype=per_param[0].dtype, device=per_param[0].device)
    at = 0
    for g in per_param:
        flat = g.reshape(n, -1)
        m = flat.shape[1]
        out.index_add_(1, idx[at : at + m], flat * sign[at : at + m])
        at += m
    return out.double().cpu().numpy()


def _one_by_one(policy: Policy, rollouts: list[Rollout], cfg: TrialConfig, sketch: Sketch) -> np.ndarray:
    """A forward and a backward of the objective per rollout."""
    params = [p for p in policy.model.parameters() if p.requires_grad]
    rows = []
    for r in rollouts:
        loss = OBJECTIVES[cfg.objective.name](objective_input(policy, [r], _correction_cap(cfg)), cfg.objective).loss
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        rows.append([(g if g is not None else torch.zeros_like(p))[None] for g, p in zip(grads, params)])
    return _sketch([torch.cat(col) for col in zip(*rows)], sketch)


def _token_weights(policy: Policy, rollouts: list[Rollout], cfg: TrialConfig) -> torch.Tensor:
    """`[n, T]` w_i = dL_i/dlogp_i: each rollout's objective (a batch of one) differentiated on its own log-probs,
    scored for the whole chunk at once without gradients into the model."""
    with torch.no_grad():
        inp = objective_input(policy, rollouts, _correction_cap(cfg))
    logprobs = inp.logprobs.detach().requires_grad_(True)
    objective = OBJECTIVES[cfg.objective.name]
    total = logprobs.new_zeros(())
    for i in range(len(rollouts)):
        row = {f.name: getattr(inp, f.name) for f in fields(ObjectiveInput)}
        row = {name: (v[i : i + 1] if isinstance(v, (torch.Tensor, list)) else v) for name, v in row.items()}
        row["logprobs"] = logprobs[i : i + 1]
        total = (
            total + objective(ObjectiveInput(**row), cfg.objective).loss
        )  # rows are independent: d(sum)/d row i = dL_i
    return torch.autograd.grad(total, logprobs)[0]


@contextmanager
def _eager_attention(model) -> Iterator[None]:
    """The model's own attention code for the block: its fused CPU attention kernel has no batching rule under
    vmap (torch falls back to a loop over the chunk, with a warning)."""
    before = model.config._attn_implementation
    if before == "eager":
        yield
        return
    model.set_attn_implementation("eager")
    try:
        yield
    finally:
        model.set_attn_implementation(before)


def _vectorised(policy: Policy, rollouts: list[Rollout], cfg: TrialConfig, sketch: Sketch) -> np.ndarray:
    """J_iᵀ w_i for the chunk in one vectorised backward."""
    model = policy.model
    w = _token_weights(policy, rollouts, cfg)
    # each rollout as one right-padded sequence (causal attention: the padding after it changes none of its
    # tokens), its completion token t predicted at position P - 1 + t
    width = max(len(r.prompt_ids) + len(r.completion_ids) for r in rollouts)
    ids = torch.full((len(rollouts), width), policy.pad_id, dtype=torch.long)
    weights = torch.zeros(len(rollouts), width - 1, dtype=w.dtype)
    for i, r in enumerate(rollouts):
        p, c = len(r.prompt_ids), len(r.completion_ids)
        ids[i, :p] = torch.as_tensor(r.prompt_ids)
        ids[i, p : p + c] = torch.as_tensor(r.completion_ids)
        weights[i, p - 1 : p - 1 + c] = w[i, :c].cpu()
    device = next(model.parameters()).device
    ids, weights = ids.to(device), weights.to(device)
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    params = {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}
    temperature = policy.temperature

    def weighted_logprob(theta: dict[str, torch.Tensor], seq: torch.Tensor, wt: torch.Tensor) -> torch.Tensor:
        logits = functional_call(model, theta, (seq[None],), {"use_cache": False}).logits[0, :-1].float() / temperature
        return (torch.log_softmax(logits, -1).gather(-1, seq[1:, None])[:, 0] * wt).sum()

    with _eager_attention(model):
        per_rollout = vmap(grad(weighted_logprob), in_dims=(None, 0, 0))(params, ids, weights)
    return _sketch([per_rollout[n] for n in names], sketch)
