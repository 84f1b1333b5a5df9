"""`word_problems`: generated multi-step word problems whose difficulty is a setting, graded by math-verify.

A problem opens with a quantity and chains `task.difficulty` events on it (buys more, gives some away, the count
doubles or triples, shares equally among boxes and keeps one), then asks for the quantity left:

    Ada has 14 marbles. Ada buys 7 more marbles. Then Ada gives 5 marbles to a friend. How many marbles does Ada
    have now? Give the final answer as a number.

Its demonstration works the events one line each and ends `#### 16`. A completion's stated answer (after `####`,
else its last `\\boxed{}`, else its last number) is compared with the reference exactly, then by math-verify
(`workbench.trial.answers`). Difficulty 1 is one event on numbers up to 20; each level adds an event and widens
the numbers. Calibrated on SmolLM2-135M-Instruct (docs/trial.md, "Tasks"): the level sets where a pretrained small
model starts, so that RL has signal (groups with mixed rewards) and headroom.

Every problem is made from its key (the train set is 200,000 keys; the first `n_eval` keys, drawn from another
stream, are the held-out set), so a process builds only the problems it reads.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from workbench.config import TaskConfig
from workbench.trial.answers import answers_equal, final_answer
from workbench.trial.tasks import Example, LazyExamples, Task, register_task

TRAIN_SIZE = 200_000
ASK = "Give the final answer as a number."
_NAMES = ["Ada", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun"]
_ITEMS = ["marbles", "apples", "stickers", "pens", "coins", "shells", "cards", "books"]

Event = Callable[[random.Random, str, str, int, int], "tuple[str, str, int] | None"]
"""(rng, name, item, value, difficulty) -> (sentence, worked line, new value), or None when it cannot apply to `value`."""


def _counted(n: int, item: str) -> str:
    return item[:-1] if n == 1 else item


def _buys(rng, name, item, v, difficulty):
    b = rng.randint(2, 9 + 5 * difficulty)
    return f"{name} buys {b} more {_counted(b, item)}.", f"{v} + {b} = {v + b}", v + b


def _gives(rng, name, item, v, difficulty):
    if v < 3:
        return None
    b = rng.randint(1, min(v - 1, 9 + 5 * difficulty))
    return f"{name} gives {b} {_counted(b, item)} to a friend.", f"{v} - {b} = {v - b}", v - b


def _grows(rng, name, item, v, difficulty):
    if v > 60:
        return None
    k = rng.choice([2, 3])
    word = {2: "doubles", 3: "triples"}[k]
    return f"Then the number of {item} {name} has {word}.", f"{v} * {k} = {v * k}", v * k


def _shares(rng, name, item, v, difficulty):
    ks = [k for k in (2, 3, 4, 5) if v % k == 0 and v // k >= 1]
    if not ks:
        return None
    k = rng.choice(ks)
    return (
        f"{name} shares the {item} equally among {k} boxes and keeps one box.",
        f"{v} / {k} = {v // k}",
        v // k,
    )


EVENTS: tuple[Event, ...] = (_buys, _gives, _grows, _shares)


def problem(key: int, difficulty: int, stream: str) -> Example:
    """Problem `key` of a stream (`train:<seed>` or `eval:<seed>`) with `difficulty` events."""
    rng = random.Random(f"{stream}:{difficulty}:{key}")
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    value = rng.randint(3, 10 + 10 * difficulty)
    sentences, lines = [f"{name} has {value} {item}."], []
    while len(lines) < difficulty:
        made = rng.choice(EVENTS)(rng, name, item, value, difficulty)
        if made is None:
            continue
        sentence, line, value = made
        sentences.append(sentence)
        lines.append(line)
    question = " ".join(sentences) + f" How many {item} does {name} have now? {ASK}"
    return Example(question, str(value), "\n".join(lines) + f"\n#### {value}")


def _checked(completion: str, example: Example) -> bool:
    return answers_equal(final_answer(completion), example.answer)


def longest_answer_tokens(difficulty: int) -> int:
    """The completion limit: a pretrained instruct model explains before it answers (~40 tokens an event)."""
    return 64 + 32 * difficulty


@register_task("word_problems")
def word_problems_task(cfg: TaskConfig) -> Task:
    """`task.difficulty` events per problem; prompts framed `Q: ...\\nA: `, or bare with `task.chat_template`."""
    d, seed = cfg.difficulty, cfg.split_seed

    def framed(example: Example) -> Example:
        prompt = example.prompt if cfg.chat_template else f"Q: {example.prompt}\nA: "
        return Example(prompt, example.answer, example.demonstration)

    def train(k: int) -> Example:
        return framed(problem(k, d, f"train:{seed}"))

    held_out = [framed(problem(k, d, f"eval:{seed}")) for k in range(cfg.n_eval)]
    return Task(
        "word_problems", LazyExamples(list(range(TRAIN_SIZE)), train), held_out, longest_answer_tokens(d), _checked
    )
