"""The probe's gradient phase: milliseconds per rollout gradient, one backward per rollout against vectorised chunks,
on a given number of threads, with the machine as it is (say what else runs; docs/performance.md, "The probe's
time").

The default probe's config and embedded model; `--n` rollouts sampled at its first step, each rollout's gradient of
the objective sketched to 2048 numbers, `--rounds` rounds alternating the two paths. The paths' results are compared
(they agree within float rounding, tests/trial/test_rollout_gradients.py).

    .venv/bin/python benchmarks/probe_gradients.py [--n 256] [--rounds 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import time
from contextlib import contextmanager


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=256, help="rollouts (a multiple of the group size, 8)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads inside the gradient phase (the probe uses 1)"
    )
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import numpy as np
    import torch

    from workbench import noise
    from workbench.trial import rollout_gradients
    from workbench.trial.policy import Policy
    from workbench.trial.probe import probe_config
    from workbench.trial.rollouts import generate_groups
    from workbench.trial.tasks import load_task

    @contextmanager
    def threads():  # the phase's thread count, for comparison (the probe's own is `single_thread`)
        before = torch.get_num_threads()
        torch.set_num_threads(args.threads)
        try:
            yield
        finally:
            torch.set_num_threads(before)

    rollout_gradients.single_thread = threads
    cfg = probe_config({})
    task = load_task(cfg.task)
    policy = Policy(cfg, task)
    rollouts, _ = generate_groups(
        policy, task, list(range(args.n // cfg.group_size)), cfg.group_size, 0, torch.Generator().manual_seed(0), 0
    )
    n_params = sum(p.numel() for p in policy.model.parameters())
    idx, sign = noise.count_sketch(n_params, 2048, seed=0)
    sketch = torch.from_numpy(idx), torch.from_numpy(sign), 2048
    tokens = np.mean([len(r.prompt_ids) + len(r.completion_ids) for r in rollouts])
    print(
        f"{len(rollouts)} rollouts of {tokens:.1f} tokens on average, {n_params / 1e6:.2f} M parameters,"
        f" {args.threads} thread(s), chunks of {rollout_gradients.chunk_size(n_params)}"
    )
    out = {}
    for _ in range(args.rounds):
        for name, vectorised in (("one backward per rollout", False), ("vectorised", True)):
            t0 = time.perf_counter()
            out[name] = rollout_gradients.sketched_gradients(policy, rollouts, cfg, sketch, vectorised=vectorised)
            ms = 1000 * (time.perf_counter() - t0) / len(rollouts)
            print(f"  {name}: {ms:.1f} ms a rollout (load average {os.getloadavg()[0]:.1f})", flush=True)
    a, b = out.values()
    print(f"relative difference of the two paths' sketches: {np.linalg.norm(a - b) / np.linalg.norm(a):.1e}")


if __name__ == "__main__":
    main()
