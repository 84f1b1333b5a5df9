"""The `word_problems` task: problems of `difficulty` events, worked demonstrations, graded as a model writes."""

import operator

import pytest

from workbench.config import TaskConfig
from workbench.trial.tasks import load_task
from workbench.trial.word_problems import problem

OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.floordiv}


def _task(difficulty: int, **fields):
    return load_task(TaskConfig(name="word_problems", difficulty=difficulty, n_eval=40, **fields))


@pytest.mark.parametrize("difficulty", [1, 2, 4, 6])
def test_a_problem_chains_difficulty_events_and_its_demonstration_is_right(difficulty):
    task = _task(difficulty)
    for example in [*task.eval, *task.train[:200]]:
        *lines, answer = example.demonstration.splitlines()
        assert len(lines) == difficulty and answer == f"#### {example.answer}"
        assert example.prompt.count(".") >= difficulty + 1 and example.prompt.startswith("Q: ")
        value = int(lines[0].split()[0])
        for line in lines:  # each worked line starts from the previous result and is right
            a, op, b, _, result = line.split()
            assert int(a) == value and OPS[op](int(a), int(b)) == int(result)
            value = int(result)
        assert value == int(example.answer) >= 0
        assert task.reward(example.demonstration, example, True) == 1.0


def test_answers_are_read_as_a_model_writes_them_and_graded_by_value():
    task = _task(2, chat_template=False)
    example = task.eval[0]
    n = int(example.answer)
    right = [f"So the answer is {n}.", f"... = \\boxed{{{n}}}", f"#### {n}.0", f"{n - 1} first, then {n}"]
    wrong = [f"The answer is {n + 1}.", "I cannot tell.", f"{n} and then {n + 3}"]
    assert [task.check(text, example) for text in right] == [True] * len(right)
    assert [task.check(text, example) for text in wrong] == [False] * len(wrong)
    assert task.reward(right[0], example, finished=False) == 0.0  # a completion cut at the limit earns nothing


def test_problems_are_fixed_by_their_key_and_the_held_out_set_by_the_split_seed():
    assert problem(7, 3, "train:0") == problem(7, 3, "train:0") != problem(8, 3, "train:0")
    a, b = _task(2), _task(2, split_seed=1)
    assert [e.prompt for e in a.eval] != [e.prompt for e in b.eval]
    assert [e.prompt for e in a.eval] == [e.prompt for e in _task(2).eval]
    train = {e.prompt for e in a.train[:2000]}
    assert len(train) > 1900  # distinct problems, not a handful repeated


def test_harder_levels_allow_longer_completions():
    assert _task(1).max_new_tokens < _task(3).max_new_tokens < _task(6).max_new_tokens
