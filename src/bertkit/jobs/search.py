"""Vector search: the jobs behind `bertkit index` (`build(IndexConfig)`: an index over an embeddings folder) and
`bertkit search` (`search(SearchConfig)`: the top-k rows of each query, with ids, scores and texts; with `rerank`,
the index's top hits re-scored by a cross-encoder and re-ordered by its score)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertkit.dataclass_io import Config, field_of, spec
from bertkit.errors import ConfigError, data_error
from bertkit.inference.index import IndexOptions, VectorIndex, build_index, embed_queries, query_encoder
from bertkit.model.folder import open_folder
from bertkit.tasks import Serving, folder_serving
from bertkit.tasks.classification import classifier_kind, relevance_scores, reranks


MAX_TOP_K = 100_000  # hits printed per query at most (`bertkit search`; the server has its own, smaller max_top_k)


@dataclass
class IndexConfig(Config):
    """One index build: `bertkit index`'s options are generated from these fields."""

    embeddings: str = spec("")
    """An embeddings folder written by `bertkit embed -o DIR` (or a .npy matrix, which cannot be searched by text)."""
    output: str = spec("")
    """The index folder to write."""
    overwrite: bool = False
    """Replace the files of an index already in `output`."""
    index: IndexOptions = field(default_factory=IndexOptions)


@dataclass
class SearchConfig(Config):
    """One search: `bertkit search`'s options are generated from these fields."""

    index: str = spec("")
    """An index folder written by `bertkit index`."""
    queries: list[str] = spec(default_factory=list, empty=True)
    """The queries (given after the options)."""
    queries_file: str | None = spec(None)
    """A text file of queries, one per line (blank lines skipped), searched after `queries`."""
    top_k: int = spec(10, ge=1, le=MAX_TOP_K)
    """Hits per query (at most the index's rows: a larger k gives every row)."""
    model: str | None = spec(None)
    """The model folder embedding the queries (default: the one the index records; it must be the same files)."""
    ef_search: int | None = field_of(IndexOptions, "ef_search", None)
    """hnsw: candidates kept while searching (default: the index's)."""
    nprobe: int | None = field_of(IndexOptions, "nprobe", None)
    """ivf: cells scanned per query (default: the index's)."""
    batch_size: int = spec(32, ge=1, le=2**16)
    """Queries per forward pass (with rerank, also the (query, hit) pairs per cross-encoder pass)."""
    rerank: str | None = spec(None)
    """A pair classifier (a cross-encoder: `bertkit finetune --task classification` on (query, text) pairs, two
    labels or --regression) that re-scores each query's top rerank_top hits: the answer holds the best top_k of
    them by its relevance ("rerank_score", as `bertkit.load(FOLDER).rank` scores), with the index's "score" and
    "index_rank" kept."""
    rerank_top: int = spec(20, ge=1, le=MAX_TOP_K)
    """With rerank: the index's hits per query that the cross-encoder re-scores (top_k may not be larger)."""


def build(config: IndexConfig) -> dict[str, Any]:
    """Write the index of config.embeddings into config.output; returns its index.json."""
    return build_index(config.embeddings, config.output, config.index, config.overwrite)


def read_queries(config: SearchConfig) -> list[str]:
    """config.queries, then config.queries_file's non-blank lines; a ConfigError when there are none."""
    queries = list(config.queries)
    if config.queries_file:
        path = Path(config.queries_file)
        try:
            queries += [q for q in path.read_text(encoding="utf-8").splitlines() if q.strip()]
        except FileNotFoundError:
            raise data_error(path, None, "no such file") from None
        except UnicodeDecodeError as e:
            raise data_error(path, None, f"not UTF-8 text ({e})") from None
    if not queries:
        raise ConfigError("no queries: give them after the options or in --queries-file")
    return queries


@dataclass
class Reranker:
    """A pair classifier opened to re-score search hits (`open_reranker`)."""

    folder: str
    model: Any
    serving: Serving

    def rerank(self, queries: list[str], hits: list[list[dict[str, Any]]], top_k: int,
               batch_size: int) -> list[list[dict[str, Any]]]:
        """Each query's best top_k hits by the relevance of (query, hit text), best first (ties keep the index's
        order), each with its "index_rank" and "rerank_score" added."""
        pairs = [(q, hit) for q, query_hits in zip(queries, hits) for hit in query_hits]
        missing = next((hit for _, hit in pairs if not isinstance(hit.get("text"), str)), None)
        if missing is not None:
            raise ConfigError(f"SearchConfig.rerank: row {missing['row']} of the index has no text to re-score; index "
                              "an embeddings folder of texts (`bertkit embed -o DIR`)")
        scores = iter(relevance_scores(self.serving, self.model, [q for q, _ in pairs],
                                       [hit["text"] for _, hit in pairs], batch_size))
        out = []
        for query_hits in hits:
            scored = [(next(scores), hit) for hit in query_hits]
            scored.sort(key=lambda pair: -pair[0])  # stable: equal relevance keeps the index's order
            out.append([{**hit, "rank": rank, "index_rank": hit["rank"], "rerank_score": score}
                        for rank, (score, hit) in enumerate(scored[:top_k], start=1)])
        return out


def open_reranker(folder: str) -> Reranker:
    """A folder's pair classifier whose answers read as relevance (`bertkit.tasks.classification.reranks`); a
    ConfigError naming the folder and what it holds otherwise."""
    opened = open_folder(folder)
    serving = folder_serving(opened.model, opened.tokenizer)
    if serving is None or serving.endpoint != "classify" or not reranks(serving.settings):
        held = (classifier_kind(serving.settings) if serving is not None and serving.endpoint == "classify"
                else f"a {type(opened.model).__name__}")
        raise ConfigError(f"SearchConfig.rerank: {folder} holds {held}; reranking needs a classifier of (query, "
                          "text) pairs with one output or two labels and no other columns (a cross-encoder: "
                          "`bertkit finetune --task classification` on a file of query, text and 0/1 label columns, "
                          "or --regression on relevance scores)")
    return Reranker(folder, opened.model, serving)


def search(config: SearchConfig) -> list[dict[str, Any]]:
    """Each query's {"query", "results": [{"rank", "row", "id", "score", "text"}, ...]}, best first; with
    config.rerank, the index's top rerank_top hits re-ordered by the cross-encoder (`Reranker.rerank`)."""
    queries = read_queries(config)
    reranker = None
    if config.rerank:
        if config.top_k > config.rerank_top:
            raise ConfigError(f"SearchConfig.top_k: {config.top_k} hits asked for, but only rerank_top "
                              f"{config.rerank_top} are re-scored and answered; give --top-k {config.rerank_top} "
                              f"or less, or --rerank-top {config.top_k} or more")
        reranker = open_reranker(config.rerank)  # before the index: a wrong folder is said before any search
    index = VectorIndex(config.index)
    try:
        index.set_search_options(config.ef_search, config.nprobe)
        encoder = query_encoder(index, config.model)
        k = config.rerank_top if reranker is not None else config.top_k
        scores, rows = index.search(embed_queries(index, encoder, queries, config.batch_size), k)
        hits = index.results(scores, rows)
    finally:
        index.close()
    if reranker is not None:
        hits = reranker.rerank(queries, hits, config.top_k, config.batch_size)
    return [{"query": q, "results": query_hits} for q, query_hits in zip(queries, hits)]


__all__ = ["IndexConfig", "Reranker", "SearchConfig", "build", "open_reranker", "read_queries", "search"]
