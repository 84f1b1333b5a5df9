"""The trainer's scorer: per-token log-probs of completions under the current policy, packed where the model allows.

`score` is what every caller that scores rollouts uses (the training step, RLEP's rescoring, the vLLM mismatch
check, the held-out demonstrations' probability, the warm start's check): `packed.score_packed` for Llama-family
models (every matmul on real tokens only), `hf.score` (padded, prompts shared per group, length buckets) for the
others. Both return the same values for the same batch (tests/backends/test_packed.py). Without grad, a batch is
scored in micro-batches of tokens whose fp32 logits fit `scoring_mib` (`train.scoring_mib`), and each micro-batch's
head in slices (`head`): the pass's memory does not grow with the batch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from workbench.backends import hf, packed
from workbench.backends.head import tokens_per_slice


def score(
    model,
    prompt_ids: list[list[int]],
    completion_ids: list[list[int]],
    *,
    temperature: float = 1.0,
    pad_id: int = 0,
    with_entropy: bool = False,
    packing: bool = True,
    compiled: bool = False,
    scoring_mib: float | None = None,
):
    """`[n, T]` log-probs (with grad) and `[n, T]` mask of the completions, and with `with_entropy` the summed
    entropy; `packing=False` forces the padded path; `compiled` runs the packed path's layers compiled
    (`train.compile`; the padded path runs eagerly). `scoring_mib`, without grad: rows in consecutive micro-batches
    of at most that many MiB of fp32 logits (a longer row alone), the head in slices of half that."""
    if scoring_mib is None or torch.is_grad_enabled():
        return _score(model, prompt_ids, completion_ids, temperature, pad_id, with_entropy, packing, compiled, None)
    max_tokens = tokens_per_slice(scoring_mib, model.get_output_embeddings().weight.shape[0])
    pieces = token_micro_batches([len(c) for c in completion_ids], max_tokens)
    if len(pieces) == 1:
        return _score(
            model, prompt_ids, completion_ids, temperature, pad_id, with_entropy, packing, compiled, max_tokens
        )
    t_max = max(len(c) for c in completion_ids)
    logps, masks, entropy = [], [], 0.0
    for a, b in pieces:
        out = _score(
            model,
            prompt_ids[a:b],
            completion_ids[a:b],
            temperature,
            pad_id,
            with_entropy,
            packing,
            compiled,
            max_tokens,
        )
        logps.append(F.pad(out[0], (0, t_max - out[0].shape[1])))
        masks.append(F.pad(out[1], (0, t_max - out[1].shape[1])))
        entropy += out[2] if with_entropy else 0.0
    result = (torch.cat(logps), torch.cat(masks))
    return (*result, entropy) if with_entropy else result


def token_micro_batches(lengths: list[int], max_tokens: int) -> list[tuple[int, int]]:
    """Consecutive row ranges `[a, b)` of at most `max_tokens` tokens each (a longer row is a range alone)."""
    pieces, start, total = [], 0, 0
    for i, n in enumerate(lengths):
        if i > start and total + n > max_tokens:
            pieces.append((start, i))
            start, total = i, 0
        total += n
    pieces.append((start, len(lengths)))
    return pieces


def _score(model, prompt_ids, completion_ids, temperature, pad_id, with_entropy, packing, compiled, max_tokens):
    if packing and max(len(c) for c in completion_ids) > 0 and packed.supports(model) is None:
        return packed.score_packed(
            model,
            prompt_ids,
            completion_ids,
            temperature=temperature,
            with_entropy=with_entropy,
            compiled=compiled,
            max_tokens=max_tokens,
        )
    return hf.score(
        model,
        prompt_ids,
        completion_ids,
        temperature=temperature,
        pad_id=pad_id,
        with_entropy=with_entropy,
        max_tokens=max_tokens,
    )
