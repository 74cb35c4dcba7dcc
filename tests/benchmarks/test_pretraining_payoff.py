"""benchmarks/pretraining_payoff.py with --baseline: every start against the named one by the task's paired test,
one per seed, figures that agree with the runs' own scores."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import pretraining_payoff  # noqa: E402


def test_paired_tests_against_a_named_baseline(tmp_path: Path, data_dir: Path, tiny_dir: Path, monkeypatch,
                                              capsys) -> None:
    monkeypatch.setitem(pretraining_payoff.BUDGETS, "sst2", {**pretraining_payoff.BUDGETS["sst2"],
                                                             "train": data_dir / "sst2" / "train.tsv",
                                                             "dev": data_dir / "sst2" / "dev.tsv", "max_length": 32})
    pretraining_payoff.main(["--task", "sst2", "--start", f"tiny={tiny_dir}", "--random-twin", "tiny",
                             "--baseline", "tiny", "--out", str(tmp_path), "--lrs", "1e-3", "--seeds", "0", "1",
                             "--max-train-examples", "64", "--epochs", "1"])
    out = capsys.readouterr().out
    record = json.loads((tmp_path / "sst2" / "paired.json").read_text())
    assert record["baseline"] == "tiny" and set(record["tests"]) == {"random init"}
    comparison = {s["name"]: s for s in json.loads((tmp_path / "sst2" / "comparison.json").read_text())["starts"]}
    for seed, test in zip((0, 1), record["tests"]["random init"]):
        assert test["test"] == "McNemar's exact test" and test["n"] == 872
        assert test["score_a"] == pytest.approx(comparison["tiny"]["scores"]["0.001"][str(seed)])
        assert test["score_b"] == pytest.approx(comparison["random init"]["scores"]["0.001"][str(seed)])
        # the discordant counts are the whole difference between the two accuracies
        assert (test["only_b"] - test["only_a"]) / test["n"] == pytest.approx(test["difference"])
        assert f"random init vs tiny, seed {seed}:" in out
    with pytest.raises(SystemExit, match="not a start"):
        pretraining_payoff.main(["--task", "sst2", "--start", f"tiny={tiny_dir}", "--baseline", "nobody", "--out",
                                 str(tmp_path), "--lrs", "1e-3", "--seeds", "0", "1", "--max-train-examples", "64",
                                 "--epochs", "1"])
