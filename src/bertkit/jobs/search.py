"""Vector search: the jobs behind `bertkit index` (`build(IndexConfig)`: an index over an embeddings folder) and
`bertkit search` (`search(SearchConfig)`: the top-k rows of each query, with ids, scores and texts)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertkit.dataclass_io import Config, field_of, spec
from bertkit.errors import ConfigError, data_error
from bertkit.inference.index import IndexOptions, VectorIndex, build_index, embed_queries, query_encoder


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
    """Queries per forward pass."""


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


def search(config: SearchConfig) -> list[dict[str, Any]]:
    """Each query's {"query", "results": [{"rank", "row", "id", "score", "text"}, ...]}, best first."""
    queries = read_queries(config)
    index = VectorIndex(config.index)
    try:
        index.set_search_options(config.ef_search, config.nprobe)
        encoder = query_encoder(index, config.model)
        scores, rows = index.search(embed_queries(index, encoder, queries, config.batch_size), config.top_k)
        return [{"query": q, "results": hits} for q, hits in zip(queries, index.results(scores, rows))]
    finally:
        index.close()


__all__ = ["IndexConfig", "SearchConfig", "build", "read_queries", "search"]
