"""Extractive question answering on SQuAD v1.1 and v2.0 files.

Windows: each (question, context) pair is encoded as `[CLS] question [SEP] context-window [SEP]`, truncating only
the context; a context longer than the room left is covered by several windows that OVERLAP by `doc_stride`
tokens (the Hugging Face fast tokenizer's `stride`; with max_length 384, doc_stride 128, as in the BERT paper's
SQuAD runs). A window that does not contain the whole answer is labelled with start = end = 0 ([CLS]).

Decoding (Devlin et al. 2019, section 4.2; the reference run_squad.py): in each window the n_best highest start
and end logits are paired; a span is kept if both ends lie in the context, the start token has its maximum
context in this window (the window where it is farthest from either edge), end >= start and it is at most
max_answer_length tokens long; its score is start + end logit. The best span over all windows is cut from the
original context by character offsets. SQuAD v2.0: the no-answer score is the smallest [CLS] score
(start[0] + end[0]) over the windows, and the answer is "" when it beats the best span by more than
`null_threshold`.

Reading a selection of articles: `FILE#START:END` reads articles START..END-1 (Python slice; e.g.
`dev-v1.1.json#:38` and `dev-v1.1.json#38:`). Predictions: `{id: answer}` JSON.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from bertkit.answers import NUMBER_BYTES, OBJECT_BYTES, json_bytes
from bertkit.data.tables import check_text, read_json
from bertkit.errors import ConfigError, TokenizerError, data_error
from bertkit.io import atomic_write_json
import bertkit.tasks.metrics as metrics
import bertkit.tasks.significance as significance
from bertkit.dataclass_io import spec
from bertkit.tasks.base import (MAX_LENGTH, MIN_LENGTH, Feature, Head, Serving, Task, TaskOptions, TaskSettings,
                                task_options)

if TYPE_CHECKING:
    from bertkit.model.folder import FolderConfig

# Reference settings of run_squad.py (google-research/bert) and transformers' run_qa.py.
DOC_STRIDE = 128
N_BEST = 20
MAX_ANSWER_LENGTH = 30
QA_MAX_LENGTH = 384
CLS_INDEX = 0  # unanswerable windows point start and end at [CLS]


@dataclass
class QAExample:
    """One question with its context; answers are (text, character start) pairs; `where` names it in the file."""

    id: str
    question: str
    context: str
    answers: list[tuple[str, int]] = field(default_factory=list)
    is_impossible: bool = False
    where: str = ""


def split_selection(path: str | os.PathLike) -> tuple[Path, slice]:
    """`FILE#START:END` -> (FILE, slice of articles); a plain path selects every article."""
    text = str(path)
    if "#" not in text:
        return Path(text), slice(None)
    name, _, sel = text.rpartition("#")
    try:
        parts = [int(p) if p.strip() else None for p in sel.split(":")]
        if len(parts) != 2:
            raise ValueError
    except ValueError:
        raise ConfigError(f"{text}: expected FILE#START:END to select articles, found {sel!r}") from None
    return Path(name), slice(parts[0], parts[1])


def read_squad(path: str | os.PathLike, labelled: bool = True) -> list[QAExample]:
    """Questions of a SQuAD JSON file (v1.1 or v2.0), checking that every answer_start points at its text."""
    file, articles = split_selection(path)
    doc = read_json(file)  # duplicate keys and lone surrogates are refused there, with the line and column
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
        raise data_error(file, None, "expected a SQuAD object with a 'data' list of articles")
    examples = []
    all_articles = list(enumerate(doc["data"]))[articles]
    for a, article in all_articles:
        for p, para in enumerate(article.get("paragraphs", [])):
            context = para.get("context")
            if not isinstance(context, str):
                raise data_error(file, None, f"data[{a}].paragraphs[{p}]: missing field 'context'")
            for q, qa in enumerate(para.get("qas", [])):
                where = f"data[{a}].paragraphs[{p}].qas[{q}]"
                for key in ("id", "question"):
                    if key not in qa:
                        raise data_error(file, None, f"{where}: missing field {key!r}")
                impossible = bool(qa.get("is_impossible", False))
                answers = []
                for k, ans in enumerate(qa.get("answers", [])):
                    text, start = ans.get("text"), ans.get("answer_start")
                    if not isinstance(text, str) or not isinstance(start, int):
                        raise data_error(file, None, f"{where}.answers[{k}]: needs 'text' (string) and "
                                         "'answer_start' (integer)")
                    if start < 0 or start + len(text) > len(context):
                        raise data_error(file, None, f"{where}.answers[{k}] (id {qa['id']}): answer_start {start} "
                                         f"is outside the context (0..{len(context) - len(text)} for this answer)")
                    found = context[start:start + len(text)]
                    if found != text:
                        raise data_error(file, None, f"{where}.answers[{k}] (id {qa['id']}): answer_start {start} "
                                         f"points at {found!r}, but the answer text is {text!r}")
                    answers.append((text, start))
                if labelled and not answers and not impossible:
                    raise data_error(file, None, f"{where} (id {qa['id']}): no answers and not is_impossible")
                question = check_text(file, None, f"{where}.question", qa["question"])
                examples.append(QAExample(str(qa["id"]), question, context, answers, impossible, where))
    return examples


# --- windows and labels ------------------------------------------------------------------------------------------


def context_offsets(encoding: Any) -> list[tuple[int, int] | None]:
    """Character span of each token of a window that belongs to the context (sequence 1), None elsewhere."""
    return [tuple(off) if seq == 1 else None for off, seq in zip(encoding.offsets, encoding.sequence_ids)]


def answer_tokens(offsets: Sequence[tuple[int, int] | None], char_start: int, char_end: int) -> tuple[int, int]:
    """Token start/end of the answer characters [char_start, char_end) in a window, or (0, 0) if not inside it."""
    ctx = [i for i, off in enumerate(offsets) if off is not None]
    if not ctx or offsets[ctx[0]][0] > char_start or offsets[ctx[-1]][1] < char_end:
        return CLS_INDEX, CLS_INDEX
    start = max(i for i in ctx if offsets[i][0] <= char_start)
    end = min(i for i in ctx if offsets[i][1] >= char_end)
    return (start, end) if start <= end else (CLS_INDEX, CLS_INDEX)


def max_context_flags(windows: Sequence[Sequence[tuple[int, int] | None]]) -> list[list[bool]]:
    """For every window and token: is this the window where the context token has most context on both sides?

    Score of a token in a window = min(tokens to its left, tokens to its right) + 0.01 * window length (the
    reference's rule); the first window wins ties. Tokens are identified across windows by their character start.
    """
    best: dict[int, tuple[float, int]] = {}
    for w, offsets in enumerate(windows):
        ctx = [i for i, off in enumerate(offsets) if off is not None]
        for k, i in enumerate(ctx):
            score = min(k, len(ctx) - 1 - k) + 0.01 * len(ctx)
            key = offsets[i][0]
            if key not in best or score > best[key][0]:
                best[key] = (score, w)
    return [[off is not None and best[off[0]][1] == w for off in offsets] for w, offsets in enumerate(windows)]


# --- decoding ----------------------------------------------------------------------------------------------------


def window_spans(start_logits: np.ndarray, end_logits: np.ndarray, offsets: Sequence[tuple[int, int] | None],
                 max_context: Sequence[bool], n_best: int = N_BEST,
                 max_answer_length: int = MAX_ANSWER_LENGTH) -> list[tuple[float, int, int]]:
    """Candidate answers of one window: (score, start char, end char), for the valid pairs of n-best ends."""
    starts = np.argsort(start_logits)[::-1][:n_best]
    ends = np.argsort(end_logits)[::-1][:n_best]
    out = []
    for s in starts:
        if s >= len(offsets) or offsets[s] is None or not max_context[s]:
            continue
        for e in ends:
            if e >= len(offsets) or offsets[e] is None or e < s or e - s + 1 > max_answer_length:
                continue
            out.append((float(start_logits[s] + end_logits[e]), offsets[s][0], offsets[e][1]))
    return out


def ranked_spans(windows: Sequence[dict[str, Any]], n_best: int = N_BEST,
                 max_answer_length: int = MAX_ANSWER_LENGTH) -> tuple[list[tuple[float, int, int]], float]:
    """Every candidate answer of one question, best first, as (score, start char, end char), and its null score
    (the smallest [CLS] score over the windows).

    Each window is a dict with start_logits, end_logits, offsets (context char spans or None) and max_context.
    """
    candidates: list[tuple[float, int, int]] = []
    null_score = float("inf")
    for w in windows:
        candidates += window_spans(w["start_logits"], w["end_logits"], w["offsets"], w["max_context"], n_best,
                                   max_answer_length)
        null_score = min(null_score, float(w["start_logits"][CLS_INDEX] + w["end_logits"][CLS_INDEX]))
    candidates.sort(key=lambda c: -c[0])
    return candidates, null_score


def null_wins(candidates: Sequence[tuple[float, int, int]], null_score: float, version_2: bool,
              null_threshold: float) -> bool:
    """SQuAD v2.0: whether the question is answered "" (its null score beats the best span by more than
    null_threshold, or no span is valid)."""
    return version_2 and (not candidates or null_score - candidates[0][0] > null_threshold)


def decode_answer(context: str, windows: Sequence[dict[str, Any]], n_best: int = N_BEST,
                  max_answer_length: int = MAX_ANSWER_LENGTH, version_2: bool = False,
                  null_threshold: float = 0.0) -> tuple[str, list[tuple[float, str]]]:
    """The answer text of one question from its windows' logits (`ranked_spans`), and the n-best (score, text)
    list."""
    candidates, null_score = ranked_spans(windows, n_best, max_answer_length)
    nbest = [(score, context[a:b]) for score, a, b in candidates[:n_best]]
    if null_wins(candidates, null_score, version_2, null_threshold):
        return "", [(null_score, "")] + nbest
    return (nbest[0][1] if nbest else ""), nbest


@dataclass
class QAOptions(TaskOptions):
    """How contexts are windowed and answers chosen."""

    doc_stride: int | None = spec(None, ge=1, le=MAX_LENGTH)
    """Overlap in tokens between context windows (default 128, or a quarter of max_length when 128 is not well below
    its half)."""
    version_2: bool = False
    """SQuAD v2.0: a question may have no answer."""
    null_threshold: float = spec(0.0, ge=-1e4, le=1e4)
    """v2.0: answer '' when the null score exceeds the best span's by more than this."""
    n_best: int | None = spec(None, ge=1, le=1000)
    """Start and end candidates considered per window (default 20)."""
    max_answer_length: int | None = spec(None, ge=1, le=MAX_LENGTH)
    """Longest answer in tokens (default 30)."""


@dataclass
class QASettings(TaskSettings):
    """How a fine-tuned QA model windows contexts and picks answers (the options as resolved)."""

    max_length: int = spec(QA_MAX_LENGTH, ge=MIN_LENGTH, le=MAX_LENGTH)
    """Word pieces per window: [CLS] question [SEP] context-window [SEP]."""
    main_metric: str | None = spec("f1")
    """The metric that picks the best checkpoint: SQuAD F1."""
    doc_stride: int = spec(DOC_STRIDE, ge=1, le=MAX_LENGTH)
    """Overlap in tokens between context windows."""
    n_best: int = spec(N_BEST, ge=1, le=1000)
    """Start and end candidates considered per window."""
    max_answer_length: int = spec(MAX_ANSWER_LENGTH, ge=1, le=MAX_LENGTH)
    """Longest answer in tokens."""
    version_2: bool = False
    """SQuAD v2.0: a question may have no answer (given, or found in the training file)."""
    null_threshold: float = spec(0.0, ge=-1e4, le=1e4)
    """v2.0: answer '' when the null score exceeds the best span's by more than this."""


@dataclass
class QARequest:
    """/qa's request: one question and the context to answer it from."""

    question: str
    context: str


@dataclass
class QAResponse:
    answer: str
    """A span of the context, context[start_char:end_char] ("" for no answer: SQuAD v2.0 models)."""
    score: float
    """Start + end logit of the span (the null score for no answer)."""
    start_char: int
    end_char: int


class QAServing(Serving):
    """/qa: one question and its context, answered with a span of the context."""

    # One question per request: a question is one item of the server's batches.
    endpoint, request, response, item_field = "qa", QARequest, QAResponse, None
    examples = ({"question": "Where does John live?", "context": "John lives in Paris."},
                {"question": "Who wrote the book, and when?",
                 "context": "The book was written by Jane Austen in 1815, in a village south of London."})
    settings: QASettings

    def request_examples(self, request: QARequest) -> list[QAExample]:
        return [QAExample("request", request.question, request.context)]

    def request_texts(self, request: QARequest, examples: Sequence[QAExample]) -> list[str]:
        return [request.question, request.context]

    def serve_features(self, example: QAExample) -> list[Feature]:
        """The question's windows, as `predict` makes them; ValueError saying which part is at fault when no piece
        of the context fits beside the question, or the context has no text at all."""
        try:
            features = super().serve_features(example)
        except TokenizerError:
            n = len(self.tokenizer.tokenize(example.question))
            raise ValueError(f"the question has {n} word pieces; with the context's it must fit in "
                             f"{self.settings.max_length} (3 go to [CLS] and [SEP], and a window keeps more than "
                             f"{self.settings.doc_stride} of the context's): send a shorter question") from None
        if not any(o is not None for f in features for o in f["offsets"]):
            raise ValueError("the context has no text left once tokenized (only spaces, control or zero-width "
                             "characters?): send a context with words in it")
        return features

    def answer(self, example: QAExample, features: Sequence[Feature],
               outputs: Sequence[dict[str, np.ndarray]]) -> dict[str, Any]:
        """The answer `decode` gives, with its score and where it lies in the context ("" at 0 when none)."""
        s = self.settings
        windows = [_window(f, out) for f, out in zip(features, outputs)]
        candidates, null_score = ranked_spans(windows, s.n_best, s.max_answer_length)
        if not candidates or null_wins(candidates, null_score, s.version_2, s.null_threshold):
            return {"answer": "", "score": null_score, "start_char": 0, "end_char": 0}
        score, a, b = candidates[0]
        return {"answer": example.context[a:b], "score": score, "start_char": a, "end_char": b}

    def respond(self, request: QARequest, results: list) -> dict[str, Any]:
        return results[0]

    def answer_bytes(self, example: QAExample) -> int:
        """A span of the context (at most all of it), its score and where it lies."""
        return OBJECT_BYTES + json_bytes(example.context) + 3 * NUMBER_BYTES


class QATask(Task):
    """SQuAD-style extractive QA."""

    name = "qa"
    aliases = ('squad',)
    options_class = QAOptions
    settings_class = QASettings
    serving = QAServing

    def settings(self, options: QAOptions | Mapping[str, Any] | None = None,
                 start: FolderConfig | None = None) -> QASettings:
        """The windows and the answer choice; the stride, unless given, is the reference's when it is well below
        half the window, else a quarter of the window (a head bertkit did not fine-tune reads up to its position
        limit with it)."""
        options = task_options(self, options)
        s = super().settings(options, start)
        stride = options.doc_stride or (DOC_STRIDE if DOC_STRIDE < s.max_length // 2 else s.max_length // 4)
        s = dataclasses.replace(s, doc_stride=stride, n_best=options.n_best or N_BEST,
                                max_answer_length=options.max_answer_length or MAX_ANSWER_LENGTH,
                                version_2=bool(options.version_2), null_threshold=float(options.null_threshold or 0.0))
        if s.doc_stride >= s.max_length // 2:
            raise ConfigError(f"--doc-stride {s.doc_stride} must be well below --max-length {s.max_length} "
                              "(it is the overlap between windows)")
        return s

    def head(self, settings: QASettings) -> Head:
        """A start and an end logit per token (BertForQuestionAnswering), trained on the answer's start and end."""
        return Head("BertForQuestionAnswering", outputs=("start_logits", "end_logits"), per_token=True,
                    labels=("start_positions", "end_positions"))

    def read(self, path: str | os.PathLike, settings: QASettings, labelled: bool = True) -> list[QAExample]:
        return read_squad(path, labelled)

    def fit_labels(self, examples: Sequence[QAExample], settings: QASettings) -> QASettings:
        """SQuAD v2.0 when a training question has no answer."""
        return dataclasses.replace(settings, version_2=settings.version_2 or any(ex.is_impossible for ex in examples))

    def features(self, examples: Sequence[QAExample], tokenizer: Any, settings: QASettings,
                 training: bool) -> list[Feature]:
        out = []
        for n, ex in enumerate(examples):
            enc = tokenizer.encode(ex.question, ex.context, max_length=settings.max_length,
                                   truncation="only_second", stride=settings.doc_stride, return_overflowing=True)
            windows = [enc, *enc.overflowing]
            offsets = [context_offsets(w) for w in windows]
            flags = max_context_flags(offsets)
            for w, offs, flag in zip(windows, offsets, flags):
                feature: Feature = {"input_ids": list(w.input_ids), "token_type_ids": list(w.token_type_ids),
                                    "example": n, "offsets": offs, "max_context": flag}
                if training:
                    if ex.answers and not ex.is_impossible:
                        text, start = ex.answers[0]
                        s, e = answer_tokens(offs, start, start + len(text))
                    else:
                        s, e = CLS_INDEX, CLS_INDEX
                    feature["start_positions"], feature["end_positions"] = s, e
                out.append(feature)
        return out

    def decode(self, examples: Sequence[QAExample], features: Sequence[Feature],
               outputs: list[dict[str, np.ndarray]], settings: QASettings) -> list[str]:
        per_example: list[list[dict[str, Any]]] = [[] for _ in examples]
        for feature, out in zip(features, outputs):
            per_example[feature["example"]].append(_window(feature, out))
        return [decode_answer(ex.context, windows, settings.n_best, settings.max_answer_length,
                              settings.version_2, settings.null_threshold)[0]
                for ex, windows in zip(examples, per_example)]

    def score(self, examples: Sequence[QAExample], predictions: Sequence[str],
              settings: QASettings) -> dict[str, float]:
        settings = self.settings_of(settings, "score settings")  # typed, or a mapping of its fields
        preds = {ex.id: p for ex, p in zip(examples, predictions)}
        return metrics.squad_scores(preds, _references(examples), version_2=_scored_as_v2(examples, settings))

    def write_predictions(self, path: str | os.PathLike, examples: Sequence[QAExample], predictions: Sequence[str],
                          settings: QASettings) -> None:
        atomic_write_json(path, {ex.id: p for ex, p in zip(examples, predictions)})


def _window(feature: Feature, outputs: dict[str, np.ndarray]) -> dict[str, Any]:
    return {**outputs, "offsets": feature["offsets"], "max_context": feature["max_context"]}


def _references(examples: Sequence[QAExample]) -> dict[str, list[str]]:
    return {ex.id: [] if ex.is_impossible else [text for text, _ in ex.answers] for ex in examples}


def _scored_as_v2(examples: Sequence[QAExample], settings: QASettings) -> bool:
    """Whether questions are scored as SQuAD v2.0 (a "" answer to an unanswerable one is right): the model's setting,
    or a file holding unanswerable questions."""
    return settings.version_2 or any(ex.is_impossible for ex in examples)


def paired_test(examples: Sequence[QAExample], predictions_a: Sequence[str], predictions_b: Sequence[str],
                settings: QASettings, seed: int = 0) -> significance.PairedTest:
    """F1 of B against A: the paired bootstrap over questions, each question's F1 the max over its answers."""
    def per_question(predictions: Sequence[str]) -> np.ndarray:
        scores = metrics.squad_question_scores({ex.id: p for ex, p in zip(examples, predictions)},
                                               _references(examples), _scored_as_v2(examples, settings))
        return np.array([[scores[ex.id][1]] for ex in examples], dtype=np.float64).reshape(-1, 1)

    n = len(examples)
    return significance.paired_bootstrap(per_question(predictions_a), per_question(predictions_b),
                                         lambda sums: sums[..., 0] / n, "f1", seed=seed)
