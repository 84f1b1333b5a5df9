"""The transformers backend: sampling and scoring with a causal LM on the trainer's own device.

`sample` is a batched decode loop with a KV cache that stops at EOS and returns, per row, the completion token
ids, the behaviour log-prob of each sampled token (under the sampling temperature) and the token entropy of the
sampling distribution. `score` recomputes the same log-probs with gradients, which is what the objectives train.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


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


def encode_prompts(tokenizer, prompts: list[str]) -> list[list[int]]:
    """Token ids of each prompt as the tokenizer frames it (BOS etc.), unpadded."""
    return [list(ids) for ids in tokenizer(prompts, add_special_tokens=True)["input_ids"]]


def left_pad(rows: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows right-aligned in one `[n, width]` id tensor, and its attention mask."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = torch.tensor(r, dtype=torch.long)
        mask[i, width - len(r) :] = 1
    return ids.to(device), mask.to(device)


def gumbel_noise(shape: tuple[int, int], generator: torch.Generator | None, device) -> torch.Tensor:
    """Standard Gumbel noise from the trial's generator: argmax(log p + noise) is a draw from p (the Gumbel-max
    trick), so a compiled decode step can sample without touching the generator itself."""
    u = torch.rand(shape, generator=generator, device=generator.device if generator is not None else device)
    return -torch.log(-torch.log(u.to(device)))


def pick(logits: torch.Tensor, finished: torch.Tensor, noise: torch.Tensor | None, *, temperature: float, greedy: bool,
         pad_id: int, eos_id: int):
    """The sampling rule of every decoder: the next token of each row (greedy, or Gumbel-max on the tempered
    log-softmax), its log-prob, the entropy of that distribution (0 for rows already finished, whose token is
    the pad) and the updated finished flags."""
    logp = F.log_softmax(logits.float() / temperature, dim=-1)
    token = logp.argmax(-1) if greedy else (logp + noise).argmax(-1)
    live = ~finished
    entropy = -(logp.exp() * logp).sum(-1) * live
    token = torch.where(live, token, torch.full_like(token, pad_id))
    return token, logp.gather(-1, token[:, None]).squeeze(-1), entropy, finished | (token == eos_id)


def assemble(tokenizer, prompt_ids: list[list[int]], tokens: torch.Tensor, logps: torch.Tensor, entropies: torch.Tensor) -> Samples:
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
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
    past, logits = out.past_key_values, out.logits[:, -1, :]
    position = positions[:, -1:]

    finished = torch.zeros(n, dtype=torch.bool, device=device)
    tokens, logps, entropies = [], [], []
    for _ in range(max_new_tokens):
        noise = None if greedy else gumbel_noise(tuple(logits.shape), generator, device)
        token, logp, entropy, finished = pick(logits, finished, noise, temperature=temperature, greedy=greedy,
                                              pad_id=pad_id, eos_id=eos_id)
        tokens.append(token)
        logps.append(logp)
        entropies.append(entropy)
        if bool(finished.all()) or len(tokens) == max_new_tokens:
            break
        mask = torch.cat([mask, torch.ones((n, 1), dtype=mask.dtype, device=device)], dim=1)
        position = position + 1
        out = model(input_ids=token[:, None], attention_mask=mask, position_ids=position, past_key_values=past, use_cache=True)
        past, logits = out.past_key_values, out.logits[:, -1, :]
    return assemble(tokenizer, prompt_ids, torch.stack(tokens, 1), torch.stack(logps, 1), torch.stack(entropies, 1))


def score(
    model,
    prompt_ids: list[list[int]],
    completion_ids: list[list[int]],
    *,
    temperature: float = 1.0,
    pad_id: int = 0,
    with_entropy: bool = False,
):
    """Per-token log-probs of the completions under `model` (with grad): `[n, T]` values and a `[n, T]` mask;
    with `with_entropy`, also the summed entropy (nats) of the distributions the tokens are scored under."""
    device = next(model.parameters()).device
    rows = [p + c for p, c in zip(prompt_ids, completion_ids)]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        attn[i, : len(r)] = 1
    ids, attn = ids.to(device), attn.to(device)
    logits = model(input_ids=ids, attention_mask=attn).logits.float() / temperature

    t_max = max(len(c) for c in completion_ids)
    # Completion token j of row i sits at position len(prompt_i) + j and is predicted by the logits one before.
    starts = torch.tensor([len(p) for p in prompt_ids], device=device)
    offs = torch.arange(t_max, device=device)
    lengths = torch.tensor([len(c) for c in completion_ids], device=device)
    mask = offs[None, :] < lengths[:, None]
    target_pos = (starts[:, None] + offs[None, :]).clamp(max=width - 1)
    targets = ids.gather(1, target_pos)
    logp = F.log_softmax(logits.gather(1, (target_pos - 1)[:, :, None].expand(-1, -1, logits.shape[-1])), dim=-1)
    token_logp = logp.gather(-1, targets[:, :, None]).squeeze(-1)
    if with_entropy:
        entropy = (-(logp.exp() * logp).sum(-1) * mask).sum()
        return token_logp * mask, mask, float(entropy)
    return token_logp * mask, mask
