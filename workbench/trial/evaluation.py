"""Held-out evaluation: greedy pass@1, sampled pass@k and mean@k, and the probability of the reference
demonstrations, on the task's fixed evaluation set; at the evaluations that sample, the same sampled accuracy and
demonstrations' probability at other decoding temperatures, and the entropy of the samples (what separates a policy
that sharpens from one that learns: docs/measurement.md, "Skill or sharpness")."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Sequence

import torch

from workbench import seeds
from workbench.backends.hf import encode_prompts, sample
from workbench.backends.scoring import score
from workbench.trial.tasks import Task


@dataclass(frozen=True)
class AtTemperature:
    """What an evaluation reads at one decoding temperature."""

    mean_at_k: float
    """Sampled pass@1: the mean reward of k samples per pass@k prompt, drawn at this temperature."""
    demo_prob: float
    """Mean probability of the reference demonstrations at this temperature (one scoring pass)."""


@dataclass
class EvalResult:
    accuracy: float
    """Greedy pass@1 over the whole held-out set (the temperature-0 point)."""
    pass_at_k: float | None
    """Share of the first `pass_k_prompts` held-out prompts with at least one correct answer among k samples (None
    when this evaluation did not sample it: `eval.pass_k_every`)."""
    k: int
    mean_at_k: float | None = None
    """Mean reward of the same k samples per prompt (avg@k, the sampled accuracy that DAPO and most reasoning RL
    papers report): an expectation under the sampling policy, so it moves smoothly with the weights where greedy
    accuracy flips whole answers at once. None when pass@k was not sampled."""
    demo_prob: float | None = None
    """(None when this evaluation did not score it: `eval.demo_prob_every`.) Mean over the held-out prompts of the probability that sampling (at the generation temperature) produces the
    prompt's reference demonstration and stops: one scoring pass, no sampling noise. On a task with one correct
    completion per prompt (`arithmetic`) this is the expected sampled accuracy; where there are many (`split`), a
    lower bound on it."""
    sample_entropy: float | None = None
    """Mean per-token entropy (nats) of the distributions the pass@k samples were drawn from, at the generation
    temperature: how sharp the policy is on the held-out prompts. None when pass@k was not sampled."""
    at_temperature: dict[float, AtTemperature] = field(default_factory=dict)
    """By decoding temperature (`eval.temperatures`): sampled pass@1 and the demonstrations' probability there. Empty
    when pass@k was not sampled."""


class Evaluator:
    """Encodes the held-out prompts once; evaluates any policy on them."""

    def __init__(
        self,
        task: Task,
        tokenizer,
        *,
        k: int,
        pass_k_prompts: int,
        max_new_tokens: int,
        temperature: float,
        seed: int,
        device="cpu",
        sampler: Callable | None = None,
        chat: bool = False,
        batch_size: int | None = None,
        temperatures: Sequence[float] = (),
        scoring_mib: float | None = None,
    ):
        self.task, self.tokenizer, self.k = task, tokenizer, k
        self.scoring_mib = scoring_mib
        """The demonstrations' scoring pass's logits bound (`train.scoring_mib`); None: unbounded."""
        self.sampler = sampler
        """The policy's decoder (`Policy.sample`); None: `hf.sample` on the model passed in."""
        self.max_new_tokens, self.temperature = max_new_tokens, temperature
        self.temperatures = tuple(temperatures)
        """Decoding temperatures read at the evaluations that sample (`eval.temperatures`); the generation
        temperature's, when listed, reuses its pass@k samples and its scoring pass."""
        self.batch_size = batch_size
        """Rows per decode or scoring call (`eval.batch_size`); None: all at once."""
        self.prompt_ids = encode_prompts(tokenizer, [e.prompt for e in task.eval], chat=chat)
        self.k_examples = task.eval[:pass_k_prompts]
        self.k_prompt_ids = [p for p in self.prompt_ids[:pass_k_prompts] for _ in range(k)]
        eos = tokenizer.eos_token_id
        # the demonstration's tokens after the prompt, as the warm start frames them (no BOS), then EOS
        self.demo_ids = [
            ids[1:] + [eos] if ids and ids[0] == tokenizer.bos_token_id else ids + [eos]
            for ids in encode_prompts(tokenizer, [e.demonstration for e in task.eval])
        ]
        # A separate generator: evaluating never shifts the training sampler's random stream.
        self.generator = torch.Generator(device=device).manual_seed(seeds.evaluation(seed))

    def _rewards(self, out, examples) -> list[float]:
        return [self.task.reward(t, e, f) for t, e, f in zip(out.texts, examples, out.finished)]

    @torch.no_grad()
    def __call__(self, model, *, pass_k: bool = True, demo_prob: bool = True) -> EvalResult:
        was_training = model.training
        model.eval()
        decode = self._chunked(self.sampler or partial(sample, model))
        greedy = decode(self.tokenizer, self.prompt_ids, max_new_tokens=self.max_new_tokens, greedy=True)
        accuracy = sum(self._rewards(greedy, self.task.eval)) / len(self.task.eval)
        demo_prob = self.demonstration_probability(model) if demo_prob else None
        if not pass_k:
            model.train(was_training)
            return EvalResult(accuracy, None, self.k, demo_prob=demo_prob)
        # The generation temperature's samples are drawn first, so listing other temperatures leaves its draws as
        # they were at the first evaluation (later ones follow the extra draws: the stream is the evaluator's own).
        sampled = self._sampled(decode, self.temperature)
        rewards = self._rewards(sampled, [e for e in self.k_examples for _ in range(self.k)])
        hits = [max(rewards[i : i + self.k]) for i in range(0, len(rewards), self.k)]
        mean_at_k = sum(rewards) / len(rewards)
        at_temperature = {}
        for t in self.temperatures:
            if t == self.temperature:
                at_t = AtTemperature(
                    mean_at_k, demo_prob if demo_prob is not None else self.demonstration_probability(model)
                )
            else:
                at_t = AtTemperature(self.sampled_accuracy(decode, t), self.demonstration_probability(model, t))
            at_temperature[t] = at_t
        model.train(was_training)
        return EvalResult(
            accuracy, sum(hits) / len(hits), self.k, mean_at_k, demo_prob, sampled.entropy_mean, at_temperature
        )

    def _sampled(self, decode: Callable, temperature: float):
        return decode(
            self.tokenizer,
            self.k_prompt_ids,
            max_new_tokens=self.max_new_tokens,
            temperature=temperature,
            generator=self.generator,
        )

    def sampled_accuracy(self, decode: Callable, temperature: float) -> float:
        """Sampled pass@1 at `temperature`: the mean reward of k samples per pass@k prompt."""
        rewards = self._rewards(self._sampled(decode, temperature), [e for e in self.k_examples for _ in range(self.k)])
        return sum(rewards) / len(rewards)

    @torch.no_grad()
    def demonstration_probability(self, model, temperature: float | None = None) -> float:
        """Mean probability of the held-out reference demonstrations (EOS included) under `model` at `temperature`
        (None: the sampling temperature)."""
        # one padded call: the held-out prompts are all distinct and nothing is trained, where packing's two passes
        # and its scatters cost more than the padding they save (0.25 s against 0.22 s on the default held-out set)
        temperature = self.temperature if temperature is None else temperature
        n, step = len(self.prompt_ids), self.batch_size or len(self.prompt_ids)
        total = 0.0
        for i in range(0, n, step):
            logp, _ = score(
                model,
                self.prompt_ids[i : i + step],
                self.demo_ids[i : i + step],
                temperature=temperature,
                pad_id=self.tokenizer.pad_token_id,
                packing=False,
                scoring_mib=self.scoring_mib,
            )
            total += float(torch.exp(logp.sum(dim=1)).sum())
        return total / n

    def _chunked(self, decode: Callable) -> Callable:
        """`decode` over rows in chunks of `batch_size`: the chunks' texts and finish flags, in order (what the
        rewards read), and their entropy."""
        if self.batch_size is None:
            return decode

        def run(tokenizer, prompt_ids, **kwargs) -> _Decoded:
            outs = [
                decode(tokenizer, prompt_ids[i : i + self.batch_size], **kwargs)
                for i in range(0, len(prompt_ids), self.batch_size)
            ]
            return _Decoded(
                [t for o in outs for t in o.texts],
                [f for o in outs for f in o.finished],
                sum(o.entropy_sum for o in outs),
                sum(o.generated_tokens for o in outs),
            )

        return run


@dataclass
class _Decoded:
    texts: list[str]
    finished: list[bool]
    entropy_sum: float
    generated_tokens: int

    @property
    def entropy_mean(self) -> float:
        return self.entropy_sum / max(self.generated_tokens, 1)
