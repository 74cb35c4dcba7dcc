"""Progress for long jobs: a tqdm bar on a terminal, one plain line every few seconds in a log file.

tqdm redraws its bar with carriage returns, which a log file (a background job's `> run.log`, CI output) keeps as
one ever-growing line. When the stream is not a terminal, `progress_bar` returns `LineProgress` instead: a line
such as `pretrain: 1200/3000 step (40.0%), 2.31 step/s, elapsed 8m40s, ETA 13m00s, loss 6.31` at most every
`interval` seconds, and one at the end.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

DEFAULT_INTERVAL_S = 10.0


def _duration(seconds: float) -> str:
    seconds = int(max(0, seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


class LineProgress:
    """A progress report for non-terminals, with tqdm's update / set_postfix / write / close."""

    def __init__(self, total: int | None, desc: str, unit: str, initial: int = 0, stream: TextIO | None = None,
                 interval: float = DEFAULT_INTERVAL_S, clock: Any = time.monotonic) -> None:
        self.total, self.desc, self.unit = total, desc, unit
        self.n = self.start_n = initial
        self.stream = stream or sys.stderr
        self.interval = interval
        self.clock = clock
        self.started = self.last_print = clock()
        self.postfix = ""
        self.closed = False

    def line(self) -> str:
        """The current report."""
        elapsed = self.clock() - self.started
        rate = (self.n - self.start_n) / elapsed if elapsed > 0 else 0.0
        parts = [f"{self.n} {self.unit}", f"{rate:.3g} {self.unit}/s", f"elapsed {_duration(elapsed)}"]
        if self.total:
            parts[0] = f"{self.n}/{self.total} {self.unit} ({100 * self.n / self.total:.1f}%)"
        if self.total and rate > 0:
            parts.append(f"ETA {_duration((self.total - self.n) / rate)}")
        if self.postfix:
            parts.append(self.postfix)
        return f"{self.desc}: " + ", ".join(parts)

    def update(self, n: int = 1) -> None:
        self.n += n
        now = self.clock()
        if now - self.last_print >= self.interval:
            self.last_print = now
            self.write(self.line())

    def set_postfix(self, **values: Any) -> None:
        self.postfix = ", ".join(f"{k} {v}" for k, v in values.items())

    def write(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.write(self.line())

    def __enter__(self) -> "LineProgress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _Silent:
    """A disabled progress report."""

    def update(self, n: int = 1) -> None: ...
    def set_postfix(self, **values: Any) -> None: ...
    def close(self) -> None: ...

    def write(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    def __enter__(self) -> "_Silent":
        return self

    def __exit__(self, *exc: Any) -> None: ...


def progress_bar(total: int | None, desc: str, unit: str, initial: int = 0, enabled: bool = True,
                 stream: TextIO | None = None, interval: float = DEFAULT_INTERVAL_S) -> Any:
    """A tqdm bar when `stream` (stderr) is a terminal, else a LineProgress; a silent one when not `enabled`."""
    stream = stream or sys.stderr
    if not enabled:
        return _Silent()
    if stream.isatty():
        from tqdm import tqdm

        return tqdm(total=total, initial=initial, desc=desc, unit=unit, dynamic_ncols=True, file=stream)
    return LineProgress(total, desc, unit, initial, stream, interval)
