"""bench_gemm_shapes runs each precision over the fixed, the new and the seen shapes and reports all six."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_gemm_shapes.py"


def test_both_precisions_and_three_shape_regimes_are_reported(tmp_path: Path) -> None:
    out = tmp_path / "shapes.json"
    run = subprocess.run([sys.executable, str(BENCH), "--rows", "8", "--shapes", "2", "--inner", "8", "--outer", "4",
                          "--threads", "1", "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    report = json.loads(out.read_text())
    assert report["cpu"].startswith("CPU flags: ") and report["shape"] == [8, 4] and report["rows"] == 8
    for name in ("fp32", "bf16"):
        r = report["results"][name]
        assert set(r) == {"fixed", "new", "seen"} and all(v > 0 for v in r.values())
        assert f"{name}: the same shape " in run.stdout
