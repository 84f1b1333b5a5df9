"""The GPU suite (`pytest -m gpu`): what runs only where torch sees CUDA. Skipped without a GPU, never part of CI;
about ten minutes on one GPU. docs/gpu.md records what it found when it last ran."""

from __future__ import annotations

import json

import pytest
import torch
from mlflow import MlflowClient

from workbench.backends.scoring import score
from workbench.config import ConfigError, build_config
from workbench.trial.loop import run_trial
from workbench.trial.policy import Policy
from workbench.trial.tasks import load_task

from support.cli import run_cli
from support.toy import TOY, toy_dict, toy_spec, tracked

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]


def cuda_cfg(**sections):
    return build_config(toy_dict(model={**TOY["model"], "device": "cuda"}, **sections))


@pytest.mark.parametrize("decode", ["static", "hf"])
def test_a_trial_trains_on_cuda_with_each_decoder(decode, tracking_uri):
    cfg = tracked(cuda_cfg(generation={"decode": decode}, budget={"compute_units": None, "steps": 6}), tracking_uri)
    torch.cuda.reset_peak_memory_stats()
    result = run_trial(cfg)
    assert len(result.evals) >= 2 and result.metrics["final/steps"] == 6
    assert torch.cuda.max_memory_allocated() > 0  # it ran on the GPU
    assert result.metrics["final/mu_measured"] > 0


def test_the_compiled_decoder_is_refused_off_the_cpu_in_one_line():
    with pytest.raises(ConfigError, match="generation.decode"):
        Policy(cuda_cfg(generation={"decode": "compiled"}), load_task(cuda_cfg().task))


def test_tf32_is_on_and_sampling_runs_in_the_training_precision_on_cuda():
    policy = Policy(cuda_cfg(), load_task(cuda_cfg().task))
    assert torch.backends.cuda.matmul.allow_tf32
    assert policy.generation_autocast  # bf16 autocast over fp32 weights, as the training step
    off = Policy(cuda_cfg(train={"autocast": "off"}), load_task(cuda_cfg().task))
    assert not off.generation_autocast


def test_two_seeds_in_one_process_leave_the_gpu_memory_flat(tracking_uri):
    peaks = []
    for seed in (0, 1):
        cfg = tracked(cuda_cfg(budget={"compute_units": None, "steps": 4}), tracking_uri)
        cfg.seed = seed
        torch.cuda.reset_peak_memory_stats()
        run_trial(cfg)
        torch.cuda.synchronize()
        peaks.append((torch.cuda.max_memory_allocated(), torch.cuda.memory_allocated()))
    assert peaks[1][1] <= peaks[0][1] * 1.1 + 2**20, peaks  # nothing of seed 0 left behind


def test_vllm_engine_is_reused_across_seeds_on_cuda(tracking_uri):
    pytest.importorskip("vllm")
    from workbench.backends import vllm as backend

    engines = []
    for seed in (0, 1):
        cfg = tracked(
            cuda_cfg(generation={"backend": "vllm"}, budget={"compute_units": None, "steps": 3}), tracking_uri
        )
        cfg.seed = seed
        run_trial(cfg)
        engines.append(next(iter(backend._ENGINES.values())))
    assert engines[0] is engines[1]
    backend.shutdown_engines()


def test_bounded_scoring_on_cuda_peaks_near_one_micro_batch_of_logits():
    from transformers import LlamaConfig, LlamaForCausalLM

    vocab = 151_936
    model = (
        LlamaForCausalLM(
            LlamaConfig(
                vocab_size=vocab,
                hidden_size=64,
                intermediate_size=128,
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=2,
                tie_word_embeddings=False,
            )
        )
        .cuda()
        .eval()
    )
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(1, vocab, (12,), generator=g).tolist() for _ in range(8)]
    rows = [p for p in prompts for _ in range(4)]
    completions = [torch.randint(1, vocab, (100,), generator=g).tolist() for _ in rows]
    mib = 128.0
    with torch.no_grad():
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        bounded = score(model, rows, completions, temperature=0.7, with_entropy=True, scoring_mib=mib)
        bounded_peak = torch.cuda.max_memory_allocated() - base
        torch.cuda.reset_peak_memory_stats()
        whole = score(model, rows, completions, temperature=0.7, with_entropy=True)
        whole_peak = torch.cuda.max_memory_allocated() - base
    assert torch.allclose(bounded[0], whole[0], atol=1e-3)
    print(
        json.dumps(
            {"bounded_peak_mib": bounded_peak / 2**20, "whole_peak_mib": whole_peak / 2**20, "micro_batch_mib": mib}
        )
    )
    assert bounded_peak <= 1.5 * mib * 2**20, bounded_peak / 2**20


def test_an_asynchronous_trial_runs_on_one_gpu(tracking_uri):
    cfg = tracked(
        cuda_cfg(
            pipeline={"mode": "async"}, budget={"compute_units": None, "steps": 6}, eval={**TOY["eval"], "every": 3}
        ),
        tracking_uri,
    )
    result = run_trial(cfg)
    assert result.metrics["final/steps"] >= 6


def test_a_short_study_on_the_gpu_with_devices(tmp_path):
    path = toy_spec(
        tmp_path,
        n_trials=2,
        seeds=2,
        base={**{k: v for k, v in TOY.items() if k != "threads"}, "model": {**TOY["model"], "device": "cuda"}},
        search_space={"replay.ratio": {"choices": [2]}, "x": {"choices": [4]}},
    )
    proc = run_cli(["study", "run", str(path), "--workers", "1", "--devices", "0"], tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    seeds = client.search_runs(
        [client.get_experiment_by_name("toy").experiment_id], filter_string="tags.`workbench.kind` = 'seed'"
    )
    assert len(seeds) == 4 and all(r.info.status == "FINISHED" for r in seeds)
    import optuna

    trials = optuna.load_study(study_name="toy", storage=f"sqlite:///{tmp_path / 'optuna.db'}").get_trials()
    assert all(t.user_attrs["devices"]["kind"] == "cuda" for t in trials if "devices" in t.user_attrs)


def test_an_asynchronous_trial_launched_by_torchrun_on_cuda(tmp_path):
    """W = T = 1 launched as two ranks on this machine: NCCL where each has a GPU of its own, gloo (the weights staged
    through host memory) where they share one."""
    import socket
    import subprocess
    import sys

    import yaml

    config = tmp_path / "trial.yaml"
    config.write_text(
        yaml.safe_dump(
            toy_dict(
                pipeline={"mode": "async"}, budget={"compute_units": None, "steps": 6}, eval={**TOY["eval"], "every": 3}
            )
        )
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes",
            "1",
            "--nproc-per-node",
            "2",
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            str(port),
            "-m",
            "workbench.cli",
            "train",
            "--config",
            str(config),
            "--tracking-uri",
            f"sqlite:///{tmp_path / 'mlflow.db'}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run = client.search_runs([e.experiment_id for e in client.search_experiments()])[0]
    backend = "nccl" if torch.cuda.device_count() >= 2 else "gloo"
    print(
        json.dumps(
            {
                "launch": run.data.tags["pipeline.launch"],
                "device": run.data.tags.get("workbench.device"),
                "steps": run.data.metrics["final/steps"],
                "mu": run.data.metrics.get("final/mu_measured"),
            }
        )
    )
    assert run.data.tags["pipeline.launch"] == f"torchrun, 2 processes, backend {backend}"
    assert run.info.status == "FINISHED" and run.data.metrics["final/steps"] == 6
