"""benchmarks/continued_table.py: the continued pre-training report's rows, read from the runs' own files, equal the
rows the report already holds for SST-2 (written from the same comparison and paired tests), and a bootstrap test
(CoNLL's F1) shows its interval instead of discordant counts."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import continued_table  # noqa: E402

REPORT = Path(__file__).resolve().parents[2] / "docs" / "results" / "continued-pretraining-epyc-avx2-2026-11-25.json"


def write_runs(tmp_path: Path, task: dict, held_out: dict) -> tuple[Path, Path]:
    """A pretraining run folder (metrics.jsonl) and a payoff folder (comparison.json, paired.json) as the jobs
    write them."""
    pretrain, payoff = tmp_path / "pretrain", tmp_path / "payoff"
    pretrain.mkdir()
    payoff.mkdir()
    lines = [{"step": 0, "split": "eval", "mlm_accuracy": held_out["mlm_before"], "perplexity": 14.0},
             {"step": 10, "split": "train", "loss": 2.0},
             {"step": held_out["steps"], "split": "eval", "mlm_accuracy": held_out["mlm_after"],
              "perplexity": held_out["ppl_after"]}]
    (pretrain / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    for name in ("comparison", "paired"):
        (payoff / f"{name}.json").write_text(json.dumps(task[name]))
    return pretrain, payoff


def test_sst2_rows_equal_the_reports_own(tmp_path: Path) -> None:
    report = json.loads(REPORT.read_text())
    held_out = report["tables"]["pretrain"]["rows"][0]
    pretrain, payoff = write_runs(tmp_path, report["tasks"]["sst2"], held_out)
    rows = continued_table.task_rows("sst2", pretrain, payoff)
    for table in ("pretrain", "best", "grid", "paired"):
        want = [r for r in report["tables"][table]["rows"] if r["task"] == "SST-2"]
        got = rows[table]
        assert len(got) == len(want)
        for g, w in zip(got, want):
            for key, value in w.items():
                assert g[key] == (pytest.approx(value) if isinstance(value, float) else value), (table, key)


def test_a_bootstrap_test_shows_its_interval_and_merging_keeps_the_other_task(tmp_path: Path) -> None:
    report = json.loads(REPORT.read_text())
    task = copy.deepcopy(report["tasks"]["sst2"])
    for test in task["paired"]["tests"]["continued-sst2"]:
        test.update(test="paired bootstrap", metric="f1", only_a=None, only_b=None, interval=[0.004, 0.021],
                    resamples=1000)
    held_out = {"steps": 330, "mlm_before": 0.49, "mlm_after": 0.51, "ppl_after": 12.0}
    pretrain, payoff = write_runs(tmp_path, task, held_out)
    rows = continued_table.task_rows("conll", pretrain, payoff)
    assert rows["paired"][0]["low"] == pytest.approx(0.4) and rows["paired"][0]["high"] == pytest.approx(2.1)
    assert rows["paired"][0]["_templates"] == {"evidence": "95% interval [{low:+.2f}, {high:+.2f}]"}
    assert rows["best"][1]["gain"] == pytest.approx(100 * (task["comparison"]["starts"][1]["mean"]
                                                          - task["comparison"]["starts"][0]["mean"]))
    merged = continued_table.merge(copy.deepcopy(report), "conll", rows, payoff)
    assert [r["task"] for r in merged["tables"]["paired"]["rows"]] == ["SST-2", "SST-2", "CoNLL-2003", "CoNLL-2003"]
    assert merged["tasks"]["conll"]["paired"] == task["paired"]
    again = continued_table.merge(merged, "conll", rows, payoff)  # running it twice replaces, not appends
    assert len(again["tables"]["best"]["rows"]) == 4


def test_a_run_without_its_starting_score_is_refused(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 110, "split": "eval", "mlm_accuracy": 0.5}) + "\n")
    with pytest.raises(SystemExit, match="no step-0 evaluation"):
        continued_table.held_out_scores(tmp_path)
