"""Comparing starts: the same budget for each, the best LR by mean over seeds, resumable, a computed verdict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bertkit.jobs import payoff
from bertkit.jobs.payoff import FinetuneBudget, PayoffConfig, StartResult, markdown_table, random_init_twin, verdict
from bertkit.model import BertForPreTraining


def test_random_init_twin_keeps_architecture_and_vocabulary(tmp_path: Path, tiny_dir: Path) -> None:
    twin = random_init_twin(tiny_dir, tmp_path / "twin", seed=3)
    a, b = BertForPreTraining.from_pretrained(str(tiny_dir)), BertForPreTraining.from_pretrained(str(twin))
    assert a.config.to_dict() == b.config.to_dict()
    assert (twin / "vocab.txt").read_text() == (tiny_dir / "vocab.txt").read_text()
    assert not torch.equal(a.bert.embeddings.word_embeddings.weight, b.bert.embeddings.word_embeddings.weight)
    again = random_init_twin(tiny_dir, tmp_path / "twin2", seed=3)
    assert torch.equal(BertForPreTraining.from_pretrained(str(again)).bert.embeddings.word_embeddings.weight,
                       b.bert.embeddings.word_embeddings.weight)


def test_best_lr_is_chosen_by_the_mean_over_seeds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # lr 1e-4: seeds 0.9 and 0.5 (mean 0.7); lr 2e-4: 0.8 and 0.8 (mean 0.8): 2e-4 wins though 1e-4 has the best run
    table = {(1e-4, 1): 0.9, (1e-4, 2): 0.5, (2e-4, 1): 0.8, (2e-4, 2): 0.8}
    calls = []

    def fake_finetune(config, resume=False):  # noqa: ANN001, ANN202
        t = config.training
        calls.append((config.model, t.lr, t.seed))
        assert resume is (Path(t.output_dir) / "checkpoints").is_dir()  # a stopped run continues
        score = table[(t.lr, t.seed)] - (0.1 if config.model == "b" else 0.0)
        summary = {"main_metric": "accuracy", "best_metrics": {"accuracy": score}}
        Path(t.output_dir).mkdir(parents=True)
        (Path(t.output_dir) / "results.json").write_text(json.dumps(summary))
        return summary

    import bertkit.jobs.finetune as finetune_job

    monkeypatch.setattr(finetune_job, "run", fake_finetune)
    budget = FinetuneBudget(task="classification", train="t", dev="d", lrs=[1e-4, 2e-4], seeds=[1, 2])
    results = payoff.run(PayoffConfig({"a": "a", "b": "b"}, budget, tmp_path))
    assert len(calls) == 8
    a, b = results
    assert a.best_lr == 2e-4 and a.best_scores == [0.8, 0.8] and a.mean == pytest.approx(0.8)
    assert b.mean == pytest.approx(0.7)
    saved = json.loads((tmp_path / payoff.SUMMARY_NAME).read_text())
    assert saved["starts"][0]["scores"]["0.0001"] == {"1": 0.9, "2": 0.5}
    # finished runs are read back, not run again
    assert [r.mean for r in payoff.run(PayoffConfig({"a": "a", "b": "b"}, budget, tmp_path))] == [a.mean, b.mean]
    assert len(calls) == 8


def test_task_options_reach_every_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The budget's task options (QA's doc_stride) go to every start's run, with max_length from the budget."""
    seen = []

    def fake_finetune(config, resume=False):  # noqa: ANN001, ANN202
        seen.append(dict(config.options))
        summary = {"main_metric": "f1", "best_metrics": {"f1": 50.0}}
        Path(config.training.output_dir).mkdir(parents=True)
        (Path(config.training.output_dir) / "results.json").write_text(json.dumps(summary))
        return summary

    import bertkit.jobs.finetune as finetune_job

    monkeypatch.setattr(finetune_job, "run", fake_finetune)
    budget = FinetuneBudget(task="qa", train="t", dev="d", lrs=[1e-3], seeds=[1], max_length=128,
                            options={"doc_stride": 32, "max_length": 999})
    payoff.run(PayoffConfig({"a": "a", "b": "b"}, budget, tmp_path))
    assert seen == [{"doc_stride": 32, "max_length": 128}] * 2


def test_table_and_verdict_are_computed_from_the_figures() -> None:
    results = [StartResult("pre-trained", "p", {}, 3e-4, [0.80, 0.82], 0.81),
               StartResult("random init", "r", {}, 1e-4, [0.78, 0.77], 0.775)]
    table = markdown_table(results, "accuracy", baseline="random init")
    assert "| pre-trained | 0.0003 | 80.00 | 82.00 | **81.00** | +3.50 |" in table
    text = verdict(results, "pre-trained", "random init", "accuracy", "SST-2")
    assert text.startswith("pre-trained beats random init on SST-2 by +3.50 accuracy points")
    assert "better on 2 of 2 seeds" in text
    worse = [results[0], StartResult("random init", "r", {}, 1e-4, [0.9, 0.9], 0.9)]
    assert "does not beat" in verdict(worse, "pre-trained", "random init", "accuracy", "SST-2")


def test_plot_puts_scores_in_points_whatever_their_scale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Accuracy in 0..1 is multiplied by 100; SQuAD's F1, already in points, is not (the demo's QA plot once showed
    1,143 F1)."""
    import bertkit.training.plots as plots

    drawn = []
    monkeypatch.setattr(plots, "plot_bars", lambda names, values, path, title, ylabel, points: drawn.append(
        (values, points, ylabel)))
    results = [StartResult("a", "a", {}, 1e-3, [0.7, 0.8], 0.75), StartResult("b", "b", {}, 1e-3, [11.0, 12.0], 11.5)]
    payoff.plot_comparison(results[:1], tmp_path / "acc.png", "t")
    payoff.plot_comparison(results[1:], tmp_path / "f1.png", "t", metric="F1", scale=1.0)
    assert drawn[0][0] == [pytest.approx(75.0)] and drawn[0][1] == [[pytest.approx(70.0), pytest.approx(80.0)]]
    assert drawn[1] == ([11.5], [[11.0, 12.0]], "F1 (%)")
