"""No-grad scoring in bounded memory (`workbench.backends.head`, `scoring.score(scoring_mib=...)`): the values of
one whole pass, at a peak of at most 1.5x one micro-batch's fp32 logits, at a 150k vocabulary."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from workbench.backends import head
from workbench.backends.head import TokenLogProb, head_logprobs, row_logsumexp, tokens_per_slice
from workbench.backends.scoring import score, token_micro_batches

from support.memory import LiveTensorBytes

VOCAB = 151_936  # Qwen2.5's


def test_token_micro_batches_are_consecutive_and_bounded():
    assert token_micro_batches([3, 3, 3, 3], 6) == [(0, 2), (2, 4)]
    assert token_micro_batches([3, 9, 2, 2], 6) == [(0, 1), (1, 2), (2, 4)]  # a longer row alone
    assert token_micro_batches([1] * 5, 100) == [(0, 5)]
    assert tokens_per_slice(1024, VOCAB) == 1766 and tokens_per_slice(1e-9, VOCAB) == 1


def _model(vocab: int, dtype=torch.float32):
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(cfg).to(dtype).eval()


def _batch(vocab: int, rows: int, group: int, prompt_len: int, max_len: int):
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(1, vocab, (prompt_len + i % 3,), generator=g).tolist() for i in range(rows // group)]
    completions = [torch.randint(1, vocab, (max_len - (i * 7) % 11,), generator=g).tolist() for i in range(rows)]
    return [p for p in prompts for _ in range(group)], completions


@pytest.mark.parametrize("packing", [True, False], ids=["packed", "padded"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_bounded_scoring_gives_the_one_pass_values(packing, dtype):
    model = _model(997, dtype)  # a prime: slices and micro-batches never divide it
    prompts, completions = _batch(997, 12, 4, 5, 20)
    with torch.no_grad():
        whole = score(model, prompts, completions, temperature=0.7, with_entropy=True, packing=packing)
        bounded = score(
            model,
            prompts,
            completions,
            temperature=0.7,
            with_entropy=True,
            packing=packing,
            scoring_mib=30 * 997 * 4 / 2**20,
        )  # 30 tokens a micro-batch, heads of 15: ~8 micro-batches
    atol = 1e-5 if dtype == torch.float32 else 1e-2
    assert torch.equal(whole[1], bounded[1])
    assert torch.allclose(whole[0], bounded[0], atol=atol) and whole[0].abs().sum() > 1
    assert bounded[2] == pytest.approx(whole[2], rel=1e-4 if dtype == torch.float32 else 1e-2)


def test_the_head_with_grad_is_one_pass_and_without_is_sliced_alike():
    model = _model(211)
    hidden, targets = torch.randn(40, 32), torch.randint(0, 211, (40,))
    full, ent = head_logprobs(model, hidden, targets, 1.3, True)
    assert full.requires_grad
    with torch.no_grad():
        sliced, ent_sliced = head_logprobs(model, hidden, targets, 1.3, True, max_tokens=7)
    assert torch.allclose(full.detach(), sliced, atol=1e-5) and torch.allclose(ent.detach(), ent_sliced, atol=1e-5)


def _peak(vocab: int, mib: float | None, packing: bool) -> tuple[int, int]:
    """Live tensor bytes at the peak of one no-grad scoring call (`support.memory`), and the batch's tokens."""
    model = _model(vocab)
    prompts, completions = _batch(vocab, 16, 4, 8, 64)
    with torch.no_grad(), LiveTensorBytes() as live:
        score(model, prompts, completions, temperature=0.7, with_entropy=True, packing=packing, scoring_mib=mib)
    return live.peak, sum(len(c) for c in completions)


@pytest.mark.parametrize("packing", [True, False], ids=["packed", "padded"])
def test_no_grad_scoring_peaks_at_most_one_and_a_half_micro_batches_of_fp32_logits(packing):
    """At 151,936 tokens of vocabulary, a 16 x ~60-token batch scored at once peaks at 2x its own fp32 logits or
    more; micro-batched at 64 MiB of logits (~110 tokens), at most 1.5 x 64 MiB."""
    mib = 64.0
    bounded, tokens = _peak(VOCAB, mib, packing)
    assert bounded <= 1.5 * mib * 2**20, bounded / 2**20
    batch_logits = tokens * VOCAB * 4
    assert batch_logits > 6 * mib * 2**20  # several micro-batches: the bound is not the batch itself
    whole, _ = _peak(VOCAB, None, packing)
    assert whole >= 2 * batch_logits  # the count sees the unbounded pass's logits


def _reference(hidden, weight, targets, temperature):
    """Autograd's chain: the head, tempered, log-softmax, the target's entry."""
    logp = torch.log_softmax(torch.nn.functional.linear(hidden, weight).float() / temperature, dim=-1)
    return logp.gather(-1, targets[:, None]).squeeze(-1)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_the_fused_head_gives_autograds_values_and_gradients(temperature, dtype):
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(37, 32, generator=g).to(dtype).requires_grad_()
    weight = (0.3 * torch.randn(997, 32, generator=g)).to(dtype).requires_grad_()
    targets = torch.randint(0, 997, (37,), generator=g)
    upstream = torch.randn(37, generator=g)  # a loss weighting each token differently
    fused = TokenLogProb.apply(hidden, weight, targets, temperature)
    (fused * upstream).sum().backward()
    got = fused.detach(), hidden.grad.clone(), weight.grad.clone()
    hidden.grad = weight.grad = None
    want = _reference(hidden, weight, targets, temperature)
    (want * upstream).sum().backward()
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    assert got[0].dtype == torch.float32 and torch.allclose(got[0], want.detach(), **tol)
    assert torch.allclose(got[1].float(), hidden.grad.float(), **tol)
    assert torch.allclose(got[2].float(), weight.grad.float(), **tol)
    assert got[2].abs().sum() > 0


def test_training_scores_through_the_fused_head_where_the_head_is_plain(monkeypatch):
    from workbench.backends import head

    model = _model(211)
    model.train()
    prompts, completions = _batch(211, 8, 4, 5, 12)
    calls = []
    real = head.TokenLogProb.apply
    monkeypatch.setattr(head.TokenLogProb, "apply", lambda *a: calls.append(1) or real(*a))
    grads = []
    for fused in (True, False):
        if not fused:
            monkeypatch.setattr(head, "plain_head", lambda model, hidden: None)
        model.zero_grad()
        logp, mask = score(model, prompts, completions, temperature=0.7)
        (logp * mask).sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    assert len(calls) == 1  # the fused head ran for the first pass only
    assert torch.allclose(grads[0], grads[1], rtol=1e-4, atol=1e-5)
    # entropy, autocast, a soft-capped head: autograd's chain
    hidden = torch.randn(4, 32)
    monkeypatch.undo()
    assert head.plain_head(model, hidden) is model.lm_head.weight
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert head.plain_head(model, hidden) is None
    model.config.final_logit_softcapping = 30.0
    assert head.plain_head(model, hidden) is None


@pytest.mark.parametrize("n", [203, 40, 7])
def test_row_logsumexp_in_slices_equals_torch_bit_for_bit(monkeypatch, n):
    vocab = 4099
    monkeypatch.setattr(head, "LSE_SLICE_BYTES", 40 * vocab * 4)  # slices of 40 rows; 203 ends in one of 43
    z = 5 * torch.randn(n, vocab, generator=torch.Generator().manual_seed(n))
    for threads in (1, 2):
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            assert torch.equal(row_logsumexp(z), torch.logsumexp(z, dim=-1))
        finally:
            torch.set_num_threads(before)
