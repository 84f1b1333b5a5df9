"""Adding a task is one registered function, from outside the package: `task.name` then names it, in a config, a
trial and a study, and an unknown name is one line naming the field."""

from __future__ import annotations

import pytest

from workbench.config import ConfigError, TaskConfig, build_config
from workbench.registry import TASKS
from workbench.trial.tasks import Example, Task, load_task


def echo_digit(cfg: TaskConfig) -> Task:
    """A task from outside the package: repeat a digit."""
    examples = [Example(prompt=f"{d}=", demonstration=str(d), answer=str(d)) for d in range(10)] * 4
    return Task("echo_digit", examples[cfg.n_eval :], examples[: cfg.n_eval], 4, lambda c, e: c.strip() == e.answer)


@pytest.fixture
def registered():
    """The task registered for one test (other tests see the registry as shipped)."""
    TASKS.register("echo_digit")(echo_digit)
    yield
    TASKS.pop("echo_digit")


def test_a_task_registered_from_outside_the_package_is_loaded_by_name(registered):
    cfg = build_config({"task": {"name": "echo_digit", "n_eval": 10}})
    task = load_task(cfg.task)
    assert task.name == "echo_digit" and len(task.eval) == 10 and len(task.train) == 30
    assert task.reward("7", task.eval[7], finished=True) == 1.0 and task.reward("3", task.eval[7], finished=True) == 0.0
    assert {"arithmetic", "split", "jsonl", "echo_digit"} <= set(TASKS)


def test_an_unknown_task_is_one_line_naming_the_field_and_the_closest_name():
    with pytest.raises(ConfigError) as err:
        build_config({"task": {"name": "arithmetik"}})
    line = str(err.value)
    assert "\n" not in line and "task.name" in line and "arithmetic" in line
