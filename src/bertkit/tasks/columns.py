"""A table's non-text columns, as classification reads them (docs/guide/columns.md): a template that writes named
columns into the text, numeric columns standardised with the training data's statistics, and categorical columns as
ids of the training data's vocabulary. Plain functions of values and statistics; `settings` is a classification
task's settings (its template, numeric_columns, categorical_columns, numeric_limits and empty_field).

Numbers the model cannot use are refused, not fitted: a magnitude above NUMERIC_MAGNITUDE anywhere, and a value
more than NUMERIC_SPREADS typical spreads from its column's median (an 'Age' of 1e30 among ages of 20 to 90 would
squeeze every real age to the same standardised value; at predict time it would drive the logits to +-inf). A new
value inside those limits but outside the training data's range is clipped to that range (and logged): the head
never extrapolates beyond what it was trained on, so a prediction is always a finite probability.
"""

from __future__ import annotations

import math
import os
import string
from typing import Any, Mapping, Sequence

import numpy as np

from bertkit.data.tables import require_field, shown
from bertkit.errors import ConfigError, data_error

UNKNOWN_CATEGORY = 0  # the id of a category training never had (and of an empty field): one bucket per column
NUMERIC_MAGNITUDE = 1e100
"""The largest magnitude a numeric column's value may have. No quantity in a table comes near it (the observable
universe holds about 1e80 atoms), so a larger value is a data error; the bound also keeps every sum of squares of
the statistics far inside float64."""
NUMERIC_SPREADS = 1e9
"""How far from its column's median a value may lie, in the column's typical spread (the median of the values'
nonzero distances from the median). Nine orders of magnitude: an 'Age' of 1e30 is refused, while a price column
spanning 1 to 1e12, or one of 0s with a few values of 1e12, stays far inside. Beyond it standardising squeezes every
other value of the column onto one point, so the column would be silently useless; real values spanning that range
belong on a log scale."""
LEGACY_Z_CLIP = 100.0
"""Folders fitted before the training range was stored: standardised values are clipped to +-this many standard
deviations (a training value lies within sqrt(n - 1) of the mean, so within 100 for files of up to 10,001 rows)."""


def template_columns(template: str) -> list[str]:
    """The columns a text template reads, in order: 'Age: {Age}. {Review Text}' -> ['Age', 'Review Text'];
    ConfigError for a positional field ({}), a format spec or a lone brace."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as e:
        raise ConfigError(f"template {template!r}: {e} (write {{{{ and }}}} for literal braces)") from None
    names = []
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if not name or spec or conversion:
            raise ConfigError(f"template {template!r}: every field must be a column name, as in {{Age}}; found "
                              f"{{{name}{'!' + conversion if conversion else ''}{':' + spec if spec else ''}}}")
        names.append(name)
    return names


def render_template(template: str, fields: Mapping[str, Any], empty: str = "unknown") -> str:
    """The template with each {column} replaced by the row's value (stripped); an empty or null value as `empty`."""
    out = []
    for literal, name, _, _ in string.Formatter().parse(template):
        out.append(literal)
        if name is not None:
            value = fields[name]
            out.append(("" if value is None else str(value).strip()) or empty)
    return "".join(out)


def parse_number(path: str | os.PathLike, line: int | None, column: str, raw: Any) -> float | None:
    """A numeric column's value: None for an empty field, else a finite number of magnitude at most
    NUMERIC_MAGNITUDE, or a DataError naming the file, line and column. A string is read as a plain decimal or
    scientific number: float() would also take '1_000' (Python's digit grouping), which a data file never means."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    value = None
    if isinstance(raw, str):
        if "_" in raw:
            raise data_error(path, line, f"column {column!r}: {shown(raw)} is not a number (write digits without "
                             "separators, as in 1000 or 1e3)")
        try:
            value = float(raw)
        except ValueError:
            pass
    elif isinstance(raw, (int, float)) and not isinstance(raw, bool):  # JSON true is not a number here
        try:
            value = float(raw)
        except OverflowError:  # a JSON integer beyond float64, e.g. 10**400
            value = math.inf
    if value is None:
        raise data_error(path, line, f"column {column!r}: {shown(raw)} is not a number (a numeric column; leave "
                         "the field empty for a missing value)")
    if not math.isfinite(value):
        raise data_error(path, line, f"column {column!r}: {shown(raw)} is not a finite number")
    if abs(value) > NUMERIC_MAGNITUDE:
        raise data_error(path, line, f"column {column!r}: {shown(raw)} is beyond +-{NUMERIC_MAGNITUDE:g}, the "
                         "largest magnitude a numeric column takes: a data error? (rescale a column whose real "
                         "values are that large)")
    return value


def fit_numeric(values: Sequence[float | None]) -> list[float]:
    """[mean, std] of a column's non-empty training values (std 1 for a constant column, [0, 1] for an empty one),
    computed on the values divided by a power of two that brings them into [-2, 2]: the same bits as computing
    them directly, but no square can overflow, whatever finite values come in (mean and std stay below the
    largest magnitude, so they are finite too)."""
    seen = np.array([v for v in values if v is not None], dtype=np.float64)
    biggest = float(np.abs(seen).max()) if seen.size else 0.0
    if not biggest:
        return [0.0, 1.0]
    scale = math.ldexp(1.0, math.frexp(biggest)[1] - 1)  # biggest / scale in [1, 2)
    scaled = seen / scale
    mean, std = float(scaled.mean()) * scale, float(scaled.std()) * scale
    return [mean, std if std > 0 else 1.0]


def fit_numeric_range(values: Sequence[float | None]) -> tuple[list[float], list[float]]:
    """([min, max], [lo, hi]) of a column's non-empty training values: the range new values are clipped to, and
    the limits beyond which a value is refused (the median +- NUMERIC_SPREADS typical spreads, see there)."""
    seen = np.array([v for v in values if v is not None], dtype=np.float64)
    if not seen.size:
        return [0.0, 0.0], [-NUMERIC_MAGNITUDE, NUMERIC_MAGNITUDE]
    median = float(np.median(seen))
    distances = np.abs(seen - median)
    distances = distances[distances > 0]
    spread = float(np.median(distances)) if distances.size else max(abs(median), 1.0)
    return ([float(seen.min()), float(seen.max())],
            [max(median - NUMERIC_SPREADS * spread, -NUMERIC_MAGNITUDE),
             min(median + NUMERIC_SPREADS * spread, NUMERIC_MAGNITUDE)])


def check_numeric_limits(path: str | os.PathLike, line: int | None, column: str, value: float | None,
                         limits: Sequence[float]) -> None:
    """DataError naming the file, line and column if `value` lies outside its column's [lo, hi] limits."""
    if value is not None and not limits[0] <= value <= limits[1]:
        raise data_error(path, line, f"column {column!r}: {value:g} lies outside {limits[0]:g} .. {limits[1]:g}, "
                         f"the values this column takes (the training values' median +- {NUMERIC_SPREADS:g} times "
                         "their typical distance from it): almost certainly a data error; fix the value (a column "
                         "whose real values span such a range is better given as its logarithm)")


def numeric_vector(values: Sequence[float | None], stats: Sequence[Sequence[float]],
                   ranges: Sequence[Sequence[float] | None] | None = None) -> list[float]:
    """The head's numeric input: each value clipped to its column's training [min, max] (when known; else the
    standardised value to +-LEGACY_Z_CLIP) and standardised by the column's [mean, std], then one missing flag
    per column; an empty field is the training mean (0.0) with its flag 1.0. Training values are inside their
    range, so clipping changes only new values, and the head never reads a number beyond what it was trained on."""
    z = []
    for v, (mean, std), bounds in zip(values, stats, ranges or [None] * len(stats)):
        if v is None:
            z.append(0.0)
        elif bounds is not None:
            z.append((min(max(v, bounds[0]), bounds[1]) - mean) / std)
        else:
            z.append(min(max((v - mean) / std, -LEGACY_Z_CLIP), LEGACY_Z_CLIP))
    return z + [1.0 if v is None else 0.0 for v in values]


def category_ids(values: Sequence[str | None], vocabularies: Sequence[Sequence[str]]) -> list[int]:
    """Per column, 1 + the value's position in the training vocabulary; UNKNOWN_CATEGORY for an unseen or empty
    value."""
    return [vocab.index(v) + 1 if v is not None and v in vocab else UNKNOWN_CATEGORY
            for v, vocab in zip(values, vocabularies)]


def input_columns(settings: Any) -> list[str]:
    """Every column the settings read besides the text, pair and label columns: the template's, numeric, categorical."""
    template = template_columns(settings.template) if settings.template else []
    return template + list(settings.numeric_columns or []) + list(settings.categorical_columns or [])


def field_text(path: str | os.PathLike, line: int | None, column: str, raw: Any) -> str | None:
    """A template or categorical column's value as text, stripped (None for an empty field); a JSON list or object
    is a DataError naming the file, line and column (its Python repr is no value of the column)."""
    if isinstance(raw, (list, dict)):
        kind = "an object" if isinstance(raw, dict) else "a list"
        raise data_error(path, line, f"column {column!r}: {shown(raw)} is {kind}; a column holds one value, a "
                         "string or a number")
    return None if raw is None else (str(raw).strip() or None)


def row_inputs(path: str | os.PathLike, line: int | None, fields: Mapping[str, Any],
               settings: Any) -> dict[str, Any]:
    """What a row (a column -> value mapping) gives besides its text and label: "text" when a template writes it,
    "numeric" and "categories" when the model reads those columns. DataError naming the file, line and column for
    a missing column, a non-number, a list or object, or (for a fitted model) a number beyond its column's limits."""
    for name in input_columns(settings):
        require_field(path, line, fields, name)
    out: dict[str, Any] = {}
    if settings.template:
        values = {name: field_text(path, line, name, fields[name]) for name in template_columns(settings.template)}
        out["text"] = render_template(settings.template, values, settings.empty_field)
    if settings.numeric_columns:
        out["numeric"] = [parse_number(path, line, c, fields[c]) for c in settings.numeric_columns]
        limits = settings.numeric_limits or {}
        for column, value in zip(settings.numeric_columns, out["numeric"]):
            if column in limits:
                check_numeric_limits(path, line, column, value, limits[column])
    if settings.categorical_columns:
        out["categories"] = [field_text(path, line, c, fields[c]) for c in settings.categorical_columns]
    return out
