"""The transformers backend: sampling and scoring with a causal LM on the trainer's own device.

`sample` is a batched decode loop with a KV cache that stops at EOS and returns, per row, the completion token
ids, the behaviour log-prob of each sampled token (under the sampling temperature) and the token entropy of the
sampling distribution. `score` recomputes the same log-probs with gradients, which is what the objectives train.
`HfBackend` is this backend as `generation.backend: hf` registers it: the trainer's own decoder samples.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from workbench import progress
from workbench.backends.base import GenerationBackend, register_backend
from workbench.backends.head import head_logprobs


@dataclass
class Samples:
    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    """Sampled tokens per row, including the EOS when the row finished."""
    logprobs: list[torch.Tensor]
    """Behaviour log-prob of every completion token (float32, CPU), aligned with `completion_ids`."""
    finished: list[bool]
    """Whether the row emitted EOS within the token limit."""
    texts: list[str]
    """Decoded completions, EOS excluded."""
    entropy_sum: float
    """Sum over generated tokens of the entropy (nats) of the distribution they were sampled from."""
    prefill_tokens: int
    """Prompt tokens processed (non-padding)."""

    @property
    def generated_tokens(self) -> int:
        return sum(len(c) for c in self.completion_ids)

    @property
    def entropy_mean(self) -> float:
        return self.entropy_sum / max(self.generated_tokens, 1)


def encode_prompts(tokenizer, prompts: list[str], chat: bool = False) -> list[list[int]]:
    """Token ids of each prompt as the tokenizer frames it (BOS etc.), unpadded; with `chat`, each prompt is one
    user turn rendered by the tokenizer's chat template with the assistant's turn opened (the template writes its
    own BOS, so no second one is added)."""
    if not chat:
        return [list(ids) for ids in tokenizer(prompts, add_special_tokens=True)["input_ids"]]
    rendered = tokenizer.apply_chat_template(
        [[{"role": "user", "content": p}] for p in prompts], add_generation_prompt=True, tokenize=False
    )
    return [list(ids) for ids in tokenizer(rendered, add_special_tokens=False)["input_ids"]]


def left_pad(rows: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows right-aligned in one `[n, width]` id tensor, and its attention mask."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = torch.tensor(r, dtype=torch.long)
        mask[i, width - len(r) :] = 1
    return ids.to(device), mask.to(device)


def uniform_noise(rows: int, generator: torch.Generator | None, device) -> torch.Tensor:
    """One uniform draw from the trial's generator per row, `[rows, 1]`, for one sampled token each; `pick` turns
    it into a token by the inverse of the row's cumulative distribution, so a compiled decode step samples without
    touching the generator itself and the choice runs inside the step."""
    u = torch.rand((rows, 1), generator=generator, device=generator.device if generator is not None else device)
    return u.to(device)


def pick(
    logits: torch.Tensor,
    finished: torch.Tensor,
    noise: torch.Tensor | None,
    *,
    temperature: float | torch.Tensor,
    greedy: bool,
    pad_id: int,
    eos_id: int,
):
    """The sampling rule of every decoder: the next token of each row (greedy, or a draw from the tempered softmax
    by inverse transform: the first token whose cumulative probability reaches the row's uniform draw from
    `uniform_noise`), its log-prob, the entropy of that distribution (0 for rows already finished, whose token is
    the pad) and the updated finished flags.

    The draw reads one uniform number a row, where the Gumbel-max trick it replaced drew one per vocabulary entry
    (49,152 for SmolLM2, every token; the same distribution). `1 - u` lies in (0, 1], so the token found always has
    a positive probability."""
    logp = F.log_softmax(logits.float() / temperature, dim=-1)
    p = logp.exp()
    if greedy:
        token = logp.argmax(-1)
    else:
        cdf = p.cumsum(-1)
        token = (cdf < (1 - noise) * cdf[:, -1:]).sum(-1).clamp(max=logp.shape[-1] - 1)
    live = ~finished
    entropy = -(p * logp).sum(-1) * live
    token = torch.where(live, token, torch.full_like(token, pad_id))
    return token, logp.gather(-1, token[:, None]).squeeze(-1), entropy, finished | (token == eos_id)


def assemble(
    tokenizer, prompt_ids: list[list[int]], tokens: torch.Tensor, logps: torch.Tensor, entropies: torch.Tensor
) -> Samples:
    """`Samples` from a decode loop's `[n, T]` tokens, log-probs and entropies: each row cut after its EOS."""
    eos_id = tokenizer.eos_token_id
    token_mat, logp_mat = tokens.cpu(), logps.float().cpu()
    completions, logprobs, done = [], [], []
    for i, row in enumerate(token_mat.tolist()):
        length = row.index(eos_id) + 1 if eos_id in row else len(row)
        completions.append(row[:length])
        logprobs.append(logp_mat[i, :length].clone())
        done.append(eos_id in row)
    texts = tokenizer.batch_decode([c[:-1] if d else c for c, d in zip(completions, done)], skip_special_tokens=True)
    return Samples(
        prompt_ids=[list(p) for p in prompt_ids],
        completion_ids=completions,
        logprobs=logprobs,
        finished=done,
        texts=texts,
        entropy_sum=float(entropies.double().sum()),
        prefill_tokens=int(sum(len(p) for p in prompt_ids)),
    )


@torch.no_grad()
def sample(
    model,
    tokenizer,
    prompt_ids: list[list[int]],
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    greedy: bool = False,
    generator: torch.Generator | None = None,
) -> Samples:
    """Decode every prompt once (repeat prompts for a group) with the model's own forward and a growing KV cache:
    the reference decoder, right for any causal LM (`workbench.backends.decode` is the fast one)."""
    device = next(model.parameters()).device
    eos_id, pad_id = tokenizer.eos_token_id, tokenizer.pad_token_id
    ids, mask = left_pad(prompt_ids, pad_id, device)
    n = ids.shape[0]
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(
        input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1
    )  # left-padded: the last is real
    past, logits = out.past_key_values, out.logits[:, -1, :]
    position = positions[:, -1:]

    finished = torch.zeros(n, dtype=torch.bool, device=device)
    tokens, logps, entropies = [], [], []
    for _ in range(max_new_tokens):
        noise = None if greedy else uniform_noise(logits.shape[0], generator, device)
        token, logp, entropy, finished = pick(
            logits, finished, noise, temperature=temperature, greedy=greedy, pad_id=pad_id, eos_id=eos_id
        )
        tokens.append(token)
        logps.append(logp)
        entropies.append(entropy)
        progress.ACTIVITY.advance(n)
        if bool(finished.all()) or len(tokens) == max_new_tokens:
            break
        mask = torch.cat([mask, torch.ones((n, 1), dtype=mask.dtype, device=device)], dim=1)
        position = position + 1
        out = model(
            input_ids=token[:, None], attention_mask=mask, position_ids=position, past_key_values=past, use_cache=True
        )
        past, logits = out.past_key_values, out.logits[:, -1, :]
    return assemble(tokenizer, prompt_ids, torch.stack(tokens, 1), torch.stack(logps, 1), torch.stack(entropies, 1))


BUCKET_OVERHEAD_TOKENS = 384
"""What one more forward/backward call costs, in padded tokens of this model's size on CPU (launching its
operators); `length_buckets` splits a batch only where the padding it removes is worth more than that."""


def length_buckets(lengths: list[int], overhead: float | None = None) -> list[list[int]]:
    """Row indices grouped into runs of similar length, each padded only to its own longest row: the partition of
    the rows sorted by length that minimises (padded tokens + `overhead` per group), by dynamic programming over
    the distinct lengths (rows of one length never gain from being split)."""
    overhead = BUCKET_OVERHEAD_TOKENS if overhead is None else overhead
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    values = sorted(set(lengths))
    upto = [0]  # upto[j]: how many rows have one of the first j distinct lengths
    for v in values:
        upto.append(upto[-1] + lengths.count(v))
    n = len(values)
    best = [0.0] + [float("inf")] * n  # best[j]: cost of the rows of the first j distinct lengths
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        for i in range(j):  # lengths i..j-1 form the last group, padded to values[j - 1]
            cost = best[i] + (upto[j] - upto[i]) * values[j - 1] + overhead
            if cost < best[j]:
                best[j], cut[j] = cost, i
    groups, j = [], n
    while j > 0:
        groups.append(order[upto[cut[j]] : upto[j]])
        j = cut[j]
    return groups[::-1]


def _score_rows(
    model,
    rows: list[list[int]],
    starts: list[int],
    lengths: list[int],
    t_max: int,
    temperature: float,
    pad_id: int,
    with_entropy: bool,
    max_tokens: int | None,
):
    """Token log-probs `[n, t_max]` (0 past each row's completion) of whole rows (prompt + completion) padded to
    their own longest, and the per-token entropies when asked (same layout). The head runs on the completion
    tokens' positions only."""
    ids, attn = _right_pad(rows, pad_id, next(model.parameters()).device)
    hidden = model.base_model(input_ids=ids, attention_mask=attn).last_hidden_state
    # Completion token j of row i sits at position start_i + j and is predicted by the hidden state one before.
    offs = torch.arange(t_max, device=ids.device)
    target_pos = (torch.tensor(starts, device=ids.device)[:, None] + offs[None, :]).clamp(max=ids.shape[1] - 1)
    before = hidden.gather(1, (target_pos - 1)[:, :, None].expand(-1, -1, hidden.shape[-1]))
    return _token_logp(model, before, ids.gather(1, target_pos), lengths, t_max, temperature, with_entropy, max_tokens)


def _right_pad(rows: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows left-aligned in one `[n, width]` id tensor, and its attention mask."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        mask[i, : len(r)] = 1
    return ids.to(device), mask.to(device)


def _token_logp(
    model,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    lengths: list[int],
    t_max: int,
    temperature: float,
    with_entropy: bool,
    max_tokens: int | None,
):
    """`[n, t_max]` log-probs of `targets` (`[n, w]`, w <= t_max) under the head at `hidden` (`[n, w, hidden]`, the
    state before each target), 0 past each row's length; and the entropies in the same layout when asked. Only
    the real tokens go through the head (`head.head_logprobs`)."""
    n, w = targets.shape
    device = targets.device
    real = (torch.arange(w, device=device)[None, :] < torch.tensor(lengths, device=device)[:, None]).reshape(-1)
    where = real.nonzero().squeeze(-1)
    token, entropy = head_logprobs(
        model,
        hidden.reshape(n * w, -1).index_select(0, where),
        targets.reshape(-1).index_select(0, where),
        temperature,
        with_entropy,
        max_tokens,
    )
    return _spread(token, where, n, w, t_max), (_spread(entropy, where, n, w, t_max) if with_entropy else None)


def _spread(x: torch.Tensor, where: torch.Tensor, n: int, w: int, t_max: int) -> torch.Tensor:
    """Values of the real tokens (at flat positions `where` of `[n, w]`) -> `[n, t_max]`, zeros elsewhere."""
    return F.pad(x.new_zeros(n * w).index_copy(0, where, x).view(n, w), (0, t_max - w))


class _Prefixes:
    """The distinct prompts of a batch run once through the model (with grad): their keys and values per layer,
    their attention mask and lengths, and the logits at each prompt's last token (which predict the first
    completion token). Rows that share a prompt (a GRPO group) attend to the same keys, so the prompt's forward
    and backward are paid once per group instead of once per row."""

    def __init__(self, model, prompts: list[list[int]], pad_id: int):
        device = next(model.parameters()).device
        ids, self.mask = _right_pad(prompts, pad_id, device)
        out = model.base_model(input_ids=ids, attention_mask=self.mask, use_cache=True)
        self.kv = [(layer.keys, layer.values) for layer in out.past_key_values.layers]
        self.lengths = self.mask.sum(-1)
        hidden = out.last_hidden_state
        self.last = hidden.gather(
            1, (self.lengths - 1)[:, None, None].expand(-1, 1, hidden.shape[-1])
        )  # [prompts, 1, hidden]

    def score(
        self,
        model,
        which: list[int],
        completions: list[list[int]],
        t_max: int,
        temperature: float,
        pad_id: int,
        with_entropy: bool,
        max_tokens: int | None,
    ):
        """Log-probs `[len(which), t_max]` of `completions` after the prompts `which` (indices into the distinct
        prompts), and their entropies when asked."""
        from transformers import DynamicCache

        device = self.mask.device
        idx = torch.tensor(which, device=device)
        cache = DynamicCache([(k.index_select(0, idx), v.index_select(0, idx)) for k, v in self.kv])
        ids, cmask = _right_pad(completions, pad_id, device)
        width = ids.shape[1]
        # completion token j sits at position len(prompt) + j; the prompt's padding stays masked in between
        positions = self.lengths.index_select(0, idx)[:, None] + torch.arange(width, device=device)[None, :]
        attn = torch.cat([self.mask.index_select(0, idx), cmask], dim=1)
        out = model.base_model(
            input_ids=ids, attention_mask=attn, position_ids=positions, past_key_values=cache, use_cache=True
        )
        before = torch.cat([self.last.index_select(0, idx), out.last_hidden_state[:, : width - 1]], dim=1)
        return _token_logp(
            model, before, ids, [len(c) for c in completions], t_max, temperature, with_entropy, max_tokens
        )


def checkpointing(model) -> bool:
    """Whether `model` recomputes its layers' activations in backward (transformers' activation checkpointing)."""
    return bool(
        getattr(model, "is_activation_checkpointing", None)
        if hasattr(type(model), "is_activation_checkpointing")
        else getattr(model, "is_gradient_checkpointing", False)
    )


def distinct_prompts(prompts: list[list[int]]) -> tuple[list[list[int]], list[int]]:
    """The distinct prompts in first-seen order, and each row's index among them."""
    seen: dict[tuple[int, ...], int] = {}
    which = [seen.setdefault(tuple(p), len(seen)) for p in prompts]
    return [list(p) for p in seen], which


def score(
    model,
    prompt_ids: list[list[int]],
    completion_ids: list[list[int]],
    *,
    temperature: float = 1.0,
    pad_id: int = 0,
    with_entropy: bool = False,
    bucketed: bool = True,
    shared_prompts: bool = True,
    max_tokens: int | None = None,
):
    """Per-token log-probs of the completions under `model` (with grad): `[n, T]` values and a `[n, T]` mask;
    with `with_entropy`, also the summed entropy (nats) of the distributions the tokens are scored under.

    With `shared_prompts`, a batch whose rows repeat prompts (at least two rows per distinct prompt on average:
    GRPO groups) runs each distinct prompt once and its completions after the prompt's keys and values
    (`_Prefixes`). With `bucketed`, rows run through the model in groups of similar length (`length_buckets`),
    each padded only to its own longest row. Either way the log-probs land in the same `[n, T]` layout, so every
    loss built on them is the one of the single padded batch (`bucketed=False, shared_prompts=False`, the
    reference; tests/backends/test_hf.py checks values and gradients). The trainer scores through
    `workbench.backends.scoring.score`, which takes the packed path (`packed`) for the models that have one.
    `max_tokens`: without grad, the head's slice bound (`head.head_logprobs`)."""
    device = next(model.parameters()).device
    lengths = [len(c) for c in completion_ids]
    t_max = max(lengths)
    distinct, which = distinct_prompts(prompt_ids)
    # a prompt's cached keys and values cannot cross a checkpointed layer's recomputation: whole rows then
    shared = shared_prompts and 2 * len(distinct) <= len(prompt_ids) and not (model.training and checkpointing(model))
    rows = completion_ids if shared else [p + c for p, c in zip(prompt_ids, completion_ids)]
    groups = length_buckets([len(r) for r in rows]) if bucketed and len(rows) > 1 else []
    if len(groups) <= 1:
        groups = [list(range(len(rows)))]  # one padded batch, in the rows' own order
    prefixes = _Prefixes(model, distinct, pad_id) if shared else None
    parts = []
    for g in groups:
        if shared:
            parts.append(
                prefixes.score(
                    model,
                    [which[i] for i in g],
                    [rows[i] for i in g],
                    t_max,
                    temperature,
                    pad_id,
                    with_entropy,
                    max_tokens,
                )
            )
        else:
            parts.append(
                _score_rows(
                    model,
                    [rows[i] for i in g],
                    [len(prompt_ids[i]) for i in g],
                    [lengths[i] for i in g],
                    t_max,
                    temperature,
                    pad_id,
                    with_entropy,
                    max_tokens,
                )
            )
    if len(groups) == 1:
        token_logp, entropy = parts[0]
    else:
        inverse = torch.empty(len(rows), dtype=torch.long, device=device)
        inverse[torch.tensor([i for g in groups for i in g], device=device)] = torch.arange(len(rows), device=device)
        token_logp = torch.cat([lp for lp, _ in parts])[inverse]
        entropy = torch.cat([e for _, e in parts])[inverse] if with_entropy else None
    mask = torch.arange(t_max, device=device)[None, :] < torch.tensor(lengths, device=device)[:, None]
    if with_entropy:
        return token_logp, mask, float(entropy.detach().sum())
    return token_logp, mask


@register_backend("hf")
class HfBackend(GenerationBackend):
    """`generation.backend: hf`: rollouts are sampled on the trainer's device by the trainer's own decoder
    (`generation.decode`: `workbench.backends.decode.make_sampler`), so no engine is started."""
