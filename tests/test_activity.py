"""A trial says what it is doing whenever it has printed nothing for `progress.LINE_EVERY_S` (10 s): the phase
(loading, generating, training, evaluating) and its count so far, so a slow step is told from a hung one."""

import logging
import re
import time

from workbench import progress
from workbench.config import build_config
from workbench.trial.loop import run_trial

from support.toy import toy_dict, tracked


def test_the_activity_line_names_the_phase_its_count_and_rate():
    activity = progress.Activity()
    activity.begin("step 3: generating", "tokens")
    activity.since -= 2.0
    activity.advance(400)
    assert re.fullmatch(r"step 3: generating: 400 tokens \(\d+ tokens/s\), 2 s", activity.describe())
    activity.begin("step 3: training", "micro-batches", total=8)
    activity.advance()
    assert activity.describe() == "step 3: training: 1/8 micro-batches, 0 s"


def test_watch_prints_only_after_a_silence(caplog):
    log = logging.getLogger("workbench.test_activity")
    progress.ACTIVITY.begin("step 0: training", "micro-batches", total=4)
    with caplog.at_level(logging.INFO, logger="workbench"), progress.watch(log, every=0.3):
        time.sleep(1.0)
    lines = [r.getMessage() for r in caplog.records if r.name == log.name]
    # one line at least every 0.3 s and at most every 0.15 s (it speaks after half the period): 3 to 6 in 1 s
    assert 2 <= len(lines) <= 7 and all(line.startswith("step 0: training: 0/4 micro-batches") for line in lines)
    assert progress.ACTIVITY.phase == ""  # cleared when the trial ends


def test_a_trial_reports_every_phase_while_it_is_silent(tracking_uri, monkeypatch, caplog):
    monkeypatch.setattr(progress, "LINE_EVERY_S", 0.02)
    cfg = build_config(toy_dict())
    with caplog.at_level(logging.INFO, logger="workbench"):
        run_trial(tracked(cfg, tracking_uri))
    lines = [r.getMessage() for r in caplog.records if r.name == "workbench.trial.loop"]
    seen = {phase for phase in ("generating", "training", "evaluation at step") if any(phase in x for x in lines)}
    assert seen == {"generating", "training", "evaluation at step"}, lines[:20]
