"""Every metric against hand-computed values, and cross-checks with seqeval and the official SQuAD formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bertkit.tasks import metrics


def test_accuracy_and_binary_f1_by_hand() -> None:
    preds, refs = [1, 1, 0, 0, 1], [1, 0, 0, 1, 1]
    assert metrics.accuracy(preds, refs) == pytest.approx(3 / 5)
    # tp 2, fp 1, fn 1 -> P = R = 2/3 -> F1 = 2/3
    assert metrics.f1_score(preds, refs) == pytest.approx(2 / 3)
    assert metrics.f1_score(preds, refs, positive=0) == pytest.approx(2 * (1 / 2 * 1 / 2) / 1)  # P = R = 1/2


def test_macro_f1_by_hand() -> None:
    preds, refs = ["a", "b", "c", "a"], ["a", "b", "b", "c"]
    # a: tp1 fp1 fn0 -> 2/3; b: tp1 fp0 fn1 -> 2/3; c: tp0 -> 0
    assert metrics.f1_score(preds, refs, "macro") == pytest.approx((2 / 3 + 2 / 3 + 0) / 3)


def test_matthews_binary_by_hand_and_phi_formula() -> None:
    preds, refs = [1, 1, 0, 0, 1], [1, 0, 0, 1, 1]
    tp, tn, fp, fn = 2, 1, 1, 1
    phi = (tp * tn - fp * fn) / math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    assert phi == pytest.approx(1 / 6)
    assert metrics.matthews_corrcoef(preds, refs) == pytest.approx(phi)
    rng = np.random.default_rng(0)
    p, r = rng.integers(0, 2, 200).tolist(), rng.integers(0, 2, 200).tolist()
    tp = sum(a == 1 and b == 1 for a, b in zip(p, r)); tn = sum(a == 0 and b == 0 for a, b in zip(p, r))
    fp = sum(a == 1 and b == 0 for a, b in zip(p, r)); fn = sum(a == 0 and b == 1 for a, b in zip(p, r))
    phi = (tp * tn - fp * fn) / math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    assert metrics.matthews_corrcoef(p, r) == pytest.approx(phi)


def test_matthews_edge_cases() -> None:
    assert metrics.matthews_corrcoef([1, 1, 1], [1, 0, 1]) == 0.0  # constant prediction: undefined -> 0
    assert metrics.matthews_corrcoef([0, 1, 2], [0, 1, 2]) == pytest.approx(1.0)


def test_pearson_spearman_by_hand() -> None:
    # dx = -1, 0, 1; dy = -7/3, -1/3, 8/3 -> sxy 5, sxx 2, syy 114/9
    assert metrics.pearson([1, 2, 3], [2, 4, 7]) == pytest.approx(5 / math.sqrt(2 * 114 / 9))
    assert metrics.spearman([1, 2, 3], [2, 4, 7]) == pytest.approx(1.0)
    assert metrics.ranks([1, 2, 2, 3]) == [1.0, 2.5, 2.5, 4.0]
    assert metrics.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    x, y = [3.0, 1.0, 2.0, 2.0, 5.0], [1.0, 0.0, 2.0, 3.0, 4.0]
    rx, ry = np.array(metrics.ranks(x)), np.array(metrics.ranks(y))
    assert metrics.spearman(x, y) == pytest.approx(np.corrcoef(rx, ry)[0, 1])
    assert metrics.pearson(x, y) == pytest.approx(np.corrcoef(x, y)[0, 1])


def test_multilabel_by_hand() -> None:
    out = metrics.multilabel_scores([{"a", "b"}, {"c"}], [{"a"}, {"c", "d"}])
    # tp 2 (a, c), fp 1 (b), fn 1 (d)
    assert out["micro_f1"] == pytest.approx(2 / 3)
    assert out["exact_match"] == 0.0


def test_entity_scores_by_hand() -> None:
    refs = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    preds = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "O"]]
    out = metrics.entity_scores(preds, refs)
    # predicted: PER ok, ORG (wrong type), ORG ok -> 2/3 precision; references: PER, LOC, ORG -> 2/3 recall
    assert out["precision"] == pytest.approx(2 / 3)
    assert out["recall"] == pytest.approx(2 / 3)
    assert out["f1"] == pytest.approx(2 / 3)
    assert out["PER_f1"] == pytest.approx(1.0) and out["LOC_f1"] == 0.0
    assert out["ORG_precision"] == pytest.approx(0.5) and out["ORG_recall"] == pytest.approx(1.0)
    assert out["LOC_support"] == 1


def test_entity_scores_boundaries_and_iob1() -> None:
    # A boundary error makes both the prediction and the reference wrong.
    out = metrics.entity_scores([["B-PER", "O", "O"]], [["B-PER", "I-PER", "O"]])
    assert out["f1"] == 0.0
    # IOB1 (entities may start with I-) counts the same chunks as IOB2.
    out = metrics.entity_scores([["I-PER", "I-PER", "O", "I-LOC"]], [["B-PER", "I-PER", "O", "B-LOC"]])
    assert out["f1"] == pytest.approx(1.0)


def test_entity_scores_match_seqeval() -> None:
    from seqeval.metrics import f1_score, precision_score, recall_score

    rng = np.random.default_rng(1)
    tags = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    refs = [[tags[i] for i in rng.integers(0, 5, 12)] for _ in range(30)]
    preds = [[tags[i] for i in rng.integers(0, 5, 12)] for _ in range(30)]
    out = metrics.entity_scores(preds, refs)
    assert out["f1"] == pytest.approx(f1_score(refs, preds))
    assert out["precision"] == pytest.approx(precision_score(refs, preds))
    assert out["recall"] == pytest.approx(recall_score(refs, preds))


def test_squad_normalisation_and_scores_by_hand() -> None:
    assert metrics.normalize_answer("The  Cat's, hat!") == "cats hat"
    assert metrics.normalize_answer("An apple a day") == "apple day"
    assert metrics.normalize_answer("theatre") == "theatre"  # articles only as whole words
    assert metrics.squad_exact_match("the Eiffel Tower.", "Eiffel tower") == 1.0
    # pred [cat, sat], ref [cat, sat, down]: P 1, R 2/3 -> F1 0.8
    assert metrics.squad_f1("the cat sat", "a cat sat down") == pytest.approx(0.8)
    assert metrics.squad_f1("cat cat", "cat") == pytest.approx(2 * 0.5 * 1 / 1.5)  # bags: one shared token
    assert metrics.squad_f1("", "cat") == 0.0
    out = metrics.squad_scores({"q1": "Denver Broncos", "q2": "blue"},
                               {"q1": ["Denver Broncos", "The Broncos"], "q2": ["green"], "q3": ["x"]})
    assert out["exact_match"] == pytest.approx(100 / 3)  # q3 missing counts 0
    assert out["f1"] == pytest.approx(100 / 3)


def test_squad_v2_no_answer() -> None:
    assert metrics.squad_f1("", "", version_2=True) == 1.0
    assert metrics.squad_f1("", "", version_2=False) == 0.0  # v1.1 formula: nothing shared
    out = metrics.squad_scores({"a": "", "b": "x"}, {"a": [], "b": ["x"]}, version_2=True)
    assert out["exact_match"] == 100.0 and out["f1"] == 100.0
    assert out["NoAns_f1"] == 100.0 and out["HasAns_exact_match"] == 100.0


def test_squad_v2_drops_gold_answers_that_normalise_to_nothing() -> None:
    """As evaluate-v2.0.py: golds = [a for a in answers if normalize_answer(a)] or [""]."""
    out = metrics.squad_scores({"q": ""}, {"q": [".", "Paris"]}, version_2=True)
    assert out["exact_match"] == 0.0 and out["f1"] == 0.0  # "." is dropped: the gold is "Paris", not ""
    assert out["HasAns_exact_match"] == 0.0  # still a has-answer question (its raw answers are not empty)
    out = metrics.squad_scores({"q": ""}, {"q": ["."]}, version_2=True)
    assert out["exact_match"] == 100.0 and "HasAns_f1" in out  # nothing left: the reference is ""
    out = metrics.squad_scores({"q": "paris"}, {"q": [".", "Paris"]}, version_2=False)
    assert out["exact_match"] == 100.0  # v1.1 keeps every gold answer


def test_length_mismatch_is_an_error() -> None:
    with pytest.raises(ValueError):
        metrics.accuracy([1], [1, 2])


def test_retrieval_scores_by_hand() -> None:
    """Query 1 finds its one relevant document second; query 2 finds one of its two first and the other third.
    recall@1 = (0 + 1/2) / 2; recall@5 = 1; MRR@10 = (1/2 + 1) / 2; nDCG@10 = (1/log2 3 + (1 + 1/2) / (1 + 1/log2 3))
    / 2 (binary gains, ideal DCG of min(10, relevant) documents first)."""
    rankings = [["d3", "d1", "d2"], ["d2", "d4", "d1", "d5"]]
    relevant = [{"d1"}, {"d2", "d1"}]
    out = metrics.retrieval_scores(rankings, relevant)
    assert out["recall@1"] == pytest.approx(0.25) and out["recall@5"] == 1.0 and out["recall@10"] == 1.0
    assert out["mrr@10"] == pytest.approx(0.75)
    assert out["ndcg@10"] == pytest.approx((1 / math.log2(3) + 1.5 / (1 + 1 / math.log2(3))) / 2)
    # Past the cut-off nothing counts: a relevant document 11th gives MRR@10 and nDCG@10 of 0.
    late = [[f"x{i}" for i in range(10)] + ["d1"]]
    assert metrics.retrieval_scores(late, [{"d1"}]) == {"recall@1": 0.0, "recall@5": 0.0, "recall@10": 0.0,
                                                        "mrr@10": 0.0, "ndcg@10": 0.0}
    with pytest.raises(ValueError, match="at least one relevant document"):
        metrics.retrieval_scores([["d1"]], [set()])
