import torch

from workbench.config import build_config
from workbench.backends.hf import encode_prompts, sample, score
from workbench.trial.checkpoint import build_char_tokenizer, ensure_embedded_checkpoint
from workbench.trial.policy import load_policy
from workbench.trial.tasks import load_task

from support.toy import toy_dict


def toy_policy():
    cfg = build_config(toy_dict())
    task = load_task(cfg.task)
    path = ensure_embedded_checkpoint(cfg.model, cfg.task, task)
    model, tok = load_policy(path, torch.device("cpu"), torch.float32)
    return model, tok, task


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
