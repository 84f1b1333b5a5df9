"""TRL's GRPOTrainer, studied by the workbench (docs/trainers.md, "TRL").

- `ReplayGRPOTrainer`: a `GRPOTrainer` whose batches come from a workbench replay strategy (the FIFO buffer of
  capacity N with horizon and fractional replay ratio y, or any registered strategy), since TRL no longer ships one;
- `LedgerGRPOTrainer`: the stock `GRPOTrainer` (its own reuse knobs `num_iterations`, `steps_per_generation`) with
  its rollouts counted;
- `ProtocolCallback`: the trial protocol on any of them: the ledger, compute units, the greedy held-out accuracy at
  the trial's cadence, the budget;
- `python -m workbench.integrations.trl`: one trial of `trainer.kind: trl`, as a study launches it.

Needs the `trl` extra (`pip install replay-workbench[trl]`).
"""

from workbench.integrations.trl.ledger import Ledger
from workbench.integrations.trl.plugin import LedgerGRPOTrainer, ReplayGRPOTrainer
from workbench.integrations.trl.protocol import ProtocolCallback, RunWriter

__all__ = ["Ledger", "LedgerGRPOTrainer", "ProtocolCallback", "ReplayGRPOTrainer", "RunWriter"]
