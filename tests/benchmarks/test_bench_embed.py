"""bench_embed refuses an engine it does not know before loading anything, naming the ones it knows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_embed.py"


def test_an_unknown_peer_is_refused_by_name() -> None:
    run = subprocess.run([sys.executable, str(BENCH), "--peers", "openvino,none"], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert run.stderr.strip() == ("--peers: unknown engine 'none'; expected a comma-separated list of onnxruntime, "
                                  "openvino, ctranslate2, or '' for none")
