"""`prepare_pretraining`: raw text files -> a folder of shards + index, streaming, with parallel workers.

The main process reads documents (bounded memory: one chunk pending per worker, twice over) and cuts the
stream into chunks (`iter_chunks`, independent of the worker count). Chunk k becomes shard k, built by
`build_shard` with an RNG derived from (seed, k) alone, so the output is byte-identical whatever `workers`.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import random
import resource
import shutil
import sys
from collections import Counter
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol, Sequence

import numpy as np

from bertkit.data.config import PretrainingDataConfig
from bertkit.data.corpus import Chunk, CorpusStats, expand_inputs, iter_chunks, iter_documents
from bertkit.data.pretraining import VocabInfo, create_instances
from bertkit.data.shards import (
    FORMAT_NAME,
    FORMAT_VERSION,
    INDEX_FILE,
    ShardArrays,
    shard_file_name,
    token_dtype,
    write_shard,
)
from bertkit.dataclass_io import Config, check_value, spec
from bertkit.errors import DataError
from bertkit.io import make_dir, seal, unseal

CONFIG_FILE = "data_config.json"
TOKENIZER_DIR = "tokenizer"


class TokenizerLike(Protocol):
    """What preparation needs from a tokenizer (bertkit.tokenizer.BertTokenizer has it)."""

    vocab: dict[str, int]

    def tokenize(self, text: str) -> list[str]: ...

    def convert_tokens_to_ids(self, tokens: list[str]) -> list[int]: ...


@dataclass
class ShardStats:
    """Counts from building one shard (summed over shards in the summary)."""

    documents: int = 0
    sentences: int = 0
    single_sentence_documents: int = 0  # fewer than 2 non-empty sentences after tokenization: skipped
    empty_sentences: int = 0  # sentences with no token (e.g. only control characters): dropped
    truncated_sentences: int = 0  # sentences longer than max_length - 3 tokens: cut to that length
    unpaired_documents: int = 0  # documents of a chunk with no other document to draw a random B from
    unpaired_last_sentences: int = 0  # balanced_nsp: a document's lone last sentence, no instance made
    instances: int = 0
    tokens: int = 0
    random_next: int = 0
    masked: int = 0

    def merge(self, other: "ShardStats") -> None:
        """Add another stats object's counts into this one."""
        for k, v in vars(other).items():
            setattr(self, k, getattr(self, k) + v)


def shard_rng(seed: int, shard_index: int) -> random.Random:
    """The RNG of one shard, a function of (seed, shard index) only."""
    digest = hashlib.sha256(f"bertkit-pretraining:{seed}:{shard_index}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "little"))


def tokenize_documents(documents: Sequence[Sequence[str]], tokenizer: TokenizerLike, max_num_tokens: int,
                       stats: ShardStats, min_sentences: int = 2) -> list[list[list[int]]]:
    """Token ids of each sentence; empty sentences dropped, long ones cut, documents left with fewer than
    `min_sentences` skipped (a sentence pair needs 2; packed full sentences need 1)."""
    out: list[list[list[int]]] = []
    for doc in documents:
        sentences: list[list[int]] = []
        for text in doc:
            ids = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(text))
            if not ids:
                stats.empty_sentences += 1
                continue
            if len(ids) > max_num_tokens:
                stats.truncated_sentences += 1
                ids = ids[:max_num_tokens]
            sentences.append(ids)
        if len(sentences) < min_sentences:
            stats.single_sentence_documents += 1
            continue
        stats.documents += 1
        stats.sentences += len(sentences)
        out.append(sentences)
    return out


def build_shard_arrays(documents: Sequence[Sequence[Sequence[int]]], config: PretrainingDataConfig, vocab: VocabInfo,
                       rng: random.Random, stats: ShardStats) -> ShardArrays:
    """Create the instances of a chunk of tokenized documents and pack them into shard arrays."""
    dtype = token_dtype(vocab.vocab_size)
    if len(documents) < 2 and config.next_sentence:
        stats.unpaired_documents += len(documents)
        documents = []
    counts: Counter = Counter()
    instances = create_instances(documents, config, vocab, rng, counts) if documents else []
    stats.unpaired_last_sentences += counts["unpaired_last_sentences"]
    n = len(instances)
    offsets = np.cumsum([0] + [len(x.input_ids) for x in instances], dtype=np.int64)
    arrays = ShardArrays(
        input_ids=np.fromiter((t for x in instances for t in x.input_ids), dtype=dtype, count=int(offsets[-1])),
        offsets=offsets,
        a_lengths=np.fromiter((x.a_length for x in instances), dtype=np.uint16, count=n),
        is_random_next=np.fromiter((x.is_random_next for x in instances), dtype=np.uint8, count=n),
    )
    if not config.dynamic_masking:
        arrays.mask_offsets = np.cumsum([0] + [len(x.masked_positions) for x in instances], dtype=np.int64)
        total = int(arrays.mask_offsets[-1])
        arrays.masked_positions = np.fromiter((p for x in instances for p in x.masked_positions), dtype=np.uint16,
                                              count=total)
        arrays.masked_labels = np.fromiter((t for x in instances for t in x.masked_labels), dtype=dtype, count=total)
        stats.masked += total
    stats.instances += len(instances)
    stats.tokens += int(offsets[-1])
    stats.random_next += int(arrays.is_random_next.sum())
    return arrays


# Per-worker state, set once by _init_worker (avoids pickling the tokenizer with every chunk).
_WORKER: dict[str, Any] = {}


def _init_worker(tokenizer: TokenizerLike, vocab: VocabInfo, config: PretrainingDataConfig, out_dir: str) -> None:
    _WORKER.update(tokenizer=tokenizer, vocab=vocab, config=config, out_dir=out_dir)


def _build_shard_task(chunk: Chunk) -> tuple[int, dict[str, Any], ShardStats, int]:
    """Tokenize a chunk, make its instances, write its shard; return (index, index entry, stats, peak RSS KiB)."""
    config: PretrainingDataConfig = _WORKER["config"]
    stats = ShardStats()
    docs = tokenize_documents(chunk.documents, _WORKER["tokenizer"], config.max_num_tokens, stats,
                              min_sentences=2 if config.next_sentence else 1)
    chunk.documents = []  # free the raw text
    arrays = build_shard_arrays(docs, config, _WORKER["vocab"], shard_rng(config.seed, chunk.index), stats)
    del docs
    entry = write_shard(Path(_WORKER["out_dir"]) / shard_file_name(chunk.index), arrays)
    return chunk.index, entry, stats, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


@dataclass
class PrepareResult:
    """What `prepare_pretraining` did: output folder, counts, shard entries and peak memory."""

    output_dir: Path
    corpus: CorpusStats
    shards: ShardStats
    num_shards: int
    peak_rss_mib: float  # the largest of the main process and its workers

    def summary(self) -> dict[str, Any]:
        """Flat dict for printing."""
        return {
            **{f"corpus.{k}": v for k, v in vars(self.corpus).items()},
            **{f"shards.{k}": v for k, v in vars(self.shards).items()},
            "num_shards": self.num_shards,
            "peak_rss_mib": round(self.peak_rss_mib, 1),
        }


def _save_tokenizer(tokenizer: TokenizerLike, folder: Path) -> None:
    """Keep the tokenizer next to the data (its own folder, or at least its vocab.txt) for consistency checks."""
    if hasattr(tokenizer, "save_pretrained"):
        tokenizer.save_pretrained(folder)  # type: ignore[attr-defined]
        return
    make_dir(folder)
    by_id = sorted(tokenizer.vocab.items(), key=lambda kv: kv[1])
    from bertkit.io import atomic_write_text

    atomic_write_text(folder / "vocab.txt", "".join(t + "\n" for t, _ in by_id))


def vocab_fingerprint(vocab: dict[str, int]) -> str:
    """sha256 of the vocabulary in id order: two datasets/models agree on ids iff this matches."""
    h = hashlib.sha256()
    for token, _ in sorted(vocab.items(), key=lambda kv: kv[1]):
        h.update(token.encode("utf-8") + b"\n")
    return h.hexdigest()


@dataclass
class PrepareOptions(Config):
    """How the data is made, not what it is (`bertkit prepare-pretraining --workers`)."""

    workers: int = spec(1, ge=1, le=1024)
    """Parallel processes (the output does not depend on it)."""


def prepare_pretraining(inputs: Iterable[str | os.PathLike], output_dir: str | os.PathLike, tokenizer: TokenizerLike,
                        config: PretrainingDataConfig | None = None, workers: int = 1,
                        progress: Callable[[int, ShardStats], None] | None = None) -> PrepareResult:
    """Turn text files into a pre-training dataset folder (shards, index.json, data_config.json, tokenizer/).

    `progress(documents_read, shard_stats)` is called after each shard. The index is written last, so an
    interrupted run leaves no dataset that looks complete.
    """
    config = config or PretrainingDataConfig()
    workers = check_value(PrepareOptions, "workers", workers, "workers")
    vocab = VocabInfo.from_vocab(tokenizer.vocab, source=getattr(tokenizer, "name_or_path", "tokenizer vocabulary"))
    files = expand_inputs(inputs)
    out = Path(output_dir)
    make_dir(out)
    unseal(out, INDEX_FILE)  # the folder is no longer a complete dataset until the new index lands

    corpus = CorpusStats()
    docs = iter_documents(files, config.layout, config.on_bad_utf8, config.text_field, config.max_document_sentences,
                          corpus, min_sentences=2 if config.next_sentence else 1)
    chunks = iter_chunks(docs, config.chunk_documents, config.chunk_chars)
    entries: dict[int, dict[str, Any]] = {}
    totals = ShardStats()
    worker_rss = 0

    def collect(result: tuple[int, dict[str, Any], ShardStats, int]) -> None:
        nonlocal worker_rss
        idx, entry, stats, rss = result
        entries[idx] = entry
        totals.merge(stats)
        worker_rss = max(worker_rss, rss)
        if progress is not None:
            progress(corpus.documents, stats)

    if workers <= 1:
        _init_worker(tokenizer, vocab, config, str(out))
        for chunk in chunks:
            collect(_build_shard_task(chunk))
    else:
        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        with ProcessPoolExecutor(
            workers, mp_context=multiprocessing.get_context(method), initializer=_init_worker,
            initargs=(tokenizer, vocab, config, str(out)),
        ) as pool:
            pending: list[Future] = []
            for chunk in chunks:
                pending.append(pool.submit(_build_shard_task, chunk))
                del chunk
                while len(pending) >= 2 * workers:  # bounded: never more than 2 chunks per worker in memory
                    collect(pending.pop(0).result())
            for fut in pending:
                collect(fut.result())

    if totals.instances == 0 and not config.next_sentence:
        raise DataError(f"no pre-training instance could be made from {len(files)} file(s): no sentence with a "
                        f"token in them ({corpus.empty_files} empty file(s))")
    if totals.instances == 0:
        raise DataError(f"no pre-training instance could be made from {len(files)} file(s): {corpus.documents} "
                        f"document(s) with 2+ sentences, {corpus.single_sentence_documents} single-sentence "
                        f"document(s) skipped, {corpus.empty_files} empty file(s); next-sentence pairs need at least 2 "
                        "documents of 2+ sentences")

    shutil.rmtree(out / TOKENIZER_DIR, ignore_errors=True)  # an earlier preparation's files are not this one's
    _save_tokenizer(tokenizer, out / TOKENIZER_DIR)
    config.save(out / CONFIG_FILE)
    shard_list = [entries[i] for i in sorted(entries)]
    index = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "dynamic_masking": config.dynamic_masking,
        "next_sentence": config.next_sentence,
        "max_length": config.max_length,
        "vocab_size": vocab.vocab_size,
        "vocab_sha256": vocab_fingerprint(tokenizer.vocab),
        "token_dtype": token_dtype(vocab.vocab_size).str,
        "num_instances": totals.instances,
        "num_tokens": totals.tokens,
        "inputs": [str(p) for p in files],
        "stats": {"corpus": vars(corpus), "shards": vars(totals)},
        "data_config": config.to_dict(),
        "shards": shard_list,
    }
    # index.json lists the shards' sha256 and, under "files", those of the tokenizer and the data settings stored
    # beside them, so that a reader can tell them from files put there later (another tokenizer: other token ids)
    stored = [CONFIG_FILE] + sorted(f"{TOKENIZER_DIR}/{p.name}" for p in (out / TOKENIZER_DIR).iterdir()
                                    if p.is_file() and not p.name.startswith("."))
    seal(out, INDEX_FILE, index, stored)
    # shard files of an earlier, larger run in the same folder are not part of this dataset
    listed = {e["file"] for e in shard_list}
    for stale in out.glob("shard-*.bin"):
        if stale.name not in listed:
            stale.unlink()

    self_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    scale = 1.0 if sys.platform == "darwin" else 1024.0  # ru_maxrss is KiB on Linux, bytes on macOS
    peak = max(self_rss, worker_rss) * scale / 2**20
    return PrepareResult(out, corpus, totals, len(shard_list), peak)

