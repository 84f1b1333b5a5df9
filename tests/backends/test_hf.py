import torch

from workbench.backends.hf import encode_prompts, sample, score
from workbench.trial.checkpoint import build_char_tokenizer

from support.toy import toy_policy


def test_char_tokenizer_round_trips_and_frames_with_bos():
    tok = build_char_tokenizer()
    text = "Q: Ada has 3 apples.\nA: 3 + 4 = 7\n#### 7"
    ids = tok(text)["input_ids"]
    assert ids[0] == tok.bos_token_id and len(ids) == len(text) + 1
    assert tok.decode(ids, skip_special_tokens=True) == text


def test_behaviour_logprobs_from_the_kv_cache_match_a_full_forward():
    model, tok, task = toy_policy()
    prompts = encode_prompts(tok, [e.prompt for e in task.train[:6]])
    out = sample(model, tok, prompts, max_new_tokens=task.max_new_tokens, generator=torch.Generator().manual_seed(0))
    logp, mask = score(model, out.prompt_ids, out.completion_ids, pad_id=tok.pad_token_id)
    for i, lp in enumerate(out.logprobs):
        n = len(out.completion_ids[i])
        assert mask[i].sum() == n
        assert torch.allclose(logp[i, :n].detach(), lp, atol=1e-4)


def test_left_padding_does_not_change_the_distribution():
    model, tok, _ = toy_policy()
    # prompts of different lengths share a padded batch; each must score as if it were alone
    prompts = encode_prompts(tok, ["1+2=", "12+34=", "99+1="])
    out = sample(model, tok, prompts, max_new_tokens=6, greedy=True)
    for i, p in enumerate(prompts):
        alone = sample(model, tok, [p], max_new_tokens=6, greedy=True)
        assert alone.completion_ids[0] == out.completion_ids[i]
        assert torch.allclose(alone.logprobs[0], out.logprobs[i], atol=1e-4)


def test_sampling_stops_at_eos_and_is_reproducible_for_a_seed():
    model, tok, task = toy_policy()
    prompts = encode_prompts(tok, [e.prompt for e in task.train[:8]] * 4)
    a = sample(model, tok, prompts, max_new_tokens=task.max_new_tokens, generator=torch.Generator().manual_seed(5))
    b = sample(model, tok, prompts, max_new_tokens=task.max_new_tokens, generator=torch.Generator().manual_seed(5))
    assert a.completion_ids == b.completion_ids
    for ids, done in zip(a.completion_ids, a.finished):
        assert (ids[-1] == tok.eos_token_id) == done
        assert tok.eos_token_id not in ids[:-1]
    assert a.generated_tokens == sum(len(c) for c in a.completion_ids)
    assert 0 < a.entropy_mean < torch.log(torch.tensor(float(len(tok)))).item()


def test_length_buckets_split_only_where_padding_outweighs_a_call():
    from workbench.backends.hf import length_buckets

    assert length_buckets([30, 31, 29, 32], overhead=384) == [[2, 0, 1, 3]]  # little padding: one call
    groups = length_buckets([10] * 20 + [200] * 4, overhead=64)
    assert sorted(map(len, groups)) == [4, 20]  # short rows are not padded to 200
    assert sorted(i for g in groups for i in g) == list(range(24))


def test_bucketed_scoring_gives_the_padded_batch_loss_and_gradients(monkeypatch):
    import workbench.backends.hf as hf

    model, tok, task = toy_policy()
    prompts = encode_prompts(tok, [e.prompt for e in task.train[:8]])
    out = sample(model, tok, prompts, max_new_tokens=task.max_new_tokens, generator=torch.Generator().manual_seed(0))
    completions = [c[: 3 + 2 * i] for i, c in enumerate(out.completion_ids)]  # lengths that differ a lot
    monkeypatch.setattr(hf, "BUCKET_OVERHEAD_TOKENS", 0)  # one call per length: as many buckets as there can be
    assert len(hf.length_buckets([len(p) + len(c) for p, c in zip(out.prompt_ids, completions)])) > 2
    grads, values = [], []
    for bucketed in (False, True):
        model.zero_grad()
        logp, mask, entropy = score(
            model, out.prompt_ids, completions, pad_id=tok.pad_token_id, with_entropy=True, bucketed=bucketed
        )
        loss = -(logp * mask).sum() / mask.sum()  # token mean, as the objectives aggregate
        loss.backward()
        values.append((logp.detach(), mask, entropy, float(loss)))
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    (lp0, m0, e0, l0), (lp1, m1, e1, l1) = values
    assert torch.equal(m0, m1)
    assert torch.allclose(lp0, lp1, atol=1e-6) and abs(l0 - l1) < 1e-6 and abs(e0 - e1) < 1e-4
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


def test_shared_prompt_scoring_gives_the_padded_batch_loss_and_gradients(monkeypatch):
    import workbench.backends.hf as hf

    model, tok, task = toy_policy()
    # GRPO-shaped: 3 prompts of different lengths x 4 completions each, completions of very different lengths
    prompts = encode_prompts(tok, [task.train[i].prompt for i in range(3)] + ["1+2=", "12+345="])
    prompts = [p for p in prompts for _ in range(4)]
    out = sample(model, tok, prompts, max_new_tokens=task.max_new_tokens, generator=torch.Generator().manual_seed(1))
    completions = [c[: 2 + (i % 7) * 3] for i, c in enumerate(out.completion_ids)]
    monkeypatch.setattr(hf, "BUCKET_OVERHEAD_TOKENS", 0)  # bucketed: completions split into several calls
    assert len(hf.length_buckets([len(c) for c in completions])) > 2
    results = []
    for shared, bucketed in ((False, False), (True, False), (True, True)):
        model.zero_grad()
        logp, mask, entropy = score(
            model,
            out.prompt_ids,
            completions,
            pad_id=tok.pad_token_id,
            temperature=0.7,
            with_entropy=True,
            bucketed=bucketed,
            shared_prompts=shared,
        )
        loss = -(logp * mask).sum() / mask.sum()
        loss.backward()
        grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        results.append((logp.detach(), mask, entropy, float(loss), grads))
    ref = results[0]
    for logp, mask, entropy, loss, grads in results[1:]:
        assert torch.equal(mask, ref[1])
        assert torch.allclose(logp, ref[0], atol=1e-5) and abs(loss - ref[3]) < 1e-6 and abs(entropy - ref[2]) < 1e-3
        assert torch.allclose(grads, ref[4], atol=1e-6)


def test_sampled_tokens_follow_the_tempered_softmax_and_never_a_zero_probability_token():
    from scipy.stats import chisquare

    from workbench.backends.hf import pick, uniform_noise

    logits = torch.tensor([[2.0, 0.5, -1.0, float("-inf"), 1.0, -3.0]])
    rows, temperature = 40_000, 0.7
    generator = torch.Generator().manual_seed(0)
    token, logp, _, _ = pick(
        logits.expand(rows, -1),
        torch.zeros(rows, dtype=torch.bool),
        uniform_noise(rows, generator, "cpu"),
        temperature=temperature,
        greedy=False,
        pad_id=0,
        eos_id=99,
    )
    probs = torch.softmax(logits[0] / temperature, -1)
    counts = torch.bincount(token, minlength=6)
    assert counts[3] == 0  # the -inf logit is never drawn
    kept = probs > 0
    expected = probs[kept].double() / probs[kept].double().sum() * rows
    assert chisquare(counts[kept].double().numpy(), expected.numpy()).pvalue > 1e-3
    assert torch.allclose(logp, torch.log(probs[token]), atol=1e-6)
    # the extremes of the uniform draw still land on tokens of positive probability
    ends, _, _, _ = pick(
        logits.expand(2, -1),
        torch.zeros(2, dtype=torch.bool),
        torch.tensor([[0.0], [1.0 - 2**-24]]),
        temperature=1.0,
        greedy=False,
        pad_id=0,
        eos_id=99,
    )
    assert ends.tolist() == [5, 0]
