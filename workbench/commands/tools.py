"""`workbench theory` (the closed-form optimum) and `workbench ui` (the stores' web interfaces)."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

from workbench import tracking
from workbench.commands import flags
from workbench.commands.base import Command
from workbench.config import ConfigError, resolve_tracking_uri


class Theory(Command):
    """Closed-form optimum of Arnal et al. Theorem 4.5 under the power-law variance (App. C.3.2)."""

    name = "theory"
    help = "closed-form optimal staleness horizon and replay ratio (Arnal et al.)"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--mu", type=float, required=True, help="generation cost / training cost of a rollout")
        p.add_argument("--rho", type=float, required=True, help="sample-iterate coupling, >= 0")
        p.add_argument(
            "--alpha", type=float, required=True, help="noise growth exponent, sigma(tau) ~ tau^alpha, < 1/2"
        )
        p.add_argument("--batch-size", type=int, default=128)
        p.add_argument("--json", action="store_true")

    def run(self, args: argparse.Namespace) -> int:
        for name in ("mu", "rho", "alpha"):
            value = getattr(args, name)
            if not math.isfinite(value) or value < 0 or (name != "rho" and value == 0):
                raise ConfigError(
                    f"--{name}: must be a {'non-negative' if name == 'rho' else 'positive'} number (got {value})"
                )
        if not args.alpha < 0.5:
            raise ConfigError(
                f"--alpha: must be < 1/2 (got {args.alpha}); at alpha >= 1/2 the optimum is on-policy (y* -> 0)"
            )
        if args.batch_size < 1:
            raise ConfigError(f"--batch-size: must be >= 1 (got {args.batch_size})")
        from workbench.workflow.theory import theory

        out, k = theory(args.mu, args.rho, args.alpha, args.batch_size)
        x, y = out["x_star"], out["y_star"]
        if args.json:
            print(json.dumps(out))
            return 0
        print(f"mu={args.mu:g} rho={args.rho:g} alpha={args.alpha:g} (Theorem 4.5, power-law variance, App. C.3.2)")
        print(f"  x* = N/R (staleness horizon)     {x:.4g}")
        print(f"  y* = B/R (replay ratio)          {y:.4g}")
        print(f"  fresh rollouts per step R = B/y* {k.fresh_per_step:.4g}   (B = {args.batch_size})")
        print(f"  buffer capacity N = x*·R         {k.exact_capacity:.4g}   (distinct draws need N >= B: {k.capacity})")
        print(f"  inference/trainer split W/T      {k.workers_per_trainer:.4g}   (≈ mu / y*)")
        if y <= 1.0:
            print("  y* <= 1: replay is not predicted to save compute here; stay on-policy")
        else:
            print(f"  as knobs: --set replay.ratio={y:.3g} --set replay.capacity={k.capacity}")
        return 0


class Ui(Command):
    """MLflow UI (and optuna-dashboard when a storage is given) on the same stores, bound to 127.0.0.1."""

    name = "ui"
    help = "MLflow UI and optuna-dashboard on the workbench's stores (127.0.0.1)"
    flags = (flags.stores,)

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--port", type=int, default=5000, help="the MLflow UI's port; optuna-dashboard takes the next")

    def run(self, args: argparse.Namespace) -> int:
        import shutil
        import subprocess

        bindir = os.path.dirname(sys.executable)
        uri = resolve_tracking_uri(args.tracking_uri)
        procs = []
        if uri.startswith("http"):
            print(f"MLflow is served by the tracking server at {uri}")
        else:
            mlflow_bin = os.path.join(bindir, "mlflow")
            procs.append(
                subprocess.Popen(
                    [mlflow_bin, "ui", "--backend-store-uri", uri, "--host", "127.0.0.1", "--port", str(args.port)],
                    env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
                )
            )
            print(f"MLflow UI: http://127.0.0.1:{args.port}  ({tracking.redact_url(uri)})")
        if args.storage:
            dash = shutil.which("optuna-dashboard", path=bindir) or shutil.which("optuna-dashboard")
            if dash is None:
                raise ConfigError("storage: optuna-dashboard is not installed (pip install optuna-dashboard)")
            procs.append(subprocess.Popen([dash, args.storage, "--host", "127.0.0.1", "--port", str(args.port + 1)]))
            print(f"optuna-dashboard: http://127.0.0.1:{args.port + 1}  ({tracking.redact_url(args.storage)})")
        try:
            for p in procs:
                p.wait()
        except KeyboardInterrupt:
            for p in procs:
                p.terminate()
        return 0
