"""The static decoder against transformers' own decode loop: same tokens, same log-probs, same draws."""

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig, Qwen2Config

from workbench.backends import decode
from workbench.backends.decode import StaticDecoder, compile_available, make_sampler, supports
from workbench.backends.hf import encode_prompts, sample
from workbench.config import ConfigError
from workbench.trial.checkpoint import build_char_tokenizer

from support.logs import captured_logs
from support.toy import toy_policy


def _agree(a, b, atol: float) -> None:
    assert a.completion_ids == b.completion_ids
    assert a.finished == b.finished and a.texts == b.texts
    for x, y in zip(a.logprobs, b.logprobs):
        assert torch.allclose(x, y, atol=atol), float((x - y).abs().max())
    assert a.entropy_sum == pytest.approx(b.entropy_sum, rel=1e-5)


def _prompts(tok, task, n=12, group=3):
    return [p for p in encode_prompts(tok, [e.prompt for e in task.train[:n]]) for _ in range(group)]


@pytest.mark.parametrize("share_prompts", [True, False])
def test_static_decoding_matches_transformers_greedy_and_sampled(share_prompts, monkeypatch):
    """Groups of rows per prompt (a GRPO batch): the prompts' keys and values held once each (`SharedPrompts`), or
    copied to every row; the same tokens either way."""
    model, tok, task = toy_policy()
    prompts = _prompts(tok, task)
    static = StaticDecoder(model, compiled=False, share_prompts=share_prompts)
    prefill, shared = static._prefill, []
    monkeypatch.setattr(static, "_prefill", lambda *a: (out := prefill(*a), shared.append(out[0].shared))[0])
    for greedy in (True, False):
        kw = dict(max_new_tokens=task.max_new_tokens, temperature=0.8, greedy=greedy)
        ref = sample(model, tok, prompts, generator=torch.Generator().manual_seed(3), **kw)
        got = static.sample(tok, prompts, generator=torch.Generator().manual_seed(3), **kw)
        _agree(ref, got, atol=1e-5)
    assert len(set(map(tuple, got.completion_ids))) > 1  # sampled rows differ: the draws really are random
    assert all((x is not None) == share_prompts for x in shared) and len(shared) == 2
    assert not share_prompts or shared[0].group == 3


def test_sampling_follows_the_generator():
    model, tok, task = toy_policy()
    prompts = _prompts(tok, task)
    static = StaticDecoder(model, compiled=False)
    kw = dict(max_new_tokens=task.max_new_tokens, greedy=False)
    a = static.sample(tok, prompts, generator=torch.Generator().manual_seed(0), **kw)
    b = static.sample(tok, prompts, generator=torch.Generator().manual_seed(0), **kw)
    c = static.sample(tok, prompts, generator=torch.Generator().manual_seed(1), **kw)
    assert a.completion_ids == b.completion_ids and a.completion_ids != c.completion_ids


def _tiny(config, tmp_path, name):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    model.save_pretrained(tmp_path / name)
    return AutoModelForCausalLM.from_pretrained(tmp_path / name, local_files_only=True, dtype=torch.float32).eval()


@pytest.mark.parametrize("family", ["llama_gqa", "qwen2"])
def test_static_decoding_matches_other_llama_family_models(family, tmp_path):
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
    model = _tiny(config, tmp_path, family)
    assert supports(model) is None
    prompts = encode_prompts(tok, ["12+7=", "3+45=", "9+9="] * 2)
    for greedy in (True, False):
        kw = dict(max_new_tokens=9, greedy=greedy)
        ref = sample(model, tok, prompts, generator=torch.Generator().manual_seed(5), **kw)
        got = StaticDecoder(model, compiled=False).sample(
            tok, prompts, generator=torch.Generator().manual_seed(5), **kw
        )
        _agree(ref, got, atol=1e-5)


def test_unsupported_models_decode_with_transformers_or_fail_clearly(tmp_path):
    tok = build_char_tokenizer()
    model = _tiny(GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=1, n_head=2, n_positions=64), tmp_path, "gpt2")
    assert "gpt2" in supports(model)
    auto = make_sampler(model, "auto", tmp_path)
    assert auto.func is sample  # the reference loop, bound to this model
    with pytest.raises(ConfigError, match="generation.decode: static does not support"):
        make_sampler(model, "static", tmp_path)


needs_compiler = pytest.mark.skipif(
    compile_available() is not None, reason="AOTInductor unavailable here (no C++ compiler)"
)


def _packages(cache: Path) -> list[Path]:
    return sorted((cache / "aot").glob("decode-step-*.pt2"))


@pytest.fixture(scope="module")
def aot_cache(tmp_path_factory):
    """A cache directory shared by this module's compiled tests: each package is built once (a minute or so)."""
    return tmp_path_factory.mktemp("aot-cache")


@needs_compiler
def test_compiled_step_gives_the_eager_tokens_and_logprobs_from_the_first_call(aot_cache, monkeypatch):
    tmp_path = aot_cache
    monkeypatch.setattr(decode, "_PACKAGES", {})
    model, tok, task = toy_policy()
    prompts = _prompts(tok, task)
    compiled = StaticDecoder(model, compiled=True, cache_dir=tmp_path)
    eager = StaticDecoder(model, compiled=False)
    with captured_logs() as records, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for greedy in (True, False):
            kw = dict(max_new_tokens=task.max_new_tokens, temperature=0.8, greedy=greedy)
            want = eager.sample(tok, prompts, generator=torch.Generator().manual_seed(5), **kw)
            got = compiled.sample(tok, prompts, generator=torch.Generator().manual_seed(5), **kw)
            assert compiled.compiled  # it did compile, not fall back
            _agree(want, got, atol=1e-5)
    assert len(_packages(tmp_path)) == 2  # one package per sampling rule (greedy, sampled)
    # each compile said beforehand that it happens once per machine and model shape, and after, how long it took;
    # torch's FutureWarning about its own tree specs (LeafSpec) does not reach the user
    lines = [r.getMessage() for r in records]
    if any("ahead of time" in line for line in lines):  # (the module's other test may have built them first)
        assert sum("once per machine and model shape" in line for line in lines) == 2
        assert sum(line.endswith(" s") and ": done in " in line for line in lines) == 2
    assert not [w for w in caught if "LeafSpec" in str(w.message)]
    # other row counts, prompt widths and temperatures: the same two packages (sizes and temperature are inputs)
    other = [p[:-1] or p for p in _prompts(tok, task, n=5, group=7)]
    for greedy in (True, False):
        kw = dict(max_new_tokens=task.max_new_tokens - 2, temperature=1.3, greedy=greedy)
        want = eager.sample(tok, other, generator=torch.Generator().manual_seed(6), **kw)
        _agree(want, compiled.sample(tok, other, generator=torch.Generator().manual_seed(6), **kw), atol=1e-5)
    assert len(_packages(tmp_path)) == 2 and len(decode._PACKAGES) == 2


@needs_compiler
def test_a_built_step_is_loaded_by_a_new_process_without_compiling(aot_cache):
    # a process builds the package (unless the test above did); a new one must load it (compiling is made to fail
    # there) and decode the same tokens
    tmp_path = aot_cache
    code = (
        "import sys, torch\n"
        "from pathlib import Path\n"
        "from support.toy import toy_policy\n"
        "from workbench.backends import aot, decode\n"
        "from workbench.backends.hf import encode_prompts\n"
        "if sys.argv[2] == 'load':\n"
        "    def refuse(*a, **k): raise AssertionError('compiled again')\n"
        "    aot.build = refuse\n"
        "model, tok, task = toy_policy()\n"
        "prompts = [p for p in encode_prompts(tok, [e.prompt for e in task.train[:6]]) for _ in range(3)]\n"
        "d = decode.StaticDecoder(model, compiled=True, cache_dir=Path(sys.argv[1]))\n"
        "out = d.sample(tok, prompts, max_new_tokens=6, greedy=True)\n"
        "assert d.compiled\n"
        "print(out.completion_ids)\n"
    )
    tests_dir = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests_dir), os.environ.get("PYTHONPATH", "")])}
    outs = []
    for mode in ("build", "load") if not _packages(tmp_path) else ("load", "load"):
        proc = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path), mode], capture_output=True, text=True, env=env, timeout=600
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        outs.append(proc.stdout.strip().splitlines()[-1])
    assert outs[0] == outs[1] and len(_packages(tmp_path)) in (1, 2)  # greedy (and the sampled one of the test above)


def test_a_step_that_cannot_compile_decodes_eagerly_with_one_warning(tmp_path, monkeypatch, caplog):
    model, tok, task = toy_policy()
    prompts = _prompts(tok, task)

    def broken(*args, **kwargs):
        raise RuntimeError("no compiler here\nsecond line")

    monkeypatch.setattr(decode.aot, "build", broken)
    monkeypatch.setattr(decode, "_PACKAGES", {})
    kw = {"max_new_tokens": task.max_new_tokens, "greedy": True}
    eager = StaticDecoder(model, compiled=False).sample(tok, prompts, **kw)
    decoder = StaticDecoder(model, compiled=True, cache_dir=tmp_path)
    with caplog.at_level("WARNING", logger="workbench.backends.decode"):
        outs = [decoder.sample(tok, prompts, **kw) for _ in range(2)]
    assert (
        not decoder.compiled
        and caplog.text.count("compiling the decode step failed (RuntimeError: no compiler here)") == 1
    )
    assert not _packages(tmp_path)  # nothing half-built left behind
    for out in outs:
        _agree(eager, out, atol=0)


def test_auto_compiles_the_decode_step_on_the_cpu_only():
    """The ahead-of-time compile crashed a CUDA process (H200, segmentation fault): `auto` decodes off the CPU with
    the static decoder run eagerly, and says why."""
    model = torch.nn.Linear(2, 2)
    assert decode.on_accelerator(model) is None
    reason = decode.on_accelerator(model.to("meta"))  # any device that is not the CPU
    assert reason is not None and "meta" in reason
    with pytest.raises(ConfigError, match=r"^generation\.decode: compiled is not available here: .* on meta"):
        make_sampler(toy_policy()[0].to("meta"), "compiled", Path("/nonexistent"))


def _mixed_lengths(tok) -> list[list[int]]:
    """Rows of different lengths: one-digit and three-digit sums finish at different steps."""
    return encode_prompts(tok, [f"{a}+{b}=" for a, b in [(1, 2), (3, 4), (5, 1), (2, 2)] + [(123, 456)] * 4])


def _record_widths(monkeypatch) -> list[int]:
    """The rows each decode step runs, appended as the decoder runs them."""
    widths: list[int] = []
    real_run = StaticDecoder._run
    monkeypatch.setattr(
        StaticDecoder,
        "_run",
        lambda self, step, s, args: widths.append(args[1].shape[0]) or real_run(self, step, s, args),
    )
    return widths


@pytest.mark.parametrize("greedy", [True, False])
def test_decoding_drops_finished_rows_and_gives_the_same_completions(greedy, monkeypatch):
    model, tok, task = toy_policy()
    prompts = _mixed_lengths(tok)
    kw = dict(max_new_tokens=task.max_new_tokens, greedy=greedy, temperature=0.8)
    drops = []
    real_drop = decode.Rows.drop
    monkeypatch.setattr(decode.Rows, "drop", lambda self, *a: drops.append(1) or real_drop(self, *a))
    static = StaticDecoder(model, compiled=False)
    compacted = static.sample(tok, prompts, generator=torch.Generator().manual_seed(5), **kw)
    assert drops, "no row was dropped: the test's rows finished together"
    monkeypatch.setattr(decode.Rows, "should_drop", lambda self, unfinished, rows: False)
    whole = static.sample(tok, prompts, generator=torch.Generator().manual_seed(5), **kw)
    _agree(whole, compacted, atol=1e-5)
    assert len({len(c) for c in whole.completion_ids}) > 1


@needs_compiler
def test_compiled_decoding_drops_finished_rows_and_gives_the_eager_completions(aot_cache, monkeypatch):
    # the compiled step's rows are symbolic: after a drop it runs the narrower batch, never below 2 rows
    model, tok, task = toy_policy()
    prompts = _mixed_lengths(tok)
    widths = _record_widths(monkeypatch)
    compiled = StaticDecoder(model, compiled=True, cache_dir=aot_cache)
    eager = StaticDecoder(model, compiled=False)
    for greedy in (True, False):
        kw = dict(max_new_tokens=task.max_new_tokens, greedy=greedy, temperature=0.8)
        widths.clear()
        got = compiled.sample(tok, prompts, generator=torch.Generator().manual_seed(5), **kw)
        assert compiled.compiled, "the step did not compile"
        assert widths[0] == len(prompts) and min(widths) < len(prompts), f"no row was dropped: widths {widths}"
        assert min(widths) >= 2
        _agree(eager.sample(tok, prompts, generator=torch.Generator().manual_seed(5), **kw), got, atol=1e-5)


def test_a_compiled_call_never_drops_to_fewer_rows_than_its_step_takes():
    assert decode.Rows(8, 0).should_drop(unfinished=1, rows=8)
    assert not decode.Rows(8, 0, min_kept=2).should_drop(unfinished=1, rows=8)
    assert decode.Rows(8, 0, min_kept=2).should_drop(unfinished=2, rows=8)
    assert not decode.Rows(8, 0, enabled=False).should_drop(unfinished=1, rows=8)
    assert not decode.Rows(6, 0).should_drop(unfinished=1, rows=6)  # below MIN_ROWS, never


def test_finished_rows_are_dropped_once_at_most_seven_eighths_run_on():
    # a drop copies the kept rows' buffers: worth it once an eighth of the rows decoded are finished
    assert not decode.Rows(16, 0).should_drop(unfinished=16, rows=16)
    assert not decode.Rows(16, 0).should_drop(unfinished=15, rows=16)
    assert decode.Rows(16, 0).should_drop(unfinished=14, rows=16)
    assert decode.decode_widths([5] * 12 + [2] * 2 + [9] * 2, drop=True) == [16, 14, 14, 14, 2, 2, 2, 2]


def test_decode_widths_are_the_rows_the_decoder_runs(monkeypatch):
    # the roofline's GEMM bound counts the decode steps' rows from the completions' lengths: the decoder's own
    model, tok, task = toy_policy()
    prompts = _mixed_lengths(tok)
    widths = _record_widths(monkeypatch)
    out = StaticDecoder(model, compiled=False).sample(tok, prompts, max_new_tokens=task.max_new_tokens, greedy=True)
    lens = [len(c) for c in out.completion_ids]
    assert decode.decode_widths(lens, drop=True) == widths and min(widths) < len(prompts)
    assert decode.decode_widths(lens, drop=False) == [len(prompts)] * len(widths)
