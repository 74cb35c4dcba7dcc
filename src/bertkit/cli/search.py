"""Verbs `index` (a vector index over an embeddings folder) and `search` (top-k rows for text queries), their
options generated from bertkit.jobs.search.IndexConfig (with bertkit.inference.index.IndexOptions) and SearchConfig."""

from __future__ import annotations

import argparse
import sys

from bertkit.cli.config_options import PREFIX, add_config_options, config_fields, config_from_options
from bertkit.inference.index import IndexOptions
from bertkit.jobs.search import IndexConfig, SearchConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `index` and `search`."""
    p = subparsers.add_parser(
        "index",
        description="Index every row of EMBEDDINGS (a folder written by `bertkit embed -o DIR`) for "
                    "inner-product search (cosine on normalised embeddings): exact, hnsw or ivf (IVF-PQ with "
                    "--pq-m). The index records the model folder's identity and the embedding settings; search "
                    "checks its query encoder against them. Needs faiss-cpu (pip install 'bertkit[index]').")
    p.add_argument("embeddings", metavar="EMBEDDINGS", help="the embeddings folder")
    p.add_argument("-o", "--output", dest=PREFIX + "output", required=True, metavar="DIR", help="the index folder")
    add_config_options(p, config_fields(IndexConfig, {"index": IndexOptions}, skip=("embeddings", "output"),
                                        defaults=IndexConfig(embeddings="-", output="-")),
                       switches=True)
    p.set_defaults(func=_index)

    p = subparsers.add_parser(
        "search",
        description="Embed each QUERY (and each line of --queries-file) as the index's rows were "
                    "embedded, and print one JSON line per query: {query, results: [{rank, row, id, score, "
                    "text}]}, best first.")
    p.add_argument("queries", metavar="QUERY", nargs="*", help="queries")
    p.add_argument("--index", dest=PREFIX + "index", required=True, metavar="DIR", help="an index folder")
    add_config_options(p, config_fields(SearchConfig, skip=("index", "queries"), defaults=SearchConfig(index="-")))
    p.set_defaults(func=_search)


def _index(args: argparse.Namespace) -> int:
    from bertkit.jobs.search import build

    setattr(args, PREFIX + "embeddings", args.embeddings)
    config = config_from_options(IndexConfig, args)
    meta = build(config)
    print(f"indexed {meta['rows']} x {meta['dim']} embeddings ({config.index.kind}) into {config.output}",
          file=sys.stderr)
    return 0


def _search(args: argparse.Namespace) -> int:
    from bertkit.answers import json_line
    from bertkit.jobs.search import search

    setattr(args, PREFIX + "queries", list(args.queries))
    for i, answer in enumerate(search(config_from_options(SearchConfig, args))):
        print(json_line(answer, f"answer {i}"))  # never `Infinity` or `NaN`, which no JSON reader takes
    return 0
