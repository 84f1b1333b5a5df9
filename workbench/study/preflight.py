"""Before a study is created or a worker joins it: the configurations it will run can run on this machine.

What a trial rejects only once it runs, with a `ConfigError` from its task's data or its generation backend, is
checked first by the same functions the trial calls, without loading a model: the task is built
(`workbench.trial.tasks.load_task`: the data file read, the held-out set checked against it; about 0.1 s for
GSM8K's 7,473 lines) and the backend's optional package looked up without importing it
(`workbench.backends.check_installed`). Checked: the on-policy baseline, every point, and every value of every knob
(a range's two ends), each combined with the base as its trial would be. A failure is one line naming the field
(`base.task.n_eval: ...` where the base itself cannot run), raised before anything is created.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from workbench.backends import check_installed
from workbench.config import ConfigError, TrialConfig, build_config
from workbench.study.spec import StudySpec, probe_point
from workbench.trial.tasks import load_task


def check_trial(cfg: TrialConfig) -> None:
    """`ConfigError`, naming the field, for what a trial of `cfg` would reject on this machine before it trains."""
    load_task(cfg.task)
    check_installed(cfg.generation.backend)


def check_study(spec: StudySpec) -> None:
    """`ConfigError` when a configuration the study runs first (or may sample) cannot run here."""
    for where, params in _configurations(spec):
        try:
            cfg = spec.trial_config(params, seed=spec.seed_list[0])
        except ConfigError:
            continue  # an infeasible pair (x < y) is skipped at run time; `load_spec` judged every other value
        try:
            check_trial(cfg)
        except ConfigError as err:
            raise ConfigError(_located(spec, where, err)) from None


def _configurations(spec: StudySpec) -> Iterator[tuple[str, dict[str, Any]]]:
    if spec.baseline:
        yield "the on-policy baseline", spec.baseline_params()
    for i, point in enumerate(spec.points):
        yield f"points[{i}]", point
    for knob, dim in spec.search_space.items():
        for value in dim.probe_values():
            yield f"search_space.{knob}: {value!r}", probe_point(spec, knob, value)


def _located(spec: StudySpec, where: str, err: ConfigError) -> str:
    """The error named after the spec's field: the base's where the base alone fails the same way."""
    try:
        check_trial(build_config(spec.base))
    except ConfigError as base_err:
        if str(base_err) == str(err):
            return f"base.{err}"
    return f"{where} gives a trial that cannot run here: {err}"
