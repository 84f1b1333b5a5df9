import json

import pytest

from workbench.config import ConfigError, TaskConfig
from workbench.trial.tasks import (
    arithmetic_completion,
    extract_final_number,
    load_task,
    numbers_equal,
    read_jsonl_examples,
    split_completion,
    write_sample_jsonl,
)


def test_arithmetic_scratchpad_shows_the_column_additions():
    assert arithmetic_completion(37, 48, 2, True) == "7+8=15,3+4+1=8;85"
    assert arithmetic_completion(99, 99, 2, True) == "9+9=18,9+9+1=19;198"
    assert arithmetic_completion(347, 485, 3, True) == "7+5=12,4+8+1=13,3+4+1=8;832"
    assert arithmetic_completion(37, 48, 2, False) == "85"


def test_arithmetic_task_is_deterministic_with_a_fixed_held_out_set():
    a, b = load_task(TaskConfig(digits=2, n_eval=100)), load_task(TaskConfig(digits=2, n_eval=100))
    assert a.eval == b.eval and a.train[:50] == b.train[:50]
    assert len(a.eval) == 100 and len(a.train) == 8100 - 100
    assert not {e.prompt for e in a.eval} & {e.prompt for e in a.train}
    ex = a.eval[0]
    assert a.reward(ex.demonstration, ex, finished=True) == 1.0
    assert a.reward(ex.demonstration, ex, finished=False) == 0.0  # no EOS, no reward
    assert a.reward(ex.demonstration[:-1] + "x", ex, finished=True) == 0.0
    # only the final answer counts, not the scratchpad
    assert a.reward("garbage;" + ex.answer, ex, finished=True) == 1.0


def test_split_completion_works_the_columns_then_writes_the_pair():
    assert split_completion(158, 279, 3, True) == "8+9=17,5+7+1=13,1+2+1=4;158+279"
    assert split_completion(37, 48, 2, False) == "37+48"


def test_split_task_accepts_every_well_formed_split_and_nothing_else():
    task = load_task(TaskConfig(name="split", digits=2, n_eval=50))
    assert len(task.eval) == 50 and len(task.train) == 179 - 50  # N from 20 to 198
    assert not {e.prompt for e in task.eval} & {e.prompt for e in task.train}
    ex = next(e for e in task.eval if 60 <= int(e.answer) <= 150)
    n = int(ex.answer)
    splits = [(a, n - a) for a in range(10, 100) if 10 <= n - a <= 99]
    assert len(splits) > 20  # many distinct correct completions for one prompt
    assert all(task.reward(split_completion(a, b, 2, True), ex, finished=True) == 1.0 for a, b in splits)
    assert task.reward(ex.demonstration, ex, finished=True) == 1.0
    assert task.reward(ex.demonstration, ex, finished=False) == 0.0
    a, b = splits[0]
    assert task.reward(f"junk;{a}+{b + 1}", ex, finished=True) == 0.0  # wrong sum
    assert task.reward(f"junk;{b}+{a}", ex, finished=True) == 1.0  # only the pair counts
    assert task.reward(f"junk;0{a}+{b}", ex, finished=True) == 0.0  # three digits
    assert task.reward(f"junk;{n - 5}+5", ex, finished=True) == 0.0  # one digit
    assert task.reward(f"junk;{n}", ex, finished=True) == 0.0  # the sum is not a split
    # the warm start's noise replaces the second number: a wrong pair with the same format
    assert ex.demonstration.endswith("+" + task.answer_tail(ex))


def test_split_demonstrations_differ_across_prompts_and_are_fixed_by_the_split_seed():
    one, again = load_task(TaskConfig(name="split", split_seed=3)), load_task(TaskConfig(name="split", split_seed=3))
    assert one.eval == again.eval and one.train[:20] == again.train[:20]
    firsts = {e.demonstration.rsplit(";", 1)[1].split("+")[0] for e in one.eval}
    assert len(firsts) > 300  # the first number is drawn per prompt, not a fixed rule


def test_split_task_needs_a_held_out_set_smaller_than_its_prompts():
    with pytest.raises(ConfigError, match="task.n_eval"):
        load_task(TaskConfig(name="split", digits=2))  # 179 sums, 500 held out by default


def test_numeric_equivalence_of_final_answers():
    assert extract_final_number("3 + 4 = 7\n#### 1,000") == "1,000"
    assert extract_final_number("so the answer is 12.") == "12"
    assert numbers_equal("1,000", "1000") and numbers_equal("7.0", "7") and numbers_equal("1/2", "0.5")
    assert not numbers_equal("7", "8") and not numbers_equal(None, "8")


def test_sample_jsonl_round_trips_into_a_task(tmp_path):
    path = write_sample_jsonl(tmp_path / "sample.jsonl", n=50)
    examples = read_jsonl_examples(path)
    assert len(examples) == 50
    task = load_task(TaskConfig(name="jsonl", path=str(path), n_eval=10))
    assert len(task.eval) == 10 and len(task.train) == 40
    ex = task.eval[0]
    assert task.reward(ex.demonstration, ex, finished=True) == 1.0
    assert task.reward("the answer is " + ex.answer, ex, finished=True) == 1.0
    assert task.reward("#### 123456789", ex, finished=True) == 0.0


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", "invalid JSON"),
        ('["a list"]', "expected an object"),
        ('{"question": "q"}', "'answer'"),
        ('{"question": "", "answer": "#### 3"}', "'question'"),
        ('{"question": "q", "answer": "no final answer"}', "#### <number>"),
    ],
)
def test_malformed_jsonl_lines_name_file_and_line(tmp_path, line, message):
    path = tmp_path / "data.jsonl"
    good = json.dumps({"question": "1+1?", "answer": "1+1=2\n#### 2"})
    path.write_text(f"{good}\n\n{good}\n{line}\n{good}\n")
    with pytest.raises(ConfigError) as err:
        read_jsonl_examples(path)
    assert str(err.value).startswith(f"{path}:4: ") and message in str(err.value)


def test_missing_jsonl_file_names_the_field(tmp_path):
    with pytest.raises(ConfigError, match="task.path"):
        load_task(TaskConfig(name="jsonl", path=str(tmp_path / "missing.jsonl")))
