"""Sequence classification of single sentences and pairs: GLUE and any TSV/CSV/JSONL file of labelled texts.

GLUE layouts are recognised from a file's header (or, for CoLA, its header-less four columns); other files name
their columns with `text_column` / `text_pair_column` / `label_column` (a name, or a 0-based index for files
without a header). Labels may be strings or numbers (single-label, names kept as they appear in the training
file), real numbers (`problem: regression`, STS-B) or several per example (`problem: multi_label`; a JSON list, or
a string split on `label_separator`, default ",").

Metrics by default: accuracy everywhere single-label, binary F1 of the positive class for MRPC/QQP (and any
two-class file; macro F1 for more classes), Matthews correlation for CoLA, Pearson/Spearman for regression,
micro F1 for multi-label. Predictions: the input rows with one more column, the predicted label as it appeared in
the training data (JSONL input: each object with a "prediction" field).

Non-text columns, two ways (docs/guide/columns.md): `template` renders named columns into the text ("Age: {Age}.
{Review Text}"; an empty field is written as `empty_field`, "unknown"); `numeric_columns` / `categorical_columns`
go to the head beside the pooled [CLS] vector: numbers standardised with the training data's mean and std (an
empty field is the mean, with a missing flag set), categories as embeddings of ids from the training data's
vocabulary (an unseen or empty value is id 0, the unknown bucket). The statistics and vocabularies are fitted on
the training examples and kept in the settings, so evaluate, predict and serve apply the same ones (the column
functions, and which numbers are refused: `bertkit.tasks.columns`).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import logging
import math
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from bertkit.dataclass_io import spec
from bertkit.answers import NUMBER_BYTES, OBJECT_BYTES, json_bytes
from bertkit.data.tables import first_row, format_of, iter_table, read_jsonl, require_field, require_text, shown
from bertkit.errors import CheckpointError, ConfigError, data_error
from bertkit.io import atomic_open
import bertkit.tasks.metrics as metrics
import bertkit.tasks.significance as significance
from bertkit.model.config import BertConfig
from bertkit.tasks.base import (DEFAULT_METRIC, Feature, Head, Serving, Task, TaskOptions, TaskSettings,
                                answer_examples, softmax, task_options)
from bertkit.tasks.columns import (LEGACY_Z_CLIP, category_ids, check_numeric_limits, fit_numeric, fit_numeric_range,
                                   input_columns, numeric_vector, row_inputs, template_columns)

if TYPE_CHECKING:
    from bertkit.model.folder import FolderConfig

Column = str | int
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Layout:
    """Where a file keeps its text, optional second text and label, and the metric its benchmark reports."""

    text: Column
    pair: Column | None
    label: Column | None
    header: bool = True
    main_metric: str = "accuracy"
    problem: str = "single_label"
    labels: tuple[str, ...] | None = None
    """The benchmark's label set; a row with any other label is an error naming its line."""


PROBLEMS = ("single_label", "regression", "multi_label")
BINARY = ("0", "1")
# The GLUE files as distributed (Wang et al. 2019, https://gluebenchmark.com/tasks), in detection order.
GLUE_LAYOUTS: dict[str, Layout] = {
    "mnli": Layout("sentence1", "sentence2", "gold_label", labels=("contradiction", "entailment", "neutral")),
    "stsb": Layout("sentence1", "sentence2", "score", main_metric="pearson", problem="regression"),
    "qqp": Layout("question1", "question2", "is_duplicate", main_metric="f1", labels=BINARY),
    "mrpc": Layout("#1 String", "#2 String", "Quality", main_metric="f1", labels=BINARY),
    "qnli": Layout("question", "sentence", "label", labels=("entailment", "not_entailment")),
    "rte": Layout("sentence1", "sentence2", "label", labels=("entailment", "not_entailment")),
    "wnli": Layout("sentence1", "sentence2", "label", labels=BINARY),
    "sst2": Layout("sentence", None, "label", labels=BINARY),
    "cola": Layout(3, None, 1, header=False, main_metric="matthews", labels=BINARY),  # source, label, mark, sentence
}
# JSONL defaults when no column is named.
JSONL_TEXT = ("text", "sentence", "sentence1", "question", "premise")
JSONL_PAIR = {"sentence1": "sentence2", "question": "sentence", "premise": "hypothesis", "text": "text_pair"}


@dataclass
class TextExample:
    """One row: the text(s), the raw label (None when unlabelled), and the row itself for the prediction file."""

    line: int
    text: str
    pair: str | None
    label: Any
    row: list[str] | dict[str, Any]
    header: list[str] | None = None
    numeric: list[float | None] | None = None
    """The numeric columns' values (None: an empty field), when the model reads numeric columns."""
    categories: list[str | None] | None = None
    """The categorical columns' values (None: an empty field), when the model reads categorical columns."""
    layout: Layout | None = None
    """The layout of the table the row came from (a GLUE task's metric and problem, for `fit_labels`)."""


def _column(spec: str | None) -> Column | None:
    """A column option: digits are a 0-based index, anything else a header name."""
    if spec is None or spec == "":
        return None
    return int(spec) if str(spec).isdigit() else spec


def detect_layout(path: str | os.PathLike, first_row: list[str], settings: ClassificationSettings) -> Layout:
    """The layout of a table: named columns if given, else a GLUE header, else CoLA's header-less layout."""
    text, pair, label = (_column(getattr(settings, k)) for k in ("text_column", "text_pair_column", "label_column"))
    if text is not None or settings.template:  # a template names header columns: the file has a header
        named = [c for c in (text, pair, label) if c is not None]
        return Layout(text, pair, label, header=bool(settings.template) or not all(isinstance(c, int) for c in named),
                      main_metric=settings.main_metric or "accuracy", problem=settings.problem or "single_label")
    glue = settings.glue
    matches = [(name, layout) for name, layout in GLUE_LAYOUTS.items() if layout.header
               and layout.text in first_row and (layout.pair is None or layout.pair in first_row)]
    # A named GLUE task first, then a layout whose label column is there too (train/dev), then any (test files).
    if matches:
        return min(matches, key=lambda m: (m[0] != glue, m[1].label not in first_row))[1]
    if len(first_row) == 4 and first_row[1] in ("0", "1") and glue in (None, "cola"):
        return GLUE_LAYOUTS["cola"]
    raise data_error(path, 1, f"cannot tell which column holds the text (first row: {first_row[:6]}); "
                     "pass --text-column (and --text-pair-column, --label-column) with header names or 0-based "
                     "indices")


def glue_name(layout: Layout) -> str | None:
    """The GLUE task a layout belongs to (None for a user-named layout)."""
    return next((name for name, known in GLUE_LAYOUTS.items() if known == layout), None)


@dataclass
class ClassificationOptions(TaskOptions):
    """Which columns hold what, and what kind of label it is."""

    text_column: str | None = spec(None)
    """Header name or 0-based index of the text (default: found from the file's layout)."""
    text_pair_column: str | None = spec(None)
    """... of the second text of a pair."""
    label_column: str | None = spec(None)
    """... of the label."""
    glue: str | None = spec(None, choices=tuple(GLUE_LAYOUTS))
    """GLUE task name when the file's layout is ambiguous (e.g. cola)."""
    regression: bool = False
    """Real-valued labels (STS-B): one output, mean squared error."""
    multi_label: bool = False
    """Several labels per example: one sigmoid per label."""
    label_separator: str = spec(",")
    """Between the labels of a multi-label example."""
    template: str | None = spec(None)
    """The text written from the row's named columns, e.g. 'Age: {Age}. Department: {Department Name}. {Review
    Text}' (instead of text_column; {{ and }} are literal braces). A column the file lacks is an error."""
    empty_field: str = spec("unknown", empty=True)
    """What the template writes for an empty field."""
    numeric_columns: list[str] | None = spec(None)
    """Columns given to the head beside the text as numbers, e.g. [Age, Rating]: standardised with the training
    data's mean and std; an empty field is the training mean with a missing flag set; a non-number is an error."""
    categorical_columns: list[str] | None = spec(None)
    """Columns given to the head beside the text as learned embeddings, e.g. [Department Name]; a value never seen
    in training (or an empty field) goes to the column's unknown bucket."""
    category_embedding_size: int = spec(16, ge=1, le=2**16)
    """Width of each categorical column's embedding."""
    labels: list[str] | None = spec(None)
    """Every label the training file may hold, e.g. '[neg, neutral, pos]': a row with another label is an error
    naming its line, and a listed class is accepted however rare. Without it a label is taken for a typo and
    refused when it is a word among numbers (or a number among words) on few rows, or when it is on at most 3 rows
    while the other classes each occur at least ten times as often."""


@dataclass
class ClassificationSettings(TaskSettings):
    """What a fine-tuned classifier keeps: its options as resolved, and what fitting on the training file learned
    (the label names, the problem, whether it read pairs, the numeric columns' statistics and the categorical
    columns' vocabularies)."""

    text_column: str | None = spec(None)
    """As the option: the text's column (None: found from the file's layout)."""
    text_pair_column: str | None = spec(None)
    """... the second text's column."""
    label_column: str | None = spec(None)
    """... the label's column."""
    glue: str | None = spec(None, choices=tuple(GLUE_LAYOUTS))
    """The GLUE task of the file's layout (given, or recognised from the training file's header)."""
    problem: str | None = spec(None, choices=PROBLEMS)
    """single_label, regression or multi_label (None before fitting: the options' or the file layout's)."""
    label_separator: str = spec(",")
    """Between the labels of a multi-label example."""
    template: str | None = spec(None)
    """The text written from the row's named columns."""
    empty_field: str = spec("unknown", empty=True)
    """What the template writes for an empty field."""
    numeric_columns: list[str] | None = spec(None)
    """Columns given to the head beside the text as standardised numbers."""
    categorical_columns: list[str] | None = spec(None)
    """Columns given to the head beside the text as learned embeddings."""
    category_embedding_size: int = spec(16, ge=1, le=2**16)
    """Width of each categorical column's embedding."""
    labels: list[str] | None = spec(None)
    """The complete label set the training file may hold (the `labels` option)."""
    label_names: list[str] | None = spec(None)
    """The head's outputs, in order: the training file's labels (None for regression)."""
    pairs: bool | None = None
    """Whether the training examples were pairs of texts (None: a folder from before it was recorded)."""
    numeric_stats: dict[str, list[float]] | None = None
    """Each numeric column's training [mean, std]."""
    numeric_range: dict[str, list[float]] | None = None
    """Each numeric column's training [min, max]: new values are clipped to it."""
    numeric_limits: dict[str, list[float]] | None = None
    """Each numeric column's [lo, hi]: a value beyond is refused (see NUMERIC_SPREADS)."""
    category_vocab: dict[str, list[str]] | None = None
    """Each categorical column's training values, in id order (id 0 is the unknown bucket)."""


def log_clipped(examples: Sequence[TextExample], columns: Sequence[str], stats: Sequence[Sequence[float]],
                ranges: Sequence[Sequence[float] | None]) -> None:
    """Log a warning per numeric column with values that numeric_vector clips: outside the training data's range
    (or, for older folders, beyond LEGACY_Z_CLIP standard deviations), with the first lines that hold one."""
    for i, (column, (mean, std), bounds) in enumerate(zip(columns, stats, ranges)):
        lo, hi = bounds if bounds is not None else (mean - LEGACY_Z_CLIP * std, mean + LEGACY_Z_CLIP * std)
        out = [(ex.line, v) for ex in examples if ex.numeric and (v := ex.numeric[i]) is not None and not lo <= v <= hi]
        if out:
            where = ", ".join(f"{v:g} (line {line})" if line else f"{v:g}" for line, v in out[:3])
            logger.warning("column %r: %d value(s) outside the training data's range %g .. %g are read as its "
                           "nearest end: %s%s", column, len(out), lo, hi, where, ", ..." if len(out) > 3 else "")


def reads_pairs(settings: ClassificationSettings) -> bool:
    """Whether the model was trained on pairs of texts (recorded at fitting; folders from before that: a template
    model without a pair column did not, other models may have)."""
    if settings.pairs is not None:
        return settings.pairs
    return not settings.template or bool(settings.text_pair_column)


def request_example(text: str | None, pair: str | None, columns: Mapping[str, Any] | None,
                    settings: ClassificationSettings,
                    where: str = "request") -> TextExample:
    """One example of a /classify request, made as `read` makes one of a file's row; DataError naming `where` for
    a column the model does not read, a pair it was not trained with (or none where it was), and whatever a row
    would be refused for."""
    columns = columns or {}
    known = input_columns(settings)
    for name in columns:
        if name not in known:
            near = next((k for k in known if k.casefold() == str(name).casefold()), None)
            raise data_error(where, None, f"unknown column {name!r}{f' (did you mean {near!r}?)' if near else ''}; "
                             f"this model reads {', '.join(map(repr, known))}")
    if pair is not None and not reads_pairs(settings):
        raise data_error(where, None, "a pair (second text) was sent, but this model was trained on single texts; "
                         "send no pairs")
    if pair is None and settings.pairs:
        raise data_error(where, None, "this model was trained on pairs of texts; send pairs, one per example")
    extra = row_inputs(where, None, columns, settings)
    text = extra.pop("text", text)
    if text is None:
        raise data_error(where, None, "no text given, and the model has no template to write it from columns")
    return TextExample(0, text, pair, None, dict(columns), **extra)


def parse_label(path: str | os.PathLike, line: int, raw: Any, problem: str, separator: str = ",") -> Any:
    """A raw label as the problem type wants it: str (single-label), float (regression), list (multi-label, a JSON
    list or a string split on `separator`)."""
    if problem == "regression":
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise data_error(path, line, f"label {raw!r} is not a number (regression)") from None
        if not math.isfinite(value):
            raise data_error(path, line, f"label {raw!r} is not a finite number")
        return value
    if problem == "multi_label":
        parts = raw if isinstance(raw, list) else str(raw).split(separator)
        return sorted({label for label in map(_label_str, parts) if label})
    if isinstance(raw, dict):
        raise data_error(path, line, f"label {shown(raw)} is an object; a label is a string or a number")
    if isinstance(raw, list):
        raise data_error(path, line, f"label {raw!r} is a list; pass --multi-label for several labels")
    return _label_str(raw)


def problem_type(settings: ClassificationSettings) -> str:
    """BertConfig.problem_type for the head's loss and the reading of its logits."""
    return {"regression": "regression", "multi_label": "multi_label_classification"}.get(
        settings.problem or "single_label", "single_label_classification")


def _fitted(settings: ClassificationSettings, key: str, columns: Sequence[str]) -> list:
    """The training data's statistics (key numeric_stats / category_vocab) for `columns`, or a ConfigError."""
    fitted = getattr(settings, key) or {}
    missing = [c for c in columns if c not in fitted]
    if missing:
        raise ConfigError(f"task settings have no {key} for {missing}: they are fitted on the training data "
                          "by `bertkit finetune`")
    return [fitted[c] for c in columns]


@dataclass
class ClassifyRequest:
    """/classify's request: texts (and pairs), or one object of columns per example for a model that reads columns."""

    texts: list[str] | None = None
    """The texts (left out for a model that writes its text from columns with a template)."""
    pairs: list[str] | None = None
    """Second segments, one per text."""
    # bool listed so that JSON true reaches the reader as true (refused in a numeric column), not as 1.0
    columns: list[dict[str, str | bool | float | int | None]] | None = None
    """One object per example, column name -> value, for a model trained with a template or numeric/categorical
    columns: read as the training file's rows were."""


@dataclass
class Classification:
    """One example's answer, read from the logits as the head's problem type says (`read_logits`)."""

    label: str | None
    """The most probable label (None for a regression head)."""
    probability: float | None
    """Its probability (softmax; sigmoid for multi-label)."""
    probabilities: dict[str, float]
    """Every label's probability."""
    labels: list[str] | None = None
    """Multi-label heads: every label with probability > 0.5."""
    value: float | None = None
    """Regression heads: the predicted number."""


@dataclass
class ClassifyResponse:
    results: list[Classification]


class ClassifyServing(Serving):
    """/classify: texts (and pairs), or objects of columns, each answered with its label and probabilities."""

    endpoint, request, response = "classify", ClassifyRequest, ClassifyResponse
    examples = ({"texts": ["A fine film.", "A slow, long and rather dull film about very little."]},)
    settings: ClassificationSettings

    def request_examples(self, request: ClassifyRequest) -> list[TextExample]:
        """One example per text (and pair), or per object of columns for a model that reads columns, made as
        `read` makes one of a row (`request_example`)."""
        settings = self.settings
        columns = input_columns(settings)
        texts, pairs = request.texts, request.pairs
        if not columns:
            if request.columns is not None:
                raise ValueError("this model reads no columns besides the text; send texts (and pairs) only")
            if texts is None:
                raise ValueError("texts is required")
            rows: list = [None] * len(texts)
        else:
            if request.columns is None:
                raise ValueError(f"this model reads the columns {columns}: send columns, one object per example")
            if settings.template and texts is not None:
                raise ValueError("this model writes its text from columns with its template "
                                 f"({settings.template!r}); send columns, not texts")
            rows = request.columns
            if texts is not None and len(texts) != len(rows):
                raise ValueError(f"columns has {len(rows)} objects, texts has {len(texts)}")
            texts = texts if texts is not None else [None] * len(rows)
        if pairs is not None and len(pairs) != len(texts):
            raise ValueError(f"pairs has {len(pairs)} entries, texts has {len(texts)}")
        return [request_example(t, p, row, settings, f"columns[{i}]" if row is not None else f"texts[{i}]")
                for i, (t, p, row) in enumerate(zip(texts, pairs or [None] * len(texts), rows))]

    def request_texts(self, request: ClassifyRequest, examples: Sequence[TextExample]) -> list[str]:
        return [ex.text for ex in examples]  # a template's text as written from the columns

    def answer_bytes(self, example: TextExample) -> int:
        """Every label with its probability, the best one again (and in `labels`, multi-label), two numbers more."""
        names = [json_bytes(n) for n in self.settings.label_names or []]
        return OBJECT_BYTES + 2 * sum(names) + len(names) * NUMBER_BYTES + max(names, default=0) + 2 * NUMBER_BYTES

    def answer(self, example: TextExample, features: Sequence[Feature],
               outputs: Sequence[dict[str, np.ndarray]]) -> dict[str, Any]:
        return read_logits(outputs[0]["logits"], problem_type(self.settings), self.settings.label_names or [])

    def example_requests(self) -> list[dict[str, Any]]:
        """For a pair classifier (a cross-encoder): each example text with a second text. For a model that reads
        columns: objects of every column it reads (a number of its training range, a category of its vocabulary, a
        word for a template's columns)."""
        settings = self.settings
        columns = input_columns(settings)
        if not columns:
            requests = super().example_requests()
            if settings.pairs:
                return [{**r, "pairs": [f"A second text, {i + 1}." for i in range(len(r["texts"]))]} for r in requests]
            return requests
        texts = ["Fine.", "A slow, long and rather dull piece about very little."]
        numeric = set(settings.numeric_columns or [])
        ranges, vocab = settings.numeric_range or {}, settings.category_vocab or {}
        body: dict[str, Any] = {"columns": [
            {c: ranges.get(c, [0.0, 0.0])[k] if c in numeric else (vocab[c] or [""])[0] if c in vocab else words
             for c in columns} for k, words in enumerate(texts)]}
        if not settings.template:
            body["texts"] = texts
        if settings.pairs:
            body["pairs"] = ["Good.", "Yes."]
        return [body]


class ClassificationTask(Task):
    """Single sentences or pairs -> one label, several labels, or a real number."""

    name = "classification"
    aliases = ('sequence_classification', 'glue')
    options_class = ClassificationOptions
    settings_class = ClassificationSettings
    serving = ClassifyServing

    def settings(self, options: ClassificationOptions | Mapping[str, Any] | None = None,
                 start: FolderConfig | None = None) -> ClassificationSettings:
        options = task_options(self, options)
        s: dict[str, Any] = {} if options.max_length is None else {"max_length": options.max_length}
        for key in ("text_column", "text_pair_column", "label_column", "glue"):
            if getattr(options, key) is not None:
                s[key] = str(getattr(options, key))
        if options.regression:
            s["problem"] = "regression"
        elif options.multi_label:
            s["problem"] = "multi_label"
        s["label_separator"] = options.label_separator or ","
        if options.template is not None:
            if options.text_column is not None:
                raise ConfigError("classification options: give template or text_column, not both (the template "
                                  "names the text's columns)")
            template_columns(options.template)
            s["template"], s["empty_field"] = options.template, options.empty_field
        columns = list(options.numeric_columns or []) + list(options.categorical_columns or [])
        if len(set(columns)) != len(columns):
            raise ConfigError(f"classification options: a column is named twice in numeric_columns / "
                              f"categorical_columns: {columns}")
        if options.numeric_columns:
            s["numeric_columns"] = list(options.numeric_columns)
        if options.categorical_columns:
            s["categorical_columns"] = list(options.categorical_columns)
            s["category_embedding_size"] = options.category_embedding_size
        if options.labels is not None:
            labels = [_label_str(label) for label in options.labels]
            if s.get("problem") == "regression" or len(labels) < 2 or "" in labels or len(set(labels)) != len(labels):
                raise ConfigError(f"classification options: labels {options.labels} must list two or more distinct, "
                                  "non-empty labels of a single- or multi-label problem")
            s["labels"] = labels
        settings = ClassificationSettings(**s)
        if options.label_column is not None:
            check_label_not_input(str(options.label_column), settings)
        return settings

    def settings_of(self, saved: Any, where: str = "task_settings") -> ClassificationSettings:
        """As every task's, and a folder's classifier whose settings name no problem (one bertkit did not
        fine-tune) reads its outputs as its config's problem_type says."""
        settings = super().settings_of(saved, where)
        if settings.problem is None and isinstance(saved, BertConfig):
            problem = {"regression": "regression", "multi_label_classification": "multi_label"}.get(
                saved.problem_type or ("regression" if saved.num_labels == 1 else ""), "single_label")
            settings = dataclasses.replace(settings, problem=problem,
                                           label_names=None if problem == "regression" else settings.label_names)
        return settings

    def head(self, settings: ClassificationSettings) -> Head:
        """BertForSequenceClassification with one output per label (one for regression), the loss of the problem,
        and the non-text columns' inputs (`tabular_inputs`: sized by the fitted vocabularies), read as the features'
        `numeric_features` and `categorical_ids`."""
        numeric = settings.numeric_columns or []
        categorical = settings.categorical_columns or []
        tabular = None
        if numeric or categorical:
            vocabularies = _fitted(settings, "category_vocab", categorical)
            tabular = {"numeric": 2 * len(numeric),  # value and missing flag per column
                       "categories": [len(v) + 1 for v in vocabularies],  # + the unknown bucket
                       "embedding_size": settings.category_embedding_size}
        regression = settings.problem == "regression"
        return Head("BertForSequenceClassification", {
            "num_labels": 1 if regression else len(settings.label_names or []),
            "label_names": None if regression else settings.label_names,
            "problem_type": problem_type(settings), "tabular_inputs": tabular},
            inputs=("input_ids", "token_type_ids", "numeric_features", "categorical_ids"))

    # --- reading -----------------------------------------------------------------------------------------------
    def read(self, path: str | os.PathLike, settings: ClassificationSettings,
             labelled: bool = True) -> list[TextExample]:
        examples = (self._read_jsonl if format_of(path) == "jsonl" else self._read_table)(path, settings, labelled)
        layout = examples[0].layout if examples else None
        if labelled and not (settings.labels or layout and layout.labels):  # a fixed label set admits rare classes
            check_stray_labels(path, examples, settings.problem or (layout.problem if layout else "single_label"))
        if settings.numeric_stats is None:  # the training file: its own limits (a fitted model's: row by row)
            check_training_numbers(path, examples, settings)
        names = settings.label_names
        for ex in examples if labelled and names is not None else ():  # a fitted model knows its labels
            for lab in ex.label if isinstance(ex.label, list) else [ex.label]:
                if lab is not None and lab not in names:
                    raise data_error(path, ex.line, f"label {lab!r} never occurs in the training data "
                                     f"(labels: {', '.join(names)})")
        return examples

    def _read_table(self, path: str | os.PathLike, settings: ClassificationSettings,
                    labelled: bool) -> list[TextExample]:
        first = first_row(path)
        if first is None:
            return []
        layout = detect_layout(path, first[1], settings)
        rows = iter_table(path, header=layout.header)  # field counts and header names checked as rows come
        header = next(rows)[1] if layout.header else None
        problem = settings.problem or layout.problem
        text_i = _index(path, header, layout.text, True) if layout.text is not None else None
        pair_i = _index(path, header, layout.pair, True) if layout.pair is not None else None
        label_i = _index(path, header, layout.label, labelled) if layout.label is not None else None
        if labelled and label_i is None:
            raise data_error(path, None, "no label column; pass --label-column")
        for name in input_columns(settings):  # the template's, numeric and categorical columns, on the header line
            _index(path, header, name, True)
        if label_i is not None:  # compared by header name (by index in a file without a header)
            names = [header[i] if header is not None and i < len(header) else str(i) for i in (label_i, text_i, pair_i)
                     if i is not None]
            check_label_not_input(names[0], settings, *names[1:])
        allowed = settings.labels or layout.labels
        need = max((i for i in (text_i, pair_i, label_i) if i is not None), default=0)
        examples = []
        for line, row in rows:
            if len(row) <= need:
                raise data_error(path, line, f"{len(row)} fields, column {need} (0-based) needed")
            label = row[label_i].strip() if label_i is not None else None
            extra = row_inputs(path, line, dict(zip(header, row)) if header is not None else {}, settings)
            examples.append(TextExample(
                line, extra.pop("text") if "text" in extra else row[text_i].strip(),
                row[pair_i].strip() if pair_i is not None else None,
                parse_label(path, line, label, problem, settings.label_separator) if label not in (None, "")
                else None, row, header, layout=layout, **extra))
            if labelled and examples[-1].label is None:
                raise data_error(path, line, f"empty label in column {layout.label!r}")
            if allowed is not None:
                check_label_set(path, line, examples[-1].label, allowed,
                                None if settings.labels else glue_name(layout))
        return examples

    def _read_jsonl(self, path: str | os.PathLike, settings: ClassificationSettings,
                    labelled: bool) -> list[TextExample]:
        rows = read_jsonl(path)
        if not rows:
            return []
        first = rows[0][1]
        template = settings.template
        text = settings.text_column or next((k for k in JSONL_TEXT if k in first), "text")
        pair = settings.text_pair_column or (JSONL_PAIR.get(text) if JSONL_PAIR.get(text) in first else None)
        label = settings.label_column or "label"
        check_label_not_input(label, settings, *([] if template else [text]), *([pair] if pair else []))
        problem = settings.problem or "single_label"
        allowed = settings.labels
        examples = []
        for line, obj in rows:
            raw = obj.get(label)
            if labelled and raw is None:
                require_field(path, line, obj, label)
            extra = row_inputs(path, line, obj, settings)
            examples.append(TextExample(
                line, extra.pop("text") if template else require_text(path, line, obj, text),
                require_text(path, line, obj, pair) if pair else None,
                parse_label(path, line, raw, problem, settings.label_separator) if raw is not None else None, obj,
                **extra))
            if allowed is not None:
                check_label_set(path, line, examples[-1].label, allowed)
        return examples

    # --- labels -----------------------------------------------------------------------------------------------
    def fit_labels(self, examples: Sequence[TextExample], settings: ClassificationSettings) -> ClassificationSettings:
        """The settings with the problem, the label names and the main metric (a GLUE file's, recognised from its
        layout, unless one was given), and the inputs' statistics (`fit_inputs`), from the training examples."""
        settings = self.fit_inputs(examples, settings)
        layout = examples[0].layout if examples else None
        problem = settings.problem or (layout.problem if layout is not None else "single_label")
        metric, glue = settings.main_metric, settings.glue
        if metric is None and layout is not None and layout.label is not None and glue_name(layout):
            metric, glue = layout.main_metric, glue_name(layout)
        if problem == "regression":
            return dataclasses.replace(settings, problem=problem, glue=glue, label_names=None,
                                       main_metric=metric or "pearson")
        seen = {lab for ex in examples for lab in (ex.label if isinstance(ex.label, list) else [ex.label])}
        unseen = [label for label in settings.labels or [] if label not in seen]
        if unseen:
            raise ConfigError(f"classification options: labels {unseen} never occur in the training examples; a "
                              "class needs examples to be learned (list only the labels the training file holds)")
        return dataclasses.replace(settings, problem=problem, glue=glue,
                                   label_names=sorted(seen, key=_label_sort_key),
                                   main_metric=metric or ("micro_f1" if problem == "multi_label" else "accuracy"))

    def fit_inputs(self, examples: Sequence[TextExample], settings: ClassificationSettings) -> ClassificationSettings:
        """The settings with the numeric columns' [mean, std], [min, max] and [lo, hi] limits, the categorical
        columns' vocabularies and whether the examples are pairs, from the training examples."""
        numeric = settings.numeric_columns or []
        categorical = settings.categorical_columns or []
        fitted: dict[str, Any] = {"pairs": any(ex.pair is not None for ex in examples)}  # what a request must send
        if numeric:
            columns = {c: [ex.numeric[i] for ex in examples] for i, c in enumerate(numeric)}  # type: ignore[index]
            fitted["numeric_stats"] = {c: fit_numeric(values) for c, values in columns.items()}
            ranges = {c: fit_numeric_range(values) for c, values in columns.items()}
            fitted["numeric_range"] = {c: r[0] for c, r in ranges.items()}
            fitted["numeric_limits"] = {c: r[1] for c, r in ranges.items()}
        if categorical:
            fitted["category_vocab"] = {c: sorted({ex.categories[i] for ex in examples  # type: ignore[index]
                                                   if ex.categories[i] is not None})  # type: ignore[index]
                                        for i, c in enumerate(categorical)}
        return dataclasses.replace(settings, **fitted)

    # --- features and decoding --------------------------------------------------------------------------------
    def features(self, examples: Sequence[TextExample], tokenizer: Any, settings: ClassificationSettings,
                 training: bool) -> list[Feature]:
        names = settings.label_names or []
        index = {name: i for i, name in enumerate(names)}
        problem = settings.problem or "single_label"
        numeric = settings.numeric_columns or []
        stats = _fitted(settings, "numeric_stats", numeric)
        if not all(math.isfinite(x) for pair in stats for x in pair):
            raise ConfigError(f"task settings: numeric_stats {dict(zip(numeric, stats))} are not all finite (fitted "
                              "by an older bertkit on a column with huge values); fine-tune the model again")
        ranges = [(settings.numeric_range or {}).get(c) for c in numeric]
        if not training:
            log_clipped(examples, numeric, stats, ranges)
        vocabularies = _fitted(settings, "category_vocab", settings.categorical_columns or [])
        out = []
        for ex in examples:
            enc = tokenizer.encode(ex.text, ex.pair, max_length=settings.max_length, truncation="longest_first")
            feature: Feature = {"input_ids": list(enc.input_ids), "token_type_ids": list(enc.token_type_ids)}
            if stats:
                feature["numeric_features"] = numeric_vector(ex.numeric or [], stats, ranges)
            if vocabularies:
                feature["categorical_ids"] = category_ids(ex.categories or [], vocabularies)
            if ex.label is not None:
                if problem == "regression":
                    feature["labels"] = float(ex.label)
                elif problem == "multi_label":
                    feature["labels"] = [1.0 if name in ex.label else 0.0 for name in names]
                elif ex.label in index:
                    feature["labels"] = index[ex.label]
            out.append(feature)
        return out

    def decode(self, examples: Sequence[TextExample], features: Sequence[Feature],
               outputs: list[dict[str, np.ndarray]], settings: ClassificationSettings) -> list:
        problem = problem_type(settings)
        key = {"regression": "value", "multi_label_classification": "labels"}.get(problem, "label")
        return [read_logits(out["logits"], problem, settings.label_names or [])[key] for out in outputs]

    def score(self, examples: Sequence[TextExample], predictions: Sequence,
              settings: ClassificationSettings) -> dict[str, float]:
        settings = self.settings_of(settings, "score settings")  # typed, or a mapping of its fields
        refs = [ex.label for ex in examples]
        problem = settings.problem or "single_label"
        if problem == "regression":
            mse = sum((p - r) ** 2 for p, r in zip(predictions, refs)) / len(refs)
            return {"pearson": metrics.pearson(predictions, refs), "spearman": metrics.spearman(predictions, refs),
                    "mse": mse}
        if problem == "multi_label":
            return metrics.multilabel_scores([set(p) for p in predictions], [set(r) for r in refs])
        names = settings.label_names or []
        result = {"accuracy": metrics.accuracy(predictions, refs),
                  "matthews": metrics.matthews_corrcoef(predictions, refs)}
        if len(names) == 2:  # binary F1 of the positive class, the second name ("1", "not_entailment", ...)
            result["f1"] = metrics.f1_score(predictions, refs, "binary", positive=names[1])
        else:
            result["f1"] = metrics.f1_score(predictions, refs, "macro")
        return result

    def write_predictions(self, path: str | os.PathLike, examples: Sequence[TextExample], predictions: Sequence,
                          settings: ClassificationSettings) -> None:
        sep = settings.label_separator
        with atomic_open(path) as f:
            if examples and isinstance(examples[0].row, dict):
                for ex, pred in zip(examples, predictions):
                    f.write(json.dumps({**ex.row, "prediction": pred}, ensure_ascii=False) + "\n")
                return
            rows = [list(examples[0].header) + ["prediction"]] if examples and examples[0].header is not None else []
            for ex, pred in zip(examples, predictions):
                rows.append(list(ex.row) + [sep.join(pred) if isinstance(pred, list) else (
                    f"{pred:.6g}" if isinstance(pred, float) else str(pred))])
            if str(path).lower().endswith(".csv"):  # RFC 4180: a text spanning lines stays one quoted field
                csv.writer(f, lineterminator="\n").writerows(rows)
                return
            for row in rows:  # TSV: one row per line, so a tab or line break inside a field is written as a space
                f.write("\t".join(re.sub(r"\r\n|[\t\r\n]", " ", cell) for cell in row) + "\n")


def paired_test(examples: Sequence[TextExample], predictions_a: Sequence, predictions_b: Sequence,
                settings: ClassificationSettings, seed: int = 0) -> significance.PairedTest:
    """Is B better than A by the settings' main metric? McNemar's exact test for accuracy; the paired bootstrap for
    F1, Matthews correlation (confusion counts), multi-label micro F1 and Pearson correlation."""
    refs = [ex.label for ex in examples]
    problem = settings.problem or "single_label"
    metric = settings.main_metric or DEFAULT_METRIC
    if problem == "regression":
        def sums(predictions: Sequence) -> np.ndarray:
            x, y = np.asarray(predictions, np.float64), np.asarray(refs, np.float64)
            return np.stack([np.ones_like(x), x, y, x * x, y * y, x * y], axis=1)

        return significance.paired_bootstrap(sums(predictions_a), sums(predictions_b),
                                             significance.pearson_from_sums, "pearson", seed=seed)
    if problem == "multi_label":
        def counts(predictions: Sequence) -> np.ndarray:
            return np.array([(len(set(p) & set(r)), len(set(p)), len(set(r))) for p, r in zip(predictions, refs)],
                            dtype=np.float64).reshape(-1, 3)

        return significance.paired_bootstrap(counts(predictions_a), counts(predictions_b),
                                             significance.f1_from_counts, "micro_f1", seed=seed)
    if metric == "accuracy":
        return significance.accuracy_test(refs, predictions_a, predictions_b)
    names = list(settings.label_names or sorted({*refs, *predictions_a, *predictions_b}, key=str))
    index = {name: i for i, name in enumerate(names)}
    k = len(names)
    statistic = significance.confusion_statistic(metric, k)
    return significance.paired_bootstrap(
        significance.confusion_counts([index[p] for p in predictions_a], [index[r] for r in refs], k),
        significance.confusion_counts([index[p] for p in predictions_b], [index[r] for r in refs], k),
        statistic, metric, seed=seed)


# The rules of check_stray_labels (see there).
STRAY_COMMON = 10
STRAY_RATIO = 10
STRAY_MAX_ROWS = 3


def read_logits(logits: np.ndarray, problem_type: str | None, names: Sequence[str]) -> dict[str, Any]:
    """The one reading of a sequence classifier's logits (evaluation, `predict`, the server), by BertConfig's
    problem_type (None: regression for one output, else single-label): regression gives "value"; multi-label a
    sigmoid per label, "labels" those above 0.5; single-label a softmax. Every answer has all five keys of
    /classify's response (None or {} where the head gives nothing). Non-finite logits are a CheckpointError."""
    logits = np.asarray(logits, dtype=np.float64).reshape(-1)
    if not np.isfinite(logits).all():  # the inputs are bounded (numeric_vector), so only the weights can do this
        raise CheckpointError(f"the model's logits are not finite ({logits.tolist()}): its weights hold NaN or inf "
                              "(a fine-tuning run whose loss diverged?); fine-tune it again")
    if problem_type is None:
        problem_type = "regression" if logits.size == 1 else "single_label_classification"
    if problem_type == "regression":
        return {"label": None, "probability": None, "probabilities": {}, "labels": None, "value": float(logits[0])}
    multi = problem_type == "multi_label_classification"
    probs = 1.0 / (1.0 + np.exp(-logits)) if multi else softmax(logits)
    best = int(probs.argmax())
    return {"label": names[best], "probability": float(probs[best]),
            "probabilities": {n: float(p) for n, p in zip(names, probs)},
            "labels": [n for n, p in zip(names, probs) if p > 0.5] if multi else None, "value": None}


def reranks(settings: ClassificationSettings) -> bool:
    """Whether a classifier's answers read as how relevant a text is to a query (`relevance`): trained on pairs of
    texts, with no other columns, and a head of one output (a cross-encoder's score) or of two labels."""
    problem, labels = problem_type(settings), len(settings.label_names or [])
    return (reads_pairs(settings) and not input_columns(settings) and
            (problem == "regression" or (problem == "single_label_classification" and labels == 2)))


def classifier_kind(settings: ClassificationSettings) -> str:
    """What a classifier reads and answers, in words ("a classifier of single texts with 3 labels"), for errors
    that say why it cannot do something (`reranks`)."""
    outputs = "one output" if problem_type(settings) == "regression" else f"{len(settings.label_names or [])} labels"
    columns = input_columns(settings)
    also = f" and the columns {', '.join(map(repr, columns))}" if columns else ""
    return f"a classifier of {'pairs of texts' if reads_pairs(settings) else 'single texts'}{also} with {outputs}"


def relevance(answer: Mapping[str, Any], names: Sequence[str], raw: bool = False) -> float:
    """A pair classifier's answer (`read_logits`) as a relevance score: a one-output head's sigmoid (a
    cross-encoder's score, as sentence-transformers' CrossEncoder gives it), or a two-label head's probability of
    its second label (the positive class, as in the binary F1 of evaluation: "1", "pos"...); `raw`: the logit (of
    the second label against the first)."""
    if answer.get("value") is not None:
        value = answer["value"]
        return value if raw else 1.0 / (1.0 + math.exp(-value))
    p = answer["probabilities"]
    return math.log(p[names[1]]) - math.log(p[names[0]]) if raw else p[names[1]]


def relevance_scores(serving: Serving, model: Any, queries: Sequence[str], documents: Sequence[str],
                     batch_size: int) -> list[float]:
    """Each (query, document) pair's relevance by a pair classifier that `reranks`: the pairs through the path
    /classify runs (request_examples, then Serving.batch, batch_size pairs per model run), read by `relevance`.
    What `Bert.rank` and `bertkit search --rerank` score with."""
    if len(queries) != len(documents):
        raise ValueError(f"{len(queries)} queries but {len(documents)} documents; give one query per document")
    if not documents:
        return []
    examples = serving.request_examples(ClassifyRequest(texts=list(queries), pairs=list(documents)))
    answers = answer_examples(serving, model, examples, batch_size, lambda i: f"texts[{i}]")
    names = serving.settings.label_names or []
    return [relevance(answer, names) for answer in answers]


def check_stray_labels(path: str | os.PathLike, examples: Sequence[TextExample], problem: str) -> None:
    """A single-label file whose labels fall into frequent classes and a few stray ones: a DataError naming the
    first stray row, since each stray label would silently add a class (a 3- or 4-class model from a 0/1 file).

    Two rules make a label a stray. The kind rule, whatever the class counts: a word among numbers (or a number
    among words), when the labels of its kind hold at most a tenth (STRAY_RATIO) as many rows as those of the other
    kind, or fewer rows than they and at most STRAY_MAX_ROWS ('l' once in a 0/1 file of 40 rows, or of 7). The rows
    rule: with the counts sorted from most to least frequent, the first tenfold drop below at least two classes of
    STRAY_COMMON rows or more separates the frequent classes, and a label below it on at most STRAY_MAX_ROWS rows is
    a stray. A genuine rare class (a 5-way sentiment file with a class on 3 rows) is accepted by listing the label
    set (`labels`); a rare class of the others' kind on more rows, or in a file whose classes are all small, passes
    as it is."""
    if problem != "single_label":
        return
    lines: dict[Any, list[int]] = {}
    for ex in examples:
        lines.setdefault(ex.label, []).append(ex.line)
    kind_rows = {True: 0, False: 0}  # rows of number labels, of word labels
    for label, at in lines.items():
        kind_rows[_is_number(label)] += len(at)
    fewer = min(kind_rows, key=lambda kind: kind_rows[kind])
    few, many = kind_rows[fewer], kind_rows[not fewer]
    other_kind = 0 < few and (few * STRAY_RATIO <= many or (few <= STRAY_MAX_ROWS and few < many))
    strays = {label for label in lines if _is_number(label) == fewer} if other_kind else set()
    ordered = sorted(lines, key=lambda label: -len(lines[label]))
    for j in range(2, len(ordered)):
        above = len(lines[ordered[j - 1]])
        if above >= STRAY_COMMON and len(lines[ordered[j]]) * STRAY_RATIO <= above:
            strays |= {label for label in ordered[j:] if len(lines[label]) <= STRAY_MAX_ROWS}
            break
    frequent = [label for label in ordered if label not in strays]
    if not strays or not frequent:
        return
    first, *others = sorted(strays, key=lambda label: lines[label][0])
    rows = lines[first]
    where = ("only on this row" if len(rows) == 1 else
             f"only on {len(rows)} rows (lines {', '.join(map(str, rows[:5]))}{', ...' if len(rows) > 5 else ''})")
    kind = ""
    if other_kind and _is_number(first) == fewer:
        kind = " and is a number among words" if fewer else " and is not a number, unlike the others"
    also = "; also " + ", ".join(f"{label!r} on line {lines[label][0]}" for label in others) if others else ""
    names = sorted(lines, key=_label_sort_key)
    raise data_error(path, rows[0], f"label {first!r} occurs {where}{kind}, while "
                     f"{', '.join(repr(c) for c in sorted(frequent, key=_label_sort_key))} occur at least "
                     f"{len(lines[frequent[-1]])} times each: a typo? It would make a class of its own "
                     f"({len(lines)} classes){also}. Fix the {'row' if len(rows) == 1 and not also else 'rows'}, or, "
                     f"if it is a real class, pass the complete label set: --labels '[{', '.join(map(str, names))}]'")


def check_label_set(path: str | os.PathLike, line: int, label: Any, allowed: Sequence[str],
                    benchmark: str | None = None) -> None:
    """DataError naming the line if a label (or one of a multi-label example's) is not in the allowed set: a
    benchmark's (GLUE) or the one given by the `labels` option."""
    for one in label if isinstance(label, list) else [label]:
        if one is not None and one not in allowed:
            source = f"a {benchmark} label" if benchmark else "one of the labels given by --labels"
            raise data_error(path, line, f"label {one!r} is not {source} (expected one of {', '.join(allowed)})")


def check_label_not_input(label: str, settings: ClassificationSettings, *texts: str) -> None:
    """ConfigError if the label column is also read as an input (the template, a numeric or categorical column,
    the text): the model would be shown the answer, and predicting new rows, which have none, would demand it."""
    roles = {"the template": template_columns(settings.template) if settings.template else [],
             "numeric_columns": settings.numeric_columns or [],
             "categorical_columns": settings.categorical_columns or [], "the text columns": texts}
    for role, columns in roles.items():
        if label in columns:
            raise ConfigError(f"classification options: the label column {label!r} is also an input ({role}): the "
                              "model would be shown the answer, and predicting rows without a label would demand "
                              f"it; leave it out of {role}")


def check_training_numbers(path: str | os.PathLike, examples: Sequence[TextExample],
                           settings: ClassificationSettings) -> None:
    """DataError naming the first row of the training file whose numeric value lies beyond its column's limits,
    fitted on the file itself (fit_numeric_range): the value that would make the column useless."""
    numeric = settings.numeric_columns or []
    if not numeric:
        return
    limits = [fit_numeric_range([ex.numeric[i] for ex in examples])[1]  # type: ignore[index]
              for i in range(len(numeric))]
    for ex in examples:
        for column, value, bounds in zip(numeric, ex.numeric or [], limits):
            check_numeric_limits(path, ex.line, column, value, bounds)


def _label_str(raw: Any) -> str:
    """Labels compare as the strings the training file wrote (JSON 1 and "1" are the same label)."""
    if isinstance(raw, bool):
        return str(int(raw))
    if isinstance(raw, float) and raw.is_integer():
        return str(int(raw))
    return str(raw).strip()


def _is_number(label: str) -> bool:
    """Whether a label reads as a finite number ("1", "-0.5"), for telling a word among numbers."""
    try:
        return math.isfinite(float(label))
    except ValueError:
        return False


def _label_sort_key(name: str) -> tuple:
    """Numeric labels in numeric order ("0" < "1" < "10"), others alphabetically."""
    try:
        return (0, float(name), name)
    except ValueError:
        return (1, 0.0, name)


def _index(path: str | os.PathLike, header: list[str] | None, column: Column, required: bool) -> int | None:
    """0-based position of a column given by index or header name; DataError if required and absent."""
    if isinstance(column, int):
        return column
    if header is not None and column in header:
        return header.index(column)
    if required:
        where = f"header: {header}" if header is not None else "the file has no header; use 0-based indices"
        raise data_error(path, 1, f"no column {column!r} ({where})")
    return None
