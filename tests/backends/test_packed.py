"""Packed scoring (`workbench.backends.packed`) against the padded batch it replaces: the same log-probs, entropy,
token-mean loss and gradients, for the embedded Llama and the other Llama-family shapes the static decoder knows."""

import pytest
import torch
from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig, Qwen2Config

from workbench.backends import decode, hf, packed
from workbench.backends.hf import encode_prompts, sample
from workbench.backends.scoring import score
from workbench.trial.checkpoint import build_char_tokenizer

from support.toy import toy_policy


def _scored(model, prompts, completions, scorer=score, **kw):
    model.zero_grad()
    logp, mask, entropy = scorer(model, prompts, completions, pad_id=0, temperature=0.7, with_entropy=True, **kw)
    loss = -(logp * mask).sum() / mask.sum()  # token mean, as the objectives aggregate
    loss.backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return logp.detach(), mask, entropy, loss.item(), grads


def _agree(model, prompts, completions):
    ref = _scored(model, prompts, completions, hf.score, bucketed=False, shared_prompts=False)  # one padded batch
    got = _scored(model, prompts, completions)
    assert torch.equal(got[1], ref[1]) and got[0].shape == ref[0].shape
    assert torch.allclose(got[0], ref[0], atol=1e-5)
    assert abs(got[3] - ref[3]) < 1e-6 and abs(got[2] - ref[2]) < 1e-3
    assert torch.allclose(got[4], ref[4], atol=1e-6)
    return got


def _groups(tok, texts, completion_lengths, group: int, seed: int, model, max_new_tokens=12):
    prompts = [p for p in encode_prompts(tok, texts) for _ in range(group)]
    out = sample(model, tok, prompts, max_new_tokens=max_new_tokens, generator=torch.Generator().manual_seed(seed))
    return out.prompt_ids, [c[: completion_lengths(i)] or c[:1] for i, c in enumerate(out.completion_ids)]


@pytest.mark.parametrize("rope", ["complex", "halves_differ", "large_model"])
def test_packed_scoring_gives_the_padded_batch_values_and_gradients(rope, monkeypatch):
    """RoPE as a complex factor on interleaved q/k rows (the default for small models), and the model's own
    rotation: for a RoPE whose halves turn by different angles, and for models above the interleaving size."""
    if rope == "halves_differ":
        monkeypatch.setattr(packed, "_halves_agree", lambda cos, sin: False)
    if rope == "large_model":
        monkeypatch.setattr(decode, "FUSE_MAX_PARAMETERS", 0)
    model, tok, task = toy_policy()
    model.train()
    assert packed.supports(model) is None
    # GRPO-shaped: prompts of different lengths x 4 completions of very different lengths
    texts = [task.train[i].prompt for i in range(3)] + ["1+2=", "12+345="]
    prompts, completions = _groups(tok, texts, lambda i: 1 + (i % 7) * 3, 4, 1, model, task.max_new_tokens)
    logp, mask, *_ = _agree(model, prompts, completions)
    assert (logp[~mask] == 0).all()
    # a replay batch whose prompts do not repeat: one prompt per row, same answer
    _agree(model, prompts[::4], completions[::4])


@pytest.mark.parametrize("family", ["llama_gqa", "qwen2"])
def test_packed_scoring_matches_other_llama_family_models(family, tmp_path):
    tok = build_char_tokenizer()
    common = dict(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=tok.bos_token_id,
    )
    config = LlamaConfig(**common) if family == "llama_gqa" else Qwen2Config(**common)  # qwen2: q/k/v biases
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / family)
    model = AutoModelForCausalLM.from_pretrained(tmp_path / family, local_files_only=True, dtype=torch.float32)
    prompts, completions = _groups(tok, ["12+7=", "3+45=", "9+9=", "123+4="], lambda i: 1 + i % 9, 3, 2, model)
    _agree(model, prompts, completions)


def test_models_packing_does_not_know_take_the_padded_path(tmp_path, monkeypatch):
    tok = build_char_tokenizer()
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(
        GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=1, n_head=2, n_positions=64)
    ).save_pretrained(tmp_path / "g")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "g", local_files_only=True, dtype=torch.float32)
    assert "gpt2" in packed.supports(model)
    prompts = encode_prompts(tok, ["1+2=", "12+345="])
    logp, mask = score(model, prompts, [[5, 6, 7], [8]], pad_id=tok.pad_token_id)
    assert logp.shape == (2, 3) and mask.tolist() == [[True, True, True], [True, False, False]]
    llama, _, _ = toy_policy()
    monkeypatch.setattr(llama.config, "attention_dropout", 0.1)
    llama.train()
    assert "dropout" in packed.supports(llama)
    llama.eval()
    assert packed.supports(llama) is None  # dropout is off outside training


def test_a_bf16_projection_is_turned_by_the_fp32_complex_rope():
    """On a GPU the trainer's forward runs under bf16 autocast (`train.autocast: auto`): the q/k projections come out
    in bf16 while RoPE's complex factor is fp32 (there is no complex bf16). Measured on an H200: the first training
    step raised `view_as_complex ... BFloat16`. CPU autocast hides it (it runs view_as_complex in fp32 itself), so
    the bf16 projection is handed to the rotation directly, as CUDA autocast does."""
    torch.manual_seed(0)
    heads, head_dim, n = 2, 8, 5
    proj = torch.nn.Linear(16, heads * head_dim, bias=False)
    h = torch.randn(n, 16)
    angles = torch.rand(n, 1, head_dim // 2)
    rope = packed.Rope(None, None, torch.polar(torch.ones_like(angles), angles))
    ref = packed._rotated(proj, h, rope, head_dim)
    got = packed._rotated(proj.to(torch.bfloat16), h.to(torch.bfloat16), rope, head_dim)
    assert got.dtype == torch.bfloat16 and got.shape == ref.shape == (n, heads, head_dim)
    assert (got.float() - ref).abs().max() < 0.05 and ref.abs().max() > 0.1
