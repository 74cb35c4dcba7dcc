"""Paired significance tests: McNemar's exact test against scipy's binomial test, the paired bootstrap's counts
against the task metrics they resample, and verdicts on fabricated predictions."""

from __future__ import annotations

import numpy as np
import pytest

from bertkit.tasks import classification, get_task, metrics, multiple_choice, ner, qa
from bertkit.tasks.classification import TextExample
from bertkit.tasks.ner import TaggedSentence
from bertkit.tasks.significance import (
    PairedTest,
    binomial_two_sided_p,
    confusion_counts,
    confusion_statistic,
    f1_from_counts,
    mcnemar,
    paired_bootstrap,
    pearson_from_sums,
    verdict_sentence,
)

stats = pytest.importorskip("scipy.stats")


@pytest.mark.parametrize("k,n", [(0, 0), (0, 1), (1, 1), (0, 5), (2, 5), (3, 5), (10, 20), (7, 30), (23, 30),
                                 (40, 45), (5, 45), (100, 230), (130, 230), (0, 400), (612, 1000)])
def test_exact_binomial_p_equals_scipy(k: int, n: int) -> None:
    expected = 1.0 if n == 0 else stats.binomtest(k, n, 0.5, alternative="two-sided").pvalue
    assert binomial_two_sided_p(k, n) == pytest.approx(expected, rel=1e-9, abs=1e-300)


def _correctness(only_a: int, only_b: int, both: int, neither: int) -> tuple[list[bool], list[bool]]:
    a = [True] * only_a + [False] * only_b + [True] * both + [False] * neither
    b = [False] * only_a + [True] * only_b + [True] * both + [False] * neither
    return a, b


@pytest.mark.parametrize("only_a,only_b", [(5, 40), (40, 5), (12, 18), (30, 30)])
def test_mcnemar_known_tables(only_a: int, only_b: int) -> None:
    a, b = _correctness(only_a, only_b, both=600, neither=200)
    test = mcnemar(a, b)
    assert (test.only_a, test.only_b, test.n) == (only_a, only_b, 600 + 200 + only_a + only_b)
    assert test.p_value == pytest.approx(stats.binomtest(only_b, only_a + only_b, 0.5).pvalue, rel=1e-9)
    assert test.score_a == pytest.approx((600 + only_a) / test.n)
    assert test.score_b == pytest.approx((600 + only_b) / test.n)


def test_mcnemar_win_loss_tie_and_identical_predictions() -> None:
    win = mcnemar(*_correctness(5, 40, 600, 227))
    assert win.outcome == "win" and win.p_value < 1e-6
    loss = mcnemar(*_correctness(40, 5, 600, 227))
    assert loss.outcome == "loss" and loss.p_value == pytest.approx(win.p_value)
    tie = mcnemar(*_correctness(12, 18, 600, 242))  # +0.7 points: p = 0.36
    assert tie.outcome == "tie" and 0.3 < tie.p_value < 0.4
    same = mcnemar(*_correctness(0, 0, 600, 272))
    assert same.outcome == "tie" and same.p_value == 1.0 and same.difference == 0.0
    assert "get exactly the same examples right" in verdict_sentence(same, "random init", "B", "SST-2 dev")


def test_a_paired_test_sees_a_difference_an_unpaired_margin_calls_noise() -> None:
    """+2.9 points on 872 sentences: inside the unpaired 95% margin (about 4 points at 76%), yet 30 of the 34
    sentences the models disagree on go to B, which McNemar's test calls a clear win."""
    a, b = _correctness(2, 27, 640, 203)
    test = mcnemar(a, b)
    unpaired_margin = 100 * 1.96 * np.sqrt(2 * 0.76 * 0.24 / 872)
    assert 100 * test.difference < unpaired_margin
    assert test.outcome == "win" and test.p_value < 1e-4


def test_verdict_sentence_is_computed_from_the_test() -> None:
    test = mcnemar(*_correctness(5, 40, 600, 227))
    text = verdict_sentence(test, "random initialisation", "(c) shipped", "SST-2 dev")
    assert text.startswith("(c) shipped beats random initialisation on SST-2 dev: 73.4 vs 69.4 accuracy "
                           "(+4.0 points); McNemar's exact test on 872 examples: 40 right only with (c) shipped, "
                           "5 right only with random initialisation, p = ")
    loss = verdict_sentence(mcnemar(*_correctness(40, 5, 600, 227)), "A", "B", "SST-2 dev")
    assert loss.startswith("B does worse than A on SST-2 dev: 69.4 vs 73.4 accuracy (-4.0 points)")
    tie = verdict_sentence(mcnemar(*_correctness(12, 18, 600, 242)), "A", "B", "SST-2 dev")
    assert "B is level with A on SST-2 dev" in tie and "not significant at the 5% level" in tie


def test_bootstrap_of_accuracy_agrees_with_mcnemar_and_is_seeded() -> None:
    a, b = _correctness(5, 40, 600, 227)
    counts_a, counts_b = np.array(a, float)[:, None], np.array(b, float)[:, None]
    mean = lambda sums: sums[..., 0] / len(a)  # noqa: E731
    boot = paired_bootstrap(counts_a, counts_b, mean, "accuracy", resamples=2000, seed=3)
    assert boot.outcome == "win" and boot.p_value < 0.01
    low, high = boot.interval
    assert 0 < low < boot.difference < high
    assert paired_bootstrap(counts_a, counts_b, mean, "accuracy", resamples=2000, seed=3) == boot
    tie = paired_bootstrap(*(np.array(x, float)[:, None] for x in _correctness(12, 18, 600, 242)),
                           lambda sums: sums[..., 0] / 872, "accuracy", seed=0)
    assert tie.outcome == "tie" and tie.interval[0] < 0 < tie.interval[1]
    same = paired_bootstrap(counts_a, counts_a, mean, "accuracy")
    assert same.outcome == "tie" and same.p_value == 1.0 and same.interval == (0.0, 0.0)
    with pytest.raises(ValueError, match="same examples"):
        paired_bootstrap(counts_a, counts_b[:10], mean, "accuracy")


def test_statistics_from_counts_equal_the_task_metrics() -> None:
    rng = np.random.default_rng(0)
    refs, preds = rng.integers(0, 2, 300).tolist(), rng.integers(0, 2, 300).tolist()
    sums = confusion_counts(preds, refs, 2).sum(0)
    assert confusion_statistic("accuracy", 2)(sums) == pytest.approx(metrics.accuracy(preds, refs))
    assert confusion_statistic("f1", 2)(sums) == pytest.approx(metrics.f1_score(preds, refs, "binary", positive=1))
    assert confusion_statistic("matthews", 2)(sums) == pytest.approx(metrics.matthews_corrcoef(preds, refs))
    refs3, preds3 = rng.integers(0, 3, 300).tolist(), rng.integers(0, 3, 300).tolist()
    sums3 = confusion_counts(preds3, refs3, 3).sum(0)
    assert confusion_statistic("f1", 3)(sums3) == pytest.approx(metrics.f1_score(preds3, refs3, "macro"))
    assert confusion_statistic("matthews", 3)(sums3) == pytest.approx(metrics.matthews_corrcoef(preds3, refs3))
    x, y = rng.normal(size=50), rng.normal(size=50)
    per_example = np.stack([np.ones(50), x, y, x * x, y * y, x * y], 1)
    assert pearson_from_sums(per_example.sum(0)) == pytest.approx(metrics.pearson(x.tolist(), y.tolist()))


def _ner_examples() -> tuple[list[TaggedSentence], list[list[str]], list[list[str]]]:
    """60 sentences: A finds every person but misses every city; B finds both."""
    gold = ["B-PER", "I-PER", "O", "B-LOC", "O"]
    examples = [TaggedSentence(i, ["Jane", "Austen", "left", "Bath", "."], gold) for i in range(60)]
    a = [["B-PER", "I-PER", "O", "O", "O"]] * 60
    b = [gold] * 55 + [["O"] * 5] * 5
    return examples, a, b


def test_entity_counts_sum_to_seqeval_f1() -> None:
    examples, a, b = _ner_examples()
    refs = [s.tags for s in examples]
    for predictions in (a, b):
        counts = np.array(metrics.entity_counts(predictions, refs))
        assert f1_from_counts(counts.sum(0)) == pytest.approx(metrics.entity_scores(predictions, refs)["f1"])


def test_ner_paired_test_is_the_bootstrap_on_entity_f1() -> None:
    examples, a, b = _ner_examples()
    task = get_task("ner")
    test = ner.paired_test(examples, a, b, task.settings_of({"label_names": ["O", "B-PER", "I-PER", "B-LOC"]}))
    assert test.test == "paired bootstrap" and test.metric == "f1"
    assert test.score_a == pytest.approx(metrics.entity_scores(a, [s.tags for s in examples])["f1"])
    assert test.outcome == "win" and test.interval[0] > 0
    assert ner.paired_test(examples, b, a, task.settings_of({})).outcome == "loss"
    assert ner.paired_test(examples, a, a, task.settings_of({})).outcome == "tie"


def test_classification_paired_test_picks_the_test_by_metric() -> None:
    task = get_task("classification")
    examples = [TextExample(i, "t", None, str(i % 2), []) for i in range(200)]
    right = [ex.label for ex in examples]
    half = [ex.label if i < 100 else "0" for i, ex in enumerate(examples)]  # wrong on 50 positives
    accuracy = classification.paired_test(examples, half, right, task.settings_of({"label_names": ["0", "1"]}))
    assert accuracy.test == "McNemar's exact test" and (accuracy.only_a, accuracy.only_b) == (0, 50)
    assert accuracy.outcome == "win"
    mcc = classification.paired_test(examples, half, right,
                                     task.settings_of({"label_names": ["0", "1"], "main_metric": "matthews"}))
    assert mcc.test == "paired bootstrap" and mcc.score_b == pytest.approx(1.0)
    assert mcc.score_a == pytest.approx(metrics.matthews_corrcoef(half, right))
    assert isinstance(mcc, PairedTest) and mcc.outcome == "win"


def test_qa_paired_test_bootstraps_question_f1_and_squad_scores_are_its_mean() -> None:
    from bertkit.tasks.qa import QAExample

    examples = [QAExample(id=f"q{i}", question="who?", context="Jane Austen wrote it.",
                          answers=[("Jane Austen", 0)]) for i in range(80)]
    a = ["Austen"] * 40 + ["wrote it"] * 40  # F1 2/3 on half, 0 on the rest
    b = ["Jane Austen"] * 70 + ["wrote it"] * 10
    task = get_task("qa")
    test = qa.paired_test(examples, a, b, task.settings_of({}))
    refs = {ex.id: ["Jane Austen"] for ex in examples}
    assert 100 * test.score_a == pytest.approx(metrics.squad_scores(dict(zip(refs, a)), refs)["f1"])
    assert 100 * test.score_b == pytest.approx(metrics.squad_scores(dict(zip(refs, b)), refs)["f1"])
    assert test.test == "paired bootstrap" and test.outcome == "win"
    assert qa.paired_test(examples, a, a, task.settings_of({})).outcome == "tie"


def test_multiple_choice_paired_test_is_mcnemar() -> None:
    from bertkit.tasks.multiple_choice import ChoiceExample

    examples = [ChoiceExample(i, str(i), "ctx", "", ["a", "b"], i % 2) for i in range(100)]
    right = [ex.label for ex in examples]
    wrong_half = [ex.label if i < 50 else 1 - ex.label for i, ex in enumerate(examples)]
    task = get_task("multiple-choice")
    test = multiple_choice.paired_test(examples, wrong_half, right, task.settings_of({}))
    assert (test.only_a, test.only_b, test.outcome) == (0, 50, "win")
