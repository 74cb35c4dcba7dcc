"""benchmarks/glue_table.py's dry run: every GLUE task of ../shared/data fine-tuned from a tiny start and its
random twin, the table's scores read from the runs, QNLI's dev split without overlap, and a paired test per task."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import glue_table  # noqa: E402


def test_qnli_split_is_disjoint_and_complete(tmp_path: Path, data_dir: Path) -> None:
    train, dev = glue_table.split_qnli(data_dir, tmp_path, held_out=1000)
    rows = (data_dir / "qnli" / "dev.tsv").read_text(encoding="utf-8").splitlines()
    a, b = train.read_text().splitlines(), dev.read_text().splitlines()
    assert a[0] == b[0] == rows[0]  # the header, so the GLUE layout is recognised
    assert len(b) == 1001 and len(a) - 1 + len(b) - 1 == len(rows) - 1
    assert not set(a[1:]) & set(b[1:])
    assert glue_table.split_qnli(data_dir, tmp_path / "again", held_out=1000)[1].read_text() == dev.read_text()


def test_dry_run_covers_every_task(tmp_path: Path, data_dir: Path) -> None:
    report = glue_table.main(["--dry-run", "--out", str(tmp_path), "--data", str(data_dir)])
    assert report["tasks"] == ["cola", "sst2", "mrpc", "qnli", "rte"]
    assert set(report["scores"]) == {"random init", "tiny"}
    for start, by_task in report["scores"].items():
        for task in glue_table.TASKS:
            scores = by_task[task.name]
            assert set(scores) == {*task.metrics, "score"}
            best = json.loads((tmp_path / task.name / start / "lr0.001-seed0" / "results.json").read_text())
            for metric in task.metrics:  # read from the run, not recomputed
                assert scores[metric] == best["best_metrics"][metric]
            assert scores["score"] == pytest.approx(sum(scores[m] for m in task.metrics) / len(task.metrics))
    for task in ("cola", "mrpc"):  # Matthews and F1: the bootstrap; accuracy: McNemar
        assert report["paired_vs_random_init"]["tiny"][task][0]["test"] == "paired bootstrap"
    assert report["paired_vs_random_init"]["tiny"]["rte"][0]["test"] == "McNemar's exact test"
    assert report["paired_vs_random_init"]["tiny"]["qnli"][0]["n"] == 64
    md = (tmp_path / "glue.md").read_text()
    assert "| random init |" in md and "MRPC (f1/accuracy)" in md
