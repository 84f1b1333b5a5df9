"""Scoring without padding: a batch's tokens packed end to end through every matmul of a Llama-family model.

A GRPO batch's completions differ in length (23-31 tokens on the default task, 50-500 on GSM8K-style ones); a
padded `[rows, longest]` batch spends every projection, MLP and the LM head on its padding too (~20% of the
trained tokens on the default task, where the matmuls are 60% of a training step and already run at the machine's
GEMM ceiling). Here the model's own modules (norms, projections, MLP, rotary embedding, LM head) run on the packed
`[tokens, hidden]` rows, so a matmul computes only real tokens; only attention sees the rows' shape: each layer
scatters its queries, keys and values into `[rows, heads, width, head_dim]`, attends, and gathers the real tokens
back (`Layout`). Each distinct prompt runs once and its keys and values serve all its completions (a GRPO group),
as in `hf.score`'s shared-prompt path; a batch whose prompts do not repeat runs the same way with one prompt per row.

The values are the padded batch's: the same log-probs (tests/backends/test_packed.py: within 1e-5, losses and
gradients within 1e-6 of `hf.score`), so every objective's token-mean loss is unchanged. `supports` says which
models take this path (what the static decoder knows, without attention dropout in training);
`workbench.backends.scoring.score` routes the others to `hf.score`'s padded, length-bucketed path.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import torch
import torch.nn.functional as F

from workbench.backends.decode import compile_available, small_enough_to_copy
from workbench.backends.decode import supports as decodable
from workbench.backends.head import head_logprobs
from workbench.backends.hf import checkpointing, distinct_prompts


def supports(model) -> str | None:
    """Why `model` cannot be scored packed, or None when it can."""
    reason = decodable(model)
    if reason is not None:
        return reason
    if model.training and float(getattr(model.config, "attention_dropout", 0.0) or 0.0) > 0:
        return "attention dropout in training"
    if model.training and checkpointing(model):
        return "gradient checkpointing in training (the model's own layers recompute their activations)"
    return None


def compile_unavailable(device: torch.device) -> str | None:
    """Why the packed layer cannot be compiled on `device` (`train.compile`), or None when it can: inductor needs a
    C++ compiler on a CPU and triton on a GPU."""
    if device.type == "cuda":
        from torch.utils._triton import has_triton

        return None if has_triton() else "no triton (torch.compile's GPU kernels)"
    return compile_available()


@dataclass
class Layout:
    """Rows of different lengths packed end to end: `tokens` `[N]`, each token's `row` and `col` (its position in
    its row), and `flat`, its index in the padded `[rows * width]` layout."""

    tokens: torch.Tensor
    row: torch.Tensor
    col: torch.Tensor
    flat: torch.Tensor
    lengths: torch.Tensor
    rows: int
    width: int

    @classmethod
    def of(cls, seqs: list[list[int]], device) -> "Layout":
        lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long)
        rows, width = len(seqs), int(lengths.max())
        row = torch.repeat_interleave(torch.arange(rows), lengths)
        starts = torch.cumsum(lengths, 0) - lengths
        col = torch.arange(int(lengths.sum())) - starts[row]
        tokens = torch.tensor([t for s in seqs for t in s], dtype=torch.long)
        to = lambda x: x.to(device)  # noqa: E731
        return cls(to(tokens), to(row), to(col), to(row * width + col), to(lengths), rows, width)

    @property
    def dense(self) -> bool:
        """Every row has the full width: packing and padding are the same layout."""
        return self.tokens.numel() == self.rows * self.width

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        """`[N, ...]` packed -> `[rows, width, ...]`, zeros in the padding."""
        if not self.dense:
            x = x.new_zeros((self.rows * self.width, *x.shape[1:])).index_copy(0, self.flat, x)
        return x.reshape(self.rows, self.width, *x.shape[1:])

    def unpad(self, x: torch.Tensor) -> torch.Tensor:
        """`[rows, width, ...]` -> `[N, ...]`, the real tokens only."""
        x = x.reshape(self.rows * self.width, *x.shape[2:])
        return x if self.dense else x.index_select(0, self.flat)


def _norm(module, x: torch.Tensor) -> torch.Tensor:
    """The model's RMSNorm: torch's fused `rms_norm` for float32 (the same values, fewer kernels forward and
    backward), the module itself otherwise (it computes in float32 and casts back)."""
    eps = getattr(module, "variance_epsilon", None)
    if x.dtype == torch.float32 and eps is not None and module.weight.dtype == torch.float32:
        return F.rms_norm(x, (x.shape[-1],), module.weight, eps)
    return module(x)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


@dataclass
class Rope:
    """One call's rotary embedding of its tokens: `cos`, `sin` `[N, 1, head_dim]` as the model computes them and,
    where the model's two halves share their frequencies (every Llama-family RoPE), `turn` `[N, 1, head_dim / 2]`:
    the same rotation as one complex factor per pair (i, i + head_dim / 2). With the q and k projections' rows
    interleaved so that each pair is adjacent (`_rotated`), the rotation is one complex multiply forward and one
    backward, where `_rotate` runs five kernels each way. Scores are unchanged: q and k are permuted alike within
    each head, and q . k does not see the order of its terms."""

    cos: torch.Tensor
    sin: torch.Tensor
    turn: torch.Tensor | None

    @classmethod
    def of(cls, rotary_emb, x: torch.Tensor, positions: torch.Tensor, interleaved: bool) -> "Rope":
        cos, sin = (t[0, :, None, :] for t in rotary_emb(x, positions[None]))
        half = cos.shape[-1] // 2
        turn = None
        if interleaved and cos.dtype == torch.float32 and _halves_agree(cos, sin):
            turn = torch.complex(cos[..., :half].contiguous(), sin[..., :half].contiguous())
        return cls(cos, sin, turn)


def _halves_agree(cos: torch.Tensor, sin: torch.Tensor) -> bool:
    """Whether the pairs (i, i + head_dim / 2) turn by one angle (the rotation is then one complex factor)."""
    half = cos.shape[-1] // 2
    return torch.equal(cos[..., :half], cos[..., half:]) and torch.equal(sin[..., :half], sin[..., half:])


@cache
def _interleaved(heads: int, head_dim: int) -> torch.Tensor:
    """A q or k projection's rows with each head's pairs (i, i + head_dim / 2) adjacent."""
    half = head_dim // 2
    within = torch.stack([torch.arange(half), torch.arange(half) + half], 1).reshape(-1)
    return (torch.arange(heads)[:, None] * head_dim + within).reshape(-1)


def _rotated(proj, h: torch.Tensor, rope: Rope, head_dim: int) -> torch.Tensor:
    """q or k of packed tokens, rotated: `[N, heads, head_dim]`."""
    n, heads = h.shape[0], proj.out_features // head_dim
    if rope.turn is None:
        return _rotate(proj(h).view(n, heads, head_dim), rope.cos, rope.sin)
    order = _interleaved(heads, head_dim).to(h.device)
    y = F.linear(h, proj.weight.index_select(0, order), None if proj.bias is None else proj.bias.index_select(0, order))
    # complex multiply in fp32 (complex bf16 does not exist: a bf16 projection under autocast is turned in fp32)
    turned = torch.view_as_complex(y.float().view(n, heads, head_dim // 2, 2)) * rope.turn
    return torch.view_as_real(turned).view(n, heads, head_dim).to(y.dtype)


def _layer(layer, x: torch.Tensor, at: Layout, rope: Rope, prefix, mask):
    """One decoder layer on packed tokens `x` `[N, hidden]`; attention over `prefix` (per-row keys and values
    before these tokens, or None) and the rows' own tokens, under `mask` (None: causal). Returns the new hidden
    states and this layer's keys and values in the padded layout (what later tokens attend to; with `rope.turn`,
    each head's key dimensions in `_interleaved` order, as its queries')."""
    attn = layer.self_attn
    n, d = x.shape[0], attn.head_dim
    h = _norm(layer.input_layernorm, x)
    q, k = _rotated(attn.q_proj, h, rope, d), _rotated(attn.k_proj, h, rope, d)
    v = attn.v_proj(h).view(n, -1, d)
    q, k, v = (at.pad(t).transpose(1, 2) for t in (q, k, v))  # [rows, heads, width, head_dim]
    kk, vv = (k, v) if prefix is None else (torch.cat([prefix[0], k], 2), torch.cat([prefix[1], v], 2))
    out = F.scaled_dot_product_attention(
        q, kk, vv, attn_mask=mask, is_causal=mask is None, scale=attn.scaling, enable_gqa=q.shape[1] != kk.shape[1]
    )
    x = x + attn.o_proj(at.unpad(out.transpose(1, 2)).reshape(n, -1))
    x = x + layer.mlp(_norm(layer.post_attention_layernorm, x))
    return x, k, v


@cache
def _compiled_layer():
    """`_layer` under `torch.compile` (`train.compile`): inductor fuses each layer's elementwise work (RMSNorm,
    RoPE, SwiGLU, the residual adds, the packing's gathers) forward and backward, and sizes stay symbolic, so a
    process traces it once per kind of call (prompts, completions; ragged or dense rows), whatever the batch."""
    return torch.compile(_layer, dynamic=True)


def score_packed(
    model,
    prompt_ids: list[list[int]],
    completion_ids: list[list[int]],
    *,
    temperature: float,
    with_entropy: bool,
    compiled: bool = False,
    max_tokens: int | None = None,
):
    """`hf.score`'s result (`[n, T]` log-probs, `[n, T]` mask and, with `with_entropy`, the summed entropy) with
    every matmul on real tokens only. Gradients flow into the model's parameters as through its own forward.
    `compiled`: each layer runs compiled (`_compiled_layer`), rotating q and k the model's way (inductor generates
    no code for complex tensors, and fuses the real rotation anyway). `max_tokens`: without grad, the head's slice
    bound (`head.head_logprobs`)."""
    inner = model.model
    device = next(model.parameters()).device
    distinct, which_list = distinct_prompts(prompt_ids)
    prompts, comps = Layout.of(distinct, device), Layout.of(completion_ids, device)
    which = torch.tensor(which_list, device=device)
    # positions: a prompt's tokens from 0, its completions' tokens after the prompt's length
    xp, xc = inner.embed_tokens(prompts.tokens), inner.embed_tokens(comps.tokens)
    pos_c = prompts.lengths.index_select(0, which).index_select(0, comps.row) + comps.col
    complex_ok = not compiled and small_enough_to_copy(model)  # the permuted q/k weights copied at every call
    layer_fn = _compiled_layer() if compiled else _layer
    rope_p, rope_c = (
        Rope.of(inner.rotary_emb, xp, prompts.col, complex_ok),
        Rope.of(inner.rotary_emb, xc, pos_c, complex_ok),
    )
    # a completion token sees its prompt's real tokens and the completion's tokens up to itself
    seen_prompt = (torch.arange(prompts.width, device=device)[None, :] < prompts.lengths[:, None]).index_select(
        0, which
    )
    causal = torch.ones(comps.width, comps.width, dtype=torch.bool, device=device).tril()
    mask_c = torch.cat([seen_prompt[:, None, :].expand(-1, comps.width, -1), causal.expand(comps.rows, -1, -1)], -1)[
        :, None
    ]
    for layer in inner.layers:
        xp, kp, vp = layer_fn(layer, xp, prompts, rope_p, None, None)
        xc, _, _ = layer_fn(layer, xc, comps, rope_c, (kp.index_select(0, which), vp.index_select(0, which)), mask_c)
    # completion token j is predicted by the hidden state before it: its prompt's last token for j = 0
    last = xp.index_select(0, torch.cumsum(prompts.lengths, 0) - 1)  # [prompts, hidden]
    index = torch.arange(comps.tokens.numel(), device=device) - 1 + last.shape[0]
    index = torch.where(comps.col == 0, which.index_select(0, comps.row), index)
    hidden = _norm(inner.norm, torch.cat([last, xc]).index_select(0, index))
    token_logp, entropy = head_logprobs(model, hidden, comps.tokens, temperature, with_entropy, max_tokens)
    t_max = comps.width
    out = token_logp.new_zeros(comps.rows * t_max).index_copy(0, comps.flat, token_logp).view(comps.rows, t_max)
    mask = torch.arange(t_max, device=device)[None, :] < comps.lengths[:, None]
    if with_entropy:
        return out, mask, float(entropy.detach().double().sum())
    return out, mask
