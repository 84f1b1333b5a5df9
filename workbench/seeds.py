"""Every random stream derived from a trial's seed, each named once (torch-free).

A trial's `seed` drives several streams that must not share numbers: the order of the train prompts, the sampling
of rollouts, the replay buffer's draws, the evaluations' samples. Each is derived here and nowhere else. The values
are the ones the workbench has always used, so every committed result stays reproducible: a stream below returns
the same integer, or the same numpy `SeedSequence` entropy (a list: `np.random.default_rng(list)`), as the line it
replaced.

| stream | consumer | value |
|---|---|---|
| `torch_global` | `torch.manual_seed` at a trial's start | seed |
| `rollout_sampler` | the torch generator rollouts are sampled with (an asynchronous trial's generator processes: one each) | seed + 104729·worker |
| `prompt_order` | `PromptStream`, the train prompts' shuffled order (one stream per generator process) | [seed, 0(, stream)] |
| `replay_draws` | the numpy generator a strategy draws its batch with (one per trainer rank when there are several) | [seed, 1(, rank)] |
| `evaluation` | the torch generator of pass@k and sampled evaluations (evaluating never shifts training's stream) | seed + 7919 |
| `vllm_engine` | the vLLM engine's own seed (each request carries a seed drawn from `rollout_sampler`) | seed |
| `probe_sketch`, `probe_bootstrap` | the probe's count sketch of gradients, its bootstrap of groups | seed |
| `RLEP_POOL` | the RLEP pool's seed run and collection: one pool for every trial seed (it is cached by config) | 0 |
| `checkpoint_seed` | a warm start's `model.init_seed` when checkpoints vary (replicate 0: the base checkpoint) | init_seed + replicate |

The offsets are primes (7919 the 1000th, 104729 the 10000th) so that seed streams of nearby seeds never collide
for the seed ranges studies use (seeds 0-200, a handful of workers).
"""

from __future__ import annotations

EVALUATION_OFFSET = 7919
"""`evaluation(seed) = seed + EVALUATION_OFFSET`."""
WORKER_STRIDE = 104_729
"""`rollout_sampler(seed, worker) = seed + WORKER_STRIDE·worker`."""
PROMPTS, REPLAY = 0, 1
"""The word after the seed in a numpy stream's entropy: [seed, PROMPTS, ...] orders prompts, [seed, REPLAY, ...]
draws batches from the buffer."""
RLEP_POOL = 0
"""The seed of the RLEP pool's build (its on-policy seed run, its sampler, its prompt order), whatever the trial's
seed: the pool is built once per configuration and shared by every seed of a study."""


def torch_global(seed: int) -> int:
    """The seed of torch's global generator, set when a trial starts."""
    return seed


def rollout_sampler(seed: int, worker: int = 0) -> int:
    """The seed of the torch generator rollouts are sampled with: the synchronous loop's is worker 0; an
    asynchronous trial's generator process `worker` has its own."""
    return seed + WORKER_STRIDE * worker


def prompt_order(seed: int, stream: int = 0) -> list[int]:
    """The entropy of the train prompts' shuffled order (`PromptStream`): stream 0 is the synchronous loop's, an
    asynchronous trial's generator `worker` reads stream `worker`."""
    return [seed, PROMPTS] + ([stream] if stream else [])


def replay_draws(seed: int, rank: int | None = None) -> list[int]:
    """The entropy of the numpy generator a strategy draws batches with: one trainer's (None), or trainer `rank`'s
    of several (each draws from its own shard of the buffer)."""
    return [seed, REPLAY] + ([rank] if rank is not None else [])


def evaluation(seed: int) -> int:
    """The seed of the evaluations' torch generator (pass@k, sampled pass@1): separate from the rollout sampler, so
    evaluating never shifts training's random stream."""
    return seed + EVALUATION_OFFSET


def vllm_engine(seed: int) -> int:
    """The vLLM engine's seed (its requests carry their own seeds, drawn from `rollout_sampler`'s generator)."""
    return seed


def probe_sketch(seed: int) -> int:
    """The seed of the probe's count sketch of per-rollout gradients (`workbench.noise.count_sketch`)."""
    return seed


def probe_bootstrap(seed: int) -> int:
    """The seed of the probe's bootstrap over groups (the horizon terms' replicates)."""
    return seed


def checkpoint_seed(init_seed: int, replicate: int) -> int:
    """The `model.init_seed` of warm start number `replicate` (a second dimension of replication: the checkpoint
    the trials start from): replicate 0 is the base config's checkpoint, `init_seed` itself, so a study that does
    not vary its checkpoint is unchanged; replicate k builds warm start init_seed + k."""
    if replicate < 0:
        raise ValueError(f"replicate: must be >= 0, got {replicate}")
    return init_seed + replicate


def checkpoint_replicate(seed: int, seeds_per_checkpoint: int) -> int:
    """Which checkpoint a trial seed starts from when every `seeds_per_checkpoint` consecutive seeds share one:
    seeds 0..k-1 the first, k..2k-1 the second, and so on."""
    if seeds_per_checkpoint < 1:
        raise ValueError(f"seeds_per_checkpoint: must be >= 1, got {seeds_per_checkpoint}")
    return seed // seeds_per_checkpoint
