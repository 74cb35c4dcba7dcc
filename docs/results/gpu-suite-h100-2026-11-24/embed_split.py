"""Where sentence-embedding time goes on CUDA: tokenization alone against the whole encode, for bertkit (Encoder,
bf16) and sentence-transformers (fp16), on the GPU suite's WikiText-2 paragraphs (max 256 tokens). MiniLM's
architecture with random weights (throughput does not depend on the weights), best of 3.

    PYTHONPATH=benchmarks python3 docs/results/gpu-suite-h100-2026-11-24/embed_split.py --data DATA \
        --minilm MINILM_FOLDER       # on a CUDA machine, from the checkout's root (benchmarks/: its gpu_suite.py)

A probe of the GPU suite's report (docs/results/gpu-suite-h100-2026-11-24.md), kept beside it.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from gpu_suite import Suite, parse_args  # the suite this script splits the embed section of


def best_of(fn: Callable[[], object], rounds: int = 3) -> float:
    """The fastest of `rounds` timed calls, in seconds, with the GPU synchronised around each."""
    times = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    import shutil

    import transformers
    from sentence_transformers import SentenceTransformer

    try:  # sentence-transformers >= 6 moved the modules
        from sentence_transformers.sentence_transformer.modules import (
            Pooling,
            Transformer,
        )
    except ImportError:
        from sentence_transformers.models import Pooling, Transformer

    from bertkit.inference.encoder import Encoder
    from bertkit.tokenizer import BertTokenizer

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", required=True)
    p.add_argument("--minilm", required=True, help="all-MiniLM-L6-v2 folder (its config and vocabulary are used)")
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("embed_split.py needs a CUDA GPU")
    folder = Path(tempfile.mkdtemp(prefix="embed_split_"))
    for name in ("config.json", "vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (Path(args.minilm) / name).exists():
            shutil.copy(Path(args.minilm) / name, folder / name)
    torch.manual_seed(0)
    transformers.BertModel(transformers.BertConfig.from_pretrained(str(folder))).save_pretrained(str(folder))
    texts = Suite(parse_args(["--data", args.data, "--minilm", str(folder)])).paragraphs(2000)
    tok = BertTokenizer.from_pretrained(str(folder))
    real_tokens = sum(len(tok.encode(t, max_length=256).input_ids) for t in texts)
    ours = Encoder(folder, precision="bf16", device="cuda", max_length=256)
    transformer = Transformer(str(folder), max_seq_length=256)
    st = SentenceTransformer(modules=[transformer, Pooling(transformer.auto_model.config.hidden_size, "mean")],
                             device="cuda").half()
    rows = {
        "bertkit tokenize": lambda: tok(texts, max_length=256, truncation=True, padding="longest"),
        "bertkit encode": lambda: ours.encode(texts, pooling="mean", normalize=False),
        "sentence-transformers tokenize": lambda: transformer.tokenizer(texts, max_length=256, truncation=True,
                                                                        padding=True, return_tensors="pt"),
        "sentence-transformers encode": lambda: st.encode(texts, batch_size=128, convert_to_tensor=True),
    }
    print(f"{len(texts)} texts, {real_tokens:,} real tokens")
    for name, fn in rows.items():
        seconds = best_of(fn)
        print(f"{name:32} {seconds * 1000:8.1f} ms  ({real_tokens / seconds:,.0f} tokens/s)")


if __name__ == "__main__":
    main()
