"""Progress reports: a bar on a terminal, a plain line every few seconds elsewhere (no carriage-return floods)."""

from __future__ import annotations

import io

from bertkit.progress import LineProgress, progress_bar


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_line_progress_prints_at_intervals_with_rate_and_eta() -> None:
    out, clock = io.StringIO(), Clock()
    p = LineProgress(100, "pretrain", "step", stream=out, interval=5.0, clock=clock)
    for _ in range(40):
        clock.t += 0.5  # 2 steps/s
        p.update()
        p.set_postfix(loss="6.31")
    p.close()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert len(lines) == 4 + 1  # every 5 s over 20 s, and the closing line
    assert lines[0] == "pretrain: 10/100 step (10.0%), 2 step/s, elapsed 0m05s, ETA 0m45s, loss 6.31"
    assert lines[-1].startswith("pretrain: 40/100 step (40.0%)") and "ETA 0m30s" in lines[-1]
    p.close()
    assert len(out.getvalue().splitlines()) == 5  # closing twice prints once


def test_resumed_progress_measures_rate_from_where_it_resumed() -> None:
    out, clock = io.StringIO(), Clock()
    p = LineProgress(1000, "run", "step", initial=900, stream=out, interval=1.0, clock=clock)
    clock.t = 10.0
    p.update(10)
    assert "910/1000 step (91.0%), 1 step/s" in out.getvalue() and "ETA 1m30s" in out.getvalue()


def test_progress_bar_picks_lines_for_a_log_file() -> None:
    log = io.StringIO()
    assert isinstance(progress_bar(10, "x", "step", stream=log), LineProgress)
    silent = progress_bar(10, "x", "step", enabled=False, stream=log)
    silent.update(5)
    silent.close()
    assert log.getvalue() == ""
