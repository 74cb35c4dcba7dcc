"""PNG curves of a metrics.jsonl (shared by pre-training, fine-tuning and the demo); matplotlib's Agg canvas only."""

from __future__ import annotations

import math
import textwrap
import os
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Sequence

from bertkit.io import atomic_path
from bertkit.training.logging import RECORD_KEYS, read_metrics

# Train-side measurements that are bookkeeping rather than curves worth a panel.
_SKIP = {"tokens_per_s", "grad_norm", "samples", "tokens", "elapsed_s"}


def _figure(width: float, height: float) -> Any:
    """A matplotlib Figure on the Agg canvas (no pyplot, no GUI backend)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=80)
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, png_path: str | os.PathLike) -> Path:
    """Write `fig` as a PNG, atomically."""
    png_path = Path(png_path)
    with atomic_path(png_path) as tmp:
        fig.savefig(tmp, format="png")
    return png_path


def collect_series(records: Iterable[dict[str, Any]]) -> dict[str, dict[str, tuple[list[int], list[float]]]]:
    """metric -> split -> (steps, values), from records with 'step' and 'split'."""
    series: dict[str, dict[str, tuple[list[int], list[float]]]] = defaultdict(dict)
    for r in records:
        split = r.get("split", "train")
        for k, v in r.items():
            if k in RECORD_KEYS or isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            steps, values = series[k].setdefault(split, ([], []))
            steps.append(int(r["step"]))
            values.append(float(v))
    return dict(series)


def plot_metrics(
    metrics: str | os.PathLike | Sequence[dict[str, Any]],
    png_path: str | os.PathLike,
    metrics_to_plot: Sequence[str] | None = None,
    title: str | None = None,
) -> Path | None:
    """Plot every metric series (one panel per metric, one line per split) into a PNG, written atomically.

    `metrics` is a metrics.jsonl path or its records. By default: losses first, then accuracies and other
    evaluation metrics, then the learning rate. Returns the PNG path, or None when there is nothing to plot.
    """
    records = read_metrics(metrics) if isinstance(metrics, (str, os.PathLike)) else list(metrics)
    series = collect_series(records)
    if metrics_to_plot is None:
        names = [k for k in series if k not in _SKIP]
        names.sort(key=lambda k: (0 if "loss" in k else 2 if k == "lr" else 1, k))
    else:
        names = [k for k in metrics_to_plot if k in series]
    if not names:
        return None
    cols = min(3, len(names))
    rows = math.ceil(len(names) / cols)
    fig = _figure(4.5 * cols, 3.2 * rows)
    for i, name in enumerate(names):
        ax = fig.add_subplot(rows, cols, i + 1)
        for split, (steps, values) in sorted(series[name].items()):
            ax.plot(steps, values, marker="o" if len(steps) < 30 else None, markersize=3, label=split)
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if len(series[name]) > 1:
            ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    # Fixed margins: tight_layout costs as much as drawing the figure again.
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.08, top=0.9 if title else 0.94, wspace=0.28, hspace=0.5)
    return _save(fig, png_path)


def plot_bars(
    labels: Sequence[str],
    values: Sequence[float],
    png_path: str | os.PathLike,
    title: str,
    ylabel: str,
    points: Sequence[Sequence[float]] | None = None,
) -> Path:
    """A bar per label with its value written on it (and, optionally, each run's value as a dot), as a PNG."""
    fig = _figure(1.8 + 1.9 * len(labels), 3.6)
    ax = fig.add_subplot(1, 1, 1)
    xs = list(range(len(labels)))
    bars = ax.bar(xs, values, color="#4c78a8", width=0.6)
    for bar, v in zip(bars, values):
        ax.text(bar.get_x() + bar.get_width() / 2, v, f"{v:.1f}", ha="center", va="bottom", fontsize=9)
    if points:
        for x, run_values in zip(xs, points):
            ax.plot([x] * len(run_values), run_values, "o", color="#e45756", markersize=4)
    low = min(min(values), *(min(p) for p in points or [] if p))
    ax.set_ylim(max(0.0, low - 10), max(values) + 5)
    ax.set_xticks(xs)
    ax.set_xticklabels([textwrap.fill(label, 16) for label in labels], fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    fig.subplots_adjust(left=0.12, right=0.98, bottom=0.22, top=0.88)
    return _save(fig, png_path)
