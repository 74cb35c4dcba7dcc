"""Sentence embeddings for search: train a bi-encoder (Reimers & Gurevych 2019, "Sentence-BERT") whose pooled vectors
put a query near the documents relevant to it, and evaluate it by retrieval. The head is `BertForEmbedding`; the
losses are `bertkit.model.losses`'.

Training data, by the `loss` option:
  - `in-batch` (the default; sentence-transformers' MultipleNegativesRankingLoss, InfoNCE): pairs or triples, the
    fields `query`, `positive` and, when the file has it, `negative` (a hard negative, which joins every query's
    candidates; more negative fields may follow with `columns`). Each query must rank its positive above every other
    positive and negative of its batch; no batch holds two examples that share a text (`no_duplicate_batches`).
  - `cosent` (Su 2022): scored pairs, the fields `text_a`, `text_b` and `score` (any real numbers; only their order
    is used).
  - `simcse`: unsupervised SimCSE (Gao et al. 2021): any text file, one text per line (or a JSONL/CSV/TSV/Parquet
    file's `text` field), each text its own positive, embedded twice with different dropout masks in one pass.
    Temperature 0.05 (scale 20) and dropout 0.1 (whatever the start folder's) as in the paper. No labels: a
    user's own corpus gives a first embedding model.
`columns` names other fields, in that order. Tables are read by `bertkit.data.tables` (TSV/CSV with a header, JSON
lines, Parquet: `iter_records`).

Evaluation data (`--dev`, `bertkit evaluate --input`):
  - a retrieval set in BEIR's layout (`bertkit.data.retrieval`: corpus.jsonl, queries.jsonl, qrels), or a pairs or
    triples file as training reads it (its queries against every positive and negative text of the file, each
    query's positives relevant): recall@1/5/10, MRR@10 (the main metric: it picks `best/`) and nDCG@10, as
    sentence-transformers' InformationRetrievalEvaluator computes them (cosine similarity, binary relevance);
  - scored pairs (with `loss: cosent`): the Spearman and Pearson correlation of the pairs' cosines with their scores
    (sentence-transformers' EmbeddingSimilarityEvaluator; Spearman is the main metric).

The folder keeps its pooling, normalisation and length in config.json's task settings and in sentence-transformers'
files (`bertkit.model.pooling`), so `bertkit embed`, `index`, `search`, `serve` and `SentenceTransformer(folder)`
embed with them. Started from a sentence-transformers folder (all-MiniLM-L6-v2), the options left unset take that
folder's pooling, normalisation and length (`settings(options, start)`); otherwise mean pooling, normalised, 128
word pieces. The task has no endpoint of its own: the server's /embed and /search serve the folder.

From Python: `evaluate_retrieval(encode, retrieval_set)` scores any encoder (bertkit's, sentence-transformers') on a
`RetrievalSet`; `retrieval_rankings` ranks a corpus's embeddings for query embeddings.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

import bertkit.tasks.metrics as metrics
from bertkit.data.retrieval import RetrievalSet, is_retrieval_set, read_retrieval_set
from bertkit.data.tables import check_text, iter_records, require_field
from bertkit.data.texts import read_texts, resolve_format
from bertkit.dataclass_io import spec
from bertkit.errors import ConfigError, data_error
from bertkit.io import atomic_open
from bertkit.model.pooling import DEFAULT_SCALE, MAX_SCALE, POOLINGS, folder_defaults
from bertkit.tasks.base import Feature, Head, Task, TaskOptions, TaskSettings, task_options

if TYPE_CHECKING:  # torch is imported where a model runs: the task's options read without it
    import torch

    from bertkit.model.folder import FolderConfig
    from bertkit.training.batches import BatchSampler

LOSSES = ("in-batch", "cosent", "simcse")
# The fields each loss reads by default; an in-batch file's `negative` is read when the file has it.
DEFAULT_COLUMNS = {"in-batch": ("query", "positive", "negative"), "cosent": ("text_a", "text_b", "score"),
                   "simcse": ("text",)}
OPTIONAL_NEGATIVE = "negative"
RETRIEVAL_METRIC = f"mrr@{metrics.RANK_CUTOFF}"  # the main metric of retrieval (MS MARCO's)
SIMILARITY_METRIC = "spearman"  # the main metric of scored pairs (STS, as sentence-transformers reports it)
RANK_DEPTH = max(*metrics.RECALL_AT, metrics.RANK_CUTOFF)  # documents ranked per query for the metrics
QUERY_BLOCK = 1024  # queries scored against the whole corpus at a time (bounds the score matrix)
# SimCSE's noise is dropout alone (Gao et al. 2021, section 3: the standard 0.1 on the hidden and attention
# probabilities); a start folder trained without dropout (bertkit-mini) would give two identical views of a text.
SIMCSE_DROPOUT = 0.1


@dataclass
class EmbeddingOptions(TaskOptions):
    """What the training file holds and how the model embeds and is trained."""

    loss: str = spec("in-batch", choices=LOSSES)
    """in-batch (query/positive pairs, optional hard negatives: multiple negatives ranking, InfoNCE), cosent (scored
    pairs: CoSENT) or simcse (plain text: unsupervised SimCSE, each text its own positive through dropout)."""
    columns: list[str] | None = spec(None)
    """The fields read, in order: in-batch: query, positive, hard negatives; cosent: the two texts and the score;
    simcse (a table): the text. Default: query,positive[,negative] | text_a,text_b,score | text."""
    pooling: str | None = spec(None, choices=tuple(POOLINGS))
    """How a text's token vectors become one vector: mean or cls (default: the start folder's
    sentence-transformers pooling, else mean)."""
    normalize: bool | None = None
    """L2-normalise the embeddings (default: as the start folder's sentence-transformers modules, else true)."""
    scale: float = spec(DEFAULT_SCALE, gt=0, le=MAX_SCALE)
    """The losses' scale, an inverse temperature: 20 is sentence-transformers' and SimCSE's 0.05."""
    learn_scale: bool = False
    """Learn the scale, starting from `scale` (CLIP's learned logit scale; at most 100)."""
    dropout: float | None = spec(None, ge=0, lt=1)
    """Hidden and attention dropout while training (default: the start folder's; with simcse 0.1, the paper's, since
    dropout is SimCSE's only noise and a folder pre-trained without it would see two identical views)."""


@dataclass
class EmbeddingSettings(TaskSettings):
    """What a trained embedding model keeps: how it embeds (read by its head and written in sentence-transformers'
    layout) and what it was trained on."""

    main_metric: str | None = spec(RETRIEVAL_METRIC)
    """The metric that picks the best checkpoint: mrr@10 (retrieval), spearman (scored pairs)."""
    loss: str = spec("in-batch", choices=LOSSES)
    """The loss it was trained with."""
    columns: list[str] | None = spec(None)
    """The fields it reads (None: the loss's defaults)."""
    pooling: str = spec("mean", choices=tuple(POOLINGS))
    """How a text's token vectors become one vector."""
    normalize: bool = True
    """Whether the embeddings are L2-normalised."""
    scale: float = spec(DEFAULT_SCALE, gt=0, le=MAX_SCALE)
    """The losses' scale (the start value, when learned)."""
    learn_scale: bool = False
    """Whether the scale was learned."""
    dropout: float | None = spec(None, ge=0, lt=1)
    """The hidden and attention dropout it trained with (None: its start folder's)."""


@dataclass(frozen=True)
class TextsExample:
    """One training (or evaluation) row: its texts in the order of the loss's fields (a query, its positive and hard
    negatives; two scored texts; one text for SimCSE) and, for scored pairs, the score."""

    line: int
    texts: tuple[str, ...]
    score: float | None = None
    scored: bool = False
    """A scored pair (cosent), whose score may be absent in a file to predict."""


@dataclass(frozen=True, eq=False)
class QueryExample:
    """One query of a retrieval set, with the ids of its relevant documents and the set's corpus (shared by all its
    queries, so a subset of the queries still searches the whole corpus)."""

    id: str
    text: str
    relevant: frozenset[str]
    corpus: dict[str, str] = field(repr=False)


def _columns(settings: EmbeddingSettings) -> tuple[str, ...]:
    return tuple(settings.columns) if settings.columns else DEFAULT_COLUMNS[settings.loss]


def _read_rows(path: str | os.PathLike, settings: EmbeddingSettings, labelled: bool) -> list[TextsExample]:
    """Pairs, triples (in-batch) or scored pairs (cosent) of a table; every row holds the fields the first row
    does (a default `negative` is read when the first row has it)."""
    columns, scored = _columns(settings), settings.loss == "cosent"
    if scored and len(columns) != 3:
        raise ConfigError(f"columns {list(columns)}: cosent reads three fields, the two texts and the score")
    if not scored and len(columns) < 2:
        raise ConfigError(f"columns {list(columns)}: in-batch reads a query and a positive (and hard negatives)")
    texts = columns[:2] if scored else columns
    examples: list[TextsExample] = []
    for line, record in iter_records(path):
        if not examples and not settings.columns and OPTIONAL_NEGATIVE in texts and OPTIONAL_NEGATIVE not in record:
            texts = tuple(c for c in texts if c != OPTIONAL_NEGATIVE)  # pairs: the file has no hard negatives
        row = tuple(check_text(path, line, c, _field(path, line, record, c)) for c in texts)
        score = None
        if scored and (labelled or record.get(columns[2]) not in (None, "")):
            score = _score(path, line, columns[2], _field(path, line, record, columns[2]))
        examples.append(TextsExample(line, row, score, scored))
    return examples


def _field(path: str | os.PathLike, line: int, record: dict[str, Any], name: str) -> Any:
    """record[name], or the DataError naming the field, the fields there are and the option that names others."""
    if name not in record:
        found = ", ".join(map(repr, list(record)[:10])) or "none"
        raise data_error(path, line, f"no field {name!r} (fields: {found}); --columns names the fields to read, "
                         "--loss what they hold (in-batch: query, positive[, negative]; cosent: text_a, text_b, score; "
                         "simcse: text, or a plain text file; a dev set of any loss may be a retrieval set, a BEIR "
                         "folder)")
    return require_field(path, line, record, name)


def _score(path: str | os.PathLike, line: int, name: str, value: Any) -> float:
    """A pair's score as a finite float; a DataError naming the field otherwise."""
    try:
        score = float(value) if not isinstance(value, bool) else float("nan")
    except (TypeError, ValueError):
        score = float("nan")
    if not np.isfinite(score):
        raise data_error(path, line, f"field {name!r} is {value!r}; expected a finite number (the pair's score)")
    return score


def _read_texts(path: str | os.PathLike, settings: EmbeddingSettings) -> list[TextsExample]:
    """SimCSE's texts: a plain text file's lines (or a table's text field), blank ones left out."""
    if resolve_format(str(path)) == "text":
        rows = ((row.line, row.text) for row in read_texts(str(path), "text"))
    else:
        name = _columns(settings)[0]
        rows = ((line, check_text(path, line, name, _field(path, line, record, name)))
                for line, record in iter_records(path))
    return [TextsExample(line, (text,)) for line, text in rows if text.strip()]


def retrieval_set(examples: Sequence[TextsExample | QueryExample]) -> RetrievalSet:
    """The retrieval set examples stand for: a retrieval set's queries with their whole corpus; or pairs and triples,
    whose distinct queries are searched against every distinct positive and negative text (ids `q<n>`, `d<n>`, in
    order of first appearance), a query's positives relevant to it."""
    if examples and isinstance(examples[0], QueryExample):
        return RetrievalSet({e.id: e.text for e in examples}, examples[0].corpus,
                            {e.id: set(e.relevant) for e in examples})
    queries: dict[str, str] = {}
    corpus: dict[str, str] = {}
    relevant: dict[str, set[str]] = {}
    for e in examples:
        if len(e.texts) < 2 or e.scored:
            raise ConfigError("retrieval is evaluated on a retrieval set (BEIR's layout) or on pairs and triples "
                              "(query, positive[, negative]); these examples are "
                              f"{'scored pairs' if e.scored else 'single texts'}")
        q = queries.setdefault(e.texts[0], f"q{len(queries)}")
        docs = [corpus.setdefault(text, f"d{len(corpus)}") for text in e.texts[1:]]
        relevant.setdefault(q, set()).add(docs[0])
    return RetrievalSet({q: text for text, q in queries.items()}, {d: text for text, d in corpus.items()}, relevant)


def _is_similarity(examples: Sequence[TextsExample | QueryExample]) -> bool:
    return bool(examples) and isinstance(examples[0], TextsExample) and examples[0].scored


def evaluation_texts(examples: Sequence[TextsExample | QueryExample]) -> list[str]:
    """The texts an evaluation embeds, in the order of its features: scored pairs' two texts pair by pair; else the
    retrieval set's queries, then its corpus."""
    if _is_similarity(examples):
        return [text for e in examples for text in e.texts[:2]]  # type: ignore[union-attr]
    retrieval = retrieval_set(examples)
    return [*retrieval.queries.values(), *retrieval.corpus.values()]


def retrieval_rankings(queries: np.ndarray | torch.Tensor, corpus: np.ndarray | torch.Tensor,
                       depth: int = RANK_DEPTH) -> list[list[int]]:
    """The `depth` corpus rows of highest cosine similarity to each query row, best first (indices into corpus):
    torch.topk over the cosines, a block of queries at a time, as sentence-transformers' evaluators rank."""
    import torch

    q = torch.nn.functional.normalize(torch.as_tensor(queries, dtype=torch.float32), dim=-1)
    d = torch.nn.functional.normalize(torch.as_tensor(corpus, dtype=torch.float32), dim=-1)
    k = min(depth, len(d))
    out: list[list[int]] = []
    for start in range(0, len(q), QUERY_BLOCK):
        out += torch.topk(q[start:start + QUERY_BLOCK] @ d.T, k, dim=1).indices.tolist()
    return out


def retrieval_metrics(retrieval: RetrievalSet, query_embeddings: np.ndarray,
                      corpus_embeddings: np.ndarray) -> dict[str, float]:
    """recall@1/5/10, mrr@10 and ndcg@10 of embeddings of a retrieval set's queries and corpus (rows in the order of
    `retrieval.queries` and `retrieval.corpus`)."""
    ids = list(retrieval.corpus)
    rankings = [[ids[i] for i in row] for row in retrieval_rankings(query_embeddings, corpus_embeddings)]
    return metrics.retrieval_scores(rankings, [retrieval.relevant[q] for q in retrieval.queries])


def evaluate_retrieval(encode: Callable[[list[str]], Any], retrieval: RetrievalSet) -> dict[str, float]:
    """recall@1/5/10, mrr@10 and ndcg@10 of any encoder on a retrieval set: `encode(texts)` returns one embedding
    row per text (bertkit's `bertkit.load(folder).encode`, sentence-transformers' `model.encode`)."""
    queries = np.asarray(encode(list(retrieval.queries.values())), dtype=np.float32)
    corpus = np.asarray(encode(list(retrieval.corpus.values())), dtype=np.float32)
    return retrieval_metrics(retrieval, queries, corpus)


class EmbeddingTask(Task):
    """Train sentence embeddings for search (pairs, triples, scored pairs or plain text) and evaluate retrieval."""

    name = "embedding"
    options_class = EmbeddingOptions
    settings_class = EmbeddingSettings
    serving = None  # the server's own /embed and /search serve an embedding folder

    def settings(self, options: EmbeddingOptions | dict[str, Any] | None = None,
                 start: FolderConfig | None = None) -> EmbeddingSettings:
        """From the options; started from a folder (`start`), the pooling, normalisation and length left unset are
        taken from its sentence-transformers files (`folder_defaults`), when it has them."""
        options = task_options(self, options)
        if start is not None:
            found = folder_defaults(start.path)
            unset = {k: found[k] for k in ("pooling", "normalize", "max_length")
                     if k in found and getattr(options, k) is None}
            options = dataclasses.replace(options, **unset)
        base = super().settings(options)
        values = {k: getattr(options, k) for k in ("loss", "columns", "scale", "learn_scale", "pooling", "normalize",
                                                   "dropout") if getattr(options, k) is not None}
        if options.loss == "simcse" and options.dropout is None:
            values["dropout"] = SIMCSE_DROPOUT
        main = SIMILARITY_METRIC if options.loss == "cosent" else RETRIEVAL_METRIC
        return dataclasses.replace(base, main_metric=main, **values)  # type: ignore[return-value]

    def read(self, path: str | os.PathLike, settings: EmbeddingSettings,
             labelled: bool = True) -> list[TextsExample | QueryExample]:
        """A retrieval set (a BEIR folder or a qrels file in one) as its queries; else the loss's rows: pairs or
        triples, scored pairs, or SimCSE's texts."""
        if is_retrieval_set(path):
            retrieval = read_retrieval_set(path)
            return [QueryExample(q, text, frozenset(retrieval.relevant[q]), retrieval.corpus)  # type: ignore[misc]
                    for q, text in retrieval.queries.items()]
        if settings.loss == "simcse":
            return _read_texts(path, settings)  # type: ignore[return-value]
        return _read_rows(path, settings, labelled)  # type: ignore[return-value]

    def head(self, settings: EmbeddingSettings) -> Head:
        """BertForEmbedding: pooled (and normalised) vectors, the loss of the settings' data in training; the
        settings' dropout (if any) replaces the start folder's."""
        dropout = {} if settings.dropout is None else {
            "hidden_dropout_prob": settings.dropout, "attention_probs_dropout_prob": settings.dropout}
        return Head("BertForEmbedding", dropout, outputs=("embeddings",),
                    inputs=("input_ids",))  # one segment per text: token types are all 0

    def features(self, examples: Sequence[TextsExample | QueryExample], tokenizer: Any, settings: EmbeddingSettings,
                 training: bool) -> list[Feature]:
        """Training: each example's texts as one feature (input_ids (texts, seq); SimCSE's text twice), scored pairs
        with their score as `labels`. Evaluation: one feature per text (`evaluation_texts`)."""
        if not training:
            evaluated = evaluation_texts(examples)
            by_text = _token_ids(evaluated, tokenizer, settings)
            return [{"input_ids": by_text[t]} for t in evaluated]
        texts = [e.texts * 2 if len(e.texts) == 1 else e.texts for e in examples]  # type: ignore[union-attr]
        ids = _token_ids([t for row in texts for t in row], tokenizer, settings)
        out = []
        for example, row in zip(examples, texts):
            feature: Feature = {"input_ids": [ids[t] for t in row]}
            if example.score is not None:  # type: ignore[union-attr]
                feature["labels"] = example.score  # type: ignore[union-attr]
            out.append(feature)
        return out

    def batch_sampler(self, features: Sequence[Feature], settings: EmbeddingSettings) -> BatchSampler | None:
        """In-batch negatives (and SimCSE): no batch holds two examples that share a text (as tokenized), which would
        be a false negative of each other (`no_duplicate_batches`). CoSENT: plain batches."""
        from bertkit.training.batches import no_duplicate_batches

        if settings.loss == "cosent":
            return None
        keys = [frozenset(tuple(ids) for ids in f["input_ids"]) for f in features]
        return partial(no_duplicate_batches, keys=keys)

    def decode(self, examples: Sequence[TextsExample | QueryExample], features: Sequence[Feature],
               outputs: list[dict[str, np.ndarray]], settings: EmbeddingSettings) -> list:
        """Scored pairs: each pair's cosine. Retrieval: each example's query's ranking, the RANK_DEPTH best document
        ids (an example of a pairs file: its query's)."""
        vectors = np.stack([out["embeddings"] for out in outputs]) if outputs else np.zeros((0, 1), np.float32)
        if _is_similarity(examples):
            unit = (vectors / np.linalg.norm(vectors, axis=-1, keepdims=True).clip(1e-12)).reshape(len(examples), 2, -1)
            return [float(c) for c in (unit[:, 0] * unit[:, 1]).sum(-1)]
        retrieval = retrieval_set(examples)
        n = len(retrieval.queries)
        ids = list(retrieval.corpus)
        ranked = dict(zip(retrieval.queries, ([ids[i] for i in row]
                                              for row in retrieval_rankings(vectors[:n], vectors[n:]))))
        by_text = {text: q for q, text in retrieval.queries.items()}
        return [ranked[e.id] if isinstance(e, QueryExample) else ranked[by_text[e.texts[0]]] for e in examples]

    def score(self, examples: Sequence[TextsExample | QueryExample], predictions: Sequence,
              settings: EmbeddingSettings) -> dict[str, float]:
        """Scored pairs: spearman and pearson of the cosines with the scores. Retrieval: recall@1/5/10, mrr@10,
        ndcg@10 over the set's queries."""
        self.settings_of(settings, "score settings")
        if _is_similarity(examples):
            gold = [e.score for e in examples]  # type: ignore[union-attr]
            return {SIMILARITY_METRIC: metrics.spearman(predictions, gold),
                    "pearson": metrics.pearson(predictions, gold)}
        retrieval = retrieval_set(examples)
        by_query = {}
        for e, ranking in zip(examples, predictions):
            by_query[e.id if isinstance(e, QueryExample) else e.texts[0]] = ranking
        keys = list(retrieval.queries) if isinstance(examples[0], QueryExample) else list(retrieval.queries.values())
        return metrics.retrieval_scores([by_query[k] for k in keys], [retrieval.relevant[q] for q in retrieval.queries])

    def write_predictions(self, path: str | os.PathLike, examples: Sequence[TextsExample | QueryExample],
                          predictions: Sequence, settings: EmbeddingSettings) -> None:
        """JSON lines: `{"id": query id, "ranking": [document ids, best first]}` per query of a retrieval set;
        `{"line": n, "query": text, "ranking": [texts, best first]}` per pair or triple (its query searched among
        the file's positives and negatives); `{"line": n, "similarity": cosine}` per scored pair."""
        texts = {} if _is_similarity(examples) else retrieval_set(examples).corpus
        with atomic_open(path) as f:
            for e, p in zip(examples, predictions):
                if isinstance(e, QueryExample):
                    record = {"id": e.id, "ranking": p}
                elif e.scored:
                    record = {"line": e.line, "similarity": p}
                else:
                    record = {"line": e.line, "query": e.texts[0], "ranking": [texts[d] for d in p]}
                f.write(json.dumps(record, ensure_ascii=False) + "\n")


def _token_ids(texts: Sequence[str], tokenizer: Any, settings: EmbeddingSettings) -> dict[str, list[int]]:
    """Each distinct text's word-piece ids, cut to settings.max_length (each text tokenized once)."""
    distinct = list(dict.fromkeys(texts))
    encoded = tokenizer(distinct, max_length=settings.max_length, truncation=True) if distinct else []
    return {text: list(e.input_ids) for text, e in zip(distinct, encoded)}


__all__ = ["EmbeddingOptions", "EmbeddingSettings", "EmbeddingTask", "QueryExample", "RetrievalSet", "TextsExample",
           "evaluate_retrieval", "retrieval_metrics", "retrieval_rankings", "retrieval_set"]
