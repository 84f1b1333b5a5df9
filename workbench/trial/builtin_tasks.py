"""The built-in tasks, registered on the first read of `workbench.registry.TASKS`: `arithmetic`, `split` and `jsonl`
(`workbench.trial.tasks`) and `word_problems` (`workbench.trial.word_problems`)."""

from workbench.trial import tasks, word_problems  # noqa: F401  (their decorators register them)
