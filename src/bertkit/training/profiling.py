"""Where a training step's time goes: torch.profiler over a window of a real run's steps
(TrainingConfig.profile_steps, profile_from).

The trainer wraps each step in one context (`StepProfiler.step`, torchtitan's shape); the step's parts are the
spans PyTorch records itself (`PART_SPANS`: the loader's next batch, the optimizer) and the rest. Rank 0 writes two
files into the output folder when the window ends:

- `profile.txt`: the steps' wall time and tokens/s, each part's share of it, and the ops by self time on the CPU
  (and on the GPU, when there is one), per step; an evaluation or checkpoint inside the window is left out;
- `profile-trace.json`: the whole trace, evaluations included, for chrome://tracing or https://ui.perfetto.dev.
"""

from __future__ import annotations

import bisect
import contextlib
import time
from collections import defaultdict
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Iterator

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from bertkit.io import atomic_path, atomic_write_text

PROFILE_TEXT = "profile.txt"
PROFILE_TRACE = "profile-trace.json"
PARTS = ("load", "optimizer", "rest")  # profile.txt's parts of a step, in order
PART_SPANS = {"load": ("enumerate(DataLoader)#",), "optimizer": ("Optimizer.step#", "Optimizer.zero_grad#")}
STEP_SPAN = "step.step"  # the record_function span around each whole step: profile.txt counts the ops inside
TOP_OPS = 25


@dataclass
class StepSpan:
    """What the trainer tells the profiler about the step it wraps: its real tokens (this process's)."""

    tokens: int = 0


class StepProfiler:
    """Profiles the optimizer steps `start + 1 .. start + steps` (1-based, as the progress bar counts) of a run.

    The trainer runs each step inside `step(done)` (`done`: the number of steps done before it) and sets the
    step's real tokens on what it yields. Outside the window it costs nothing."""

    def __init__(self, output_dir: Path, start: int, steps: int, device: torch.device, enabled: bool = True) -> None:
        self.output_dir, self.start, self.steps, self.device = output_dir, start, steps, device
        self.enabled = enabled and steps > 0
        self._prof: Any = None
        self._done, self._tokens, self._seconds = 0, 0, 0.0
        self.written: Path | None = None
        self.write_seconds = 0.0
        """How long writing the files took (the trainer leaves it out of the logged tokens/s)."""

    @contextlib.contextmanager
    def step(self, done: int) -> Iterator[StepSpan]:
        """Around one step: profiled inside the window (the profiler starts at the window's first step, and writes
        the files after its last), else nothing."""
        span = StepSpan()
        if self.enabled and self._prof is None and done == self.start:
            gpu = [ProfilerActivity.CUDA] if self.device.type == "cuda" else []
            self._sync()
            self._prof = profile(activities=[ProfilerActivity.CPU, *gpu])
            self._prof.__enter__()
        if self._prof is None:
            yield span
            return
        started = time.perf_counter()
        with record_function(STEP_SPAN):
            yield span
            if self._done + 1 == self.steps:
                self._sync()  # the last step's queued device work belongs to it
        self._seconds += time.perf_counter() - started
        self._done += 1
        self._tokens += span.tokens
        if self._done == self.steps:
            self.finish()

    def finish(self, note: str = "") -> Path | None:
        """Stop the profiler (the device's queued work included) and write the files; `note` says why it stopped
        early, when the run ended inside the window."""
        if self._prof is None:
            return None
        self._sync()
        started = time.perf_counter()
        prof = self._prof
        self.close()  # one window per run
        with atomic_path(self.output_dir / PROFILE_TRACE) as tmp:
            prof.export_chrome_trace(str(tmp))
        text = report(prof.events(), self._done, self._seconds, self._tokens, self.start, self.device, note)
        atomic_write_text(self.output_dir / PROFILE_TEXT, text)
        self.written = self.output_dir / PROFILE_TEXT
        self.write_seconds = time.perf_counter() - started
        return self.written

    def close(self) -> None:
        """Stop a running profiler without writing anything (the run stopped inside the window)."""
        if self._prof is not None:
            prof, self._prof = self._prof, None
            prof.__exit__(None, None, None)
        self.enabled = False

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def in_steps(events: list[Any]) -> list[Any]:
    """The profiled events that ran inside a step's span (STEP_SPAN) and are not spans themselves."""
    spans = sorted((e.time_range.start, e.time_range.end) for e in events if e.name == STEP_SPAN)
    starts = [a for a, _ in spans]

    def inside(e: Any) -> bool:
        i = bisect.bisect_right(starts, e.time_range.start) - 1
        return i >= 0 and e.time_range.end <= spans[i][1]

    return [e for e in events if not e.name.startswith("step.") and inside(e)]


def report(events: list[Any], steps: int, seconds: float, tokens: int, start: int, device: torch.device,
           note: str = "") -> str:
    """profile.txt's text: the steps' wall time and tokens/s, the parts' shares, the top ops on each device."""
    ms_per_step = 1000 * seconds / max(1, steps)
    lines = [f"# training steps {start + 1}-{start + steps}, profiled with torch.profiler{note}",
             f"wall time {ms_per_step:.2f} ms per step (the profiler's own cost included), "
             f"{tokens / max(seconds, 1e-12):,.0f} real tokens/s", "",
             "## the step's parts (host wall time: the loader's and the optimizer's own spans, and the rest)", "",
             f"{'part':<16}{'ms per step':>14}{'share of the step':>20}"]
    part_us: dict[str, float] = defaultdict(float)
    for e in in_steps(events):
        part = next((p for p, prefixes in PART_SPANS.items() if e.name.startswith(prefixes)), None)
        if part is not None:
            part_us[part] += e.time_range.elapsed_us()
    steps_us = sum(e.time_range.elapsed_us() for e in events if e.name == STEP_SPAN)
    part_us["rest"] = max(0.0, steps_us - sum(part_us.values()))
    for part in PARTS:
        if part in part_us:
            ms = part_us[part] / 1000 / max(1, steps)
            lines.append(f"{part:<16}{ms:>14.3f}{ms / ms_per_step:>20.1%}")
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for e in in_steps(events):
        row = totals[e.key]
        row[0] += e.self_cpu_time_total
        row[1] += e.self_device_time_total
        row[2] += 1
    tables = [("CPU", 0)] + ([("GPU", 1)] if device.type == "cuda" else [])
    for name, col in tables:
        total = sum(row[col] for row in totals.values()) or 1.0
        lines += ["", f"## ops by self {name} time ({name} total {total / 1000 / max(1, steps):.2f} ms per step)", "",
                  f"{'op':<48}{'ms per step':>14}{'share':>9}{'calls per step':>16}"]
        for key, row in sorted(totals.items(), key=lambda kv: kv[1][col], reverse=True)[:TOP_OPS]:
            if row[col] <= 0:
                break
            lines.append(f"{key[:47]:<48}{row[col] / 1000 / max(1, steps):>14.3f}{row[col] / total:>9.1%}"
                         f"{row[2] / max(1, steps):>16.1f}")
    return "\n".join(lines) + "\n"
