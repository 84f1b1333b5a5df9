import json

import pytest

from workbench.config import ConfigError, TaskConfig
from workbench.trial.answers import answers_equal, final_answer
from workbench.trial.tasks import (
    arithmetic_completion,
    load_task,
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


def test_final_answers_are_read_after_hashes_else_boxed_else_the_last_number():
    assert final_answer("3 + 4 = 7\n#### 1,000") == "1,000"
    assert final_answer("x\n####  \\frac{1}{2} \nmore text") == "\\frac{1}{2}"
    assert final_answer("so the answer is \\boxed{\\frac{\\sqrt{3}}{2}}, done 7") == "\\frac{\\sqrt{3}}{2}"
    assert final_answer("so the answer is 12.") == "12"
    assert final_answer("no answer here") is None and final_answer("#### ") is None


# (stated answer, reference, equal): the numeric fallback, then math-verify's judgement on MATH-style answers
TRICKY = [
    ("1,000", "1000", True),
    ("7.0", "7", True),
    ("0.5", "\\frac{1}{2}", True),
    ("1/2", "\\frac12", True),
    ("\\dfrac{1}{2}", "\\frac{1}{2}", True),
    ("-0.75", "-\\frac{3}{4}", True),
    ("3\\sqrt{2}", "\\sqrt{18}", True),
    ("\\pi/2", "\\frac{\\pi}{2}", True),
    ("12 \\text{ cm}", "12", True),  # units dropped
    ("x = 5", "5", True),  # an equation's right-hand side
    ("(1, 2)", "(1,2)", True),
    ("\\{2,1\\}", "\\{1,2\\}", True),  # sets compare unordered
    ("50\\%", "50", True),  # math-verify accepts a percentage as its number ...
    ("50\\%", "0.5", True),  # ... and as its fraction
    ("0.333", "\\frac{1}{3}", False),  # rounded too early
    ("2\\pi", "6.28", False),
    ("7", "8", False),
    (None, "8", False),
    ("", "8", False),
]


@pytest.mark.parametrize("stated, reference, equal", TRICKY)
def test_answers_are_equal_as_numbers_or_by_math_verify(stated, reference, equal):
    assert answers_equal(stated, reference) is equal


def test_a_math_style_jsonl_file_is_read_and_judged_with_latex_answers(tmp_path):
    path = tmp_path / "math.jsonl"
    rows = [
        {"question": f"q{i}", "answer": f"work\n#### {a}"}
        for i, a in enumerate(["\\frac{3}{4}", "2\\sqrt{3}", "1,250", "12.0"])
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    examples = read_jsonl_examples(path)
    assert [e.answer for e in examples] == ["\\frac{3}{4}", "2\\sqrt{3}", "1250", "12"]
    task = load_task(TaskConfig(name="jsonl", path=str(path), n_eval=1))
    by_answer = {e.answer: e for e in [*task.train, *task.eval]}
    assert task.reward("so \\boxed{0.75}", by_answer["\\frac{3}{4}"], finished=True) == 1.0
    assert task.reward("#### \\sqrt{12}", by_answer["2\\sqrt{3}"], finished=True) == 1.0
    assert task.reward("it is 1,250", by_answer["1250"], finished=True) == 1.0
    assert task.reward("#### 13", by_answer["12"], finished=True) == 0.0


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
        ('{"question": "q", "answer": "no final answer"}', "#### <final answer>"),
        ('{"question": "q", "answer": "no final answer ####  "}', "#### <final answer>"),
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


def test_a_small_jsonl_file_holds_out_a_fifth_and_pass_at_k_fits_in_it(tmp_path):
    from workbench.config import build_config

    path = write_sample_jsonl(tmp_path / "gsm.jsonl", n=300)
    cfg = build_config({"task": {"name": "jsonl", "path": str(path)}})
    assert cfg.task.n_eval == 60 and cfg.eval.pass_k_prompts == 60
    task = load_task(cfg.task)
    assert len(task.eval) == 60 and len(task.train) == 240
    big = build_config({})  # the built-in tasks keep 500 held out and pass@k on 128 of them
    assert big.task.n_eval == 500 and big.eval.pass_k_prompts == 128
    with pytest.raises(ConfigError, match="task.n_eval"):  # a size the user set is kept, and checked
        load_task(build_config({"task": {"name": "jsonl", "path": str(path), "n_eval": 300}}).task)
