"""Retrieval with bertkit's embeddings and indexes (issue 28), three sections, each written to --json as it ends:

- `squad`: SQuAD v1.1 dev as retrieval: each of the 10,570 questions against the 2,067 unique paragraphs, the gold
  paragraph the one its question was asked about. For all-MiniLM-L6-v2 and bertkit-mini: the paragraphs embedded by
  `bertkit embed` (the job, into a folder; normalised, fp32), indexed by `bertkit index` (exact, HNSW, IVF), the
  questions embedded by the index's query encoder; recall@1/5/10 and MRR@10 of each index and of
  sentence-transformers' `util.semantic_search` on the same vectors (exact recall must be equal).
- `synthetic`: queries/s of exact (IndexFlatIP) and IVF search on a synthetic 1 M x 384 clustered, normalised
  index, and each IVF setting's recall@10 against exact's top 10; the ratio at the fastest setting within 2 points.
- `stream`: `bertkit embed` on files of --stream-lines lines (WikiText-2 lines, repeated) with a tiny random
  model, each in its own process: its peak RSS and texts/s (flat memory: the same peak for 10x the lines);
  then, on a subset with bertkit-mini, the streaming job against the
  in-memory path of the old verb (`bertkit.load(m).encode(all lines)`), interleaved repeats, texts/s ratio.

    python3 benchmarks/bench_retrieval.py --json docs/results/retrieval-epyc-avx2-2026-11-25.json
        [--sections squad,synthetic,stream] [--work /tmp/retrieval] [--rows 1000000] [--queries 1000]
        [--stream-lines 20000,2000000] [--parity-lines 5000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from common import cpu_line, minilm_dir

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
KS = (1, 5, 10)


def squad_pairs(path: Path) -> tuple[list[str], list[str], list[int]]:
    """(unique paragraphs, questions, each question's paragraph number)."""
    data = json.loads(path.read_text(encoding="utf-8"))["data"]
    paragraphs: dict[str, int] = {}
    questions, gold = [], []
    for article in data:
        for p in article["paragraphs"]:
            number = paragraphs.setdefault(p["context"], len(paragraphs))
            for qa in p["qas"]:
                questions.append(qa["question"])
                gold.append(number)
    return list(paragraphs), questions, gold


def retrieval_metrics(rows: np.ndarray, gold: list[int]) -> dict[str, float]:
    """recall@1/5/10 and MRR@10 of ranked row numbers (queries, >= 10) against each query's gold row."""
    hit = rows[:, :10] == np.asarray(gold)[:, None]
    out = {f"recall@{k}": float(hit[:, :k].any(axis=1).mean()) for k in KS}
    first = np.where(hit.any(axis=1), hit.argmax(axis=1) + 1, np.inf)
    out["mrr@10"] = float((1.0 / first).mean())
    return out


def squad_section(work: Path, repeats: int) -> dict[str, Any]:
    import torch
    from sentence_transformers import util

    from bertkit.inference.index import IndexOptions, VectorIndex, build_index, embed_queries, query_encoder
    from bertkit.jobs.embed import EmbedConfig
    from bertkit.jobs.embed import run as embed

    paragraphs, questions, gold = squad_pairs(DATA / "squad_v1.1" / "dev-v1.1.json")
    corpus = work / "squad-paragraphs.jsonl"
    corpus.write_text("".join(json.dumps({"id": i, "text": p}) + "\n" for i, p in enumerate(paragraphs)))
    print(f"SQuAD v1.1 dev: {len(questions)} questions, {len(paragraphs)} unique paragraphs", flush=True)
    kinds = {"exact": IndexOptions(), "hnsw": IndexOptions(kind="hnsw", hnsw_m=32, ef_construction=80, ef_search=64),
             "ivf": IndexOptions(kind="ivf", nlist=64, nprobe=8, train_size=len(paragraphs))}
    results: dict[str, Any] = {}
    for name, model in (("all-MiniLM-L6-v2", minilm_dir()), ("bertkit-mini", "bertkit-mini")):
        folder = work / f"emb-{name}"
        start = time.perf_counter()
        embed(EmbedConfig(input=str(corpus), output=str(folder), model=model, normalize=True, precision="fp32",
                          id_field="id", shard_size=500, progress=False), resume=(folder / "embed.json").is_file())
        embed_s = time.perf_counter() - start
        row: dict[str, Any] = {"embed_paragraphs_s": embed_s}
        q_vectors = None
        for kind, options in kinds.items():
            target = work / f"index-{name}-{kind}"
            start = time.perf_counter()
            build_index(folder, target, options, overwrite=True)
            build_s = time.perf_counter() - start
            index = VectorIndex(target)
            if q_vectors is None:
                encoder = query_encoder(index)
                start = time.perf_counter()
                q_vectors = embed_queries(index, encoder, questions)
                row["embed_questions_s"] = time.perf_counter() - start
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                _, ranked = index.search(q_vectors, 10)
                times.append(time.perf_counter() - start)
            row[kind] = {**retrieval_metrics(ranked, gold), "build_s": build_s,
                         "queries_per_s": len(questions) / min(times), "options": vars(options)}
            index.close()
            print(f"{name} {kind}: {row[kind]}", flush=True)
        matrix = torch.from_numpy(VectorIndex(work / f"index-{name}-exact").index.reconstruct_n(0, len(paragraphs)))
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            hits = util.semantic_search(torch.from_numpy(q_vectors), matrix, top_k=10)
            times.append(time.perf_counter() - start)
        ranked_st = np.array([[h["corpus_id"] for h in q] for q in hits])
        row["sentence-transformers"] = {**retrieval_metrics(ranked_st, gold),
                                        "queries_per_s": len(questions) / min(times)}
        row["exact_recall_equals_st"] = all(row["exact"][k] == row["sentence-transformers"][k]
                                            for k in ("recall@1", "recall@5", "recall@10"))
        print(f"{name} sentence-transformers: {row['sentence-transformers']}; exact recall equal: "
              f"{row['exact_recall_equals_st']}", flush=True)
        results[name] = row
    return {"questions": len(questions), "paragraphs": len(paragraphs), "models": results}


def clustered(rows: int, dim: int, clusters: int, rng: np.random.Generator, noise: float = 1.0) -> np.ndarray:
    """Normalised points around `clusters` random centres (a corpus has topics; uniform noise has no neighbours)."""
    centres = rng.standard_normal((clusters, dim), dtype=np.float32)
    out = np.empty((rows, dim), np.float32)
    for start in range(0, rows, 100_000):
        n = min(100_000, rows - start)
        block = centres[rng.integers(0, clusters, n)] + noise * rng.standard_normal((n, dim), dtype=np.float32)
        out[start:start + n] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out


def synthetic_section(rows: int, queries: int, repeats: int) -> dict[str, Any]:
    import faiss

    dim, rng = 384, np.random.default_rng(0)
    data = clustered(rows + queries, dim, 2000, rng)
    base, q = data[:rows], np.ascontiguousarray(data[rows:])
    print(f"synthetic: {rows} x {dim}, {queries} queries, faiss {faiss.__version__}, "
          f"{faiss.omp_get_max_threads()} threads", flush=True)
    exact = faiss.IndexFlatIP(dim)
    exact.add(base)

    def timed(index: Any) -> tuple[float, np.ndarray]:
        best, ranked = float("inf"), None
        for _ in range(repeats):
            start = time.perf_counter()
            _, ranked = index.search(q, 10)
            best = min(best, time.perf_counter() - start)
        return queries / best, ranked

    exact_qps, truth = timed(exact)
    del exact
    out: dict[str, Any] = {"rows": rows, "dim": dim, "queries": queries, "exact_queries_per_s": exact_qps,
                           "exact_recall@10": 1.0, "ivf": []}
    print(f"exact: {exact_qps:.1f} queries/s", flush=True)
    nlist = 2048
    quantizer = faiss.IndexFlatIP(dim)
    ivf = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
    start = time.perf_counter()
    ivf.train(base[rng.choice(rows, min(rows, 64 * nlist), replace=False)])
    ivf.add(base)
    out["ivf_build_s"] = time.perf_counter() - start
    for nprobe in (1, 2, 4, 8, 16, 32):
        ivf.nprobe = nprobe
        qps, ranked = timed(ivf)
        recall = float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ranked.tolist(), truth.tolist())]))
        out["ivf"].append({"nlist": nlist, "nprobe": nprobe, "queries_per_s": qps, "recall@10": recall,
                           "speedup": qps / exact_qps})
        print(f"ivf nlist {nlist} nprobe {nprobe}: {qps:.1f} queries/s ({qps / exact_qps:.1f}x exact), "
              f"recall@10 {recall:.4f}", flush=True)
    within = [r for r in out["ivf"] if r["recall@10"] >= 0.98]
    out["best_within_2_points"] = max(within, key=lambda r: r["speedup"]) if within else None
    return out


def stream_section(work: Path, lines: list[int], parity_lines: int, repeats: int) -> dict[str, Any]:
    import torch

    import bertkit
    from bertkit.jobs.embed import EmbedConfig
    from bertkit.jobs.embed import run as embed
    from bertkit.model import BertConfig, BertModel

    source = [x.strip() for name in ("valid.txt", "test.txt")
              for x in (DATA / "wikitext2" / name).read_text(encoding="utf-8").splitlines()]
    source = [x[:200] for x in source if x and not x.startswith("=")]  # lines of up to 200 characters
    tiny = work / "tiny-model"
    if not tiny.is_dir():  # hidden 32, 2 layers, bertkit-mini's vocabulary: the streaming's cost, not the model's
        torch.manual_seed(0)
        BertModel(BertConfig(vocab_size=8192, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                             intermediate_size=37)).save_pretrained(str(tiny))
        mini = Path(bertkit.__file__).parent / "pretrained" / "bertkit-mini"
        for name in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
            shutil.copy(mini / name, tiny / name)
    result: dict[str, Any] = {"model": "random tiny (hidden 32, 2 layers, bertkit-mini's vocabulary)", "runs": []}
    for n in lines:  # each in its own process, which reports its own peak RSS
        big = work / f"lines-{n}.txt"
        with open(big, "w", encoding="utf-8") as f:
            for i in range(n):
                f.write(source[i % len(source)] + "\n")
        out_dir = work / "stream-out"
        shutil.rmtree(out_dir, ignore_errors=True)
        args = ["embed", str(big), "-o", str(out_dir), "--model", str(tiny), "--precision", "fp32", "--batch-size",
                "128"]
        code = ("import resource, sys\nfrom bertkit.cli import main\nrc = main(sys.argv[1:])\n"
                "print('peak_rss_kb', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
                "sys.exit(rc)")
        print("stream: bertkit", " ".join(args), flush=True)
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
        wall = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(done.stderr[-2000:])
        peak_kb = int(done.stderr.split("peak_rss_kb")[-1].split()[0])
        progress = [x for x in done.stderr.splitlines() if x.startswith("embed:")]
        run = {"lines": n, "input_mb": big.stat().st_size / 2**20, "peak_rss_mb": peak_kb / 1024, "wall_s": wall,
               "texts_per_s": n / wall, "progress_lines": progress[:1] + progress[-1:]}
        result["runs"].append(run)
        print(f"stream: {run}", flush=True)
        shutil.rmtree(out_dir, ignore_errors=True)
        big.unlink()
    if not parity_lines:
        return result
    # throughput parity on a subset, with bertkit-mini: the streaming job against the old in-memory verb
    subset = work / "parity.txt"
    subset.write_text("".join(source[i % len(source)] + "\n" for i in range(parity_lines)))
    old_times: list[float] = []
    new_times: list[float] = []

    def old_verb() -> np.ndarray:
        texts = subset.read_text(encoding="utf-8").splitlines()
        vectors = bertkit.load("bertkit-mini").encode(texts, batch_size=32, precision="fp32")
        np.save(work / "in-memory.npy", vectors)
        return vectors

    def streaming() -> None:
        embed(EmbedConfig(input=str(subset), output=str(work / "parity.npy"), model="bertkit-mini",
                          precision="fp32", progress=False))

    for i in range(repeats):  # each path end to end as the verb runs it (read, load, embed, save), in turn, the
        for path in ((old_verb, streaming) if i % 2 == 0 else (streaming, old_verb)):  # first one alternating
            start = time.perf_counter()
            out = path()
            (old_times if path is old_verb else new_times).append(time.perf_counter() - start)
            if out is not None:
                in_memory = out
    streamed = np.load(work / "parity.npy")
    result["parity"] = {"lines": parity_lines, "model": "bertkit-mini", "repeats": repeats,
                        "in_memory_s": old_times, "streaming_s": new_times,
                        "in_memory_texts_per_s": parity_lines / min(old_times),
                        "streaming_texts_per_s": parity_lines / min(new_times),
                        "streaming_over_in_memory": min(old_times) / min(new_times),
                        "max_abs_difference": float(np.abs(streamed - in_memory).max())}
    print(f"parity: {result['parity']}", flush=True)
    return result


def tables(report: dict[str, Any]) -> dict[str, Any]:
    """The report's tables (docs/generate.py renders them), from the sections it has."""
    out: dict[str, Any] = {}
    if "squad" in report:
        rows = []
        for model, r in report["squad"]["models"].items():
            for method in ("exact", "hnsw", "ivf", "sentence-transformers"):
                rows.append({"model": model, "method": {"exact": "bertkit exact", "hnsw": "bertkit HNSW",
                                                        "ivf": "bertkit IVF", "sentence-transformers":
                                                        "sentence-transformers util.semantic_search"}[method],
                             **{k.replace("@", "_at_"): v for k, v in r[method].items() if k != "options"}})
        pct = {"align": "right"}
        out["squad"] = {"columns": [{"title": "model", "template": "{model}"}, {"title": "search", "template": "{method}"},
                                    *({**pct, "title": f"recall@{k}", "template": f"{{recall_at_{k}:.4f}}"}
                                      for k in KS),
                                    {**pct, "title": "MRR@10", "template": "{mrr_at_10:.4f}"},
                                    {"title": "queries/s", "template": "{queries_per_s:,.0f}", "align": "right"}],
                        "rows": rows}
    if "synthetic" in report:
        syn = report["synthetic"]
        rows = [{"setting": "exact (IndexFlatIP)", "queries_per_s": syn["exact_queries_per_s"], "recall": 1.0,
                 "speedup": 1.0}]
        rows += [{"setting": f"IVF nlist {r['nlist']}, nprobe {r['nprobe']}", "queries_per_s": r["queries_per_s"],
                  "recall": r["recall@10"], "speedup": r["speedup"],
                  "_bold": ["speedup"] if r == syn.get("best_within_2_points") else []} for r in syn["ivf"]]
        out["synthetic"] = {"columns": [{"title": "search", "template": "{setting}"},
                                        {"title": "recall@10 vs exact", "template": "{recall:.4f}", "align": "right"},
                                        {"title": "queries/s", "template": "{queries_per_s:,.0f}", "align": "right"},
                                        {"title": "x exact", "key": "speedup", "template": "{speedup:.1f}x",
                                         "align": "right"}],
                            "rows": rows}
    if "stream" in report:
        st = report["stream"]
        out["stream"] = {"columns": [{"title": "lines", "template": "{lines:,}", "align": "right"},
                                     {"title": "input MB", "template": "{input_mb:.1f}", "align": "right"},
                                     {"title": "peak RSS MB", "template": "{peak_rss_mb:.0f}", "align": "right"},
                                     {"title": "texts/s (whole process)", "template": "{texts_per_s:,.0f}",
                                      "align": "right"}],
                         "rows": [{k: v for k, v in r.items() if k != "progress_lines"} for r in st["runs"]]}
        if not st["runs"]:
            del out["stream"]
        par = st.get("parity")
        if par is None:
            return out
        out["parity"] = {"columns": [{"title": "path", "template": "{path}"},
                                     {"title": "texts/s", "template": "{texts_per_s:,.1f}", "align": "right"},
                                     {"title": "x in-memory", "template": "{ratio:.3f}", "align": "right"}],
                         "rows": [{"path": "in memory (the old verb: read all lines, bertkit.load(m).encode, np.save)",
                                   "texts_per_s": par["in_memory_texts_per_s"], "ratio": 1.0},
                                  {"path": "streaming job (bertkit embed, shards of 10,000)",
                                   "texts_per_s": par["streaming_texts_per_s"],
                                   "ratio": par["streaming_over_in_memory"]}]}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-retrieval"))
    parser.add_argument("--sections", default="squad,synthetic,stream")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--stream-lines", default="20000,2000000",
                        help="line counts of the streaming runs, separated by commas (flat memory: equal peaks)")
    parser.add_argument("--parity-lines", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    print(cpu_line(), flush=True)
    report: dict[str, Any] = json.loads(args.json.read_text()) if args.json.is_file() else {}  # other sections kept
    report["cpu"] = cpu_line()
    report["command"] = " ".join(sys.argv)
    for section in args.sections.split(","):
        if section == "squad":
            report["squad"] = squad_section(args.work, args.repeats)
        elif section == "synthetic":
            report["synthetic"] = synthetic_section(args.rows, args.queries, args.repeats)
        elif section == "stream":
            report["stream"] = stream_section(args.work, [int(n) for n in args.stream_lines.split(",") if n], args.parity_lines, args.repeats)
        else:
            raise SystemExit(f"unknown section {section!r}")
        report["tables"] = tables(report)
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
