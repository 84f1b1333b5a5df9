"""The LM head: per-token log-probs and entropies from final hidden states, in bounded memory without grad.

A scoring pass's largest tensor is its logits, `[tokens, vocab]` in float32: at Qwen's 151,936-token vocabulary,
1,024 tokens take 0.58 GiB, and the log-softmax and the entropy each want another tensor of that size (a whole
GRPO batch scored at once peaked at 3x its fp32 logits). With grad, the trainer's micro-batches bound it
(`train.micro_batch_size`). Without grad (the rollouts' rescoring, RLEP's, the proximal log-probs, the held-out
demonstrations' probability), `head_logprobs` runs the head over slices of tokens and computes each slice's
log-softmax in place, so a pass holds about two slices' logits at a time (`tests/backends/test_head.py` measures
the peak at a 150k vocabulary).

With grad and no entropy (the training step), a plain linear head (no bias, soft-cap or logit scale, autocast off)
runs as one autograd function (`TokenLogProb`): it keeps the logits alone for the backward and computes the
gradient over them in place, where autograd's chain (temper, log-softmax, gather) keeps two `[tokens, vocab]`
tensors and makes five more passes over that size (the gather's zero-filled gradient, the log-softmax's and the
division's backward).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable


def logits_fn(model) -> Callable[[torch.Tensor], torch.Tensor]:
    """Final hidden states `[N, hidden]` -> the model's logits `[N, vocab]`: its output embedding, then the final
    soft-capping (Gemma 2) or logit scale (Cohere) its config names, as its own forward applies them."""
    head = model.get_output_embeddings()
    cap = getattr(model.config, "final_logit_softcapping", None)
    scale = getattr(model.config, "logit_scale", None)

    def logits(h: torch.Tensor) -> torch.Tensor:
        out = head(h)
        if scale is not None:
            out = out * scale
        if cap:
            out = torch.tanh(out / cap) * cap
        return out

    return logits


def plain_head(model, hidden: torch.Tensor) -> torch.Tensor | None:
    """The head's `[vocab, hidden]` weight where the logits are `hidden @ weight.T` and nothing else (no bias, no
    soft-capping or logit scale, autocast off where `hidden` lives): what `TokenLogProb` computes. Else None."""
    head = model.get_output_embeddings()
    if not isinstance(head, torch.nn.Linear) or head.bias is not None:
        return None
    if getattr(model.config, "final_logit_softcapping", None) or getattr(model.config, "logit_scale", None) is not None:
        return None
    if torch.is_autocast_enabled(hidden.device.type):
        return None
    return head.weight


LSE_SLICE_BYTES = 16 * 2**20  # a slice `row_logsumexp` hands to torch.logsumexp (a remainder may add MIN_ROWS - 1)
MIN_ROWS = 8


def row_logsumexp(z: torch.Tensor) -> torch.Tensor:
    """Each row's log-sum-exp of `z` `[N, V]`, equal bit for bit to `torch.logsumexp(z, -1)`, in row slices of at
    most `LSE_SLICE_BYTES`. torch's kernel writes a shifted copy of its input: for a training step's logits (GBs)
    that copy is fresh memory, faulted in page by page, and took 4.8 s of a 47 s B 128 step of SmolLM2-135M; a
    slice's copy comes back from the allocator warm. Slices keep at least `MIN_ROWS` rows (with fewer, torch splits
    a row's sum between threads, and its last bits change)."""
    n, width = z.shape
    rows = max(MIN_ROWS, LSE_SLICE_BYTES // max(1, width * z.element_size()))
    if n <= rows:
        return torch.logsumexp(z, dim=-1)
    starts = list(range(0, n, rows))
    if n - starts[-1] < MIN_ROWS:
        starts.pop()  # a short remainder joins the slice before it
    out = z.new_empty(n)
    for a, b in zip(starts, starts[1:] + [n]):
        torch.logsumexp(z[a:b], dim=-1, out=out[a:b])
    return out


class TokenLogProb(torch.autograd.Function):
    """`log softmax(hidden @ weight.T / temperature)[target]` per row `[N]`, its gradient with respect to `hidden`
    and `weight` from the logits alone: d/dz_j = [j = target] - softmax_j (over the tempered logits z), times
    1/temperature. The forward keeps the float32 logits (tempered in place) and their log-sum-exp; the backward turns
    them into the gradient in place (so it runs once: `once_differentiable`) and ends in the head's two GEMMs. The
    same values as autograd's chain up to float rounding (tests/backends/test_head.py)."""

    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, temperature: float):
        z = F.linear(hidden, weight)
        z = z.float() if z.dtype != torch.float32 else z
        if temperature != 1.0:
            z.div_(temperature)
        lse = row_logsumexp(z)
        token = z.gather(-1, targets[:, None]).squeeze(-1) - lse
        ctx.save_for_backward(hidden, weight, targets, z, lse)
        ctx.temperature = temperature
        return token

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):
        hidden, weight, targets, z, lse = ctx.saved_tensors
        g = grad.float() / ctx.temperature
        dz = z.sub_(lse[:, None]).exp_().mul_(-g[:, None])  # -g p_j, in place over the saved logits
        dz.scatter_add_(1, targets[:, None], g[:, None])  # + g at the target
        dz = dz.to(hidden.dtype)
        grad_hidden = dz @ weight if ctx.needs_input_grad[0] else None
        grad_weight = dz.t() @ hidden if ctx.needs_input_grad[1] else None
        return grad_hidden, grad_weight, None, None


def tokens_per_slice(scoring_mib: float, vocab: int) -> int:
    """Tokens whose fp32 logits take `scoring_mib` MiB (at least 1): one no-grad scoring micro-batch."""
    return max(1, int(scoring_mib * 2**20 // (4 * vocab)))


def head_logprobs(
    model,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    with_entropy: bool,
    max_tokens: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-prob `[N]` of each target token under the tempered head at `hidden` `[N, hidden]`, and each position's
    entropy `[N]` with `with_entropy`. With grad (or without `max_tokens`): one pass. Without grad: slices of at
    most `max_tokens // 2` tokens, each tempered and normalised in place, so the pass never holds more than about
    `max_tokens` tokens' fp32 logits."""
    logits_of = logits_fn(model)
    if torch.is_grad_enabled():
        weight = None if with_entropy else plain_head(model, hidden)
        if weight is not None:
            return TokenLogProb.apply(hidden, weight, targets, float(temperature)), None
        logp = F.log_softmax(logits_of(hidden).float() / temperature, dim=-1)
        token = logp.gather(-1, targets[:, None]).squeeze(-1)
        return token, (-(logp.exp() * logp).sum(-1) if with_entropy else None)
    n = hidden.shape[0]
    size = max(1, n if max_tokens is None else max_tokens // 2)
    parts = [
        _in_place(logits_of, hidden[i : i + size], targets[i : i + size], temperature, with_entropy)
        for i in (range(0, n, size) if n else [0])
    ]
    if len(parts) == 1:
        return parts[0]
    token = torch.cat([t for t, _ in parts])
    return token, (torch.cat([e for _, e in parts]) if with_entropy else None)


def _in_place(logits_of, hidden: torch.Tensor, targets: torch.Tensor, temperature: float, with_entropy: bool):
    """One slice without grad: its logits made float32 once, then tempered, normalised and read in place (two
    `[tokens, vocab]` tensors at most: the logits and one temporary)."""
    logits = logits_of(hidden)
    logits = logits.float() if logits.dtype != torch.float32 else logits
    if temperature != 1.0:
        logits.div_(temperature)
    logits.sub_(logits.amax(dim=-1, keepdim=True))  # log-sum-exp, shifted by each row's max, as torch's
    logits.sub_(torch.exp(logits).sum(dim=-1, keepdim=True).log_())  # log p, in place
    token = logits.gather(-1, targets[:, None]).squeeze(-1)
    entropy = None
    if with_entropy:
        p = logits.exp()
        entropy = -p.mul_(logits).sum(-1)
    return token, entropy
