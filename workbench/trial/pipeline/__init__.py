"""Arnal et al.'s asynchronous system on one machine (`pipeline.mode: async`; arXiv 2604.08706, App. B; docs/pipeline.md).

    W generator processes, each:                       T trainers (rank 0 is the trial's process), each:
        pull the published weights when they are           take what arrived (as much as the strategy has room
          `generation.sync_every` versions ahead             for); strategy.stream_batch -> a batch, or wait
        sample a chunk of whole GRPO groups (rewards,      one optimizer step on it (the configured objective)
          advantages, behaviour log-probs frozen)          publish the weights (version = optimizer steps done)
        deal its groups to the trainers' inboxes           (T > 1: gradients averaged, torch.distributed gloo)
          (waits when one is full)                         rank 0: evaluate on schedule, generators paused

The replay ratio is not set: it emerges from the two sides' speeds (K_train / K_gen). Processes are
`torch.multiprocessing` spawn children; the weights travel through shared-memory tensors under a lock (rank 0
copies its parameters in after each step, a generator copies them out), rollouts through one bounded
multiprocessing queue per trainer, each trainer keeping its own shard (B/T per step from N/T, App. D.4). A
rollout's `birth_step` is the weight version that generated it, so its age at a trainer step is its policy lag at
training, and its lag at generation (versions the trainer had published beyond it when it was pushed:
`Rollout.pushed_version - birth_step`, in flight) is logged as `pipeline/lag_push_mean`.

Accounting: compute units as in a synchronous trial (K_train + mu·K_gen at the configured mu, so the two modes
compare on one scale), generation seconds as the generators' busy seconds, each side's idle seconds (generators
waiting on a full queue, the trainer starved), the weight traffic, mu by the paper's estimator (K_train/T)/(K_gen/W)
(App. D.4) and device-seconds (W + T) x the pipeline's wall time (evaluations excluded).

Faults: a generator that dies (any signal) or raises ends the trial within about a second with one line naming it;
the same for a trainer process; the trial's run ends FAILED (KILLED on Ctrl-C: children ignore SIGINT and are ended
by rank 0); a trainer exception stops every other process; no child outlives the trial (each also exits when its
parent is gone).

Across machines the same trial is launched by torchrun, every rank running the same command (`distributed`):
gradients and weights over torch.distributed groups (NCCL where each process has a GPU of its own, else gloo),
rollouts and flags through the launcher's store.

Modules: `weights` (the shared weights), `generator` (the generator processes, the chunk format, process
handling), `trainer` (a trainer's shard, its step report, gradient averaging, the other trainers' processes),
`local` (the wiring on one machine: spawned children, shared memory, queues), `distributed` (the wiring of a
torchrun launch), `driver` (rank 0's loop).
"""

from workbench.trial.pipeline.driver import PipelineSource
from workbench.trial.pipeline.generator import PipelineError

__all__ = ["PipelineError", "PipelineSource"]
