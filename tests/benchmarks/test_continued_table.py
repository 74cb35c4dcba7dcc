"""benchmarks/continued_table.py: the continued pre-training report's rows, read from the runs' own files, are the
figures worked out by hand from those files; the report's tables are what its raw records (the payoff's comparison
and paired tests, kept under "tasks") give, recomputed here; a bootstrap test (CoNLL's F1) shows its interval
instead of discordant counts."""

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


def assert_rows(got: list[dict], want: list[dict], what: str) -> None:
    """The same rows, key for key; floats to rounding."""
    assert len(got) == len(want), what
    for g, w in zip(got, want):
        assert g.keys() == w.keys(), what
        for key, value in w.items():
            assert g[key] == (pytest.approx(value, abs=1e-9) if isinstance(value, float) else value), (what, key)


def test_rows_are_the_runs_figures_worked_out_by_hand(tmp_path: Path) -> None:
    """Two starts, two learning rates, seeds 1 and 2 whose scores differ (a swapped seed shows), and a held-out run
    evaluated three times: every row written out by hand."""
    comparison = {"budget": {"seeds": [1, 2]}, "starts": [
        {"name": "shipped", "scores": {"0.0001": {"1": 0.70, "2": 0.74}, "0.001": {"1": 0.80, "2": 0.78}},
         "best_lr": 0.001, "best_scores": [0.80, 0.78], "mean": 0.79},
        {"name": "continued", "scores": {"0.0001": {"1": 0.81, "2": 0.83}, "0.001": {"1": 0.76, "2": 0.70}},
         "best_lr": 0.0001, "best_scores": [0.81, 0.83], "mean": 0.82}]}
    mcnemar = dict(test="McNemar's exact test", interval=None, outcome="tie")
    paired = {"baseline": "shipped", "tests": {"continued": [
        {**mcnemar, "n": 100, "score_a": 0.80, "score_b": 0.81, "only_a": 5, "only_b": 6, "p_value": 1.0},
        {**mcnemar, "n": 100, "score_a": 0.78, "score_b": 0.83, "only_a": 2, "only_b": 7, "p_value": 0.18}]}}
    pretrain, payoff = tmp_path / "pretrain", tmp_path / "payoff"
    pretrain.mkdir()
    payoff.mkdir()
    lines = [{"step": 0, "split": "eval", "mlm_accuracy": 0.40, "perplexity": 20.0},
             {"step": 5, "split": "train", "loss": 3.0},
             {"step": 50, "split": "eval", "mlm_accuracy": 0.45, "perplexity": 15.0},
             {"step": 100, "split": "eval", "mlm_accuracy": 0.47, "perplexity": 14.0}]
    (pretrain / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (payoff / "comparison.json").write_text(json.dumps(comparison))
    (payoff / "paired.json").write_text(json.dumps(paired))

    rows = continued_table.task_rows("sst2", pretrain, payoff)
    shipped, continued = "shipped bertkit-mini", "continued on the task's text"
    assert_rows(rows["pretrain"], [{"task": "SST-2", "steps": 100, "mlm_before": 0.40, "mlm_after": 0.47,
                                    "ppl_after": 14.0}], "pretrain")
    assert_rows(rows["best"], [
        {"task": "SST-2", "start": shipped, "best_lr": 0.001, "seed1": 80.0, "seed2": 78.0, "mean": 79.0, "gain": 0.0,
         "_templates": {"gain": ""}},
        {"task": "SST-2", "start": continued, "best_lr": 0.0001, "seed1": 81.0, "seed2": 83.0, "mean": 82.0,
         "gain": 3.0}], "best")
    assert_rows(rows["grid"], [
        {"task": "SST-2", "start": shipped, "lr_0p0001": "72.00 (70.00, 74.00)", "lr_0p001": "79.00 (80.00, 78.00)"},
        {"task": "SST-2", "start": continued, "lr_0p0001": "82.00 (81.00, 83.00)",
         "lr_0p001": "73.00 (76.00, 70.00)"}], "grid")
    common = dict(task="SST-2", test="McNemar's exact test", n=100, interval=None, outcome="tie")
    assert_rows(rows["paired"], [
        {**common, "seed": 1, "continued": 81.0, "shipped": 80.0, "only_continued": 6, "only_shipped": 5, "p": 1.0},
        {**common, "seed": 2, "continued": 83.0, "shipped": 78.0, "only_continued": 7, "only_shipped": 2, "p": 0.18}],
        "paired")


@pytest.mark.parametrize("task", sorted(continued_table.TITLES))
def test_the_reports_tables_are_what_its_raw_records_give(task: str) -> None:
    """Each figure of the report's best, grid and paired tables recomputed here from the payoff's raw scores that
    the report keeps (each start's score per learning rate and seed, and the paired tests): the best learning rate
    is the one with the highest mean over seeds, each seed's column is that seed's score, the paired rows pair the
    two starts' best runs seed by seed. (The held-out MLM row has no raw record in the report: the test above
    checks how it is read.)"""
    report = json.loads(REPORT.read_text())
    title = continued_table.TITLES[task]
    comparison, paired = report["tasks"][task]["comparison"], report["tasks"][task]["paired"]
    seeds = comparison["budget"]["seeds"]
    table = {name: [r for r in report["tables"][name]["rows"] if r["task"] == title]
             for name in ("best", "grid", "paired")}
    assert [len(rows) for rows in table.values()] == [2, 2, len(seeds)]
    by_seed = []  # per start: the best learning rate's score for each seed, in percent
    for start, best, grid in zip(comparison["starts"], table["best"], table["grid"]):
        means = {lr: sum(scores[str(s)] for s in seeds) / len(seeds) for lr, scores in start["scores"].items()}
        best_lr = max(means, key=means.get)
        assert best["best_lr"] == float(best_lr), (task, start["name"])
        by_seed.append([100 * start["scores"][best_lr][str(s)] for s in seeds])
        assert [best["seed1"], best["seed2"]] == pytest.approx(by_seed[-1], abs=1e-9)
        assert best["mean"] == pytest.approx(100 * means[best_lr], abs=1e-9)
        for lr, scores in start["scores"].items():
            values = [100 * scores[str(s)] for s in seeds]
            want = f"{100 * means[lr]:.2f} ({values[0]:.2f}, {values[1]:.2f})"
            assert grid[f"lr_{lr.replace('.', 'p')}"] == want, (task, start["name"], lr)
    assert table["best"][0]["gain"] == 0.0
    assert table["best"][1]["gain"] == pytest.approx(table["best"][1]["mean"] - table["best"][0]["mean"], abs=1e-9)
    (tests,) = paired["tests"].values()
    for i, (seed, row, test) in enumerate(zip(seeds, table["paired"], tests)):
        assert row["seed"] == seed
        assert (row["shipped"], row["continued"]) == pytest.approx((by_seed[0][i], by_seed[1][i]), abs=1e-9), seed
        assert (row["only_shipped"], row["only_continued"], row["p"], row["outcome"], row["n"]) == (
            test["only_a"], test["only_b"], test["p_value"], test["outcome"], test["n"])


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
