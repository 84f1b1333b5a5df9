"""Progress lines for long phases: a ticker through counted items, a heartbeat around a silent call."""

import logging
import time

from workbench import progress

from support.logs import captured_logs


def test_a_ticker_reports_its_count_and_latest_note_and_closes_with_its_time(monkeypatch):
    monkeypatch.setattr(progress, "LINE_EVERY_S", 0.0)
    with captured_logs() as records:
        with progress.Ticker(3, "phase", "items", False, logging.getLogger("workbench.test")) as ticker:
            ticker.update()
            ticker.update(2, note="accuracy 0.5")
    lines = [r.getMessage() for r in records]
    assert lines[0].startswith("phase: 1/3 items, ") and lines[1].startswith("phase: 3/3 items, accuracy 0.5, ")
    assert lines[-1].startswith("phase: 3 items in ") and lines[-1].endswith(" s, accuracy 0.5")


def test_a_ticker_off_a_terminal_says_nothing_between_its_lines_for_line_every_s(monkeypatch):
    monkeypatch.setattr(progress, "LINE_EVERY_S", 3600.0)
    with captured_logs() as records:
        with progress.Ticker(100, "phase", "items", False, logging.getLogger("workbench.test")) as ticker:
            for _ in range(100):
                ticker.update()
    assert [r.getMessage().split(" in ")[0] for r in records] == ["phase: 100 items"]  # the closing line only


def test_a_heartbeat_ticks_while_a_silent_call_runs_and_says_how_long_it_took():
    with captured_logs() as records:
        with progress.heartbeat("compiling", logging.getLogger("workbench.test"), every=0.05):
            time.sleep(0.3)
    lines = [r.getMessage() for r in records]
    assert len(lines) >= 3 and all(line.startswith("compiling: ") and line.endswith(" s so far") for line in lines[:-1])
    assert lines[-1] == "compiling: done in 0 s"
    time.sleep(0.1)
    assert len(records) == len(lines)  # the thread is gone: no line after the block
