"""The predict -> probe -> verify -> confirm workflow, one layer under the command line.

Each step of the workflow crosses packages: it fits the analysis to a study's runs, runs the probe and its
learning-rate sweep (the trial engine), and runs what they predict as trials of the study (the study package). The
command line parses and prints; these modules do the work, one module per step, each importing only what its step
runs (the command line loads a step's module when the command runs, so start-up stays short):

- `workbench.workflow.predict`: `workbench analyze` and `report` (the fit and its predicted optimum);
- `workbench.workflow.theory`: `workbench theory` (the closed form's optimum as knobs);
- `workbench.workflow.probe`: `workbench probe` (one short replay run measured, its prediction, the on-policy
  learning-rate sweep);
- `workbench.workflow.verify`: `workbench study verify` (the fit's, a compared model's or the probe's optimum run as
  trials of the study, handed over as a `workbench.prediction.Prediction`);
- `workbench.workflow.confirm`: `workbench study confirm` (the best configurations and the predictions re-run on
  fresh seeds).

Only the command line and this package call the analysis (import-linter's `one-way-flow` contract).
"""

DEFAULT_SWEEP_UNITS = 100.0
"""Compute units of the on-policy learning-rate sweep's first run, where the trial sets no budget."""
