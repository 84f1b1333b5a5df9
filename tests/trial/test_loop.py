"""The trial loop through the real trainer path: the buffer is exercised by training, not by hand-made tensors."""

import math

import numpy as np
import pytest
import torch
from mlflow import MlflowClient

from workbench.config import ConfigError, build_config
from workbench.trial.objectives import OBJECTIVES, ObjectiveOutput, register_objective
from workbench.trial.loop import run_trial
from workbench.trial.policy import Policy
from workbench.trial.rollouts import PromptStream, generate_groups
from workbench.trial.step import TrialDiverged, train_step
from workbench.trial.tasks import load_task

from support.toy import toy_dict, tracked


def test_ratio_one_with_capacity_b_is_on_policy_grpo(tracking_uri):
    cfg = build_config(toy_dict(replay={"ratio": 1, "capacity": 16}))
    records = []
    run_trial(tracked(cfg, tracking_uri), observer=records.append)
    assert len(records) == 4
    # not a degenerate check: some groups have mixed rewards, so advantages and the loss are non-zero
    assert any(r.advantage != 0 for rec in records for r in rec.batch)

    # A plain on-policy loop from the same building blocks and seed: sample B fresh rollouts, train on all once.
    task = load_task(cfg.task)
    torch.manual_seed(cfg.seed)
    policy = Policy(cfg, task)
    optimizer = torch.optim.Adam(policy.model.parameters(), lr=cfg.lr)
    prompts = PromptStream(len(task.train), cfg.seed)
    sampler = torch.Generator().manual_seed(cfg.seed)
    groups = cfg.batch_size // cfg.group_size
    for step, record in enumerate(records):
        fresh, _ = generate_groups(
            policy, task, prompts.take(groups), cfg.group_size, step, sampler, step * cfg.batch_size
        )
        out, _, _ = train_step(policy, optimizer, fresh, cfg, step)
        assert [r.uid for r in record.batch] == [r.uid for r in fresh]
        assert [r.completion_ids for r in record.batch] == [r.completion_ids for r in fresh]
        assert all(r.uses == 1 and r.age(step) == 0 for r in record.batch)
        assert record.loss == pytest.approx(out.loss.item(), rel=1e-6, abs=1e-7)
        assert record.metrics["offpolicy/ratio_mean"] == pytest.approx(1.0, abs=1e-4)
        assert record.metrics["replay/fresh"] == cfg.batch_size


def test_replay_trial_reuses_rollouts_within_capacity_and_horizon(tracking_uri):
    cfg = build_config(
        toy_dict(replay={"ratio": 2, "capacity": 64, "horizon": 3}, budget={"compute_units": None, "steps": 12})
    )
    records = []
    result = run_trial(tracked(cfg, tracking_uri), observer=records.append)
    uses: dict[int, int] = {}
    total_fresh = 0
    for rec in records:
        uids = [r.uid for r in rec.batch]
        assert len(uids) == cfg.batch_size == len(set(uids))  # B distinct rollouts
        assert all(0 <= r.age(rec.step) <= 3 for r in rec.batch)  # horizon respected, ages from birth
        assert rec.metrics["replay/buffer_size"] <= 64
        total_fresh += len(rec.fresh)
        for u in uids:
            uses[u] = uses.get(u, 0) + 1
    # R = B / 2 per step in the long run (the first batch borrows a full B, repaid later)
    assert abs(total_fresh - 12 * cfg.batch_size / 2) <= cfg.batch_size
    assert max(uses.values()) > 1
    assert result.metrics["final/replay_ratio"] == pytest.approx(12 * cfg.batch_size / total_fresh)
    assert result.metrics["final/steps"] == 12
    # the ledger, counted here from what was generated and trained: discarded = aged out (born 4+ steps ago) untrained
    born, trained = {}, set()
    for rec in records:
        born.update({r.uid: r.birth_step for r in rec.fresh})
        trained.update(r.uid for r in rec.batch)
        m = rec.metrics
        gone = sum(u not in trained for u, b in born.items() if rec.step - b > 3)
        assert m["compute/discarded_rollouts"] == gone
        assert m["compute/trained_once_rollouts"] == len(trained)
        assert m["compute/gen_rollouts"] == len(born) == len(trained) + m["compute/held_rollouts"] + gone
    assert any(rec.metrics["compute/discarded_rollouts"] > 0 for rec in records)
    # the diagnostics: the consecutive-gradient cosine from the second step on, the importance weights' ESS
    assert "offpolicy/grad_cosine" not in records[0].metrics
    assert all(-1 <= rec.metrics["offpolicy/grad_cosine"] <= 1 for rec in records[1:] if rec.metrics["train/grad_norm"])
    assert all(0 < rec.metrics["offpolicy/ess"] <= 1 for rec in records)
    # ... and their means over the run's steps, with the final metrics (what the analysis sets against the saving)
    mean = lambda key: np.mean([rec.metrics[key] for rec in records if key in rec.metrics])  # noqa: E731
    assert result.metrics["final/ess_mean"] == pytest.approx(mean("offpolicy/ess"))
    assert result.metrics["final/grad_cosine_mean"] == pytest.approx(mean("offpolicy/grad_cosine"))
    assert result.metrics["final/age_mean"] == pytest.approx(mean("replay/age_mean"))


def test_compute_budget_stops_the_trial_and_counts_replay_as_cheaper(tracking_uri):
    on = run_trial(
        tracked(build_config(toy_dict(budget={"compute_units": 6, "steps": None}, compute={"mu": 2.0})), tracking_uri)
    )
    rep = run_trial(
        tracked(
            build_config(
                toy_dict(
                    replay={"ratio": 2, "capacity": 64}, budget={"compute_units": 6, "steps": None}, compute={"mu": 2.0}
                )
            ),
            tracking_uri,
        ),
    )
    assert on.metrics["final/steps"] == 6 and on.metrics["final/compute_units"] == pytest.approx(6)
    # each replay step costs (B + 2 B/2) / (B + 2 B) = 2/3 of a unit (after the borrowed first fill)
    assert rep.metrics["final/steps"] >= 8
    assert 6 <= rep.metrics["final/compute_units"] < 6 + 1


def test_a_nan_loss_fails_the_trial_and_its_mlflow_run(tracking_uri):
    @register_objective("test_nan")
    def nan_objective(inp, cfg):
        return ObjectiveOutput((inp.logprobs * inp.mask).sum() * float("nan"), 1.0, 0.0)

    try:
        cfg = build_config(toy_dict(objective={"name": "test_nan"}))
        run_ids = []
        with pytest.raises(TrialDiverged, match="loss is nan at step 0"):
            run_trial(tracked(cfg, tracking_uri), on_run_created=run_ids.append)
    finally:
        OBJECTIVES.pop("test_nan")
    run = MlflowClient(tracking_uri).get_run(run_ids[0])
    assert run.info.status == "FAILED"
    assert run.data.tags["workbench.failure"].startswith("TrialDiverged: loss is nan")


def test_prompt_stream_is_a_seeded_sequence_of_epochs():
    a, b = PromptStream(10, 3), PromptStream(10, 3)
    first = a.take(10)
    assert sorted(first) == list(range(10)) and first == b.take(10)
    assert sorted(a.take(10)) == list(range(10))


def test_mismatch_correction_weights_tokens_by_the_truncated_trainer_engine_ratio():
    """The vllm backend's TIS correction, on rollouts whose engine and trainer log-probs differ (no engine needed)."""
    from workbench.trial.step import objective_input

    cfg = build_config(toy_dict())
    task = load_task(cfg.task)
    policy = Policy(cfg, task)
    fresh, _ = generate_groups(policy, task, [0, 1], 4, 0, torch.Generator().manual_seed(0), 0)
    for i, r in enumerate(fresh):  # the trainer saw token 0 as more likely than the engine did (by 0.5 or 0.05 nats)
        r.trainer_logprobs = r.behaviour_logprobs.clone()
        r.trainer_logprobs[0] += 0.5 if i % 2 else 0.05
        r.advantage = 1.0 if i % 2 else -1.0  # non-zero, so the weights show in the loss
    plain = objective_input(policy, fresh)
    corrected = objective_input(policy, fresh, correction_cap=1.2)
    assert plain.token_weights is None
    w = corrected.token_weights
    for i, r in enumerate(fresh):
        n = len(r.completion_ids)
        expected = min(math.exp(0.5 if i % 2 else 0.05), 1.2)
        assert w[i, 0].item() == pytest.approx(expected, rel=1e-5)
        assert torch.allclose(w[i, 1:n], torch.ones(n - 1), atol=1e-6)
        assert torch.allclose(corrected.behaviour_logprobs[i, :n], r.trainer_logprobs)  # the PPO ratio's old policy
    loss_plain = OBJECTIVES["ppo_clip"](plain, cfg.objective).loss
    loss_corr = OBJECTIVES["ppo_clip"](corrected, cfg.objective).loss
    assert torch.isfinite(loss_corr) and not torch.isclose(loss_plain, loss_corr)


def test_minibatch_steps_clip_against_the_policy_before_the_batch(tracking_uri):
    from workbench.trial.step import minibatches

    assert [len(m) for m in minibatches(list(range(10)), 3)] == [4, 3, 3] and len(minibatches([1], 4)) == 1
    cfg = build_config(
        toy_dict(objective={"name": "decoupled_ppo", "minibatches": 2}, replay={"ratio": 2, "capacity": 64})
    )
    records = []
    run_trial(tracked(cfg, tracking_uri), observer=records.append)
    # The second minibatch step is taken from parameters the first one moved: pi_theta / pi_prox leaves 1.
    assert any(abs(r.metrics["offpolicy/prox_ratio_mean"] - 1.0) > 1e-6 for r in records)
    assert all(r.metrics["train/updates"] >= 1 for r in records)


def test_pass_at_k_every_other_evaluation_and_always_at_the_last(tracking_uri):
    cfg = tracked(build_config(toy_dict(budget={"steps": 5}, eval={"every": 1, "pass_k_every": 2})), tracking_uri)
    result = run_trial(cfg)
    history = MlflowClient(tracking_uri).get_metric_history(result.run_id, "eval/pass_at_k")
    accuracy = MlflowClient(tracking_uri).get_metric_history(result.run_id, "eval/accuracy")
    assert [m.step for m in accuracy] == [0, 1, 2, 3, 4, 5]
    assert [m.step for m in history] == [0, 2, 4, 5]  # evaluations 0, 2, 4 and the last
    assert result.metrics["final/pass_at_k"] == history[-1].value
    # mean@k comes from the same samples: logged with pass@k, and never above it (a mean of k rewards <= their max)
    mean_k = MlflowClient(tracking_uri).get_metric_history(result.run_id, "eval/mean_at_k")
    assert [m.step for m in mean_k] == [m.step for m in history]
    assert all(0 <= m.value <= p.value for m, p in zip(mean_k, history))
    # a study that reads greedy accuracy scores the demonstrations with pass@k (`eval.demo_prob_every: null`)
    demo = MlflowClient(tracking_uri).get_metric_history(result.run_id, "eval/demo_prob")
    assert [m.step for m in demo] == [0, 2, 4, 5]
    # evaluation time is its own line, inside the trial's wall time and apart from generation and training
    m = result.metrics
    assert 0 < m["final/eval_seconds"] < m["final/wall_seconds"] - m["final/gen_seconds"] - m["final/train_seconds"]


def test_the_curve_a_study_reads_is_measured_at_every_evaluation_the_others_on_their_schedule():
    def schedule(n: int, **ev) -> list[tuple[bool, bool]]:
        cfg = build_config(toy_dict(eval={"every": 1, **ev}))
        return [cfg.eval.samples_at(i, i == n - 1) for i in range(n)]

    every_other = [True, False, True, False, True, True]
    assert schedule(6, pass_k_every=2) == list(zip(every_other, every_other))
    assert schedule(6, pass_k_every=2, metric="demo_prob") == [(p, True) for p in every_other]
    assert schedule(6, pass_k_every=2, demo_prob_every=1) == [(p, True) for p in every_other]
    assert schedule(6, pass_k_every=1, demo_prob_every=3) == [
        (True, d) for d in [True, False, False, True, False, True]
    ]
    # a study that reads greedy accuracy alone samples nothing, not even at the first and the last evaluation
    assert schedule(4, pass_k_every=None) == [(False, False)] * 4
    assert schedule(4, pass_k_every=None, demo_prob_every=2) == [(False, d) for d in [True, False, True, True]]
    with pytest.raises((ConfigError, ValueError), match="demo_prob_every"):
        build_config(toy_dict(eval={"demo_prob_every": 0}))


def test_lr_warmup_rises_linearly_then_holds(tracking_uri):
    cfg = build_config(toy_dict(lr=1e-3, lr_warmup_steps=3, budget={"compute_units": None, "steps": 6}))
    records = []
    run_trial(tracked(cfg, tracking_uri), observer=records.append)
    lrs = [rec.metrics["train/lr"] for rec in records]
    assert lrs == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3, 1e-3])
    plain = []
    run_trial(
        tracked(build_config(toy_dict(lr=1e-3, budget={"compute_units": None, "steps": 2})), tracking_uri),
        observer=plain.append,
    )
    assert [rec.metrics["train/lr"] for rec in plain] == pytest.approx([1e-3, 1e-3])


def test_mean_at_k_is_the_mean_reward_of_the_pass_at_k_samples(tracking_uri):
    """A decoder that answers right on the first of k samples for every other prompt (and greedy always right):
    pass@k = 1/2, mean@k = 1/(2k), greedy accuracy 1."""
    from workbench.backends.hf import Samples
    from workbench.trial.evaluation import Evaluator

    cfg = build_config(toy_dict())
    task = load_task(cfg.task)
    policy = Policy(cfg, task)
    k, n = 4, 10

    def decode(tokenizer, prompt_ids, *, max_new_tokens, greedy=False, temperature=1.0, generator=None):
        if greedy:
            texts = [e.answer for e in task.eval]
        else:
            texts = [
                task.eval[i // k].answer if i % k == 0 and (i // k) % 2 == 0 else "x" for i in range(len(prompt_ids))
            ]
        rows = len(prompt_ids)
        return Samples(prompt_ids, [[0]] * rows, [torch.zeros(1)] * rows, [True] * rows, texts, 0.0, 0)

    evaluate = Evaluator(
        task, policy.tokenizer, k=k, pass_k_prompts=n, max_new_tokens=4, temperature=1.0, seed=0, sampler=decode
    )
    res = evaluate(policy.model)
    assert res.accuracy == 1.0 and res.pass_at_k == 0.5 and res.mean_at_k == 0.5 / k
    assert evaluate(policy.model, pass_k=False).mean_at_k is None


def test_demo_prob_is_the_mean_probability_of_the_reference_demonstrations():
    """Against a plain full-sequence forward of each held-out prompt followed by its demonstration and EOS."""
    from workbench.trial.evaluation import Evaluator

    cfg = build_config(toy_dict())
    task = load_task(cfg.task)
    policy = Policy(cfg, task)
    tok, model = policy.tokenizer, policy.model.eval()
    evaluate = Evaluator(
        task, tok, k=2, pass_k_prompts=4, max_new_tokens=policy.max_new_tokens, temperature=0.7, seed=0
    )
    probs = []
    with torch.no_grad():
        for e in task.eval:
            prompt = tok(e.prompt)["input_ids"]
            demo = tok(e.demonstration, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
            ids = torch.tensor([prompt + demo])
            logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1] / 0.7
            logp = torch.log_softmax(logits.float(), dim=-1).gather(1, torch.tensor(demo)[:, None]).sum()
            probs.append(float(torch.exp(logp)))
    reference = sum(probs) / len(probs)
    assert 0 < reference < 1
    assert evaluate.demonstration_probability(model) == pytest.approx(reference, rel=1e-4)
    assert evaluate(model, pass_k=False).demo_prob == pytest.approx(reference, rel=1e-4)


def test_eval_batch_size_chunks_evaluation_without_changing_its_greedy_results():
    """`eval.batch_size`: the held-out set decoded and scored in chunks (7 rows of 64 here) gives the greedy accuracy
    and the demonstrations' probability of one call, and every decode call holds at most 7 rows."""
    from workbench.trial.evaluation import Evaluator

    cfg = build_config(toy_dict())
    task = load_task(cfg.task)
    policy = Policy(cfg, task)
    sizes = []

    def counting(tokenizer, prompt_ids, **kwargs):
        sizes.append(len(prompt_ids))
        return policy.sample(tokenizer, prompt_ids, **kwargs)

    kw = dict(k=2, pass_k_prompts=8, max_new_tokens=policy.max_new_tokens, temperature=0.7, seed=0)
    whole = Evaluator(task, policy.tokenizer, sampler=counting, **kw)(policy.model, pass_k=False)
    assert sizes == [len(task.eval)]
    sizes.clear()
    chunked = Evaluator(task, policy.tokenizer, sampler=counting, batch_size=7, **kw)(policy.model)
    assert max(sizes) == 7 and sum(sizes) == len(task.eval) + 8 * 2
    assert 0 < whole.accuracy < 1 and chunked.accuracy == whole.accuracy
    assert chunked.demo_prob == pytest.approx(whole.demo_prob, rel=1e-5)
    assert chunked.pass_at_k is not None


def test_eval_metric_chooses_the_curve_compute_to_target_reads(tracking_uri):
    """`eval.metric: demo_prob`: the final compute-to-target estimates are those of the demonstrations' probability
    curve, not of greedy accuracy (which is still logged as `final/accuracy`)."""
    from workbench.estimators import curve_summary, readings

    target = 0.01
    cfg = tracked(
        build_config(
            toy_dict(budget={"steps": 4}, eval={"every": 1, "metric": "demo_prob", "target_accuracy": target})
        ),
        tracking_uri,
    )
    result = run_trial(cfg)
    demo = readings(result.evals, "demo_prob")
    spent = [e["compute_units"] for e in result.evals]
    expected = curve_summary(spent, demo, target, cfg.budget.compute_units)
    greedy = curve_summary(spent, [e["accuracy"] for e in result.evals], target, cfg.budget.compute_units)
    logged = {k: result.metrics[f"final/{k}"] for k in expected if f"final/{k}" in result.metrics}
    assert logged == pytest.approx({k: expected[k] for k in logged}, nan_ok=True)
    assert logged != pytest.approx({k: greedy[k] for k in logged}, nan_ok=True)  # the normalised AUC at least differs
    assert result.metrics["final/accuracy"] == result.evals[-1]["accuracy"]
    assert demo != [e["accuracy"] for e in result.evals]


def test_eval_metric_is_checked_at_the_edge():
    from workbench.config import ConfigError, load_config
    from workbench.estimators import readings

    with pytest.raises((ConfigError, ValueError), match="eval.pass_k_every"):
        build_config(toy_dict(eval={"metric": "mean_at_k", "pass_k_every": 2}))
    with pytest.raises((ConfigError, ValueError), match="eval.metric"):
        load_config(None, ["eval.metric=greedy"])
    with pytest.raises(ValueError, match="mean_at_k is missing"):
        readings([{"accuracy": 0.5, "mean_at_k": None}], "mean_at_k")


def test_a_run_short_of_its_target_goes_on_to_it_or_to_the_cap(tracking_uri):
    """`budget.until_target_units`: past `compute_units` a run goes on only while its evaluations have not reached
    the target; one that reached it stops at the budget, one that never does stops at the cap."""
    base = {"compute_units": 2, "steps": None}
    reached = run_trial(
        tracked(
            build_config(
                toy_dict(budget={**base, "until_target_units": 6}, eval={"every_units": 1, "target_accuracy": 0.01})
            ),
            tracking_uri,
        )
    )
    never = run_trial(
        tracked(
            build_config(
                toy_dict(budget={**base, "until_target_units": 5}, eval={"every_units": 1, "target_accuracy": 1.0})
            ),
            tracking_uri,
        )
    )
    plain = run_trial(
        tracked(build_config(toy_dict(budget=base, eval={"every_units": 1, "target_accuracy": 1.0})), tracking_uri)
    )
    units = lambda r: r.evals[-1]["compute_units"]  # noqa: E731
    assert 2 <= units(reached) < 3 and 2 <= units(plain) < 3  # the target met before the budget: no extension
    assert 5 <= units(never) < 6  # never met: on to the cap, evaluated on its schedule all the way
    assert [round(e["compute_units"]) for e in never.evals][:6] == [0, 1, 2, 3, 4, 5]


def test_the_target_cap_must_lie_above_the_budget():
    with pytest.raises(ConfigError, match="budget.until_target_units"):
        build_config(toy_dict(budget={"compute_units": 4, "steps": None, "until_target_units": 4}))


def test_a_fixed_mu_gives_the_same_compute_units_beside_a_cpu_bound_job(tracking_uri):
    """The compute unit counts work, not seconds, once mu is fixed (`compute.mu`, a study's `compute_mu`): the same
    trial alone and beside a process that keeps a core busy spends the same units at every evaluation, while its
    wall-clock mu (a logged diagnostic) is free to move."""
    import subprocess
    import sys

    cfg = build_config(toy_dict(compute={"mu": 0.509}, budget={"compute_units": None, "steps": 6}))
    alone = run_trial(tracked(cfg, tracking_uri))
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        loaded = run_trial(tracked(cfg, tracking_uri))
    finally:
        burner.kill()
        burner.wait()
    spent = lambda r: [e["compute_units"] for e in r.evals]  # noqa: E731
    assert len(spent(alone)) == len(spent(loaded)) >= 3
    assert spent(loaded) == pytest.approx(spent(alone), rel=0.02)
    assert alone.metrics["final/mu_measured"] > 0 and loaded.metrics["final/mu_measured"] > 0


def test_an_extended_run_goes_on_past_its_crossing_by_the_margin():
    """Stopped at its first crossing, a run leaves a fitted curve nothing beyond it (the `fitted` estimator then
    censors it): it goes on to (1 + until_target_margin) x the units it had spent at the later of its first crossing
    and its fitted curve's, never past the cap."""
    from types import SimpleNamespace

    from workbench.estimators import fitted
    from workbench.trial.record import budget_left, reached_at

    cfg = build_config(
        toy_dict(
            budget={"compute_units": 60, "steps": None, "until_target_units": 240},
            eval={"every_units": 3, "target_accuracy": 0.5},
        )
    )
    rows = [{"compute_units": u, "accuracy": a} for u, a in ((0, 0.3), (60, 0.45), (160, 0.52))]
    left = lambda units, evals: budget_left(cfg, 1, SimpleNamespace(units=units), evals)  # noqa: E731
    assert left(100, rows[:2])  # short of the target past the budget: on
    assert left(199, rows) and not left(200, rows)  # crossed at 160: on to 200
    assert not left(240, rows[:2])  # the cap
    early = [{"compute_units": 0, "accuracy": 0.3}, {"compute_units": 30, "accuracy": 0.6}]
    assert not left(60, early)  # crossed early: the budget's end is past the margin already
    # one evaluation touches the target, the sigmoid fitted to the curve crosses it only beyond: the fitted estimator
    # would censor the run, so it goes on until the fit crosses within it, then the margin past the later crossing
    touched = [
        {"compute_units": u, "accuracy": a} for u, a in zip(range(0, 61, 12), (0.3, 0.35, 0.38, 0.42, 0.44, 0.51))
    ]
    cfg.budget.compute_units = 20
    assert left(76, touched)  # crossed first at 60: 75 would have stopped it
    held = touched + [{"compute_units": 72, "accuracy": 0.49}, {"compute_units": 84, "accuracy": 0.53}]
    crossing = fitted([r["compute_units"] for r in held], [r["accuracy"] for r in held], 0.5).value  # ~69
    assert 60 < crossing < 84 and reached_at(held, "accuracy", 0.5) == crossing
    assert left(crossing * 1.25 - 0.1, held) and not left(crossing * 1.25, held)
