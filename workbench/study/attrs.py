"""Names of the user attributes the workbench stores on Optuna studies and trials (MLflow's names live in
`workbench.tracking`)."""

# on the study
SPEC = "spec"
"""The validated spec the study was created with."""
PARENT_RUN = "mlflow_parent_run_id"
"""The study's MLflow parent run."""
REFERENCE_MU = "reference_mu"
"""The study's reference mu (also stored on each trial, as the mu its compute was accounted at)."""
TARGET = "target_accuracy"
"""The study's target accuracy: the spec's number, or set by the baseline when the spec says `auto`."""
REQUEUED = "requeued"
"""Numbers of failed trials a resumed `study run` dealt with (interrupted ones, and those behind a fail-fast stop,
`workbench.study.failfast`): their configurations enqueued again, unless no longer a point of the spec's space."""

LR_EXTENSIONS = "lr_extensions"
"""`lr_sweep`: learning rates queued past an end of the sweep (`workbench.study.lr_sweep`); they add to n_trials."""

# on a trial
RUN = "mlflow_run_id"
"""The trial's MLflow run (the MLflow run carries the trial number back: `tracking.TRIAL_NUMBER`)."""
BASELINE = "baseline"
POINT = "point"
LR_EXTENSION = "lr_extension"
"""A point queued past an end of its arm's lr sweep (`workbench.study.lr_sweep`)."""
LR_PAST_DECLINE = "lr_past_decline"
"""A point not trained: the two lrs below it on its arm's sweep were resolved in the arm's disfavour
(`workbench.study.lr_sweep.held`); skipped, and taken off the study's n_trials."""
REQUEUED_FROM = "requeued_from"
SKIPPED = "skipped"
"""A sampler proposal that was not trained (x < y, or a configuration already run); pruned, not counted."""
SKIP_REASON = "skip_reason"
ARM = "arm"
"""A trial that is not a sampler proposal (`predicted`: the fitted optimum run by `study verify`; `confirm`: a
configuration re-run on fresh seeds by `study confirm`)."""
KNOBS = "knobs"
"""The knob values of an arm (kept apart from `params`, which only sampler proposals have)."""
EXTENDS = "extends"
"""A `race` arm: the number of the trial whose configuration it runs on more seeds (merged into it)."""
CONFIRMS = "confirms"
"""A `confirm` arm: the number of the trial whose configuration it re-runs on fresh seeds."""
PREDICTED = "predicted_compute_to_target"
PREDICTED_TWINS = "predicted_twins"
"""Study: the trials whose knobs a `study verify` prediction named (measured already, so it ran nothing new);
`study confirm --predicted` re-runs them as predictions."""
PER_SEED = "per_seed"
SEEDS = "seeds"
"""The seeds a trial ran (the spec's, or the fresh seeds of a `confirm` arm)."""
SUMMARY = "summary"
CENSORED_SEEDS = "censored_seeds"
FAIL_REASON = "fail_reason"
CONFIG_ERROR = "config_error"
"""A trial that failed with a `ConfigError` (a configuration that cannot run): its one-line message. It stops the
study (`workbench.study.failfast`)."""
DEVICES = "devices"
"""What the trial's worker process ran on (`study run/worker --devices`): kind, ids, pid, and what it saw (its
CUDA_VISIBLE_DEVICES or its CPU affinity)."""
PRUNE_REASON = "prune_reason"
"""Why the compute pruner stopped a trial."""
INTERRUPTED = "interrupted"
PROGRESS = "progress"
"""A running trial's progress, `seed 2/3, 31/60 units`, updated at most every few seconds (the driver's bar shows it)."""
