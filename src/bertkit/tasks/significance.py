"""Is one model better than another on the same evaluation examples? Paired significance tests.

Two fine-tuned models scored on the same dev set are not independent samples: most examples are easy or hard for
both. A paired test looks only at where they differ, and is far more sensitive than comparing two accuracies as if
they came from different data (Dietterich 1998, "Approximate statistical tests for comparing supervised
classification learning algorithms").

- Accuracy: McNemar's exact test. Of the examples exactly one model gets right, each is equally likely to be either
  model's under the null hypothesis of equal accuracy, so the count of one model's wins is Binomial(discordant, 1/2);
  the two-sided p-value is twice the smaller tail (capped at 1), as `scipy.stats.binomtest` computes it.
- Metrics that are not a mean over examples (entity F1): the paired bootstrap (Koehn 2004, "Statistical
  significance tests for machine translation evaluation"; Berg-Kirkpatrick et al. 2012). The same resampled
  examples score both models; the 95% percentile interval of the difference and a two-sided p-value come from the
  resamples. Each example contributes additive counts (correct entities, predicted, gold), so a resample's metric
  is a function of summed counts and thousands of resamples take milliseconds.

The outcome reads "win", "loss" or "tie" for model B against model A at level `alpha`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

import numpy as np

ALPHA = 0.05  # the conventional 5% level: a difference this unlikely under "no difference" counts as real
BOOTSTRAP_RESAMPLES = 2000


@dataclass
class PairedTest:
    """The result of comparing model B with model A on the same n examples."""

    test: str
    """"McNemar's exact test" or "paired bootstrap"."""
    metric: str
    n: int
    """Examples both models were scored on."""
    score_a: float
    score_b: float
    p_value: float
    outcome: str
    """"win" (B better at level alpha), "loss" (B worse) or "tie"."""
    alpha: float = ALPHA
    only_a: int | None = None
    """McNemar: examples only A gets right."""
    only_b: int | None = None
    """McNemar: examples only B gets right."""
    interval: tuple[float, float] | None = None
    """Bootstrap: 95% percentile interval of score_b - score_a."""
    resamples: int | None = None

    @property
    def difference(self) -> float:
        return self.score_b - self.score_a

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "difference": self.difference}

    def evidence(self, a_name: str = "A", b_name: str = "B") -> str:
        """The test's figures in words: the discordant counts or the interval, and the p-value."""
        if self.only_a is not None:
            return (f"{self.test} on {self.n} examples: {self.only_b} right only with {b_name}, {self.only_a} "
                    f"right only with {a_name}, p = {format_p(self.p_value)}")
        low, high = self.interval or (float("nan"), float("nan"))
        return (f"{self.test} over {self.n} examples ({self.resamples} resamples): 95% interval of the difference "
                f"[{100 * low:+.2f}, {100 * high:+.2f}] points, p = {format_p(self.p_value)}")


def format_p(p: float) -> str:
    """A p-value for people: three significant digits, small ones in scientific notation."""
    return f"{p:.3g}" if p >= 1e-3 else f"{p:.1e}"


def _outcome(p_value: float, difference: float, alpha: float) -> str:
    if p_value < alpha and difference > 0:
        return "win"
    if p_value < alpha and difference < 0:
        return "loss"
    return "tie"


def binomial_two_sided_p(k: int, n: int) -> float:
    """Exact two-sided p-value of k successes in n trials with success probability 1/2 (exact integer sums)."""
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(k, n - k) + 1))
    return min(1.0, 2 * tail / 2**n)


def mcnemar(a_correct: Sequence[bool], b_correct: Sequence[bool], metric: str = "accuracy",
            alpha: float = ALPHA) -> PairedTest:
    """McNemar's exact test of B against A from each example's correctness under both models."""
    if len(a_correct) != len(b_correct):
        raise ValueError(f"{len(a_correct)} results for A but {len(b_correct)} for B: a paired test needs the "
                         "same examples")
    if not a_correct:
        raise ValueError("no examples to compare")
    a = np.asarray(a_correct, dtype=bool)
    b = np.asarray(b_correct, dtype=bool)
    only_a, only_b = int((a & ~b).sum()), int((b & ~a).sum())
    p = binomial_two_sided_p(only_b, only_a + only_b)
    score_a, score_b = float(a.mean()), float(b.mean())
    return PairedTest("McNemar's exact test", metric, len(a), score_a, score_b, p,
                      _outcome(p, score_b - score_a, alpha), alpha, only_a=only_a, only_b=only_b)


def accuracy_test(references: Sequence, predictions_a: Sequence, predictions_b: Sequence) -> PairedTest:
    """McNemar's exact test of B's accuracy against A's on the same references."""
    return mcnemar([p == r for p, r in zip(predictions_a, references)],
                   [p == r for p, r in zip(predictions_b, references)])


def paired_bootstrap(a_counts: np.ndarray, b_counts: np.ndarray, statistic: Callable[[np.ndarray], np.ndarray],
                     metric: str, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0,
                     alpha: float = ALPHA) -> PairedTest:
    """The paired bootstrap of B against A.

    `a_counts` and `b_counts` are (examples, k) arrays of additive per-example counts; `statistic` maps summed
    counts (..., k) to the metric (...). Each resample draws the same example indices for both models.
    """
    a_counts, b_counts = np.asarray(a_counts, dtype=np.float64), np.asarray(b_counts, dtype=np.float64)
    if a_counts.ndim != 2 or a_counts.shape != b_counts.shape:
        raise ValueError(f"counts of shape {a_counts.shape} for A but {b_counts.shape} for B: a paired test needs "
                         "the same examples")
    n = len(a_counts)
    if n == 0:
        raise ValueError("no examples to compare")
    score_a, score_b = float(statistic(a_counts.sum(0))), float(statistic(b_counts.sum(0)))
    rng = np.random.default_rng(seed)
    deltas = np.empty(resamples)
    chunk = max(1, (1 << 22) // (n * a_counts.shape[1]))  # resamples per step: about 32 MB of gathered counts
    for start in range(0, resamples, chunk):
        idx = rng.integers(0, n, size=(min(chunk, resamples - start), n))
        deltas[start:start + len(idx)] = statistic(b_counts[idx].sum(1)) - statistic(a_counts[idx].sum(1))
    low, high = (float(x) for x in np.percentile(deltas, [100 * alpha / 2, 100 * (1 - alpha / 2)]))
    if not np.any(deltas != 0):
        p = 1.0  # identical predictions: no evidence either way
    else:  # how often a resample's difference falls on the other side of zero, both ways
        p = min(1.0, 2 * min(float(np.mean(deltas <= 0)), float(np.mean(deltas >= 0))))
    return PairedTest("paired bootstrap", metric, n, score_a, score_b, p, _outcome(p, score_b - score_a, alpha),
                      alpha, interval=(low, high), resamples=resamples)


def f1_from_counts(sums: np.ndarray) -> np.ndarray:
    """Micro F1 from summed (correct, predicted, gold) counts: 2 correct / (predicted + gold), 0 when both are 0."""
    sums = np.asarray(sums, dtype=np.float64)
    return _ratio(2 * sums[..., 0], sums[..., 1] + sums[..., 2])


def confusion_statistic(metric: str, classes: int, positive: int = 1) -> Callable[[np.ndarray], np.ndarray]:
    """A statistic over summed one-hot confusion cells (..., classes * classes; cell = reference * classes +
    prediction): "accuracy", "f1" (binary F1 of class `positive`; macro F1 when classes > 2) or "matthews"."""

    def statistic(sums: np.ndarray) -> np.ndarray:
        m = np.asarray(sums, dtype=np.float64).reshape(*np.shape(sums)[:-1], classes, classes)  # (..., ref, pred)
        total = m.sum((-2, -1))
        correct = np.trace(m, axis1=-2, axis2=-1)
        if metric == "accuracy":
            return _ratio(correct, total)
        predicted, reference = m.sum(-2), m.sum(-1)  # (..., classes)
        if metric == "matthews":
            numerator = correct * total - (predicted * reference).sum(-1)
            denominator = np.sqrt((total**2 - (predicted**2).sum(-1)) * (total**2 - (reference**2).sum(-1)))
            return _ratio(numerator, denominator)
        if metric == "f1":
            tp = np.diagonal(m, axis1=-2, axis2=-1)
            f1 = _ratio(2 * tp, predicted + reference)
            return f1[..., positive] if classes == 2 else f1.mean(-1)
        raise ValueError(f"no confusion statistic for metric {metric!r}; expected accuracy, f1 or matthews")

    return statistic


def confusion_counts(predictions: Sequence[int], references: Sequence[int], classes: int) -> np.ndarray:
    """Each example's one-hot confusion cell, (examples, classes * classes): additive counts for the bootstrap."""
    cells = np.asarray(references, dtype=np.int64) * classes + np.asarray(predictions, dtype=np.int64)
    return np.eye(classes * classes, dtype=np.float64)[cells]


def pearson_from_sums(sums: np.ndarray) -> np.ndarray:
    """Pearson correlation from summed (1, x, y, x^2, y^2, xy) per example."""
    n, x, y, xx, yy, xy = (np.asarray(sums, dtype=np.float64)[..., i] for i in range(6))
    return _ratio(n * xy - x * y, np.sqrt(np.maximum(n * xx - x * x, 0) * np.maximum(n * yy - y * y, 0)))


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """numerator / denominator, 0 where the denominator is 0 (the metrics' convention for an empty class)."""
    numerator, denominator = np.asarray(numerator, np.float64), np.asarray(denominator, np.float64)
    return np.divide(numerator, denominator, out=np.zeros(np.broadcast(numerator, denominator).shape),
                     where=denominator != 0)


# How a verdict sentence names a metric (the key as stored otherwise).
METRIC_NAMES = {"f1": "F1", "micro_f1": "micro F1", "matthews": "Matthews correlation", "pearson": "Pearson r"}


def verdict_sentence(test: PairedTest, a_name: str, b_name: str, task: str) -> str:
    """One sentence computed from the test: who wins on which task, by how much, and the evidence."""
    gain = 100 * test.difference
    metric = METRIC_NAMES.get(test.metric, test.metric)
    scores = f"{100 * test.score_b:.1f} vs {100 * test.score_a:.1f} {metric} ({gain:+.1f} points)"
    if test.outcome == "win":
        head = f"{b_name} beats {a_name} on {task}: {scores}"
    elif test.outcome == "loss":
        head = f"{b_name} does worse than {a_name} on {task}: {scores}"
    elif (test.only_a, test.only_b) == (0, 0):
        head = f"{b_name} and {a_name} get exactly the same examples right on {task}: {scores}"
    else:
        head = f"{b_name} is level with {a_name} on {task}: {scores}, not significant at the {test.alpha:.0%} level"
    return f"{head}; {test.evidence(a_name, b_name)}."
