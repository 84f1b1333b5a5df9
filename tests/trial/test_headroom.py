"""The primary target has headroom: the checkpoint the default task's trials start from reaches it at no decoding
temperature in [0, 1] before any training (`workbench.trial.headroom`)."""

import json
from pathlib import Path

import pytest

from workbench.study.spec import load_spec
from workbench.trial.headroom import TEMPERATURES, has_headroom, readings

ROOT = Path(__file__).resolve().parents[2]


def test_readings_start_from_the_model_the_trials_source_gives(monkeypatch):
    """No `model.path`: the checkpoint read is the one the trial's model source gives, loaded by that source."""
    from workbench.config import build_config
    from workbench.registry import MODEL_SOURCES
    from workbench.trial.checkpoint import SHIPPED
    from workbench.trial.model_sources import ModelSource

    tiny, loaded = sorted(SHIPPED.glob("tiny-llama-*"))[0], []

    class Packaged(ModelSource):  # a model that is not a directory at model.path (a package's, say)
        @classmethod
        def checkpoint(cls, cfg, task):
            return tiny

        @classmethod
        def load(cls, path, device, dtype):
            loaded.append(Path(path))
            return super().load(path, device, dtype)

    monkeypatch.setitem(MODEL_SOURCES, "packaged_for_headroom", Packaged)
    cfg = build_config({"task": {"n_eval": 4}, "model": {"source": "packaged_for_headroom"}})
    assert cfg.model.path is None
    start = readings(cfg, (0.0,), k=1)
    assert loaded == [tiny] and set(start) == {0.0} and 0.0 <= start[0.0] <= 1.0


def test_the_rule():
    assert has_headroom(0.65, {0.0: 0.384, 0.5: 0.24})
    assert not has_headroom(0.17, {0.0: 0.02, 0.5: 0.257, 1.0: 0.037})  # a demo_prob-like target reached at T 0.5


@pytest.mark.slow
def test_the_skill_study_target_is_out_of_reach_of_its_first_checkpoint_at_every_temperature():
    spec = load_spec(ROOT / "studies" / "skill_greedy.yaml")
    cfg = spec.trial_config(spec.baseline_params(), seed=0)  # seeds 0-3: the shipped warm start (init_seed 0)
    assert cfg.model.path is None and cfg.model.init_seed == 0
    start = readings(cfg, TEMPERATURES, k=1)
    assert set(start) == set(TEMPERATURES) and start[0.0] > 0.3  # it answers, weakly: RL has room
    assert start[0.0] == max(start.values())  # sampling reads lower than greedy here
    assert has_headroom(cfg.eval.target_accuracy, start), (cfg.eval.target_accuracy, start)
    # the committed report read the study at the same target
    report = json.loads((ROOT / "reports" / "archive" / "skill_greedy" / "analysis.json").read_text())
    assert report["target_accuracy"] == cfg.eval.target_accuracy
