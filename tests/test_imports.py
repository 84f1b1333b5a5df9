"""Start-up stays cheap: the package and the command line's entry load neither torch nor the model stack."""

import subprocess
import sys

HEAVY = ("torch", "transformers", "mlflow", "optuna", "scipy")


def _loaded_after(code: str) -> set[str]:
    probe = f"{code}\nimport sys\nprint(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_import_workbench_loads_no_heavy_library():
    assert _loaded_after("import workbench") == set()


def test_cli_help_loads_no_heavy_library():
    code = "import contextlib, io\nfrom workbench.cli import main\nwith contextlib.redirect_stdout(io.StringIO()):\n    try:\n        main(['--help'])\n    except SystemExit:\n        pass"
    assert _loaded_after(code) == set()


def test_registries_fill_on_first_read():
    code = "from workbench.registry import OBJECTIVES, STRATEGIES\nprint(sorted(STRATEGIES), sorted(OBJECTIVES))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "'uniform'" in out and "'dgg'" in out and "'ppo_clip'" in out and "'decoupled_ppo'" in out
