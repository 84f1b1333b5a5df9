"""Studies: Optuna samples buffer settings, every trial is a real training run logged to MLflow (docs/studies.md).

Where things are: the spec (`spec`), storages (`storage`), the study's handles and creation (`context`), one
trial over its seeds (`objective`), a worker (`worker`), the local driver (`driver`), what has been done
(`summary`), the fitted optimum run as trials (`verify`), and the Optuna attribute names (`attrs`).
"""
