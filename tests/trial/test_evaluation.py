"""Held-out evaluation at several decoding temperatures, and the entropy of its samples (`eval.temperatures`)."""

from pathlib import Path

import pytest
import torch
from mlflow import MlflowClient

from analysis.data import _curve
from workbench import tracking
from workbench.backends.hf import Samples
from workbench.config import ConfigError, build_config
from workbench.trial.evaluation import Evaluator
from workbench.trial.loop import run_trial
from workbench.trial.policy import Policy
from workbench.trial.tasks import load_task

from support.toy import toy_dict, tracked


def _toy_policy():
    cfg = build_config(toy_dict())
    task = load_task(cfg.task)
    return cfg, task, Policy(cfg, task)


def test_a_trial_logs_pass_at_1_and_the_demonstrations_at_each_temperature_where_it_samples(tracking_uri, tmp_path):
    cfg = tracked(
        build_config(toy_dict(budget={"steps": 3}, eval={"every": 1, "pass_k_every": 2, "temperatures": [0.5, 1.0]})),
        tracking_uri,
    )
    result = run_trial(cfg)
    client = MlflowClient(tracking_uri)

    def history(key: str) -> dict[int, float]:
        return {m.step: m.value for m in client.get_metric_history(result.run_id, key)}

    sampled_steps = [0, 2, 3]  # evaluations 0, 2 and the last
    mean_k, demo = history(tracking.EVAL_MEAN_AT_K), history(tracking.EVAL_DEMO_PROB)
    entropy = history(tracking.EVAL_SAMPLE_ENTROPY)
    assert sorted(entropy) == sampled_steps and all(v > 0 for v in entropy.values())
    for t in (0.5, 1.0):
        at_mean, at_demo = (
            history(tracking.EVAL_MEAN_AT_K_AT_T.format(t)),
            history(tracking.EVAL_DEMO_PROB_AT_T.format(t)),
        )
        assert sorted(at_mean) == sorted(at_demo) == sampled_steps
        assert all(0 <= v <= 1 for v in at_mean.values()) and all(0 < v < 1 for v in at_demo.values())
    # the generation temperature (1.0) reuses its own samples and scoring pass
    assert history(tracking.EVAL_MEAN_AT_K_AT_T.format(1.0)) == mean_k
    assert history(tracking.EVAL_DEMO_PROB_AT_T.format(1.0)) == demo
    # a sharper decoding puts more mass on the demonstrations of a warm-started model
    assert all(history(tracking.EVAL_DEMO_PROB_AT_T.format(0.5))[s] > demo[s] for s in sampled_steps)
    # the curve artifact carries the same readings, None where the evaluation did not sample
    rows = result.evals
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert rows[1][tracking.CURVE_MEAN_AT_K_AT_T.format(0.5)] is None and rows[1][tracking.CURVE_SAMPLE_ENTROPY] is None
    assert rows[2][tracking.CURVE_DEMO_PROB_AT_T.format(0.5)] == history(tracking.EVAL_DEMO_PROB_AT_T.format(0.5))[2]
    assert rows[3][tracking.CURVE_SAMPLE_ENTROPY] == pytest.approx(entropy[3])
    # where the curve artifact is lost, the analysis rebuilds the same rows from the metric history
    for path in Path(tracking_uri.removeprefix("sqlite:///")).parent.rglob(Path(tracking.CURVE_ARTIFACT).name):
        path.unlink()
    rebuilt = _curve(client, result.run_id, str(tmp_path))
    keys = [tracking.CURVE_SAMPLE_ENTROPY] + [
        k.format(t) for t in (0.5, 1.0) for k in (tracking.CURVE_MEAN_AT_K_AT_T, tracking.CURVE_DEMO_PROB_AT_T)
    ]
    assert [{k: r[k] for k in keys} for r in rebuilt] == [{k: r[k] for k in keys} for r in rows]


def test_each_temperature_reads_its_own_samples_and_scoring_pass():
    """Against the evaluator's parts called by hand: the demonstrations scored at T, the samples decoded at T."""
    cfg, task, policy = _toy_policy()
    temperatures = []

    def recording(tokenizer, prompt_ids, **kwargs):
        if not kwargs.get("greedy"):
            temperatures.append(kwargs["temperature"])
        return policy.sample(tokenizer, prompt_ids, **kwargs)

    kw = dict(k=2, pass_k_prompts=8, max_new_tokens=policy.max_new_tokens, temperature=1.0, seed=0, sampler=recording)
    evaluate = Evaluator(task, policy.tokenizer, temperatures=[0.3, 1.0, 0.7], **kw)
    res = evaluate(policy.model)
    assert temperatures == [1.0, 0.3, 0.7]  # the generation temperature first, once; then the others in order
    assert set(res.at_temperature) == {0.3, 1.0, 0.7}
    for t in (0.3, 0.7):
        assert res.at_temperature[t].demo_prob == pytest.approx(
            evaluate.demonstration_probability(policy.model, t), rel=1e-5
        )
    assert res.at_temperature[1.0].demo_prob == res.demo_prob and res.at_temperature[1.0].mean_at_k == res.mean_at_k
    assert res.at_temperature[0.3].demo_prob > res.at_temperature[0.7].demo_prob > res.demo_prob
    # with pass@k off nothing is sampled at any temperature
    assert evaluate(policy.model, pass_k=False).at_temperature == {}


def test_listing_temperatures_leaves_the_generation_temperatures_first_draws_as_they_were():
    cfg, task, policy = _toy_policy()
    kw = dict(
        k=2, pass_k_prompts=8, max_new_tokens=policy.max_new_tokens, temperature=1.0, seed=3, sampler=policy.sample
    )
    plain = Evaluator(task, policy.tokenizer, **kw)(policy.model)
    listed = Evaluator(task, policy.tokenizer, temperatures=[0.5], **kw)(policy.model)
    assert (listed.pass_at_k, listed.mean_at_k, listed.sample_entropy) == (
        plain.pass_at_k,
        plain.mean_at_k,
        plain.sample_entropy,
    )
    assert plain.at_temperature == {} and set(listed.at_temperature) == {0.5}


def test_sample_entropy_is_the_mean_per_token_entropy_of_the_samples_whole_or_chunked():
    """A decoder whose every sample is 2 tokens with 1.5 nats of entropy in all: 0.75 nats per token, whether the
    samples are decoded at once or in chunks of 3 rows."""
    cfg, task, policy = _toy_policy()

    def decode(tokenizer, prompt_ids, *, max_new_tokens, greedy=False, temperature=1.0, generator=None):
        rows = len(prompt_ids)
        return Samples(prompt_ids, [[5, 6]] * rows, [torch.zeros(2)] * rows, [True] * rows, ["x"] * rows, 1.5 * rows, 0)

    kw = dict(k=2, pass_k_prompts=5, max_new_tokens=4, temperature=1.0, seed=0, sampler=decode)
    assert Evaluator(task, policy.tokenizer, **kw)(policy.model).sample_entropy == pytest.approx(0.75)
    assert Evaluator(task, policy.tokenizer, batch_size=3, **kw)(policy.model).sample_entropy == pytest.approx(0.75)
    assert Evaluator(task, policy.tokenizer, **kw)(policy.model, pass_k=False).sample_entropy is None


@pytest.mark.parametrize("temperatures, message", [([0.5, 0.0], "must be > 0"), ([0.5, 0.5], "at most once")])
def test_eval_temperatures_are_checked_at_the_edge(temperatures, message):
    with pytest.raises(ConfigError, match=f"eval.temperatures: each {message}"):
        build_config(toy_dict(eval={"temperatures": temperatures}))


@pytest.mark.parametrize(
    ("autocast", "decode", "on"),
    [
        ("bfloat16", "static", True),
        ("bfloat16", "hf", True),
        ("bfloat16", "compiled", False),
        ("auto", "static", False),
    ],
)
def test_on_a_cpu_sampling_and_evaluation_run_in_bf16_only_when_asked_and_decoded_eagerly(autocast, decode, on):
    cfg = build_config(toy_dict(train={"autocast": autocast}, generation={"decode": decode}))
    policy = Policy(cfg, load_task(cfg.task))
    assert policy.generation_autocast is on
    with policy.precision():
        assert torch.is_autocast_enabled("cpu") is on
