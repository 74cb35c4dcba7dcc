"""A vector index over an embeddings folder (FAISS, `pip install 'bertkit[index]'`): what `bertkit index` writes and
`bertkit search` and the server's /search read.

    DIR/index.faiss   the FAISS index, inner-product metric (cosine on normalised embeddings)
    DIR/rows.jsonl    row i's {"id": ..., "text": ...} (line i), read by seeking to offsets[i]: memory holds the
    DIR/offsets.npy   vectors, not the corpus
    DIR/index.json    written last (`bertkit.io.seal`): the kind and its parameters, the row count, the embedding
                      settings of the folder it was built from (model identity, pooling, normalisation, precision,
                      length, dim), against which the query encoder is checked on load, and the size and sha256 of
                      the three files above, checked when the index is opened

A build (an --overwrite too) removes index.json before it writes anything, so an interrupted one leaves a folder that
says it is incomplete, never new rows beside old vectors.

Kinds: `exact` (IndexFlatIP: every vector scored, the reference), `hnsw` (a graph: M links per vector, efConstruction
when built, efSearch when searched) and `ivf` (vectors in `nlist` k-means cells, `nprobe` cells scanned per query;
with `pq_m` > 0 stored as product-quantised codes of pq_m x pq_bits bits, IVF-PQ, else whole).
"""

from __future__ import annotations

import json
import math
import os
from array import array
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bertkit.dataclass_io import Config, check_value, spec
from bertkit.errors import CheckpointError, ConfigError
from bertkit.io import (
    atomic_open,
    atomic_path,
    check_file,
    check_output_dir,
    folder_lock,
    read_json_object,
    record_field,
    remove_stale_temp_files,
    seal,
    sealed_entries,
    unseal,
)
from bertkit.inference.vector_store import Embeddings, check_same_settings, embedding_settings

if TYPE_CHECKING:  # the encoder (torch) is imported where queries are embedded: IndexOptions reads without it
    from bertkit.inference.encoder import Encoder, Encoders

INDEX_FILE, META_FILE, ROWS_FILE, OFFSETS_FILE = "index.faiss", "index.json", "rows.jsonl", "offsets.npy"
KINDS = ("exact", "hnsw", "ivf")
MAX_CANDIDATES = 2**16  # hnsw's efConstruction / efSearch: beyond any useful recall/speed trade
MAX_DIM = 2**16  # an embedding's width (BertConfig's hidden size bound)
FORMAT = "bertkit-index"
VERSION = 2
"""2: index.json lists its files' sizes and sha256; a version 1 folder (which did not) is refused: built again."""


def import_faiss() -> Any:
    """The faiss module, or a ConfigError saying how to install it."""
    try:
        import faiss
    except ImportError as e:
        raise ConfigError(f"vector indexes need FAISS: pip install 'bertkit[index]' (faiss-cpu) ({e})") from None
    return faiss


@dataclass
class IndexOptions(Config):
    """The kind of index and its parameters (`bertkit index`'s options)."""

    kind: str = spec("exact", choices=KINDS)
    """exact (every vector scored), hnsw (a graph) or ivf (k-means cells; IVF-PQ with pq_m > 0)."""
    hnsw_m: int = spec(32, ge=2, le=512)
    """hnsw: links per vector (more: better recall, more memory, slower build)."""
    ef_construction: int = spec(80, ge=1, le=MAX_CANDIDATES)
    """hnsw: candidates kept while building."""
    ef_search: int = spec(64, ge=1, le=MAX_CANDIDATES)
    """hnsw: candidates kept while searching (the recall/speed dial; a search may change it)."""
    nlist: int = spec(1024, ge=1, le=2**24)
    """ivf: k-means cells (about sqrt(rows) to 4 sqrt(rows))."""
    nprobe: int = spec(16, ge=1, le=2**24)
    """ivf: cells scanned per query (the recall/speed dial; a search may change it)."""
    pq_m: int = spec(0, ge=0, le=MAX_DIM)
    """ivf: product-quantiser sub-vectors per vector (must divide dim); 0 keeps whole vectors (IVF-Flat)."""
    pq_bits: int = spec(8, ge=1, le=16, why="FAISS trains 2**pq_bits centroids per sub-vector")
    """ivf with pq_m > 0: bits per sub-vector code."""
    train_size: int = spec(100_000, ge=1, le=10**9)
    """ivf: vectors the k-means (and PQ) training sees at most, spread evenly over the rows."""

    def check(self, dim: int) -> None:
        """ConfigError when the options do not fit embeddings of this dimension (each field alone is checked by
        its spec)."""
        if self.pq_m and dim % self.pq_m:
            raise ConfigError(f"IndexOptions.pq_m: expected a divisor of the embeddings' dimension {dim}, found "
                              f"{self.pq_m}")


def _new_index(options: IndexOptions, dim: int) -> Any:
    faiss = import_faiss()
    if options.kind == "exact":
        return faiss.IndexFlatIP(dim)
    if options.kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, options.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = options.ef_construction
        return index
    quantizer = faiss.IndexFlatIP(dim)
    if options.pq_m:
        return faiss.IndexIVFPQ(quantizer, dim, options.nlist, options.pq_m, options.pq_bits,
                                faiss.METRIC_INNER_PRODUCT)
    return faiss.IndexIVFFlat(quantizer, dim, options.nlist, faiss.METRIC_INNER_PRODUCT)


def _training_sample(store: Embeddings, size: int) -> np.ndarray:
    """At most `size` rows spread evenly over the store (every step-th row), as float32."""
    step = max(1, -(-store.rows // size))
    parts, start = [], 0
    for matrix in store.iter_matrices():
        first = (-start) % step
        parts.append(matrix[first::step])
        start += matrix.shape[0]
    return np.ascontiguousarray(np.concatenate(parts))


def build_index(embeddings: str | os.PathLike, output: str | os.PathLike, options: IndexOptions,
                overwrite: bool = False) -> dict[str, Any]:
    """Index every row of an embeddings folder into `output` (see the module's docstring); returns index.json."""
    store = Embeddings(embeddings)
    dim = store.dim
    options.check(dim)
    out = check_output_dir(output, overwrite)
    index = _new_index(options, dim)
    if options.kind == "ivf":
        sample = _training_sample(store, options.train_size)
        if sample.shape[0] < options.nlist:
            raise ConfigError(f"{embeddings}: {sample.shape[0]} rows to train {options.nlist} cells; use a smaller "
                              "--nlist (about sqrt(rows)) or the exact kind")
        index.train(sample)
    for matrix in store.iter_matrices():
        index.add(np.ascontiguousarray(matrix))
    with folder_lock(out):
        unseal(out, META_FILE)  # first: until the new index.json lands, no reader pairs new rows with old vectors
        remove_stale_temp_files(out, min_age_s=0)  # an interrupted build's (their writers are dead: we hold the lock)
        offsets = array("q")
        with atomic_open(out / ROWS_FILE, "wb") as f:
            for row in store.iter_rows():
                offsets.append(f.tell())
                f.write(json.dumps(row, ensure_ascii=False).encode("utf-8") + b"\n")
        with atomic_open(out / OFFSETS_FILE, "wb") as f:
            np.save(f, np.frombuffer(offsets, dtype=np.int64) if offsets else np.zeros(0, np.int64))
        faiss = import_faiss()
        with atomic_path(out / INDEX_FILE) as tmp:
            faiss.write_index(index, str(tmp))
        meta = {"format": FORMAT, "version": VERSION, "rows": int(index.ntotal), "dim": dim,
                "metric": "inner_product", "options": asdict(options), "embeddings": str(embeddings),
                "settings": store.settings}
        return seal(out, META_FILE, meta, [INDEX_FILE, ROWS_FILE, OFFSETS_FILE])


_KIND_CLASSES = {"exact": lambda faiss: faiss.IndexFlat, "hnsw": lambda faiss: faiss.IndexHNSW,
                 "ivf": lambda faiss: faiss.IndexIVF}
"""The FAISS class every index of a kind is an instance of (`_new_index` builds them)."""


def _recorded_options(meta: dict[str, Any], dim: int, where: Path) -> IndexOptions:
    """index.json's options, each a field of IndexOptions with a valid value; else a CheckpointError naming it."""
    recorded = record_field(meta, "options", dict, where)
    unknown = sorted(set(recorded) - {f.name for f in fields(IndexOptions)})
    if unknown:
        raise CheckpointError(f"{where}: unknown index options {', '.join(map(repr, unknown))}")
    try:
        options = IndexOptions(**recorded)
        options.check(dim)
    except (ConfigError, TypeError, ValueError) as e:
        raise CheckpointError(f"{where}: options: {e}") from None
    if options.kind not in _KIND_CLASSES:
        raise CheckpointError(f"{where}: kind {options.kind!r}; expected one of {', '.join(_KIND_CLASSES)}")
    return options


class VectorIndex:
    """An index folder opened for search: `search(vectors, k)` -> (scores, rows), `row(i)` -> {"id", "text"}."""

    def __init__(self, folder: str | os.PathLike) -> None:
        self.folder = Path(folder)
        where = self.folder / META_FILE
        if not where.is_file():
            raise CheckpointError(f"{self.folder}: no {META_FILE}; expected a folder written by `bertkit index`")
        self.meta = read_json_object(where)
        if self.meta.get("format") != FORMAT:
            raise CheckpointError(f"{where}: format {self.meta.get('format')!r}; expected {FORMAT!r}")
        if self.meta.get("version") != VERSION:
            raise CheckpointError(f"{where}: version {self.meta.get('version')!r}, which records no sha256 of the "
                                  "index's files, so nothing shows that its rows belong with its vectors; build it "
                                  f"again: bertkit index EMBEDDINGS -o {self.folder} --overwrite")
        files = sealed_entries(self.meta, where, (INDEX_FILE, ROWS_FILE, OFFSETS_FILE))
        rows, dim = record_field(self.meta, "rows", int, where), record_field(self.meta, "dim", int, where)
        self.settings: dict[str, Any] = record_field(self.meta, "settings", (dict, type(None)), where) or {}
        self.options = _recorded_options(self.meta, dim, where)
        # Every file checked against its sha256 in index.json before it is used (measured: about 1 s per GB read)
        faiss = import_faiss()
        try:
            self.index = faiss.read_index(str(check_file(self.folder, files[INDEX_FILE], where)))
        except RuntimeError as e:
            raise CheckpointError(f"{self.folder / INDEX_FILE}: not a FAISS index ({str(e).splitlines()[0]})") from None
        try:
            self.offsets = np.load(check_file(self.folder, files[OFFSETS_FILE], where), mmap_mode="r",
                                   allow_pickle=False)
        except ValueError as e:
            raise CheckpointError(f"{self.folder / OFFSETS_FILE}: not a .npy array ({e})") from None
        check_file(self.folder, files[ROWS_FILE], where)
        if self.index.ntotal != rows or self.offsets.shape != (rows,) or self.index.d != dim:
            raise CheckpointError(f"{self.folder}: {self.index.ntotal} vectors of width {self.index.d} and "
                                  f"{len(self.offsets)} rows; {META_FILE} says {rows} of width {dim}")
        if not isinstance(self.index, _KIND_CLASSES[self.options.kind](faiss)):
            raise CheckpointError(f"{self.folder / INDEX_FILE}: a {type(self.index).__name__}; {META_FILE} says "
                                  f"kind {self.options.kind!r}")
        self._rows = open(self.folder / ROWS_FILE, "rb")  # noqa: SIM115 (kept open for the index's life)
        self.set_search_options()

    def set_search_options(self, ef_search: int | None = None, nprobe: int | None = None) -> None:
        """The recall/speed dial of an approximate index (the built values where None), each checked against its
        IndexOptions spec (0 or a negative count is an error, not "the default")."""
        ef_search = self.options.ef_search if ef_search is None else check_value(IndexOptions, "ef_search", ef_search)
        nprobe = self.options.nprobe if nprobe is None else check_value(IndexOptions, "nprobe", nprobe)
        if self.options.kind == "hnsw":
            self.index.hnsw.efSearch = ef_search
        elif self.options.kind == "ivf":
            self.index.nprobe = nprobe

    @property
    def dim(self) -> int:
        return int(self.meta["dim"])

    def __len__(self) -> int:
        return int(self.meta["rows"])

    def search(self, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The k best rows of each query vector by inner product: (scores, rows), each (queries, min(k, rows)): a
        k beyond the index's rows gives every row (FAISS would allocate k slots per query first: 1e9 of them took
        all of a 23 GB machine); a row of -1 (score -inf) where an approximate index finds fewer."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self.dim:
            raise ConfigError(f"query vectors of shape {vectors.shape}; this index holds {self.dim}-dimensional ones")
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ConfigError(f"k must be an integer >= 1, got {k!r}")
        return self.index.search(vectors, max(1, min(int(k), len(self))))

    def row(self, i: int) -> dict[str, Any]:
        """Row i's {"id", "text"}."""
        self._rows.seek(int(self.offsets[i]))
        return json.loads(self._rows.readline())

    def results(self, scores: np.ndarray, rows: np.ndarray) -> list[list[dict[str, Any]]]:
        """Per query, its hits as {"rank", "row", "id", "score", "text"} (the missing ones left out); a
        CheckpointError naming the row when a hit's score is not finite (its vector holds NaN or inf), since such a
        score is no ranking and no JSON number."""
        out = []
        for q, (query_scores, query_rows) in enumerate(zip(scores, rows)):
            hits = []
            for rank, (score, i) in enumerate(zip(query_scores.tolist(), query_rows.tolist()), start=1):
                if i >= 0 and not math.isfinite(score):
                    raise CheckpointError(f"{self.folder}: row {i} scores {score} for query {q}: its vector is not "
                                          "finite; index embeddings whose shards hold only finite numbers")
                if i >= 0:
                    hits.append({"rank": rank, "row": i, **self.row(i), "score": score})
            out.append(hits)
        return out

    def close(self) -> None:
        self._rows.close()


def query_encoder(index: VectorIndex, model: str | os.PathLike | None = None, device: Any = None,
                  encoders: Encoders | None = None) -> Encoder:
    """The Encoder that embeds queries as the index's rows were embedded: the index's model (or `model`, which must
    be the same files; `encoders`, that model's loaded Encoders, if it is open already) with its pooling,
    normalisation, precision and length; a ConfigError naming what differs."""
    if not index.settings:
        raise ConfigError(f"index {index.folder}: built from a bare .npy matrix, which records no model or "
                          "settings; build it from a `bertkit embed -o DIR` folder to search it with text queries")
    from bertkit.inference.encoder import Encoder

    model = model or index.settings["model"]
    precision, max_length = index.settings["precision"], index.settings["max_length"]
    encoder = (encoders.get(precision, max_length, device) if encoders is not None
               else Encoder(model, precision=precision, max_length=max_length, device=device))
    check_same_settings(index.settings,
                        embedding_settings(model, encoder, index.settings["pooling"], index.settings["normalize"]),
                        f"index {index.folder}", f"embed and index the corpus again with {model}, or search with the "
                        f"model it was built with ({index.settings['model']})")
    return encoder


def embed_queries(index: VectorIndex, encoder: Encoder, queries: list[str], batch_size: int = 32) -> np.ndarray:
    """The queries' vectors, pooled and normalised as the index's rows."""
    return encoder.encode(queries, pooling=index.settings["pooling"], normalize=index.settings["normalize"],
                          batch_size=batch_size).numpy()


__all__ = ["INDEX_FILE", "KINDS", "IndexOptions", "VectorIndex", "build_index", "embed_queries", "import_faiss",
           "query_encoder"]
