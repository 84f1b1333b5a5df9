"""Static-shape decoding for Llama-family models: preallocated KV buffers and one decode step, eager or compiled.

The transformers decode loop (`hf.sample`) spends most of a token on launching ~100 small operators, growing its
KV cache by concatenation and building attention masks. Here the prompt is prefilled by the model's own forward,
its keys and values are copied into buffers sized once per call (rounded up, so every call of a trial has the same
shapes), and each new token runs one function of the model's weights: RMSNorm, fused q/k/v, RoPE from the
model's own rotary embedding, attention over the buffer, fused gate/up, and then the sampling itself (tempered
log-softmax, the inverse-transform choice from one uniform number a row, drawn outside with the trial's generator,
the chosen token's log-prob, the entropy). Compiled, that function is built ahead of time into an AOTInductor
package (`aot`) with the rows and the buffer length left symbolic: one package per model and sampling rule (greedy
or sampled), built once per machine into the workbench's cache directory and loaded by every later process in
milliseconds.

Where the rows are groups of one prompt each (a GRPO batch), the prompts' keys and values are held once per prompt
and attended by each group's rows together (`SharedPrompts`); the buffers then hold the generated tokens only.

Supported: the `llama`, `mistral` and `qwen2` model types with SiLU MLPs (what `supports` checks); anything else
decodes with `hf.sample`. The result is the same `Samples`, token for token (tests/backends/test_decode.py checks
greedy tokens and log-probs against `hf.sample` within 1e-5, and the same draws for the same generator).
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import math
import os
import shutil
from dataclasses import asdict, dataclass
from functools import cache, partial
from pathlib import Path

import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree

from workbench import faults
from workbench import progress
from workbench.backends import aot
from workbench.backends.hf import Samples, assemble, distinct_prompts, left_pad, pick, uniform_noise
from workbench.cache import cache_root
from workbench.config import ConfigError

log = logging.getLogger(__name__)

SUPPORTED_TYPES = ("llama", "mistral", "qwen2")
FUSE_MAX_PARAMETERS = 100_000_000
"""Up to this size the q/k/v and gate/up weights are concatenated once per call (fewer, larger matmuls); larger
models use their projections as they are, so decoding never holds a second copy of big weights."""
LENGTH_BUCKET = 16
"""Buffer lengths are rounded up to a multiple of this (the compiled step's buffer length is symbolic in these
buckets)."""
MAX_ROWS, MAX_BUCKETS, MAX_STEPS = 1 << 16, 1 << 12, 1 << 16
"""The ranges the compiled step accepts (rows and tokens to generate from 2; fewer decode eagerly)."""
COMPILE_TYPICAL = "0.5-2 min on 2 cores, longer beside other work"
"""What a decode step's compile takes, said before it starts. Measured for the embedded model on 2-core EPYCs:
73 s then 27 s for its two steps (the second reuses inductor's caches), 77-122 s each beside other jobs."""


def small_enough_to_copy(model) -> bool:
    """Whether `model` is small enough (`FUSE_MAX_PARAMETERS`) for copies of its weights made at every call: the
    decoder's fused q/k/v and gate/up, training's interleaved q/k rows (`packed.Rope`)."""
    return sum(p.numel() for p in model.parameters()) <= FUSE_MAX_PARAMETERS


def supports(model) -> str | None:
    """Why `model` cannot use the static decoder, or None when it can."""
    cfg = getattr(model, "config", None)
    if getattr(cfg, "model_type", None) not in SUPPORTED_TYPES:
        return f"model type {getattr(cfg, 'model_type', None)!r} (static decoding knows {', '.join(SUPPORTED_TYPES)})"
    if getattr(cfg, "hidden_act", "silu") != "silu":
        return f"activation {cfg.hidden_act!r}"
    if getattr(cfg, "use_sliding_window", False) and getattr(cfg, "sliding_window", None):
        return "sliding-window attention"
    if getattr(cfg, "mlp_bias", False):
        return "MLP biases"
    return None


def compile_available() -> str | None:
    """Why the decode step cannot be compiled here, or None: AOTInductor on CPU needs a C++ compiler."""
    reason = aot.available()
    if reason is not None:
        return reason
    if (
        not torch.cuda.is_available()
        and shutil.which(os.environ.get("CXX", "c++")) is None
        and shutil.which("g++") is None
    ):
        return "no C++ compiler on PATH (inductor needs one on CPU)"
    return None


def on_accelerator(model) -> str | None:
    """Why `auto` does not compile the decode step for a model off the CPU, or None on the CPU. The ahead-of-time
    compile is built and measured for the CPU only: on an H200 (torch 2.11, CUDA 13) it crashed the process with a
    segmentation fault after ~70 s, while the same static decoder run eagerly worked."""
    device = next(model.parameters()).device
    return None if device.type == "cpu" else f"the ahead-of-time compile is for the CPU; the model is on {device.type}"


def use_compile_cache(cache_dir: Path) -> None:
    """Keep inductor's own compile caches under the workbench cache (unless the user chose a place)."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_dir / "inductor"))


@dataclass(frozen=True)
class Shape:
    """What a compiled step is specialised on besides tensor shapes: the model's geometry and the sampling rule."""

    heads: int
    kv_heads: int
    head_dim: int
    inter: int
    eps: float
    scaling: float
    greedy: bool
    pad_id: int
    eos_id: int
    fused: bool
    qkv_bias: bool
    shared: bool = False
    """Whether the prompts' keys and values are held once per prompt (`SharedPrompts`)."""


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def _per_prompt(x: torch.Tensor, slots: torch.Tensor, group: int, rows: int) -> torch.Tensor:
    """Rows' `[n, kv_heads, q_group, c]`, placed at their `slots` among the call's `rows` = P x `group`, as
    `[P, kv_heads, group x q_group, c]`: each prompt's rows side by side (rows no longer decoded are zeros). `group`
    may be symbolic (a compiled step takes any group size)."""
    _, kv_heads, q_group, c = x.shape
    full = x.new_zeros((rows, kv_heads, q_group, c)).index_copy(0, slots, x)
    return full.view(-1, group, kv_heads, q_group, c).transpose(1, 2).reshape(-1, kv_heads, group * q_group, c)


def _per_row(x: torch.Tensor, slots: torch.Tensor, group: int) -> torch.Tensor:
    """`_per_prompt` undone: `[P, kv_heads, group x q_group, c]` back to the rows at `slots`, `[n, kv_heads, q_group,
    c]`."""
    prompts, kv_heads, gq, c = x.shape
    rows = x.view(prompts, kv_heads, group, gq // group, c).transpose(1, 2).reshape(-1, kv_heads, gq // group, c)
    return rows.index_select(0, slots)


def _decode_step(
    s: Shape, weights, token, finished, keys, values, t, cos_all, sin_all, bias, noise, temperature, shared=None
):
    """One token for every row: the model's next-token distribution and the choice from it.

    `keys`/`values`: per layer `[L, n, kv_heads, head_dim]` buffers of the tokens before this one, position-major
    so that the caller passes only the positions filled so far (a contiguous slice, in buckets of `LENGTH_BUCKET`:
    the attention's memory traffic, most of a step's time outside its GEMMs, grows with the tokens decoded instead
    of being the whole buffer's from the first token), only read here; `bias`: `[L, n]`, 0 where a buffered key is
    visible, -inf elsewhere; `temperature`: a 0-d tensor, so
    evaluation and training share one compiled step whatever their temperatures. The new token's own key and value
    join the attention beside the buffer and are returned, for the caller to write into the buffers in place: a
    compiled step that wrote them itself would copy every buffer whole at every token (functionalised in-place
    writes; 500 rows decoded 0.25 s compiled against 0.26 s eagerly, 0.19 s since). Returns the next token, its log-prob, the
    entropy of the distribution it was drawn from (0 for finished rows), the finished flags and, per layer, this
    token's keys and values `[n, kv_heads, head_dim]`.

    `shared` (with `s.shared`): the prompts' keys and values held once per prompt, a tuple of per-layer keys
    `[P, kv_heads, head_dim, W]`, per-layer values `[P, kv_heads, W, head_dim]`, the bias `[P, W]`, each row's place
    `slots` `[n]` among the call's P x G rows and a `[G]` tensor whose length is G (`SharedPrompts.args`); the
    buffers then hold the generated tokens only. Each
    prompt's keys are read once for its G rows, in one matmul of G times the rows, instead of once per row."""
    embed, layers, norm, head = weights
    n = token.shape[0]
    cos = cos_all.index_select(1, t).unsqueeze(1)  # [n, 1, 1, d]
    sin = sin_all.index_select(1, t).unsqueeze(1)
    x = embed[token].unsqueeze(1)  # [n, 1, hidden]
    q_size, kv_size = s.heads * s.head_dim, s.kv_heads * s.head_dim
    group = s.heads // s.kv_heads  # query heads per key/value head (GQA); head h reads key/value head h // group
    new_keys, new_values = [], []
    for i, w in enumerate(layers):
        h = _rms(x, w["ln1"], s.eps)
        if s.fused:
            q, k, v = F.linear(h, w["qkv"], w.get("qkv_b")).split([q_size, kv_size, kv_size], dim=-1)
        else:
            q, k, v = (
                F.linear(h, w["q"], w.get("q_b")),
                F.linear(h, w["k"], w.get("k_b")),
                F.linear(h, w["v"], w.get("v_b")),
            )
        q = _rotate(q.view(n, 1, s.heads, s.head_dim).transpose(1, 2), cos, sin)  # [n, heads, 1, d]
        k = _rotate(k.view(n, 1, s.kv_heads, s.head_dim).transpose(1, 2), cos, sin)  # [n, kv_heads, 1, d]
        v = v.view(n, 1, s.kv_heads, s.head_dim).transpose(1, 2)
        qg = q.reshape(n, s.kv_heads, group, s.head_dim)
        buffered = torch.matmul(qg, keys[i].permute(1, 2, 3, 0)) * s.scaling + bias.t()[:, None, None, :]
        own = (qg * k).sum(-1, keepdim=True) * s.scaling
        if shared is None:
            scores = torch.cat([buffered, own], dim=-1)  # [n, kv_heads, group, L + 1]
            p = torch.softmax(scores.float(), dim=-1).to(q.dtype)
            attn = torch.matmul(p[..., :-1], values[i].permute(1, 2, 0, 3)) + p[..., -1:] * v  # [n, kv_heads, group, d]
        else:
            prompt_keys, prompt_values, prompt_bias, slots = shared[0][i], shared[1][i], shared[2], shared[3]
            rows_per_prompt = shared[4].shape[0]
            width, all_rows = prompt_bias.shape[1], prompt_bias.shape[0] * rows_per_prompt
            prompted = _per_row(
                torch.matmul(_per_prompt(qg, slots, rows_per_prompt, all_rows), prompt_keys) * s.scaling
                + prompt_bias[:, None, None, :],
                slots,
                rows_per_prompt,
            )  # [n, kv_heads, group, W]
            scores = torch.cat([prompted, buffered, own], dim=-1)  # [n, kv_heads, group, W + L + 1]
            p = torch.softmax(scores.float(), dim=-1).to(q.dtype)
            from_prompt = torch.matmul(_per_prompt(p[..., :width], slots, rows_per_prompt, all_rows), prompt_values)
            attn = (
                _per_row(from_prompt, slots, rows_per_prompt)
                + torch.matmul(p[..., width:-1], values[i].permute(1, 2, 0, 3))
                + p[..., -1:] * v
            )
        x = x + F.linear(attn.reshape(n, 1, q_size), w["o"])
        h = _rms(x, w["ln2"], s.eps)
        if s.fused:
            gate, up = F.linear(h, w["gate_up"]).split([s.inter, s.inter], dim=-1)
        else:
            gate, up = F.linear(h, w["gate"]), F.linear(h, w["up"])
        x = x + F.linear(F.silu(gate) * up, w["down"])
        new_keys.append(k.squeeze(2))
        new_values.append(v.squeeze(2))
    logits = F.linear(_rms(x, norm, s.eps)[:, 0], head)
    return (
        *pick(logits, finished, noise, temperature=temperature, greedy=s.greedy, pad_id=s.pad_id, eos_id=s.eos_id),
        new_keys,
        new_values,
    )


def _weights(model, fused: bool):
    """The decode step's view of the model's current weights (fused copies made now, so they are never stale)."""
    inner = model.model
    layers = []
    for layer in inner.layers:
        a, m = layer.self_attn, layer.mlp
        w = {
            "ln1": layer.input_layernorm.weight,
            "ln2": layer.post_attention_layernorm.weight,
            "o": a.o_proj.weight,
            "down": m.down_proj.weight,
        }
        if fused:
            w["qkv"] = torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight])
            w["gate_up"] = torch.cat([m.gate_proj.weight, m.up_proj.weight])
            if a.q_proj.bias is not None:
                w["qkv_b"] = torch.cat([a.q_proj.bias, a.k_proj.bias, a.v_proj.bias])
        else:
            w.update(
                q=a.q_proj.weight, k=a.k_proj.weight, v=a.v_proj.weight, gate=m.gate_proj.weight, up=m.up_proj.weight
            )
            if a.q_proj.bias is not None:
                w.update(q_b=a.q_proj.bias, k_b=a.k_proj.bias, v_b=a.v_proj.bias)
        layers.append(w)
    return inner.embed_tokens.weight, layers, inner.norm.weight, model.lm_head.weight


@cache
def _source_digest() -> str:
    """The decode step's own code: a package built from older code is never loaded."""
    code = "".join(inspect.getsource(f) for f in (_decode_step, _rms, _rotate, pick))
    return hashlib.sha256(code.encode()).hexdigest()[:16]


def _tensors(args) -> list[torch.Tensor]:
    return [x for x in pytree.tree_leaves(args) if isinstance(x, torch.Tensor)]


def _package_key(shape: Shape, args: tuple) -> dict:
    """Everything the compiled step is specialised on: the geometry, the sampling rule, the weights' sizes, every
    input's rank and dtype, the device and the step's code."""
    return {
        "step": _source_digest(),
        "shape": asdict(shape),
        "device": args[1].device.type,
        "weights": [(tuple(w.shape), str(w.dtype)) for w in _tensors(args[0])],
        "inputs": [(x.dim(), str(x.dtype)) for x in _tensors(args[1:])],
    }


def _symbolic(args: tuple) -> tuple:
    """Which sizes stay symbolic in the compiled step: the rows, the buffer length (in buckets) and the number of
    tokens the RoPE tables hold; the weights, `t` and the temperature are static."""
    rows = torch.export.Dim("rows", min=2, max=MAX_ROWS)
    length = LENGTH_BUCKET * torch.export.Dim("buckets", min=1, max=MAX_BUCKETS)
    steps = torch.export.Dim("steps", min=2, max=MAX_STEPS)
    weights, _, _, keys, values, _, _, _, _, noise, _, shared = args
    if shared is not None:
        prompts = torch.export.Dim("prompts", min=2, max=MAX_ROWS)
        width = torch.export.Dim("width", min=2, max=MAX_STEPS)
        group = torch.export.Dim("group", min=2, max=MAX_ROWS)
        shared = (
            [{0: prompts, 3: width} for _ in shared[0]],
            [{0: prompts, 2: width} for _ in shared[1]],
            {0: prompts, 1: width},
            {0: rows},
            {0: group},
        )
    return (
        pytree.tree_map(lambda _: None, weights),
        {0: rows},
        {0: rows},
        [{0: length, 1: rows} for _ in keys],
        [{0: length, 1: rows} for _ in values],
        None,
        {0: rows, 1: steps},
        {0: rows, 1: steps},
        {0: length, 1: rows},
        None if noise is None else {0: rows},
        None,
        shared,
    )


def _example(args: tuple) -> tuple:
    """Arguments to export the step on: the call's weights, each symbolic size set to a typical value (the compiler
    tunes for it) that no other size here takes (a coincidence would let export tie the two together)."""
    taken = {d for x in _tensors(args) for d in x.shape}

    def free(start: int) -> int:
        v = next(v for v in range(start, 1 << 16) if v not in taken and v * LENGTH_BUCKET not in taken)
        taken.update({v, v * LENGTH_BUCKET})
        return v

    rows, buckets, steps = free(127), free(4), free(29)
    weights, token, finished, keys, values, t, cos_all, sin_all, bias, noise, temperature, shared = args
    n, length = rows, buckets * LENGTH_BUCKET

    def zeros(x, *size):
        return torch.zeros(size, dtype=x.dtype, device=x.device)

    if shared is not None:  # P prompts of G rows each (at least the example's rows) and a prompt width
        group = free(5)
        prompts, width = free(-(-rows // group)), free(23)
        k0, v0 = shared[0][0], shared[1][0]
        shared = (
            [zeros(k0, prompts, k0.shape[1], k0.shape[2], width) for _ in shared[0]],
            [zeros(v0, prompts, v0.shape[1], width, v0.shape[3]) for _ in shared[1]],
            zeros(shared[2], prompts, width),
            torch.arange(rows, device=shared[3].device),
            zeros(shared[4], group),
        )
    cos = zeros(cos_all, n, steps, cos_all.shape[-1])
    return (
        weights,
        zeros(token, n),
        zeros(finished, n),
        [zeros(k, length, n, *k.shape[2:]) for k in keys],
        [zeros(v, length, n, *v.shape[2:]) for v in values],
        torch.zeros_like(t),
        cos,
        cos.clone(),
        zeros(bias, length, n),
        None if noise is None else zeros(noise, n, noise.shape[1]),
        temperature.clone(),
        shared,
    )


_PACKAGES: dict[Path, aot.Package] = {}
"""Per process: the decode steps loaded so far, by package path (a study worker loads each once for all its trials)."""


SHARE_MIN_ROWS = 2
"""A call shares its prompts' keys and values (`SharedPrompts`) where every prompt has this many rows or more."""


@dataclass
class SharedPrompts:
    """A GRPO call's prompts held once each: P distinct prompts of `group` consecutive rows each (what `sample` is
    given for a batch of groups). Per layer the prompt keys `[P, kv_heads, head_dim, W]` (transposed once, for the
    score matmul) and values `[P, kv_heads, W, head_dim]`, and the bias `[P, W]` (-inf on left padding). A decode
    step reads each prompt's keys and values once for its `group` rows, where a per-row buffer read them `group`
    times: SmolLM2's chat prompts are ~2/3 of what a completion's token attends to."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    bias: torch.Tensor
    group: int

    @staticmethod
    def group_of(which: list[int]) -> int:
        """G where the rows are P >= 2 prompts of G >= `SHARE_MIN_ROWS` consecutive rows each, else 0."""
        prompts = max(which, default=-1) + 1
        group = len(which) // prompts if prompts else 0
        uniform = prompts >= 2 and group >= SHARE_MIN_ROWS and which == [i // group for i in range(len(which))]
        return group if uniform else 0

    def args(self, slots: torch.Tensor) -> tuple:
        """The decode step's `shared` argument for the rows at `slots` (the last entry's length tells it G)."""
        return (
            self.keys,
            self.values,
            self.bias,
            slots,
            torch.zeros(self.group, dtype=torch.int8, device=slots.device),
        )


@dataclass
class KvBuffers:
    """One call's static buffers, `length` positions (a multiple of `LENGTH_BUCKET`) of which the prompts fill the
    first `width`: each layer's keys and values `[length, rows, kv_heads, head_dim]`, the attention bias
    `[length, rows]` (-inf where a position is padding or not written yet), and the RoPE cos/sin of every new
    token's position `[rows, max_new_tokens, head_dim]`."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    bias: torch.Tensor
    cos: torch.Tensor
    sin: torch.Tensor
    width: int
    length: int
    shared: "SharedPrompts | None" = None
    """The prompts' keys and values held once per prompt (then `width` is 0: the buffers hold generated tokens)."""

    def select(self, rows: torch.Tensor) -> "KvBuffers":
        """The buffers of `rows` only (copies): what decoding goes on with once the other rows have finished."""
        return KvBuffers(
            keys=[k[:, rows] for k in self.keys],
            values=[v[:, rows] for v in self.values],
            bias=self.bias[:, rows],
            cos=self.cos[rows],
            sin=self.sin[rows],
            width=self.width,
            length=self.length,
            shared=self.shared,
        )

    def write(self, slot: int, new: list[torch.Tensor]) -> None:
        """A new token's keys then values (each layer's, in `keys + values` order) at `slot`, opened to the tokens
        after it."""
        for buffer, block in zip(self.keys + self.values, new):
            buffer[slot] = block  # one contiguous block
        self.bias[slot] = 0.0


class Rows:
    """Which of a call's rows decoding still runs: once at most `DROP_AT` (7/8) of them are unfinished (and at
    least `MIN_ROWS` run), the finished ones are dropped from the batch and its buffers, so a batch whose completions
    are mostly short is not decoded at the width of its longest one (SmolLM2-135M's 100 held-out word problems,
    median 36 tokens and longest 96: greedy decoding in 0.66x the time with rows dropped at half, the same
    completions). A drop copies the buffers of the rows kept (~0.1 s for 128 rows of SmolLM2-135M's 96-token call,
    against ~0.2 s for a decode step of them), so dropping at 7/8 rather than at half pays: a sampled B 128 batch
    of that model in 0.91x the time (0.85-0.93, 4 rounds, the same completions; 6-10 drops a batch where half made
    1-2, rows decoded 1.05x the useful ones where half ran 1.27x: `benchmarks/decode_drop_rule.py`). Each position's
    outputs are put back at the call's width (a dropped row reads the pad token, log-prob 0, entropy 0: what a
    finished row gets), and sampling still draws its noise at the call's width, each row reading its own, so a
    seed's samples do not depend on when rows are dropped. The compiled step takes any number of rows from 2 (its
    rows are symbolic), so a compiled call keeps at least `min_kept` = 2: it never leaves the package it started
    with."""

    MIN_ROWS = 8
    DROP_AT = 7 / 8

    def __init__(self, n: int, pad_id: int, *, enabled: bool = True, min_kept: int = 1):
        self.n, self.pad_id, self.enabled, self.min_kept = n, pad_id, enabled, min_kept
        self.index: torch.Tensor | None = None
        """The call's row of each row still decoded (None: every row, in order)."""

    def should_drop(self, unfinished: int, rows: int) -> bool:
        """Whether to drop the finished rows now: `unfinished` of the `rows` decoded still run."""
        if not self.enabled or rows < self.MIN_ROWS or unfinished < self.min_kept:
            return False
        return unfinished < rows and unfinished <= self.DROP_AT * rows

    def drop(self, kv: KvBuffers, token: torch.Tensor, finished: torch.Tensor):
        keep = (~finished).nonzero().squeeze(1)
        self.index = keep if self.index is None else self.index[keep]
        return kv.select(keep), token[keep], finished[keep]

    def rows_of(self, values: torch.Tensor) -> torch.Tensor:
        """The rows still decoded of `values`, given at the call's width."""
        return values if self.index is None else values[self.index]

    def full(self, values: torch.Tensor, fill) -> torch.Tensor:
        """`values` of the rows still decoded, at the call's width."""
        if self.index is None:
            return values
        out = torch.full((self.n,), fill, dtype=values.dtype, device=values.device)
        out[self.index] = values
        return out


def decode_widths(completion_lens: list[int], *, drop: bool, min_kept: int = 1) -> list[int]:
    """The rows each decode step of these completions runs: every row until the static decoder's rule
    (`Rows`) drops the finished ones (`drop`), then the rows left. A completion of `c` tokens (its EOS
    included, or cut at the cap) is unfinished while fewer than `c` tokens are out; the first token comes from the
    prefill, so decode step `t` runs after `t + 1` are out."""
    live = Rows(len(completion_lens), 0, enabled=drop, min_kept=min_kept)
    width, widths = len(completion_lens), []
    for t in range(max(completion_lens, default=0) - 1):
        unfinished = sum(c > t + 1 for c in completion_lens)
        if unfinished == 0:
            break
        if live.should_drop(unfinished, width):
            width = unfinished
        widths.append(width)
    return widths


class StaticDecoder:
    """`sample` with static KV buffers and a decode step that is compiled (`compiled=True`) or run eagerly.

    Compiled: every call decodes with the package of its sampling rule, loaded from `cache_dir` (milliseconds) or,
    the first time on a machine, built there first (about a minute on 2 cores, logged); calls of fewer than 2 rows
    decode eagerly. Which code decodes a call never depends on timing or on the cache's state, so a seed's run is the
    same every time. If building or loading fails, one warning, and the decoder goes on eagerly."""

    def __init__(self, model, *, compiled: bool, cache_dir: Path | None = None, share_prompts: bool = True):
        reason = supports(model)
        if reason is not None:
            raise ValueError(f"generation.decode: static decoding does not support this model: {reason}")
        self.model, self.compiled, self.share_prompts = model, compiled, share_prompts
        self.cache_dir = cache_dir if cache_dir is not None else cache_root()
        cfg = model.config
        attn = model.model.layers[0].self_attn
        self.geometry = dict(
            heads=cfg.num_attention_heads,
            kv_heads=getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads,
            head_dim=attn.head_dim,
            inter=cfg.intermediate_size,
            eps=float(model.model.layers[0].input_layernorm.variance_epsilon),
            scaling=float(getattr(attn, "scaling", attn.head_dim**-0.5)),
            qkv_bias=attn.q_proj.bias is not None,
            fused=small_enough_to_copy(model),
        )

    def _step(self, shape: Shape, args: tuple):
        """The step for this call: the compiled package of its sampling rule, or eager."""
        eager = partial(_decode_step, shape)
        if not self.compiled or args[1].shape[0] < 2:
            return eager
        try:
            path = aot.package_path(self.cache_dir, "decode-step", _package_key(shape, args))
            if path not in _PACKAGES:
                if path.exists():
                    _PACKAGES[path] = aot.load_or_build(path, eager, lambda: _example(args), _symbolic(args))
                else:
                    use_compile_cache(self.cache_dir)
                    what = f"generation.decode: compiling the {'greedy' if shape.greedy else 'sampled'} decode step"
                    log.info(
                        f"{what} ahead of time, once per machine and model shape (usually {COMPILE_TYPICAL}; later"
                        f" runs load it in milliseconds) into {path}"
                    )
                    with progress.heartbeat(what, log):
                        _PACKAGES[path] = aot.load_or_build(path, eager, lambda: _example(args), _symbolic(args))
            return _PACKAGES[path]
        except Exception as err:  # noqa: BLE001  (compilation unavailable after all: decode eagerly)
            self._give_up(err)
            return eager

    def _give_up(self, err: Exception) -> None:
        log.warning(
            f"generation.decode: compiling the decode step failed ({faults.one_line(err, typed=True)}); decoding eagerly"
        )
        self.compiled = False

    @torch.no_grad()
    def sample(
        self,
        tokenizer,
        prompt_ids: list[list[int]],
        *,
        max_new_tokens: int,
        temperature: float = 1.0,
        greedy: bool = False,
        generator: torch.Generator | None = None,
    ) -> Samples:
        device = next(self.model.parameters()).device
        eos_id, pad_id = tokenizer.eos_token_id, tokenizer.pad_token_id
        kv, last_logits = self._prefill(prompt_ids, max_new_tokens, pad_id, device)
        shape = Shape(**self.geometry, greedy=greedy, pad_id=pad_id, eos_id=eos_id, shared=kv.shared is not None)
        n = len(prompt_ids)
        finished = torch.zeros(n, dtype=torch.bool, device=device)
        noise = None if greedy else uniform_noise(n, generator, device)
        first = pick(last_logits, finished, noise, temperature=temperature, greedy=greedy, pad_id=pad_id, eos_id=eos_id)
        tokens, logps, entropies = self._decode(kv, shape, first, temperature, generator, max_new_tokens)
        return assemble(tokenizer, prompt_ids, torch.stack(tokens, 1), torch.stack(logps, 1), torch.stack(entropies, 1))

    def _prefill(
        self, prompt_ids: list[list[int]], max_new_tokens: int, pad_id: int, device: torch.device
    ) -> tuple[KvBuffers, torch.Tensor]:
        """The prompts run through the model's own forward (left-padded), their keys and values copied into static
        buffers sized for the whole call, and each row's logits of its first new token."""
        model, g = self.model, self.geometry
        # a GRPO batch repeats each prompt G times: prefill the distinct prompts once, copy their keys and values
        distinct, which = distinct_prompts(prompt_ids)
        ids, mask = left_pad(distinct, pad_id, device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        out = model(
            input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1
        )  # left-padded
        rows = torch.tensor(which, device=device)
        dtype = out.past_key_values.layers[0].keys.dtype
        prompt_bias = torch.where(mask.bool(), 0.0, float("-inf")).to(dtype)  # [P, W]
        mask, positions, last_logits = mask[rows], positions[rows], out.logits[rows, -1, :]
        n, width = len(prompt_ids), ids.shape[1]
        group = SharedPrompts.group_of(which) if self.share_prompts else 0
        shared = None
        if group:  # the prompts' keys and values once each; the buffers hold the generated tokens only
            shared = SharedPrompts(
                [layer.keys.transpose(-1, -2).contiguous() for layer in out.past_key_values.layers],
                [layer.values.contiguous() for layer in out.past_key_values.layers],
                prompt_bias,
                group,
            )
            width = 0
        length = math.ceil((width + max_new_tokens) / LENGTH_BUCKET) * LENGTH_BUCKET
        keys, values = [], []
        for layer in out.past_key_values.layers:
            k = torch.zeros(length, n, g["kv_heads"], g["head_dim"], dtype=dtype, device=device)
            v = torch.zeros_like(k)
            if not group:
                k[:width], v[:width] = layer.keys[rows].permute(2, 0, 1, 3), layer.values[rows].permute(2, 0, 1, 3)
            keys.append(k)
            values.append(v)
        new_positions = positions[:, -1:] + torch.arange(1, max_new_tokens + 1, device=device)
        cos_all, sin_all = model.model.rotary_emb(keys[0], new_positions)  # [n, T, d], the model's own RoPE
        bias = torch.full((length, n), float("-inf"), dtype=dtype, device=device)
        if not group:
            bias[:width] = prompt_bias[rows].t()
        return KvBuffers(keys, values, bias, cos_all, sin_all, width, length, shared), last_logits

    def _decode(
        self,
        kv: KvBuffers,
        shape: Shape,
        first: tuple[torch.Tensor, ...],
        temperature: float,
        generator: torch.Generator | None,
        max_new_tokens: int,
    ) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
        """The `first` token (token, log-prob, entropy, finished) and every one after it, one decode step each,
        written into the buffers, until every row has finished or `max_new_tokens` are out: the tokens, log-probs
        and entropies, one tensor of the rows per position."""
        token, logp, entropy, finished = first
        n, device = token.shape[0], token.device
        tempered = torch.tensor(float(temperature), dtype=torch.float32, device=device)
        weights = _weights(self.model, self.geometry["fused"])
        tokens, logps, entropies = [token], [logp], [entropy]
        live = Rows(n, shape.pad_id, min_kept=2 if self.compiled else 1)
        every = torch.arange(n, device=device)
        step = None
        for t in range(max_new_tokens - 1):
            unfinished = int((~finished).sum())  # one read of the flags a token (a device sync on a GPU)
            if unfinished == 0:
                break
            if live.should_drop(unfinished, finished.shape[0]):
                kv, token, finished = live.drop(kv, token, finished)
            n = token.shape[0]
            progress.ACTIVITY.advance(n)
            noise = None if shape.greedy else live.rows_of(uniform_noise(live.n, generator, device))
            index = torch.tensor([t], device=device)
            # the positions written so far, in buckets (one at least: a step's buffer is never empty)
            filled = min(kv.length, max(LENGTH_BUCKET, math.ceil((kv.width + t) / LENGTH_BUCKET) * LENGTH_BUCKET))
            args = (
                weights,
                token,
                finished,
                [k[:filled] for k in kv.keys],
                [v[:filled] for v in kv.values],
                index,
                kv.cos,
                kv.sin,
                kv.bias[:filled],
                noise,
                tempered,
                None if kv.shared is None else kv.shared.args(every if live.index is None else live.index),
            )
            if step is None:
                step = self._step(shape, args)
            step, (token, logp, entropy, finished, new_keys, new_values) = self._run(step, shape, args)
            kv.write(t + kv.width, new_keys + new_values)
            tokens.append(live.full(token, live.pad_id))
            logps.append(live.full(logp, 0.0))
            entropies.append(live.full(entropy, 0.0))
        return tokens, logps, entropies

    def _run(self, step, shape: Shape, args: tuple) -> tuple:
        """`step(*args)`, and the step to go on with: a compiled step that fails at run time gives way to the
        eager one, from this token on."""
        try:
            return step, step(*args)
        except Exception as err:  # noqa: BLE001  (a compiled step that fails at run time: eager from here on)
            if not self.compiled:
                raise
            self._give_up(err)
            step = partial(_decode_step, shape)
            return step, step(*args)


def make_sampler(model, mode: str, cache_dir: Path):
    """The decoder `generation.decode` asks for, as `fn(tokenizer, prompt_ids, *, max_new_tokens, temperature,
    greedy, generator) -> Samples`: `hf` the transformers loop; `static` the static decoder run eagerly; `compiled`
    it under torch.compile; `auto` compiled where the model is supported and compilation is available, else the
    best that is (a model the static decoder does not know decodes with `hf`)."""
    from workbench.backends.hf import sample

    if mode == "hf":
        return partial(sample, model)
    reason = supports(model)
    if reason is not None:
        if mode != "auto":
            raise ConfigError(f"generation.decode: {mode} does not support this model: {reason} (use auto or hf)")
        log.info(f"generation.decode auto: transformers decoding ({reason})")
        return partial(sample, model)
    compiled = mode == "compiled"
    if compiled and (off_cpu := on_accelerator(model)):
        raise ConfigError(
            f"generation.decode: compiled is not available here: {off_cpu} (it crashed CUDA processes"
            " with a segmentation fault; use auto or static)"
        )
    if mode == "auto":
        why_not = compile_available() or on_accelerator(model)
        compiled = why_not is None
        if why_not:
            log.info(f"generation.decode auto: static decoding without compilation ({why_not})")
    return StaticDecoder(model, compiled=compiled, cache_dir=cache_dir).sample
