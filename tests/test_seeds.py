"""The seed streams (`workbench.seeds`): each named once, each with the value it had before it had a name (so every
committed result stays reproducible), and no two of a trial's streams alike."""

import re

import numpy as np
import pytest

from workbench import seeds

from support.source import occurrences


@pytest.mark.parametrize("seed", [0, 1, 4, 100, 103])
def test_every_stream_keeps_the_value_it_had(seed):
    # the formulas the streams had in loop.py, rollouts.py, evaluation.py and pipeline/ before this module
    assert seeds.torch_global(seed) == seed and seeds.rollout_sampler(seed) == seed
    assert seeds.rollout_sampler(seed, worker=3) == seed + 104_729 * 3
    assert seeds.evaluation(seed) == seed + 7919
    assert seeds.prompt_order(seed) == [seed, 0] and seeds.prompt_order(seed, stream=2) == [seed, 0, 2]
    assert seeds.replay_draws(seed) == [seed, 1] and seeds.replay_draws(seed, rank=0) == [seed, 1, 0]
    assert seeds.probe_sketch(seed) == seeds.probe_bootstrap(seed) == seeds.vllm_engine(seed) == seed
    assert seeds.RLEP_POOL == 0


def test_a_seed_sequence_stream_draws_what_the_old_entropy_drew():
    old = np.random.default_rng([5, 1]).permutation(50)
    assert (np.random.default_rng(seeds.replay_draws(5)).permutation(50) == old).all()
    # the synchronous loop's prompt order is stream 0: [seed, 0], not [seed, 0, 0]
    assert (
        np.random.default_rng(seeds.prompt_order(5)).permutation(50) == np.random.default_rng([5, 0]).permutation(50)
    ).all()


def test_a_trials_streams_never_coincide_over_the_seeds_studies_use():
    # a torch generator seeded alike in two roles repeats its draws: over seeds 0-299 and 8 generator processes, no
    # seed's evaluation or generator stream is any seed's training stream, nor another's of a different role
    study_seeds = range(300)
    roles = {
        "training": {seeds.rollout_sampler(s) for s in study_seeds},
        "evaluation": {seeds.evaluation(s) for s in study_seeds},
        **{f"worker {w}": {seeds.rollout_sampler(s, w) for s in study_seeds} for w in range(1, 9)},
    }
    assert sum(len(v) for v in roles.values()) == len(set().union(*roles.values())) == 10 * 300
    entropies = {tuple(seeds.prompt_order(s, w)) for s in range(50) for w in range(8)} | {
        tuple(seeds.replay_draws(s, r)) for s in range(50) for r in [None, 0, 1, 2]
    }
    assert len(entropies) == 50 * 8 + 50 * 4


def test_the_checkpoint_seed_is_the_base_one_at_replicate_zero_and_new_after():
    assert seeds.checkpoint_seed(0, 0) == 0 and seeds.checkpoint_seed(7, 0) == 7  # no replication: unchanged
    assert [seeds.checkpoint_seed(0, seeds.checkpoint_replicate(s, 4)) for s in range(10)] == [0] * 4 + [1] * 4 + [
        2
    ] * 2
    with pytest.raises(ValueError, match="replicate"):
        seeds.checkpoint_seed(0, -1)
    with pytest.raises(ValueError, match="seeds_per_checkpoint"):
        seeds.checkpoint_replicate(3, 0)


def test_the_seed_streams_have_one_home():
    # offsets, seed-sequence entropies and derived manual seeds written anywhere else are copies of a stream
    patterns = {
        r"\b(7919|104_?729)\b": "self . generator = torch . Generator ( device = device ) . manual_seed ( seed + 7919 )",
        r"default_rng \( \[": "replay_rng = np . random . default_rng ( [ cfg . seed , 1 ] )",
        r"manual_seed \( [\w. ]+? [-+*] ": "sampler = torch . Generator ( ) . manual_seed ( cfg . seed + 104_729 * worker )",
        r"manual_seed \( \d+ \)": "torch . manual_seed ( 0 )",  # a fixed stream (the RLEP pool's) is named too
    }
    for pattern, old in patterns.items():
        assert re.search(pattern, old), pattern  # each pattern finds the copy it stands for
    assert [hit for pattern in patterns for hit in occurrences(pattern, home="workbench/seeds.py")] == []
