"""A subword tokenizer through the whole trial: `workbench build-model` trains a byte-level BPE tokenizer on a sample
JSONL file and saves a tiny Llama of its vocabulary; `workbench train` loads it through `model.path` with
`from_pretrained`, frames the prompts with its chat template and logs to a real MLflow store."""

import json

import pytest
from mlflow import MlflowClient
from transformers import AutoTokenizer

from support.cli import run_cli
from workbench.backends.hf import encode_prompts
from workbench.trial.tasks import write_sample_jsonl

TRAIN = [
    "--set",
    "task.name=jsonl",
    "--set",
    "budget.steps=3",
    "--set",
    "budget.compute_units=null",
    "--set",
    "eval.every=2",
    "--set",
    "batch_size=8",
    "--set",
    "group_size=4",
    "--set",
    "threads=1",
    "--set",
    "generation.max_new_tokens=12",
    "--set",
    "generation.decode=static",
    "--set",
    "eval.pass_k_prompts=8",
]


@pytest.fixture(scope="module")
def bpe_model(tmp_path_factory):
    """A 300-line sample task and a tiny Llama with a BPE tokenizer trained on it (chat template, no pad token)."""
    root = tmp_path_factory.mktemp("bpe")
    jsonl = write_sample_jsonl(root / "task.jsonl", n=300)
    proc = run_cli(["build-model", str(root / "model"), "--jsonl", str(jsonl), "--vocab-size", "500"], root)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    return root, jsonl, summary


def test_build_model_writes_a_subword_hf_directory(bpe_model):
    root, _, summary = bpe_model
    model = root / "model"
    assert (model / "model.safetensors").is_file() and (model / "tokenizer.json").is_file()
    assert not list(model.glob("*.bin"))  # weights as safetensors only
    tok = AutoTokenizer.from_pretrained(model, local_files_only=True)
    assert len(tok) == summary["vocab_size"] <= 500 and tok.pad_token is None
    text = "Ada has 12 apples and buys 3 more."
    ids = tok(text)["input_ids"]
    assert len(ids) < len(text) / 2  # subwords, not characters
    assert tok.decode(ids, skip_special_tokens=True) == text


def test_chat_template_prompts_have_one_bos_and_open_the_assistant_turn(bpe_model):
    root, _, _ = bpe_model
    tok = AutoTokenizer.from_pretrained(root / "model", local_files_only=True)
    [plain] = encode_prompts(tok, ["How many apples?"])
    [chat] = encode_prompts(tok, ["How many apples?"], chat=True)
    assert plain[0] == chat[0] == tok.bos_token_id
    assert chat.count(tok.bos_token_id) == 1
    text = tok.decode(chat)
    assert text.startswith("<s><|user|>\nHow many apples?</s>") and text.endswith("<|assistant|>\n")
    rendered = tok.apply_chat_template(
        [{"role": "user", "content": "How many apples?"}], add_generation_prompt=True, tokenize=False
    )
    assert text == rendered and chat[1:] != plain[1:]


@pytest.mark.slow
def test_bpe_trial_with_chat_template_through_the_cli_into_mlflow(bpe_model):
    root, jsonl, _ = bpe_model
    uri = f"sqlite:///{root / 'mlflow.db'}"
    proc = run_cli(
        [
            "train",
            *TRAIN,
            "--set",
            f"task.path={jsonl}",
            "--set",
            f"model.path={root / 'model'}",
            "--set",
            "task.chat_template=true",
            "--set",
            "eval.batch_size=7",
            "--tracking-uri",
            uri,
            "--json",
        ],
        root,
    )
    assert proc.returncode == 0, proc.stderr
    last = json.loads(proc.stdout.strip().splitlines()[-1])
    assert last["metrics"]["final/steps"] == 3
    client = MlflowClient(uri)
    run = client.get_run(last["run_id"])
    assert run.info.status == "FINISHED"
    assert run.data.params["task.chat_template"] == "True" and run.data.params["model.path"] == str(root / "model")
    assert run.data.params["eval.batch_size"] == "7" and run.data.params["task.n_eval"] == "60"  # a fifth of 300 lines
    accuracy = client.get_metric_history(last["run_id"], "eval/accuracy")
    assert sorted(m.step for m in accuracy) == [0, 2, 3]
    assert all(0.0 <= m.value <= 1.0 for m in accuracy)
    assert client.get_metric_history(last["run_id"], "compute/gen_tokens")[-1].value > 0


def test_chat_template_needs_a_tokenizer_that_has_one(bpe_model, tmp_path):
    root, jsonl, _ = bpe_model
    plain = tmp_path / "plain"
    proc = run_cli(
        ["build-model", str(plain), "--jsonl", str(jsonl), "--vocab-size", "400", "--no-chat-template"], tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    proc = run_cli(
        [
            "train",
            *TRAIN,
            "--set",
            f"task.path={jsonl}",
            "--set",
            f"model.path={plain}",
            "--set",
            "task.chat_template=true",
            "--tracking-uri",
            f"sqlite:///{tmp_path / 'mlflow.db'}",
        ],
        tmp_path,
    )
    assert proc.returncode == 2
    assert (
        proc.stderr.strip().splitlines()[-1]
        == f"workbench: error: task.chat_template: the tokenizer in {plain} has no chat template"
    )


def test_chat_template_with_the_embedded_model_is_a_config_error(bpe_model, tmp_path):
    _, jsonl, _ = bpe_model
    proc = run_cli(
        ["train", "--set", "task.name=jsonl", "--set", f"task.path={jsonl}", "--set", "task.chat_template=true"],
        tmp_path,
    )
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert "task.chat_template" in line and "model.path" in line


@pytest.mark.parametrize(
    "args, field",
    [
        (["--size", "huge"], "--size"),
        (["--vocab-size", "10"], "--vocab-size"),
    ],
)
def test_build_model_bad_input_is_one_line(bpe_model, tmp_path, args, field):
    _, jsonl, _ = bpe_model
    proc = run_cli(["build-model", str(tmp_path / "m"), "--jsonl", str(jsonl), *args], tmp_path)
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert field in line
