"""Metrics log: one JSON record per line in metrics.jsonl (append + flush)."""

from __future__ import annotations

import contextlib
import json
import math
import os
from pathlib import Path
from typing import Any

from bertkit.io import atomic_write_text, make_dir

# Keys of a record that describe it rather than measure something.
RECORD_KEYS = ("step", "split", "epoch", "phase", "time")


def read_metrics(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Records of a metrics.jsonl; a torn last line (a crash mid-write) is skipped."""
    path = Path(path)
    if not path.is_file():
        return []
    records = []
    for line in filter(None, map(str.strip, path.read_text(encoding="utf-8").splitlines())):
        with contextlib.suppress(json.JSONDecodeError):
            records.append(json.loads(line))
    return records


def truncate_metrics(path: str | os.PathLike, last_step: int) -> None:
    """Drop the records after `last_step` (a resumed run replays those steps), and an earlier resume's record at
    `last_step` itself (the run resumes from there again: the new resume's record replaces it)."""
    path = Path(path)
    if not path.is_file():
        return
    keep = [r for r in read_metrics(path) if int(r.get("step", 0)) < last_step
            or (int(r.get("step", 0)) == last_step and r.get("split") != "resume")]
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in keep))


def _clean(value: Any) -> Any:
    """JSON has no NaN/inf: write them as strings so every line stays valid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


class MetricsLogger:
    """Appends records to metrics.jsonl; inactive on ranks other than 0. (Trackers get the records through the
    trainer's callbacks: bertkit.training.tracking.)"""

    def __init__(self, output_dir: str | os.PathLike, enabled: bool = True) -> None:
        self.path = Path(output_dir) / "metrics.jsonl"
        self.enabled = enabled

    def log(self, record: dict[str, Any]) -> None:
        """Append one record (it must hold 'step' and 'split': 'train', 'eval', or 'resume': where a run was
        resumed and what it changed)."""
        if not self.enabled:
            return
        make_dir(self.path.parent)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps({k: _clean(v) for k, v in record.items()}) + "\n")
            f.flush()
