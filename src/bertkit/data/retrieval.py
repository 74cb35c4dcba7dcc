"""Retrieval sets: queries, a corpus and which documents are relevant to which query, read from BEIR's layout (what
sentence-transformers' InformationRetrievalEvaluator takes as three dicts: `queries`, `corpus`, `relevant_docs`).

A BEIR folder (Thakur et al. 2021) holds
  - `corpus.jsonl`: one document per line, `{"_id": ..., "text": ..., "title": ...}` (title optional; a document's
    text is its title and text joined by a space, as BEIR and sentence-transformers join them);
  - `queries.jsonl`: one query per line, `{"_id": ..., "text": ...}`;
  - the relevance judgements, a TSV file with the header `query-id  corpus-id  score`: `qrels.tsv`, or
    `qrels/<split>.tsv` (BEIR's: test.tsv, dev.tsv, ...). A document is relevant to a query when its score is > 0.
Each file may be gzipped (`corpus.jsonl.gz`). The set is named by its folder (which must then hold one qrels file) or
by a qrels file inside it (`scifact/qrels/dev.tsv`). Queries without a relevant document are left out, as BEIR and
sentence-transformers leave them out.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from bertkit.data.tables import check_text, iter_jsonl, iter_table, require_field, shown
from bertkit.errors import DataError, data_error

QRELS_HEADER = ("query-id", "corpus-id", "score")


@dataclass(frozen=True)
class RetrievalSet:
    """Queries and documents by id, and each query's relevant documents (every query has at least one)."""

    queries: dict[str, str]
    """Query id -> text."""
    corpus: dict[str, str]
    """Document id -> text."""
    relevant: dict[str, set[str]]
    """Query id -> the ids of its relevant documents (sentence-transformers' `relevant_docs`)."""


def _existing(folder: Path, name: str) -> Path | None:
    """folder/name, or folder/name.gz, whichever exists (None: neither)."""
    return next((p for p in (folder / name, folder / f"{name}.gz") if p.is_file()), None)


def retrieval_files(path: str | os.PathLike) -> tuple[Path, Path, Path] | None:
    """(corpus, queries, qrels) of the retrieval set `path` names (a BEIR folder, or a qrels file in one); None when
    `path` is not such a set. A folder with several qrels files, or a set missing a file, is a DataError."""
    path = Path(path)
    if path.is_dir():
        folder = path
        qrels = [p for p in (_existing(folder, "qrels.tsv"),) if p is not None]
        if not qrels and (folder / "qrels").is_dir():
            qrels = sorted(p for p in (folder / "qrels").iterdir() if p.name.endswith((".tsv", ".tsv.gz")))
        if len(qrels) != 1:
            found = ", ".join(str(p.relative_to(folder)) for p in qrels) or "none"
            raise data_error(path, None, f"a retrieval set needs one relevance file, qrels.tsv or qrels/<split>.tsv "
                             f"(found: {found}); name the one to use, e.g. {folder / 'qrels' / 'test.tsv'}")
        qrels_file = qrels[0]
    elif path.is_file() and path.name.endswith((".tsv", ".tsv.gz")) and (
            _existing(path.parent, "corpus.jsonl") or _existing(path.parent.parent, "corpus.jsonl")):
        qrels_file = path
        folder = path.parent if _existing(path.parent, "corpus.jsonl") else path.parent.parent
    else:
        return None
    corpus, queries = _existing(folder, "corpus.jsonl"), _existing(folder, "queries.jsonl")
    if corpus is None or queries is None:
        missing = [name for name, p in (("corpus.jsonl", corpus), ("queries.jsonl", queries)) if p is None]
        raise data_error(folder, None, f"a retrieval set (BEIR's layout) needs {' and '.join(missing)} beside its "
                         "relevance file")
    return corpus, queries, qrels_file


def is_retrieval_set(path: str | os.PathLike) -> bool:
    """Whether `path` names a retrieval set (a BEIR folder, or a qrels file in one)."""
    try:
        return retrieval_files(path) is not None
    except DataError:
        return True  # one, but broken: reading it says how


def _texts(path: Path, joined: bool) -> dict[str, str]:
    """id -> text of a corpus.jsonl / queries.jsonl file (`joined`: title and text joined, when there is a title)."""
    out: dict[str, str] = {}
    for line, obj in iter_jsonl(path):
        ident = require_field(path, line, obj, "_id")
        if isinstance(ident, bool) or not isinstance(ident, (str, int)):
            raise data_error(path, line, f"field '_id' is {shown(ident)}; expected a string or an integer id")
        text = check_text(path, line, "text", require_field(path, line, obj, "text"))
        title = obj.get("title")
        if joined and title:
            text = f"{check_text(path, line, 'title', title)} {text}".strip()
        if str(ident) in out:
            raise data_error(path, line, f"id {str(ident)!r} is given twice")
        out[str(ident)] = text
    if not out:
        raise data_error(path, None, "no entries (the file is empty)")
    return out


def read_retrieval_set(path: str | os.PathLike) -> RetrievalSet:
    """The retrieval set `path` names (the module's layout); a DataError naming the file and line of anything
    malformed: a missing file or field, an id given twice, a judgement naming an unknown query or document."""
    files = retrieval_files(path)
    if files is None:
        raise data_error(path, None, "not a retrieval set: expected a folder holding corpus.jsonl, queries.jsonl and "
                         "qrels.tsv or qrels/<split>.tsv (BEIR's layout), or a qrels file in one")
    corpus_file, queries_file, qrels_file = files
    corpus, queries = _texts(corpus_file, joined=True), _texts(queries_file, joined=False)
    relevant: dict[str, set[str]] = {}
    rows = iter_table(qrels_file, header=True, delimiter="\t")
    line, header = next(rows, (0, []))
    if tuple(header[:2]) != QRELS_HEADER[:2] or len(header) != 3:
        raise data_error(qrels_file, line or None, f"expected the header {' | '.join(QRELS_HEADER)} (tab-separated)")
    for line, (query, doc, score) in rows:
        for ident, ids, what, where in ((query, queries, "query", queries_file),
                                        (doc, corpus, "document", corpus_file)):
            if ident not in ids:
                raise data_error(qrels_file, line, f"{what} id {ident!r} is not in {where}")
        try:
            value = float(score)
        except ValueError:
            raise data_error(qrels_file, line, f"score {score!r} is not a number") from None
        if value > 0:
            relevant.setdefault(query, set()).add(doc)
    if not relevant:
        raise data_error(qrels_file, None, "no query has a relevant document (a score > 0)")
    return RetrievalSet({q: queries[q] for q in queries if q in relevant}, corpus, relevant)


__all__ = ["RetrievalSet", "is_retrieval_set", "read_retrieval_set", "retrieval_files"]
