"""Scoring without padding: a batch's tokens packed end to end through every matmul of a Llama-family model.

A GRPO batch's completions differ in length (23-31 tokens on the default task, 50-500 on GSM8K-style ones); a
padded `[rows, longest]` batch spends every projection, MLP and the LM head on its padding too (~20% of the
trained tokens on the default task, where the matmuls are 60% of a training step and already run at the machine's
GEMM ceiling). Here the model's own modules (norms, projections, MLP, rotary embedding, LM head) run on the packed
`[tokens, hidden]` rows, so a matmul computes only real tokens; only attention sees the rows' shape: each layer
scatters its queries, keys and values into `[rows, heads, width, head_dim]`, attends, and gathers the real tokens
back (`Layout`), the completions in groups of similar length, each at its own width (`attention_parts`). Each distinct prompt runs once and its keys and values serve all its completions (a GRPO group),
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


ATTENTION_OVERHEAD_PAIRS = 20_000
"""What one more attention call per layer costs (its launches, the padding and gathering around it), in
query-key pairs of a row: a batch's completions are split into groups of similar length only where the pairs their
own widths save are worth more than that (`attention_parts`)."""


@dataclass
class Part:
    """Rows that attend together, padded to their own longest: their tokens `[start, end)` of the packed call, laid
    out by `at`; for completions, each row's prompt (`which`, an index into the prompts' keys and values) and the
    mask over that prompt's keys then the row's own (None: causal over the row alone)."""

    at: Layout
    start: int
    end: int
    which: torch.Tensor | None = None
    mask: torch.Tensor | None = None


def attention_parts(
    seqs: list[list[int]], which: list[int], seen_prompt: torch.Tensor, device, overhead: float | None = None
) -> tuple[list[int], list[Part]]:
    """The completions `seqs` in groups of similar length, each attending at its own width (a padded batch
    attends every row over the longest one's queries and keys: at SmolLM2's B 128, completions of 20-96 tokens,
    most of the pairs), grouped where the query-key pairs saved outweigh `overhead` per group
    (`hf.length_buckets`). Returns the rows' order (each group's rows adjacent) and the groups, their tokens in
    that order."""
    prefix = seen_prompt.shape[1]
    overhead = ATTENTION_OVERHEAD_PAIRS if overhead is None else overhead
    groups = length_buckets(
        [len(s) for s in seqs], overhead, cost=lambda rows, longest: rows * longest * (prefix + longest)
    )
    order, parts, start = [i for g in groups for i in g], [], 0
    for g in groups:
        at = Layout.of([seqs[i] for i in g], device)
        rows = torch.tensor([which[i] for i in g], device=device)
        causal = torch.ones(at.width, at.width, dtype=torch.bool, device=device).tril()
        seen = seen_prompt.index_select(0, rows)[:, None, :].expand(-1, at.width, -1)
        mask = torch.cat([seen, causal.expand(at.rows, -1, -1)], -1)[:, None]
        end = start + int(at.tokens.numel())
        parts.append(Part(at, start, end, rows, mask))
        start = end
    return order, parts


def _project(layer, x: torch.Tensor, rope: Rope):
    """A layer's queries, keys and values of packed tokens `x` `[N, hidden]`: `[N, heads, head_dim]` each, q and k
    rotated."""
    attn = layer.self_attn
    n, d = x.shape[0], attn.head_dim
    h = _norm(layer.input_layernorm, x)
    return _rotated(attn.q_proj, h, rope, d), _rotated(attn.k_proj, h, rope, d), attn.v_proj(h).view(n, -1, d)


def _finish(layer, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
    """The rest of a layer after attention: the output projection, the residual, the MLP."""
    x = x + layer.self_attn.o_proj(attended)
    return x + layer.mlp(_norm(layer.post_attention_layernorm, x))


def _attend(attn, q, k, v, parts: list[Part], prefix):
    """Each part's queries over `prefix` (its rows' prompts' keys and values, or None) and the part's own tokens,
    back in packed order `[N, heads * head_dim]`; and the last part's keys and values padded `[rows, kv_heads,
    width, head_dim]` (a call of one part, the prompts: what completions attend to)."""
    outs = []
    sizes = [part.end - part.start for part in parts]  # one split each (one gradient concatenation backward, where
    # a slice per part would give each part's gradient back as a zero-filled tensor of the whole call)
    for part, *qkv in zip(parts, *(t.split(sizes) for t in (q, k, v))):
        qb, kb, vb = (part.at.pad(t).transpose(1, 2) for t in qkv)
        kk, vv = kb, vb
        if prefix is not None:
            kk = torch.cat([prefix[0].index_select(0, part.which), kb], 2)
            vv = torch.cat([prefix[1].index_select(0, part.which), vb], 2)
        out = F.scaled_dot_product_attention(
            qb,
            kk,
            vv,
            attn_mask=part.mask,
            is_causal=part.mask is None,
            scale=attn.scaling,
            enable_gqa=qb.shape[1] != kk.shape[1],
        )
        outs.append(part.at.unpad(out.transpose(1, 2)))
    out = outs[0] if len(outs) == 1 else torch.cat(outs)
    return out.reshape(q.shape[0], -1), kb, vb


def _layer(layer, x: torch.Tensor, parts: list[Part], rope: Rope, prefix, compiled: bool = False):
    """One decoder layer on packed tokens `x` `[N, hidden]`, attention by `parts` over `prefix` (`_attend`).
    Returns the new hidden states and the (last) part's keys and values, padded (with `rope.turn`, each head's key
    dimensions in `_interleaved` order, as its queries'). `compiled`: the work before and after attention runs
    compiled (`_compiled`), attention itself as it is (one kernel per part)."""
    project, finish = _compiled() if compiled else (_project, _finish)
    q, k, v = project(layer, x, rope)
    attended, kb, vb = _attend(layer.self_attn, q, k, v, parts, prefix)
    return finish(layer, x, attended), kb, vb


@cache
def _compiled():
    """`_project` and `_finish` under `torch.compile` (`train.compile`): inductor fuses each layer's elementwise
    work (RMSNorm, RoPE, SwiGLU, the residual adds) forward and backward, and sizes stay symbolic, so a process
    traces each once per kind of call, whatever the batch and however its completions are grouped."""
    return torch.compile(_project, dynamic=True), torch.compile(_finish, dynamic=True)


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
    every matmul on real tokens only, and the completions attending in groups of similar length (`attention_parts`).
    Gradients flow into the model's parameters as through its own forward. `compiled`: each layer's work around
    attention runs compiled (`_compiled`), rotating q and k the model's way (inductor generates no code for complex
    tensors, and fuses the real rotation anyway). `max_tokens`: without grad, the head's slice
    bound (`head.head_logprobs`)."""
    inner = model.model
    device = next(model.parameters()).device
    distinct, which_list = distinct_prompts(prompt_ids)
    prompts = Layout.of(distinct, device)
    # a completion token sees its prompt's real tokens and the completion's tokens up to itself
    seen_prompt = torch.arange(prompts.width, device=device)[None, :] < prompts.lengths[:, None]
    order, parts = attention_parts(completion_ids, which_list, seen_prompt, device)
    comps = Layout.of([completion_ids[i] for i in order], device)  # each attention group's rows adjacent
    which = torch.tensor([which_list[i] for i in order], device=device)
    # positions: a prompt's tokens from 0, its completions' tokens after the prompt's length
    xp, xc = inner.embed_tokens(prompts.tokens), inner.embed_tokens(comps.tokens)
    pos_c = prompts.lengths.index_select(0, which).index_select(0, comps.row) + comps.col
    complex_ok = not compiled and small_enough_to_copy(model)  # the permuted q/k weights copied at every call
    rope_p, rope_c = (
        Rope.of(inner.rotary_emb, xp, prompts.col, complex_ok),
        Rope.of(inner.rotary_emb, xc, pos_c, complex_ok),
    )
    whole = [Part(prompts, 0, int(prompts.tokens.numel()))]
    for layer in inner.layers:
        xp, kp, vp = _layer(layer, xp, whole, rope_p, None, compiled)
        xc, _, _ = _layer(layer, xc, parts, rope_c, (kp, vp), compiled)
    # completion token j is predicted by the hidden state before it: its prompt's last token for j = 0
    last = xp.index_select(0, torch.cumsum(prompts.lengths, 0) - 1)  # [prompts, hidden]
    index = torch.arange(comps.tokens.numel(), device=device) - 1 + last.shape[0]
    index = torch.where(comps.col == 0, which.index_select(0, comps.row), index)
    hidden = _norm(inner.norm, torch.cat([last, xc]).index_select(0, index))
    token_logp, entropy = head_logprobs(model, hidden, comps.tokens, temperature, with_entropy, max_tokens)
    t_max, rows = comps.width, comps.rows
    flat = torch.tensor(order, device=device).index_select(0, comps.row) * t_max + comps.col  # the callers' rows
    out = token_logp.new_zeros(rows * t_max).index_copy(0, flat, token_logp).view(rows, t_max)
    lengths = torch.tensor([len(c) for c in completion_ids], device=device)
    mask = torch.arange(t_max, device=device)[None, :] < lengths[:, None]
    if with_entropy:
        return out, mask, float(entropy.detach().double().sum())
    return out, mask
