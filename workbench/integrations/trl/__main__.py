"""`python -m workbench.integrations.trl`: one trial of `trainer.kind: trl`, as a study (or `workbench train`) starts
it: the trial config from `$WORKBENCH_TRIAL_CONFIG`, its MLflow run `$MLFLOW_RUN_ID` (docs/trainers.md)."""

from __future__ import annotations

import json
import os
import sys
import traceback

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local model only; no telemetry from TRL's trainer
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def main() -> int:
    import warnings

    # transformers' deprecation notes about TRL's own arguments (`gradient_checkpointing`): not the user's to act on
    warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")
    from workbench import faults, progress
    from workbench.config import ConfigError, build_config

    progress.setup_logging()
    try:
        from workbench.integrations.trl.trial import run

        cfg = build_config(json.loads(open(os.environ["WORKBENCH_TRIAL_CONFIG"]).read()))
        run(cfg, os.environ["MLFLOW_RUN_ID"])
    except ConfigError as err:
        print(f"trl trial: error: {err}", file=sys.stderr)
        return 2
    except ImportError as err:
        print(f"trl trial: error: {faults.one_line(err)} (pip install 'replay-workbench[trl]')", file=sys.stderr)
        return 2
    except Exception as err:
        traceback.print_exc()  # for the person debugging; the line after it is what the study reports
        print(f"trl trial: error: {faults.one_line(err, typed=True)}", file=sys.stderr)
        raise SystemExit(1) from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
