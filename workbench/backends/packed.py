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
from workbench.backends.hf import checkpointing, distinct_prompts, length_buckets


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
        layout = cls.of_lengths([len(s) for s in seqs], device)
        layout.tokens = torch.tensor([t for s in seqs for t in s], dtype=torch.long, device=device)
        return layout

    @classmethod
    def of_lengths(cls, lengths: list[int], device) -> "Layout":
        """The layout of rows of these lengths (`tokens` left empty)."""
        sizes = torch.tensor(lengths, dtype=torch.long)
        rows, width = len(lengths), int(sizes.max())
        row = torch.repeat_interleave(torch.arange(rows), sizes)
        starts = torch.cumsum(sizes, 0) - sizes
        col = torch.arange(int(sizes.sum())) - starts[row]
        to = lambda x: x.to(device)  # noqa: E731
        return cls(
            torch.empty(0, dtype=torch.long, device=device),
            to(row),
            to(col),
            to(row * width + col),
            to(sizes),
            rows,
            width,
        )

    @property
    def dense(self) -> bool:
        """Every row has the full width: packing and padding are the same layout."""
        return self.flat.numel() == self.rows * self.width

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


@dataclass
class Bucket:
    """Completions of similar length attended together, padded only to their own longest: `tokens` (their tokens'
    indices in the packed order, row by row), `layout` (the bucket's own padded layout of those tokens), `prompts`
    (each row's prompt among the distinct prompts) and `mask` (what each token sees: its prompt's real tokens, then
    its own row up to itself)."""

    tokens: torch.Tensor
    layout: Layout
    prompts: torch.Tensor
    mask: torch.Tensor


BUCKET_CALL_FLOPS = 10e6
"""What one more attention bucket costs, in the FLOPs of attention it could have computed instead: its ~30 more
operators forward and backward (gathers, padding, the call; ~0.4 ms on 2 CPU cores, where attention runs at ~25
GFLOP/s). Against it, a padded query token costs ~6 x heads x head_dim x the keys it sees: SmolLM2-135M's
completions split where ~10 padded tokens can go, the embedded model's only where hundreds can."""


def completion_buckets(
    comps: Layout, which: torch.Tensor, seen_prompt: torch.Tensor, heads: int, head_dim: int
) -> list[Bucket] | None:
    """The completions split into buckets of similar length (`hf.length_buckets`) where the padding removed is worth
    more than the calls added (`BUCKET_CALL_FLOPS`), or None where one bucket would hold them all (attention then
    runs on the padded batch). Each bucket attends at its own longest row: the same values."""
    lengths = comps.lengths.tolist()
    keys = seen_prompt.shape[1] + sum(lengths) / len(lengths)  # what a query sees, on average
    groups = length_buckets(lengths, overhead=BUCKET_CALL_FLOPS / (6 * heads * head_dim * keys))
    if len(groups) < 2:
        return None
    device = comps.tokens.device
    starts = [0]
    for n in lengths[:-1]:
        starts.append(starts[-1] + n)
    buckets = []
    for group in groups:
        tokens = torch.cat([torch.arange(starts[r], starts[r] + lengths[r]) for r in group])
        layout = Layout.of_lengths([lengths[r] for r in group], device)
        prompts = which.index_select(0, torch.tensor(group, dtype=torch.long, device=device))
        width = layout.width
        causal = torch.ones(width, width, dtype=torch.bool, device=device).tril()
        seen = seen_prompt.index_select(0, prompts)
        mask = torch.cat([seen[:, None, :].expand(-1, width, -1), causal.expand(len(group), -1, -1)], -1)[:, None]
        buckets.append(Bucket(tokens.to(device), layout, prompts, mask))
    return buckets


def _attend_buckets(q, k, v, buckets: list[Bucket], prefix, scale: float) -> torch.Tensor:
    """Attention of packed completion tokens (`[N, heads, head_dim]` each) bucket by bucket, over each row's prompt
    keys and values (`prefix`, one per distinct prompt) and its own: the packed `[N, heads, head_dim]` outputs.
    Always eager: the number of buckets changes from call to call, which a compiled graph would be traced for."""
    pieces = []
    for b in buckets:
        qb, kb, vb = (b.layout.pad(t.index_select(0, b.tokens)).transpose(1, 2) for t in (q, k, v))
        kk = torch.cat([prefix[0].index_select(0, b.prompts), kb], 2)
        vv = torch.cat([prefix[1].index_select(0, b.prompts), vb], 2)
        out = F.scaled_dot_product_attention(
            qb, kk, vv, attn_mask=b.mask, scale=scale, enable_gqa=qb.shape[1] != kk.shape[1]
        )
        pieces.append(b.layout.unpad(out.transpose(1, 2)))
    order = torch.cat([b.tokens for b in buckets])
    back = torch.empty_like(order)
    back[order] = torch.arange(order.numel(), device=order.device)
    return torch.cat(pieces).index_select(0, back)


def _projected(layer, x: torch.Tensor, rope: Rope):
    """A layer's normed input's q, k (rotated) and v, `[N, heads, head_dim]` each."""
    attn = layer.self_attn
    n, d = x.shape[0], attn.head_dim
    h = _norm(layer.input_layernorm, x)
    return _rotated(attn.q_proj, h, rope, d), _rotated(attn.k_proj, h, rope, d), attn.v_proj(h).view(n, -1, d)


def _rest(layer, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """A layer after its attention (`out`, packed `[N, heads, head_dim]`): the output projection, the MLP, the two
    residual adds."""
    x = x + layer.self_attn.o_proj(out.reshape(x.shape[0], -1))
    return x + layer.mlp(_norm(layer.post_attention_layernorm, x))


def _layer(layer, x: torch.Tensor, at: Layout, rope: Rope, prefix, mask):
    """One decoder layer on packed tokens `x` `[N, hidden]`; attention over `prefix` (per-row keys and values
    before these tokens, or None) and the rows' own tokens, under `mask` (None: causal). Returns the new hidden
    states and this layer's keys and values in the padded layout (what later tokens attend to; with `rope.turn`,
    each head's key dimensions in `_interleaved` order, as its queries')."""
    attn = layer.self_attn
    q, k, v = (at.pad(t).transpose(1, 2) for t in _projected(layer, x, rope))  # [rows, heads, width, head_dim]
    kk, vv = (k, v) if prefix is None else (torch.cat([prefix[0], k], 2), torch.cat([prefix[1], v], 2))
    out = F.scaled_dot_product_attention(
        q, kk, vv, attn_mask=mask, is_causal=mask is None, scale=attn.scaling, enable_gqa=q.shape[1] != kk.shape[1]
    )
    return _rest(layer, x, at.unpad(out.transpose(1, 2))), k, v


def _bucketed_layer(layer, x: torch.Tensor, buckets: list[Bucket], rope: Rope, prefix, compiled: bool) -> torch.Tensor:
    """`_layer` for completions attended bucket by bucket (`completion_buckets`): `prefix` holds one entry per
    distinct prompt, each bucket its own mask; no keys or values come back (nothing attends to a completion's).
    `compiled`: the projections before attention and the rest of the layer after it run compiled, the attention
    between them eagerly."""
    projected, rest = _compiled_parts() if compiled else (_projected, _rest)
    q, k, v = projected(layer, x, rope)
    return rest(layer, x, _attend_buckets(q, k, v, buckets, prefix, layer.self_attn.scaling))


@cache
def _compiled_layer():
    """`_layer` under `torch.compile` (`train.compile`): inductor fuses each layer's elementwise work (RMSNorm,
    RoPE, SwiGLU, the residual adds, the packing's gathers) forward and backward, and sizes stay symbolic, so a
    process traces it once per kind of call (prompts, completions; ragged or dense rows), whatever the batch."""
    return torch.compile(_layer, dynamic=True)


@cache
def _compiled_parts():
    """`_projected` and `_rest` under `torch.compile`, for `_bucketed_layer`."""
    return torch.compile(_projected, dynamic=True), torch.compile(_rest, dynamic=True)


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
    seen_prompt = torch.arange(prompts.width, device=device)[None, :] < prompts.lengths[:, None]  # [prompts, width]
    attn = inner.layers[0].self_attn
    buckets = completion_buckets(comps, which, seen_prompt, model.config.num_attention_heads, attn.head_dim)
    if buckets is None:
        causal = torch.ones(comps.width, comps.width, dtype=torch.bool, device=device).tril()
        seen = seen_prompt.index_select(0, which)
        mask_c = torch.cat([seen[:, None, :].expand(-1, comps.width, -1), causal.expand(comps.rows, -1, -1)], -1)[
            :, None
        ]
    for layer in inner.layers:
        xp, kp, vp = layer_fn(layer, xp, prompts, rope_p, None, None)
        if buckets is None:
            prefix = (kp.index_select(0, which), vp.index_select(0, which))
            xc, _, _ = layer_fn(layer, xc, comps, rope_c, prefix, mask_c)
        else:
            xc = _bucketed_layer(layer, xc, buckets, rope_c, (kp, vp), compiled)
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
