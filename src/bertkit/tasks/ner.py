"""Token classification (NER) on CoNLL column files.

Reading: one token per line, columns separated by spaces or tabs, the tag in the last column (CoNLL-2003:
`token POS chunk NER`); a blank line ends a sentence and `-DOCSTART-` lines (document boundaries) are skipped.
Tags in IOB1 (I- may start an entity) are converted to IOB2 on reading; predictions are written in IOB2.

Features follow the BERT paper (section 4.3): each word is split into word pieces, the word's label goes on its
first piece and -100 (ignored by the loss) on the rest. A sentence longer than max_length pieces is truncated; its
lost words are predicted "O", counted, and reported in a warning. Predictions: one tag per original word, written
as `token<TAB>tag` lines with a blank line between sentences. Metric: entity-level precision/recall/F1 counted as
seqeval (conlleval) counts them, plus per-type scores.

`--frozen` is the paper's feature-based approach (section 5.3): BERT stays frozen, runs once per sentence with its
hidden states cached to disk (`bertkit.tasks.feature_cache`), and the one Trainer trains only a tagger on the cached
features (`frozen_features`: last, sum or concatenation of the last four, or a learned mix of every layer; `tagger`:
a two-layer BiLSTM or a linear layer). Its folder holds the encoder too and decodes as above.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from bertkit.dataclass_io import spec
from bertkit.answers import NUMBER_BYTES, OBJECT_BYTES, json_bytes
from bertkit.data.tables import iter_lines
from bertkit.errors import data_error
from bertkit.io import atomic_open
import bertkit.tasks.metrics as metrics
import bertkit.tasks.significance as significance
from bertkit.model.head_settings import FrozenTaggerSettings
from bertkit.tasks.base import (IGNORE_INDEX, Feature, Head, Serving, Task, TaskOptions, TaskSettings, softmax,
                                task_options)
from bertkit.tokenizer.basic import word_span

if TYPE_CHECKING:
    from bertkit.model.folder import FolderConfig

logger = logging.getLogger(__name__)

DOCSTART = "-DOCSTART-"
OUTSIDE = "O"


@dataclass
class TaggedSentence:
    """A sentence: its words, their tags (None when unlabelled) and the line of its first word."""

    line: int
    words: list[str]
    tags: list[str] | None
    iob1: bool = False
    """Whether the file wrote its tags in IOB1 (they are converted to IOB2 on reading)."""
    spans: list[tuple[int, int]] | None = None
    """A served text's words: where each lies in the text, (start, end) characters (None for a file's sentences)."""


def iob1_to_iob2(tags: Sequence[str]) -> list[str]:
    """IOB2 tags from IOB1 ones: an I-X that does not continue an X entity starts one, so it becomes B-X."""
    out = []
    for i, tag in enumerate(tags):
        if tag.startswith("I-"):
            prev = out[i - 1] if i else OUTSIDE
            if prev == OUTSIDE or prev[2:] != tag[2:]:
                tag = "B-" + tag[2:]
        out.append(tag)
    return out


def is_iob1(sentences: Sequence[Sequence[str]]) -> bool:
    """Whether any entity starts with I- (IOB1); IOB2 always starts entities with B-."""
    return any(iob1_to_iob2(tags) != list(tags) for tags in sentences)


def read_conll(path: str | os.PathLike, labelled: bool = True) -> list[TaggedSentence]:
    """Sentences of a CoNLL column file; DataError naming the line where the column count changes."""
    sentences: list[TaggedSentence] = []
    words: list[str] = []
    tags: list[str] = []
    start = 0
    columns: int | None = None

    def flush() -> None:
        if words:
            sentences.append(TaggedSentence(start, list(words), list(tags) if columns and columns > 1 else None))
        words.clear()
        tags.clear()

    for number, line in iter_lines(path):
        fields = line.split()
        if not fields:
            flush()
            continue
        if fields[0] == DOCSTART:
            flush()
            continue
        if columns is None:
            columns = len(fields)
            if labelled and columns < 2:
                raise data_error(path, number, "one column only: expected `token ... tag` (the tag last)")
        elif len(fields) != columns:
            raise data_error(path, number, f"{len(fields)} columns, expected {columns} as on the file's first "
                             "token line")
        if not words:
            start = number
        words.append(fields[0])
        if columns > 1:
            tag = fields[-1]
            if tag != OUTSIDE and not (tag[:2] in ("B-", "I-") and len(tag) > 2):
                raise data_error(path, number, f"tag {tag!r} is not O, B-TYPE or I-TYPE")
            tags.append(tag)
    flush()
    return sentences


def word_tags(feature: Feature, logits: np.ndarray, label_names: Sequence[str]) -> list[tuple[str, float]]:
    """Each word's tag and its softmax probability, read at the word's first piece (BERT paper, section 4.3); a
    word that did not fit in max_length is "O" with probability 1."""
    probs = softmax(logits)
    tags = []
    for p in feature["word_starts"]:
        if p is None:
            tags.append((OUTSIDE, 1.0))
        else:
            best = int(probs[p].argmax())
            tags.append((label_names[best], float(probs[p, best])))
    return tags


@dataclass
class NerOptions(TaskOptions, FrozenTaggerSettings):
    """NER's options: the common ones, and the feature-based approach's (the tagger's from FrozenTaggerSettings)."""

    frozen: bool = False
    """The feature-based approach (paper, section 5.3): BERT stays frozen, runs once per sentence with its features
    cached, and only a tagger on them trains (see --frozen-features, --tagger)."""
    feature_cache: str | None = spec(None)
    """With --frozen: folder of the cached encoder features (default OUTPUT/feature_cache); runs sharing one (other
    feature choices or taggers on the same data) encode nothing again."""


@dataclass
class NerSettings(TaskSettings, FrozenTaggerSettings):
    """What a fine-tuned tagger keeps: the tag set, and with --frozen the tagger's settings."""

    main_metric: str | None = spec("f1")
    """The metric that picks the best checkpoint: entity-level F1."""
    label_names: list[str] | None = spec(None)
    """The tags, O first, then each type's B- before its I- (fitted on the training file)."""
    frozen: bool = False
    """The feature-based approach: a tagger on the frozen encoder's features."""
    source_scheme: str | None = spec(None, choices=("iob1",))
    """"iob1" when the training file's tags were IOB1 (converted to IOB2 on reading)."""
    encoder: str | None = spec(None)
    """With --frozen: the encoder folder the tagger was first built on (a record)."""


@dataclass
class NerRequest:
    """/ner's request: the texts to tag."""

    texts: list[str]


@dataclass
class TaggedToken:
    token: str
    """A word as the basic tokenizer splits (and, for uncased models, lowercases) it."""
    label: str
    probability: float
    start: int
    """Where the word begins in the request's text (a character index)..."""
    end: int
    """...and where it ends: text[start:end] is the word as it was sent (case and accents kept)."""


@dataclass
class NerResponse:
    results: list[list[TaggedToken]]


class NerServing(Serving):
    """/ner: each text's words with their tags, probabilities and places in the text."""

    endpoint, request, response = "ner", NerRequest, NerResponse
    examples = ({"texts": ["John lives in Paris.", "The committee met in New York on a cold Tuesday."]},)
    settings: NerSettings

    def request_examples(self, request: NerRequest) -> list[TaggedSentence]:
        """Each text as a sentence of the words the basic tokenizer splits it into, with their places in the text."""
        sentences = []
        for text in request.texts:
            words = self.tokenizer.words(text)
            sentences.append(TaggedSentence(0, [w for w, _, _ in words], None, spans=[word_span(w) for w in words]))
        return sentences

    def answer_bytes(self, example: TaggedSentence) -> int:
        """Per word: itself, the longest label, its probability, start and end (a text of punctuation is a word per
        character: 10,000 of them answer about 1 MB)."""
        label = max(json_bytes(n) for n in [*(self.settings.label_names or []), OUTSIDE])
        per_word = OBJECT_BYTES + label + 3 * NUMBER_BYTES
        return OBJECT_BYTES + len(example.words) * per_word + sum(json_bytes(w) for w in example.words)

    def answer(self, example: TaggedSentence, features: Sequence[Feature],
               outputs: Sequence[dict[str, np.ndarray]]) -> list[dict[str, Any]]:
        """Each word with its tag, as `decode` reads it (`word_tags`: the tag at its first piece), the tag's
        probability and the word's place in the text."""
        tags = word_tags(features[0], outputs[0]["logits"], self.settings.label_names or [])
        if example.spans is None:  # a file's sentence (`bertkit predict --probabilities`): words with no text around
            return [{"token": w, "label": tag, "probability": p} for w, (tag, p) in zip(example.words, tags)]
        return [{"token": w, "label": tag, "probability": p, "start": a, "end": b}
                for w, (tag, p), (a, b) in zip(example.words, tags, example.spans)]


def entities(words: Sequence[Mapping[str, Any]], text: str) -> list[dict[str, Any]]:
    """A served text's tagged words (`NerServing.answer`) grouped into entities, read as seqeval reads IOB2: a B-X
    word starts an X entity, the I-X words after it continue it, and an I-X after anything else starts one (a tag
    with neither prefix, from a tag set of bare types, reads as I-). Each entity: its type, its text as it was sent
    (text[start:end], case and accents kept), its span in characters, and its score, the mean of its words' tag
    probabilities (transformers' "simple" aggregation)."""
    spans: list[tuple[str, int, int, list[float]]] = []  # type, start, end, the words' probabilities
    previous = None  # the type of the entity the last word was in
    for word in words:
        tag = word["label"]
        if tag == OUTSIDE:
            previous = None
            continue
        begins, kind = (tag[:2] == "B-", tag[2:]) if tag[:2] in ("B-", "I-") else (False, tag)
        if not begins and kind == previous:
            spans[-1] = (kind, spans[-1][1], word["end"], [*spans[-1][3], word["probability"]])
        else:
            spans.append((kind, word["start"], word["end"], [word["probability"]]))
        previous = kind
    return [{"label": kind, "text": text[a:b], "start": a, "end": b, "score": sum(p) / len(p)}
            for kind, a, b, p in spans]


class NerTask(Task):
    """Named-entity recognition: one tag per word."""

    name = "ner"
    aliases = ('token_classification',)
    options_class = NerOptions
    settings_class = NerSettings
    serving = NerServing

    def settings(self, options: NerOptions | Mapping[str, Any] | None = None,
                 start: FolderConfig | None = None) -> NerSettings:
        """With --frozen, the tagger's settings go into the folder's config."""
        options = task_options(self, options)
        settings = super().settings(options, start)
        if options.frozen:
            settings = dataclasses.replace(settings, frozen=True, **FrozenTaggerSettings.to_settings(options))
        return settings

    def head(self, settings: NerSettings) -> Head:
        """A linear layer per token (BertForTokenClassification), or with --frozen the tagger on the frozen
        encoder's features, sized by `frozen_tagger` (it reads them cached, as `hidden_layers`, when the features
        have them); one output per tag, per token."""
        sizes: dict[str, Any] = {"num_labels": len(settings.label_names or []), "label_names": settings.label_names}
        if settings.frozen:
            return Head("BertForFrozenTokenClassification",
                        {**sizes, "frozen_tagger": FrozenTaggerSettings.to_settings(settings)}, per_token=True,
                        inputs=("input_ids", "token_type_ids", "hidden_layers"))
        return Head("BertForTokenClassification", sizes, per_token=True)

    def read(self, path: str | os.PathLike, settings: NerSettings, labelled: bool = True) -> list[TaggedSentence]:
        """The sentences of a CoNLL file, IOB1 tags as IOB2; with fitted settings, a tag training never had is a
        DataError naming its line."""
        sentences = read_conll(path, labelled)
        if is_iob1([s.tags for s in sentences if s.tags is not None]):
            for s in sentences:
                if s.tags is not None:
                    s.tags, s.iob1 = iob1_to_iob2(s.tags), True
        names = settings.label_names
        for s in sentences if labelled and names is not None else ():
            for i, tag in enumerate(s.tags or []):
                if tag not in names:
                    raise data_error(path, s.line + i, f"tag {tag!r} never occurs in the training data "
                                     f"(tags: {', '.join(names)})")
        return sentences

    def fit_labels(self, examples: Sequence[TaggedSentence], settings: NerSettings) -> NerSettings:
        seen = {t for s in examples for t in (s.tags or [])} | {OUTSIDE}
        # O first, then each type's B- before its I-.
        return dataclasses.replace(settings, label_names=sorted(seen, key=lambda t: (t != OUTSIDE, t[2:], t[:2])),
                                   source_scheme="iob1" if any(s.iob1 for s in examples) else settings.source_scheme)

    def features(self, examples: Sequence[TaggedSentence], tokenizer: Any, settings: NerSettings,
                 training: bool) -> list[Feature]:
        index = {t: i for i, t in enumerate(settings.label_names or [])}
        room = settings.max_length - 2  # [CLS] ... [SEP]
        cache: dict[str, list[int]] = {}
        out, lost = [], 0
        for s in examples:
            ids = [tokenizer.cls_token_id]
            labels = [IGNORE_INDEX]
            word_starts: list[int | None] = []
            for i, word in enumerate(s.words):
                if word not in cache:
                    cache[word] = tokenizer.encode_word(word) or [tokenizer.unk_token_id]
                pieces = cache[word]
                if len(ids) - 1 + len(pieces) > room:
                    word_starts.append(None)
                    continue
                word_starts.append(len(ids))
                labels += [index.get(s.tags[i], IGNORE_INDEX) if s.tags else IGNORE_INDEX]
                labels += [IGNORE_INDEX] * (len(pieces) - 1)
                ids += pieces
            ids.append(tokenizer.sep_token_id)
            labels.append(IGNORE_INDEX)
            lost += sum(w is None for w in word_starts)
            feature: Feature = {"input_ids": ids, "token_type_ids": [0] * len(ids), "word_starts": word_starts}
            if s.tags is not None:
                feature["labels"] = labels
            out.append(feature)
        if lost:
            logger.warning("%d word(s) did not fit in max_length=%d word pieces; they are predicted %r",
                           lost, settings.max_length, OUTSIDE)
        return out

    def decode(self, examples: Sequence[TaggedSentence], features: Sequence[Feature],
               outputs: list[dict[str, np.ndarray]], settings: NerSettings) -> list[list[str]]:
        return [[tag for tag, _ in word_tags(feature, out["logits"], settings.label_names or [])]
                for feature, out in zip(features, outputs)]

    def score(self, examples: Sequence[TaggedSentence], predictions: Sequence[list[str]],
              settings: NerSettings) -> dict[str, float]:
        self.settings_of(settings, "score settings")  # typed, or a mapping of its fields (checked)
        return metrics.entity_scores(predictions, [s.tags for s in examples])

    def write_predictions(self, path: str | os.PathLike, examples: Sequence[TaggedSentence],
                          predictions: Sequence[list[str]], settings: NerSettings) -> None:
        with atomic_open(path) as f:
            for s, tags in zip(examples, predictions):
                f.writelines(f"{w}\t{t}\n" for w, t in zip(s.words, tags))
                f.write("\n")


def paired_test(examples: Sequence[TaggedSentence], predictions_a: Sequence[list[str]],
                predictions_b: Sequence[list[str]], settings: NerSettings, seed: int = 0) -> significance.PairedTest:
    """Entity F1 of B against A: the paired bootstrap over sentences (F1 is not a mean over sentences)."""
    refs = [s.tags for s in examples]
    return significance.paired_bootstrap(np.array(metrics.entity_counts(predictions_a, refs)).reshape(-1, 3),
                                         np.array(metrics.entity_counts(predictions_b, refs)).reshape(-1, 3),
                                         significance.f1_from_counts, "f1", seed=seed)
