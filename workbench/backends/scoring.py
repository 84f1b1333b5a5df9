"""The trainer's scorer: per-token log-probs of completions under the current policy, packed where the model allows.

`score` is what every caller that scores rollouts uses (the training step, RLEP's rescoring, the vLLM mismatch
check, the held-out demonstrations' probability, the warm start's check): `packed.score_packed` for Llama-family
models (every matmul on real tokens only), `hf.score` (padded, prompts shared per group, length buckets) for the
others. Both return the same values for the same batch (tests/backends/test_packed.py).
"""

from __future__ import annotations

from workbench.backends import hf, packed


def score(model, prompt_ids: list[list[int]], completion_ids: list[list[int]], *, temperature: float = 1.0,
          pad_id: int = 0, with_entropy: bool = False, packing: bool = True, compiled: bool = False):
    """`[n, T]` log-probs (with grad) and `[n, T]` mask of the completions, and with `with_entropy` the summed
    entropy; `packing=False` forces the padded path; `compiled` runs the packed path's layers compiled
    (`train.compile`; the padded path runs eagerly)."""
    if packing and max(len(c) for c in completion_ids) > 0 and packed.supports(model) is None:
        return packed.score_packed(model, prompt_ids, completion_ids, temperature=temperature, with_entropy=with_entropy,
                                   compiled=compiled)
    return hf.score(model, prompt_ids, completion_ids, temperature=temperature, pad_id=pad_id, with_entropy=with_entropy)
