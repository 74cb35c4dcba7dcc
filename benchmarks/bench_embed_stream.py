"""Embedding a stream of new texts, as `bertkit embed` does a large file: tokens/s when every batch is new to the
process, against the same batches seen before, for the Encoder's linear layers on the packed real tokens, on
every position of the padded batch, or as the Encoder chooses batch by batch (auto: padded where the padding is
small, in bf16 on a CPU).

Under bf16 on a CPU PyTorch multiplies with oneDNN, which builds (JIT-compiles) a kernel for each new matrix shape.
Packed, the row count of a batch's products is its real token count, new in nearly every batch; padded, it is count
x width (widths in steps of 16), which repeats. The best-of-rounds figures of bench_embed.py run the same batches
again and hide that cost; this measures it. Each execution runs in its own process (a fresh kernel cache), the two in
turns, `--rounds` times:

    python benchmarks/bench_embed_stream.py [--precision bf16] [--chunk 400] [--chunks 10] [--rounds 2]
        [--threads 2] [--json OUT]

Texts (`--texts`): WikiText-2 validation then test paragraphs, or SST-2 training sentences (short texts), cut into
chunks of `--chunk`; each chunk is encoded once in order (the stream), then the first `--again` chunks once more
(seen shapes). Model: all-MiniLM-L6-v2, max 256 tokens.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import DATA, MAX_LEN, cpu_line, minilm_dir, wikitext_paragraphs

EXECUTIONS = ("packed", "padded", "auto")  # auto: the Encoder's own choice, batch by batch (runs_padded)


def stream_texts(data: Path, chunk: int, chunks: int | None, kind: str = "wikitext") -> list[list[str]]:
    """WikiText-2 validation then test paragraphs, or SST-2 training sentences, in chunks of `chunk` texts (whole
    chunks only)."""
    if kind == "sst2":
        from task_text import sst2_sentences

        texts = sst2_sentences(data / "sst2" / "train.tsv")
    else:
        texts = [t for name in ("valid.txt", "test.txt") for t in wikitext_paragraphs(data / "wikitext2" / name)]
    out = [texts[i : i + chunk] for i in range(0, len(texts) - chunk + 1, chunk)]
    return out[:chunks] if chunks else out


def run_one(args: argparse.Namespace) -> dict[str, Any]:
    """One process's measurement: every chunk once, then the first `again` chunks again."""
    import warnings

    import torch

    from bertkit.inference.encoder import Encoder
    from bertkit.model.execution import Execution

    torch.set_num_threads(args.threads)
    enc = Encoder(minilm_dir(), precision=args.precision, max_length=MAX_LEN, device="cpu")
    if args.execution != "auto":  # every batch one way, instead of the Encoder's choice per batch
        forced = Execution(unpadded=args.execution == "packed")
        enc.batch_plan = lambda lengths, width: forced  # type: ignore[method-assign]
    chunks = stream_texts(Path(args.data), args.chunk, args.chunks, args.texts)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # texts cut at MAX_LEN tokens
        ids = [enc.tokenize(c) for c in chunks]

    def timed(i: int) -> float:
        start = time.perf_counter()
        enc.encode_ids(ids[i])
        return time.perf_counter() - start

    first = [timed(i) for i in range(len(ids))]
    again = [timed(i) for i in range(min(args.again, len(ids)))]
    return {"execution": args.execution, "tokens": [sum(len(x) for x in c) for c in ids], "first": first,
            "again": again}


def summary(run: dict[str, Any], again: int) -> dict[str, float]:
    """tokens/s of the whole first pass, of its last `again` chunks, and of the first `again` chunks seen again."""
    tok, first, seen = run["tokens"], run["first"], run["again"]
    return {"stream": sum(tok) / sum(first), "stream_last": sum(tok[-again:]) / sum(first[-again:]),
            "seen": sum(tok[: len(seen)]) / sum(seen)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--precision", default="bf16", choices=("fp32", "bf16"))
    parser.add_argument("--texts", default="wikitext", choices=("wikitext", "sst2"), help="the stream's texts")
    parser.add_argument("--chunk", type=int, default=400, help="texts per chunk (default %(default)s)")
    parser.add_argument("--chunks", type=int, default=None, help="chunks in the stream (default: all)")
    parser.add_argument("--again", type=int, default=3, help="chunks encoded a second time (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=2, help="processes per execution, in turns (%(default)s)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--data", default=str(DATA))
    parser.add_argument("--json", type=Path, default=None, help="write every process's figures here")
    parser.add_argument("--execution", choices=EXECUTIONS, default=None, help=argparse.SUPPRESS)  # one process
    args = parser.parse_args()
    if args.chunk < 1 or args.again < 1 or args.rounds < 1 or (args.chunks is not None and args.chunks < 1):
        raise SystemExit("--chunk, --chunks, --again and --rounds: expected integers >= 1")
    if args.execution is not None:
        print(json.dumps(run_one(args)))
        return
    if not stream_texts(Path(args.data), args.chunk, args.chunks, args.texts):
        raise SystemExit(f"{args.data}/wikitext2: fewer than --chunk {args.chunk} paragraphs")
    print(cpu_line())
    print(f"{args.texts}, all-MiniLM-L6-v2, {args.precision}, max {MAX_LEN} tokens, {args.threads} threads, chunks of "
          f"{args.chunk} texts; each execution in its own process, {args.rounds} rounds in turns")
    runs = []
    for r in range(args.rounds):
        for execution in EXECUTIONS:
            cmd = [sys.executable, __file__, "--execution", execution] + sys.argv[1:]
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"{execution} run failed:\n{done.stderr[-2000:]}")
            run = json.loads(done.stdout.strip().splitlines()[-1])
            run["round"] = r + 1
            run.update(summary(run, args.again))
            runs.append(run)
            print(f"round {r + 1} {execution}: stream {run['stream']:,.0f} tok/s (last {args.again} chunks "
                  f"{run['stream_last']:,.0f}), seen again {run['seen']:,.0f}", flush=True)
    best = {e: {k: max(r[k] for r in runs if r["execution"] == e) for k in ("stream", "stream_last", "seen")}
            for e in EXECUTIONS}
    print("\n| execution | stream tok/s | last chunks of the stream | seen again | seen / stream |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for e in EXECUTIONS:
        b = best[e]
        print(f"| {e} | {b['stream']:,.0f} | {b['stream_last']:,.0f} | {b['seen']:,.0f} | "
              f"{b['seen'] / b['stream']:.2f}x |")
    ratio = {e: {k: best[e][k] / best["packed"][k] for k in ("stream", "stream_last", "seen")} for e in EXECUTIONS}
    for e in EXECUTIONS[1:]:
        print(f"{e} / packed: stream {ratio[e]['stream']:.2f}x, last chunks {ratio[e]['stream_last']:.2f}x, "
              f"seen {ratio[e]['seen']:.2f}x (best round of each)")
    if args.json:
        args.json.write_text(json.dumps({"cpu": cpu_line(), "texts": args.texts, "precision": args.precision,
                                         "chunk": args.chunk,
                                         "threads": args.threads, "again": args.again, "runs": runs, "best": best,
                                         "over_packed": ratio}, indent=1) + "\n")


if __name__ == "__main__":
    main()
