"""Memory and speed settings of the trainer (`train.*`): micro-batches, gradient checkpointing, autocast and
compilation change how a step is computed, not what it computes."""

import pytest
import torch
from torch._dynamo.utils import counters

from workbench.backends.hf import checkpointing
from workbench.config import ConfigError, build_config
from workbench.trial.objectives import OBJECTIVES
from workbench.trial.policy import Policy, resolve_dtype
from workbench.trial.rollouts import PromptStream, generate_groups
from workbench.trial.step import _score_frozen, train_step
from workbench.trial.tasks import load_task

from support.toy import toy_dict


def batch_and_policy(**train):
    cfg = build_config(toy_dict(train=train))
    task = load_task(cfg.task)
    torch.manual_seed(0)
    policy = Policy(cfg, task)
    rollouts, _ = generate_groups(
        policy,
        task,
        PromptStream(len(task.train), 0).take(cfg.batch_size // cfg.group_size),
        cfg.group_size,
        0,
        torch.Generator().manual_seed(0),
        0,
    )
    assert len({len(r.completion_ids) for r in rollouts}) > 1  # lengths differ: the token weighting matters
    assert any(r.advantage != 0 for r in rollouts)
    return cfg, policy, rollouts


def gradients(cfg, policy, rollouts) -> tuple[dict[str, torch.Tensor], float]:
    """The gradients of one step (the gate captures them and drops the step: the weights stay as they are)."""
    grads = {}

    def capture(model, step):
        grads.update({n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None})
        return True

    out, _, applied = train_step(
        policy, torch.optim.Adam(policy.model.parameters(), lr=cfg.lr), rollouts, cfg, 0, gate=capture
    )
    assert not applied and grads
    return grads, out.loss.item()


@pytest.mark.parametrize("objective", sorted(OBJECTIVES))
def test_micro_batches_give_the_one_pass_gradient_of_the_token_mean_loss(objective):
    cfg, policy, rollouts = batch_and_policy()
    cfg.objective.name = objective
    for r in rollouts:  # an off-policy batch, so ratios, clipping and corrections are not all trivial
        r.behaviour_logprobs = r.behaviour_logprobs + 0.05 * torch.randn(
            len(r.behaviour_logprobs), generator=torch.Generator().manual_seed(r.uid)
        )
    whole, loss = gradients(cfg, policy, rollouts)
    cfg.train.micro_batch_size = 5  # 16 rollouts: 5, 5, 5, 1, the groups of 4 cut across micro-batches
    pieces, micro_loss = gradients(cfg, policy, rollouts)
    assert micro_loss == pytest.approx(loss, rel=1e-6, abs=1e-7)
    assert set(pieces) == set(whole)
    worst = max(float((pieces[n] - whole[n]).abs().max()) for n in whole)
    assert worst <= 1e-6
    assert max(float(g.abs().max()) for g in whole.values()) > 1e-4  # not a comparison of zeros


def test_chunked_no_grad_scoring_equals_one_pass():
    cfg, policy, rollouts = batch_and_policy()
    whole = _score_frozen(policy, rollouts)
    chunked = _score_frozen(policy, rollouts, micro_batch_size=3)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(whole, chunked))


def test_gradient_checkpointing_recomputes_the_same_gradients():
    cfg, policy, rollouts = batch_and_policy()
    plain, loss = gradients(cfg, policy, rollouts)
    cfg2, checkpointed_policy, _ = batch_and_policy(gradient_checkpointing=True)
    assert checkpointing(checkpointed_policy.model)
    checkpointed, loss2 = gradients(cfg2, checkpointed_policy, rollouts)
    assert loss2 == pytest.approx(loss, rel=1e-5)
    assert max(float((checkpointed[n] - plain[n]).abs().max()) for n in plain) <= 1e-5


def test_compiled_training_computes_the_eager_loss_and_gradients():
    """`train.compile`: the packed layers under torch.compile (the model's real RoPE rotation, fused by inductor)
    against the eager packed path (RoPE as one complex multiply): float rounding apart, the same step."""
    cfg, policy, rollouts = batch_and_policy()
    eager, loss = gradients(cfg, policy, rollouts)
    cfg2, compiled_policy, _ = batch_and_policy(compile=True)
    assert compiled_policy.compile_training
    compiled, loss2 = gradients(cfg2, compiled_policy, rollouts)
    assert loss2 == pytest.approx(loss, rel=1e-5)
    assert max(float((compiled[n] - eager[n]).abs().max()) for n in eager) <= 1e-5
    assert max(float(g.abs().max()) for g in eager.values()) > 1e-3  # not a comparison of zeros
    traced = counters["stats"]["unique_graphs"]
    _, loss3 = gradients(cfg2, compiled_policy, rollouts[:-3])  # fewer rows, other lengths: sizes are symbolic
    assert loss3 != loss2 and counters["stats"]["unique_graphs"] == traced  # no new trace


def test_compiled_training_refuses_what_it_cannot_compile():
    cfg = build_config(toy_dict(train={"compile": True, "gradient_checkpointing": True}))
    with pytest.raises(ConfigError, match="train.compile: gradient checkpointing"):
        Policy(cfg, load_task(cfg.task))


def test_bf16_autocast_runs_the_step_in_mixed_precision_close_to_float32():
    cfg, policy, rollouts = batch_and_policy()
    full, loss = gradients(cfg, policy, rollouts)
    cfg.train.autocast = "bfloat16"
    mixed, mixed_loss = gradients(cfg, policy, rollouts)
    assert mixed_loss != loss and mixed_loss == pytest.approx(
        loss, rel=0.05, abs=1e-3
    )  # bf16 matmuls: close, not equal
    cosine = torch.nn.functional.cosine_similarity(
        torch.cat([g.flatten() for g in full.values()]), torch.cat([mixed[n].flatten() for n in full]), dim=0
    )
    assert cosine > 0.95


def test_trainer_weights_default_to_float32_on_every_device():
    """`model.dtype: auto` keeps float32 master weights (bf16 weights would round Adam's ~lr-sized updates away: one
    Adam step at lr 1e-6 on a bf16 weight of 0.02 leaves it unchanged); an explicit dtype is taken as given."""
    assert resolve_dtype("auto") is torch.float32
    assert resolve_dtype("bfloat16") is torch.bfloat16
    w = torch.tensor([0.02], dtype=torch.bfloat16)
    assert torch.equal(w - 1e-6, w)  # the rounding the default avoids
