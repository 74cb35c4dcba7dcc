"""Task metrics as pure functions: accuracy, F1, Matthews correlation, Pearson/Spearman, entity-level F1, SQuAD EM/F1.

Every function takes plain Python sequences and returns floats, so each can be checked against hand-computed values.
GLUE conventions: MRPC and QQP report accuracy and binary F1 of the positive class, CoLA Matthews correlation,
STS-B Pearson and Spearman correlation; CoNLL-2003 reports entity-level F1 (as conlleval / seqeval count entities);
SQuAD reports exact match and token F1 as the official v1.1 evaluation script computes them. Retrieval reports
recall@k, MRR@10 and nDCG@10 with binary relevance, as sentence-transformers' InformationRetrievalEvaluator does.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from typing import Collection, Hashable, Sequence

import numpy as np

# --- classification ---------------------------------------------------------------------------------------------------


def accuracy(predictions: Sequence[Hashable], references: Sequence[Hashable]) -> float:
    """Fraction of predictions equal to their reference."""
    _check_lengths(predictions, references)
    if not references:
        return 0.0
    return sum(p == r for p, r in zip(predictions, references)) / len(references)


def precision_recall_f1(tp: int, fp: int, fn: int) -> tuple[float, float, float]:
    """Precision, recall and F1 from counts; 0 where a denominator is 0."""
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def f1_score(predictions: Sequence[Hashable], references: Sequence[Hashable], average: str = "binary",
             positive: Hashable = 1) -> float:
    """F1 of one class ('binary', the class `positive`), or averaged over classes ('macro', 'micro')."""
    _check_lengths(predictions, references)
    if average == "binary":
        return _class_f1(predictions, references, positive)
    if average == "macro":
        classes = sorted(set(references) | set(predictions), key=str)
        return sum(_class_f1(predictions, references, c) for c in classes) / len(classes) if classes else 0.0
    if average == "micro":  # for single-label classification micro-F1 equals accuracy
        return accuracy(predictions, references)
    raise ValueError(f"average must be 'binary', 'macro' or 'micro', got {average!r}")


def _class_f1(predictions: Sequence[Hashable], references: Sequence[Hashable], positive: Hashable) -> float:
    tp = sum(p == positive and r == positive for p, r in zip(predictions, references))
    fp = sum(p == positive and r != positive for p, r in zip(predictions, references))
    fn = sum(p != positive and r == positive for p, r in zip(predictions, references))
    return precision_recall_f1(tp, fp, fn)[2]


def matthews_corrcoef(predictions: Sequence[Hashable], references: Sequence[Hashable]) -> float:
    """Matthews correlation (Gorodkin's multi-class R_K; equals the phi coefficient for two classes); 0 if undefined."""
    _check_lengths(predictions, references)
    n = len(references)
    correct = sum(p == r for p, r in zip(predictions, references))
    pred_counts, true_counts = Counter(predictions), Counter(references)
    classes = set(pred_counts) | set(true_counts)
    cov_pt = correct * n - sum(pred_counts[k] * true_counts[k] for k in classes)
    cov_pp = n * n - sum(pred_counts[k] ** 2 for k in classes)
    cov_tt = n * n - sum(true_counts[k] ** 2 for k in classes)
    if cov_pp == 0 or cov_tt == 0:
        return 0.0
    return cov_pt / math.sqrt(cov_pp * cov_tt)


def multilabel_scores(predictions: Sequence[set], references: Sequence[set]) -> dict[str, float]:
    """Multi-label: micro-averaged precision/recall/F1 over (example, label) pairs, and exact-set accuracy."""
    _check_lengths(predictions, references)
    tp = sum(len(p & r) for p, r in zip(predictions, references))
    fp = sum(len(p - r) for p, r in zip(predictions, references))
    fn = sum(len(r - p) for p, r in zip(predictions, references))
    precision, recall, f1 = precision_recall_f1(tp, fp, fn)
    exact = accuracy([frozenset(p) for p in predictions], [frozenset(r) for r in references])
    return {"micro_f1": f1, "micro_precision": precision, "micro_recall": recall, "exact_match": exact}


# --- regression -------------------------------------------------------------------------------------------------------


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson correlation coefficient; 0 when either side is constant."""
    _check_lengths(x, y)
    n = len(x)
    if n < 2:
        return 0.0
    mx, my = sum(x) / n, sum(y) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    sxx = sum((a - mx) ** 2 for a in x)
    syy = sum((b - my) ** 2 for b in y)
    if sxx == 0 or syy == 0:
        return 0.0
    return sxy / math.sqrt(sxx * syy)


def ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, ties sharing the mean of the ranks they span (as Spearman's rho needs)."""
    _, group, counts = np.unique(np.asarray(values, dtype=np.float64), return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)  # a tie group spans the ranks ends - counts + 1 .. ends
    return ((2 * ends - counts + 1) / 2)[group.reshape(-1)].tolist()


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman rank correlation: Pearson correlation of the (tie-averaged) ranks."""
    return pearson(ranks(x), ranks(y))


# --- entity-level scores (NER) ----------------------------------------------------------------------------------------


def entity_scores(predictions: Sequence[Sequence[str]], references: Sequence[Sequence[str]]) -> dict[str, float]:
    """Entity-level precision/recall/F1 over tag sequences (IOB1 or IOB2), counted by seqeval, plus per-type F1.

    seqeval's default mode counts chunks as conlleval does: an entity is correct only if its type and both of its
    boundaries match a reference entity. Keys: precision, recall, f1, and `<TYPE>_precision/_recall/_f1/_support`.
    """
    from seqeval.metrics import classification_report

    _check_lengths(predictions, references)
    for i, (p, r) in enumerate(zip(predictions, references)):
        if len(p) != len(r):
            raise ValueError(f"sentence {i}: {len(p)} predicted tags for {len(r)} reference tags")
    report = classification_report([list(r) for r in references], [list(p) for p in predictions],
                                   output_dict=True, zero_division=0)
    micro = report.get("micro avg", {"precision": 0.0, "recall": 0.0, "f1-score": 0.0})
    out = {"precision": float(micro["precision"]), "recall": float(micro["recall"]), "f1": float(micro["f1-score"])}
    for name, row in report.items():
        if name.endswith(" avg"):
            continue
        out[f"{name}_precision"] = float(row["precision"])
        out[f"{name}_recall"] = float(row["recall"])
        out[f"{name}_f1"] = float(row["f1-score"])
        out[f"{name}_support"] = int(row["support"])
    return out


def entity_counts(predictions: Sequence[Sequence[str]],
                  references: Sequence[Sequence[str]]) -> list[tuple[int, int, int]]:
    """(correct, predicted, gold) entities per sentence, chunked as `entity_scores` chunks them: summed over the
    sentences they give its micro F1 (2 correct / (predicted + gold)), which the paired bootstrap resamples."""
    from seqeval.metrics.sequence_labeling import get_entities

    _check_lengths(predictions, references)
    out = []
    for p, r in zip(predictions, references):
        predicted, gold = set(get_entities(list(p))), set(get_entities(list(r)))
        out.append((len(predicted & gold), len(predicted), len(gold)))
    return out


# --- SQuAD: exact match and token F1, as the official v1.1 evaluation script computes them ----------------------------

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """Lower case, remove punctuation, remove the articles a/an/the, collapse whitespace (official order)."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def squad_exact_match(prediction: str, reference: str) -> float:
    """1.0 if the normalised strings are equal."""
    return float(normalize_answer(prediction) == normalize_answer(reference))


def squad_f1(prediction: str, reference: str, version_2: bool = False) -> float:
    """F1 over the bags of normalised tokens.

    v1.1 gives 0 whenever no token is shared; v2.0 scores an empty answer against an empty reference (a correct
    'no answer') as 1.
    """
    pred_tokens = normalize_answer(prediction).split()
    ref_tokens = normalize_answer(reference).split()
    if version_2 and (not pred_tokens or not ref_tokens):
        return float(pred_tokens == ref_tokens)
    same = sum((Counter(pred_tokens) & Counter(ref_tokens)).values())
    return precision_recall_f1(same, len(pred_tokens) - same, len(ref_tokens) - same)[2]


def squad_question_scores(predictions: dict[str, str], references: dict[str, list[str]],
                          version_2: bool = False) -> dict[str, tuple[float, float]]:
    """(EM, F1) of each question, as fractions: for each the max over its reference answers.

    A question missing from `predictions` scores 0, as in the official script. In v2.0 an unanswerable question has
    the single reference "", and, as evaluate-v2.0.py does, gold answers that normalise to "" are dropped (a question
    left with none has the reference "").
    """
    out = {}
    for qid, answers in references.items():
        golds = answers
        if version_2:  # the official evaluate-v2.0.py drops gold answers that normalise to "" (e.g. ".")
            golds = [a for a in answers if normalize_answer(a)]
        golds = golds or [""]
        if qid in predictions:
            pred = predictions[qid]
            out[qid] = (max(squad_exact_match(pred, g) for g in golds),
                        max(squad_f1(pred, g, version_2) for g in golds))
        else:
            out[qid] = (0.0, 0.0)
    return out


def squad_scores(predictions: dict[str, str], references: dict[str, list[str]],
                 version_2: bool = False) -> dict[str, float]:
    """Corpus EM and F1 in percent: the mean over the questions of `squad_question_scores` (v2.0 also gets
    HasAns/NoAns breakdowns)."""
    per_question = squad_question_scores(predictions, references, version_2)
    n = len(references)
    out = {"exact_match": 100.0 * sum(em for em, _ in per_question.values()) / n if n else 0.0,
           "f1": 100.0 * sum(f1 for _, f1 in per_question.values()) / n if n else 0.0}
    if version_2:
        for name, has in (("HasAns", True), ("NoAns", False)):
            part = [per_question[q] for q, answers in references.items() if bool(answers) == has]
            if part:
                out[f"{name}_exact_match"] = 100.0 * sum(e for e, _ in part) / len(part)
                out[f"{name}_f1"] = 100.0 * sum(f for _, f in part) / len(part)
    return out


# --- retrieval: a ranking of documents per query against the set of its relevant ones (binary relevance) --------------

RECALL_AT = (1, 5, 10)  # the recall@k reported
RANK_CUTOFF = 10  # MRR@10 and nDCG@10 (MS MARCO's and BEIR's headline cut-offs)


def recall_at(ranking: Sequence[Hashable], relevant: Collection[Hashable], k: int) -> float:
    """The fraction of the relevant documents among the first k of the ranking."""
    return len(set(ranking[:k]) & set(relevant)) / len(relevant)


def reciprocal_rank(ranking: Sequence[Hashable], relevant: Collection[Hashable], k: int = RANK_CUTOFF) -> float:
    """1 / the rank of the first relevant document among the first k (0 when none is)."""
    return next((1 / rank for rank, doc in enumerate(ranking[:k], start=1) if doc in relevant), 0.0)


def ndcg_at(ranking: Sequence[Hashable], relevant: Collection[Hashable], k: int = RANK_CUTOFF) -> float:
    """Normalised discounted cumulative gain at k: sum of 1 / log2(rank + 1) over the relevant documents among the
    first k, over the same sum for a ranking with every relevant document first (Jarvelin & Kekalainen 2002)."""
    dcg = sum(1 / math.log2(rank + 1) for rank, doc in enumerate(ranking[:k], start=1) if doc in relevant)
    ideal = sum(1 / math.log2(rank + 1) for rank in range(1, min(k, len(relevant)) + 1))
    return dcg / ideal


def retrieval_scores(rankings: Sequence[Sequence[Hashable]], relevant: Sequence[Collection[Hashable]],
                     recall_ks: Sequence[int] = RECALL_AT, cutoff: int = RANK_CUTOFF) -> dict[str, float]:
    """recall@k for each k of `recall_ks`, mrr@cutoff and ndcg@cutoff, each the mean over the queries: rankings[i]
    holds query i's documents best first (at least max(recall_ks, cutoff) of them, or every document), relevant[i]
    the documents relevant to it (at least one: a query with none has nothing to find)."""
    _check_lengths(rankings, relevant)
    if any(not r for r in relevant):
        raise ValueError("every query needs at least one relevant document")
    n = max(len(rankings), 1)
    scores = {f"recall@{k}": sum(recall_at(r, rel, k) for r, rel in zip(rankings, relevant)) / n
              for k in recall_ks}
    scores[f"mrr@{cutoff}"] = sum(reciprocal_rank(r, rel, cutoff) for r, rel in zip(rankings, relevant)) / n
    scores[f"ndcg@{cutoff}"] = sum(ndcg_at(r, rel, cutoff) for r, rel in zip(rankings, relevant)) / n
    return scores


def _check_lengths(a: Sequence, b: Sequence) -> None:
    if len(a) != len(b):
        raise ValueError(f"{len(a)} predictions for {len(b)} references")
