"""Tasks with verifiable rewards: the built-in arithmetic and split tasks and GSM8K-style JSONL files.

A task is data plus a checker: deterministic train prompts, a fixed held-out set, a demonstration per example
(for the supervised warm start) and `reward(completion, example)` in {0, 1}. Tasks are registered by name
(`register_task`); `task.name` picks one.
"""

from __future__ import annotations

import functools
import json
import random
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from workbench.config import ConfigError, TaskConfig
from workbench.registry import TASKS
from workbench.trial.answers import answers_equal, as_number, final_answer


@dataclass(frozen=True)
class Example:
    prompt: str
    """Text the policy continues (no BOS: the tokenizer adds it)."""
    answer: str
    """The reference final answer."""
    demonstration: str
    """A correct completion, used by the supervised warm start."""


class LazyExamples(Sequence):
    """Examples made on access from their keys: a 200,000-prompt train set costs its key list, not 200,000 objects
    built in every process that loads the task (most trials read a few thousand of them)."""

    def __init__(self, keys: list[int], make):
        self._keys, self._make = keys, make

    def __len__(self) -> int:
        return len(self._keys)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._make(k) for k in self._keys[i]]
        return self._make(self._keys[i])


def _answer_is_tail(example: Example) -> str:
    return example.answer


@dataclass(frozen=True)
class Task:
    name: str
    train: Sequence[Example]
    eval: list[Example]
    max_new_tokens: int
    check: Callable[[str, Example], bool]
    """Whether a finished completion's final answer is right for the example."""
    answer_tail: Callable[[Example], str] = _answer_is_tail
    """The part of an example's demonstration that the warm start's `noise` replaces by random digits (its final
    answer, at the demonstration's end)."""

    def reward(self, completion: str, example: Example, finished: bool) -> float:
        """1.0 if the completion ended (EOS) and its final answer is right, else 0.0."""
        return float(finished and self.check(completion, example))


register_task = TASKS.register
"""`@register_task("name")` on a `TaskConfig -> Task` function: `task.name: name` then runs it (`workbench.registry`)."""


# ---------------------------------------------------------------- arithmetic


def arithmetic_completion(a: int, b: int, digits: int, scratchpad: bool) -> str:
    """`a+b`'s worked answer: column additions right to left, then the sum (`7+8=15,3+4+1=8;85`)."""
    total = str(a + b)
    if not scratchpad:
        return total
    da, db = str(a).zfill(digits)[::-1], str(b).zfill(digits)[::-1]
    steps, carry = [], 0
    for x, y in zip(da, db):
        s = int(x) + int(y) + carry
        steps.append(f"{x}+{y}{'+1' if carry else ''}={s}")
        carry = s // 10
    return ",".join(steps) + ";" + total


def arithmetic_final_answer(completion: str) -> str:
    """The answer part of an arithmetic completion: after the last `;` (or the whole text without a scratchpad)."""
    return completion.rsplit(";", 1)[-1].strip()


def _exact(completion: str, example: Example) -> bool:
    return arithmetic_final_answer(completion) == example.answer


def _operand_range(digits: int) -> tuple[int, int]:
    """The smallest operand and the number of operands with `digits` digits (one digit: 0-9)."""
    lo = 10 ** (digits - 1) if digits > 1 else 0
    return lo, 10**digits - lo


@register_task("arithmetic")
def arithmetic_task(cfg: TaskConfig) -> Task:
    """`digits`-digit operand pairs in an order fixed by `split_seed`; the first `n_eval` are held out.

    All pairs when there are at most 200,000 (up to 2 digits), else a deterministic sample of 200,000.
    """
    lo, width = _operand_range(cfg.digits)
    total = width * width
    if cfg.n_eval >= min(total, 200_000):
        raise ConfigError(f"task.n_eval: must be < {min(total, 200_000)} ({cfg.digits}-digit pairs)")
    order = random.Random(cfg.split_seed).sample(range(total), min(total, 200_000))

    def example(k: int) -> Example:
        a, b = lo + k // width, lo + k % width
        return Example(f"{a}+{b}=", str(a + b), arithmetic_completion(a, b, cfg.digits, cfg.scratchpad))

    largest = 10**cfg.digits - 1  # all columns carry: the longest completion
    longest = len(arithmetic_completion(largest, largest, cfg.digits, cfg.scratchpad))
    held_out = [example(k) for k in order[: cfg.n_eval]]
    return Task("arithmetic", LazyExamples(order[cfg.n_eval :], example), held_out, longest + 2, _exact)


# ---------------------------------------------------------------- split: many correct completions per prompt


def split_completion(a: int, b: int, digits: int, scratchpad: bool) -> str:
    """A worked split of a + b: the column additions of `a+b` (as in the arithmetic task), then the pair
    (`8+9=17,5+7+1=13,1+2+1=4;158+279` for 437)."""
    pair = f"{a}+{b}"
    if not scratchpad:
        return pair
    return arithmetic_completion(a, b, digits, True).rsplit(";", 1)[0] + ";" + pair


_PAIR = re.compile(r"(\d+)\+(\d+)")


def split_pair(completion: str) -> tuple[str, str] | None:
    """The pair a split completion ends with (after the last `;`), as written; None if it is not `a+b`."""
    found = _PAIR.fullmatch(arithmetic_final_answer(completion))
    return (found.group(1), found.group(2)) if found else None


@register_task("split")
def split_task(cfg: TaskConfig) -> Task:
    """Write the prompt's number N as a sum of two `digits`-digit numbers: `437=` -> any `a+b` with a + b = 437
    and both a and b of exactly `digits` digits (no leading zero). Most prompts have hundreds of correct answers
    (at 3 digits, min(999, N - 100) - max(100, N - 999) + 1 of them: up to 900), unlike the arithmetic task, where every correct
    completion is one scratchpad string; replaying successes is then no longer close to supervised learning on
    gold answers. The demonstration of N is one split drawn at random (fixed by `split_seed`), worked like the
    arithmetic task's scratchpad, so the warm-started model samples many different a for one N.

    Every reachable N is a prompt (2 * lo .. 2 * (10^digits - 1)), in an order fixed by `split_seed`; the first
    `n_eval` are held out.
    """
    lo, width = _operand_range(cfg.digits)
    hi = lo + width - 1
    sums = list(range(2 * lo, 2 * hi + 1))
    if cfg.n_eval >= len(sums):
        raise ConfigError(f"task.n_eval: must be < {len(sums)} (the sums of two {cfg.digits}-digit numbers)")
    random.Random(cfg.split_seed).shuffle(sums)

    def example(n: int) -> Example:
        a = random.Random(f"{cfg.split_seed}:{n}").randint(max(lo, n - hi), min(hi, n - lo))
        return Example(f"{n}=", str(n), split_completion(a, n - a, cfg.digits, cfg.scratchpad))

    def check(completion: str, example: Example) -> bool:
        pair = split_pair(completion)
        if pair is None:
            return False
        a, b = pair
        well_formed = all(len(v) == cfg.digits and (cfg.digits == 1 or v[0] != "0") for v in pair)
        return well_formed and int(a) + int(b) == int(example.answer)

    def tail(example: Example) -> str:  # the second number: noise there makes a wrong pair
        return example.demonstration.rsplit("+", 1)[-1]

    longest = len(split_completion(hi, hi, cfg.digits, cfg.scratchpad))
    held_out = [example(n) for n in sums[: cfg.n_eval]]
    return Task("split", LazyExamples(sums[cfg.n_eval :], example), held_out, longest + 2, check, tail)


# ---------------------------------------------------------------- JSONL (GSM8K style)


def jsonl_lines(path: str | Path, field: str) -> Iterator[tuple[Path, int, object]]:
    """The parsed non-blank lines of a JSONL file as (file, line number, value); a missing file is an error naming
    `field` (the setting or option that gave the path), invalid JSON one naming the file and line."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(f"{field}: no such file {p}")
    for lineno, line in enumerate(p.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield p, lineno, json.loads(line)
        except json.JSONDecodeError as err:
            raise ConfigError(f"{p}:{lineno}: invalid JSON ({err.msg})") from None


def read_jsonl_examples(path: str | Path, chat: bool = False) -> list[Example]:
    """Parse a JSONL file of `{"question", "answer"}` objects, each answer ending `#### <final answer>` (a number,
    or any LaTeX math-verify reads: `\\frac{3}{4}`, `2\\sqrt{3}`, `12 \\text{ cm}`); an error names the file
    and line. A prompt is `Q: <question>\nA: `, or with `chat` the bare question (the chat template frames it)."""
    examples, p = [], Path(path).expanduser()
    for p, lineno, obj in jsonl_lines(path, "task.path"):
        if not isinstance(obj, dict):
            raise ConfigError(f"{p}:{lineno}: expected an object with question and answer")
        for key in ("question", "answer"):
            if not isinstance(obj.get(key), str) or not obj[key].strip():
                raise ConfigError(f"{p}:{lineno}: missing or empty string field {key!r}")
        final = final_answer(obj["answer"]) if "####" in obj["answer"] else None
        if final is None:
            raise ConfigError(f"{p}:{lineno}: answer must end with '#### <final answer>' (a number or LaTeX)")
        number = as_number(final)
        reference = str(number) if number is not None and number.denominator == 1 else final
        question = obj["question"].strip()
        examples.append(Example(question if chat else f"Q: {question}\nA: ", reference, obj["answer"].strip()))
    if not examples:
        raise ConfigError(f"{p}: no examples")
    return examples


def _checked(completion: str, example: Example) -> bool:
    return answers_equal(final_answer(completion), example.answer)


@register_task("jsonl")
def jsonl_task(cfg: TaskConfig) -> Task:
    examples = read_jsonl_examples(cfg.path, chat=cfg.chat_template)  # type: ignore[arg-type]
    if cfg.n_eval >= len(examples):
        raise ConfigError(f"task.n_eval: must be < the {len(examples)} examples in {cfg.path}")
    random.Random(cfg.split_seed).shuffle(examples)
    longest = max(len(e.demonstration) for e in examples)
    return Task("jsonl", examples[cfg.n_eval :], examples[: cfg.n_eval], longest + 8, _checked)


def load_task(cfg: TaskConfig) -> Task:
    """The task of a config; cached per process (a study worker runs many trials and seeds of one task)."""
    stamp = (
        Path(cfg.path).expanduser().stat().st_mtime_ns
        if cfg.name == "jsonl" and cfg.path and Path(cfg.path).expanduser().is_file()
        else 0
    )
    return _load_task(cfg.model_dump_json(), stamp)


@functools.lru_cache(maxsize=4)
def _load_task(cfg_json: str, _stamp: int) -> Task:
    cfg = TaskConfig.model_validate_json(cfg_json)
    return TASKS.lookup(cfg.name)(cfg)


# ---------------------------------------------------------------- a sample JSONL file the project writes itself

_TEMPLATES = [
    ("{n} has {a} apples and buys {b} more. How many apples does {n} have now?", "+"),
    ("A box holds {a} pens. {n} takes {b} of them. How many pens are left in the box?", "-"),
    ("{n} reads {a} pages a day for {b} days. How many pages does {n} read?", "*"),
    ("{n} saves {a} dollars in May and {b} dollars in June. How much does {n} save in total?", "+"),
    ("A bus carries {a} people and {b} get off at the first stop. How many are still on the bus?", "-"),
    ("There are {a} rows of chairs with {b} chairs in each row. How many chairs are there?", "*"),
]
_NAMES = ["Ada", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana"]


def write_sample_jsonl(path: str | Path, n: int = 200, seed: int = 0) -> Path:
    """Write `n` GSM8K-style word problems (worked answer, `#### N` final line) to `path`."""
    rng = random.Random(seed)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("w", encoding="utf-8") as f:
        for _ in range(n):
            template, op = rng.choice(_TEMPLATES)
            a, b = rng.randint(2, 40), rng.randint(2, 12)
            if op == "-":
                a += b
            value = {"+": a + b, "-": a - b, "*": a * b}[op]
            question = template.format(n=rng.choice(_NAMES), a=a, b=b)
            answer = f"{a} {op} {b} = {value}\n#### {value}"
            f.write(json.dumps({"question": question, "answer": answer}) + "\n")
    return p
