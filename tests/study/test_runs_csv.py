"""The per-run table from a study's Optuna record (`workbench.study.runs`): what `workbench results` recomputes a
comparison from gives the study summary's own comparison, a censored run carrying its total, never a score."""

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import create_trial

from analysis.recompute import recompute
from workbench.study import attrs, compare, runs
from workbench.study.spec import StudySpec


def test_the_table_recomputes_the_summary_comparison_with_its_censored_runs(tmp_path):
    spec = StudySpec.model_validate(
        {
            "name": "r",
            "base": {"budget": {"compute_units": 60}},
            "search_space": {"replay.ratio": {"choices": [1, 2]}, "x": {"choices": [1, 8]}},
        }
    )
    study = optuna.create_study(study_name="r", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    study.set_user_attr(attrs.TARGET, 0.55)
    study.set_user_attr(attrs.REFERENCE_MU, 0.509)
    space = {"replay.ratio": CategoricalDistribution([1, 2]), "x": CategoricalDistribution([1, 8])}
    for i, values in enumerate([[30.0, 25.0, 33.0, 28.0, None], [21.0, 17.6, 23.4, None, None]]):
        per_seed = [
            {
                "seed": s,
                "compute_to_target": v or 999.0,
                "compute_to_target_fitted": v or 999.0,
                "total_units": 60.0,
                "censored": int(v is None),
                "censored_fitted": int(v is None),
            }
            for s, v in enumerate(values)
        ]
        study.add_trial(
            create_trial(
                params={"replay.ratio": 1 + i, "x": 1 + 7 * i},
                distributions=space,
                value=1.0,
                user_attrs={attrs.PER_SEED: per_seed, attrs.BASELINE: i == 0},
            )
        )
    out = tmp_path / "reports" / "r" / "runs.csv"
    assert runs.write(study, spec, out) == 10
    text = out.read_text()
    assert "999" not in text  # the penalised score of a censored run is no value of the table
    row = compare.comparison(study)[1]
    assert recompute(tmp_path / "reports", "r", 1, 0, None) == row.ratio.fmt()
    assert (row.ratio.n, row.ratio.one_censored, row.ratio.both_censored) == (4, 1, 1)
