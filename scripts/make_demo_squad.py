"""Make the demo's SQuAD v1.1 sample (src/bertkit/demo_data/squad_*.json.gz) from the official dev file.

    python3 scripts/make_demo_squad.py ../shared/data/squad_v1.1/dev-v1.1.json src/bertkit/demo_data

Only the dev file of SQuAD v1.1 is at hand, so it is split by article as ../shared/data/README.md prescribes:
articles 0-37 are the training side, articles 38-47 (10 articles, 1,988 questions) the evaluation side. The
training sample is a seeded draw of whole paragraphs (every question of a drawn paragraph kept, articles and
paragraphs in their original order) until it holds TRAIN_QUESTIONS questions; the evaluation side is kept whole.
The output is deterministic: the same input gives byte-identical files (gzip with no timestamp), which
tests/jobs/test_demo.py checks against the shipped files when the input is present.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
from pathlib import Path
from typing import Any

from bertkit.io import atomic_open

TRAIN_ARTICLES = slice(0, 38)
DEV_ARTICLES = slice(38, None)
TRAIN_QUESTIONS = 2000
TRAIN_NAME = "squad_train_sample.json.gz"
DEV_NAME = "squad_dev_sample.json.gz"


def sample_paragraphs(articles: list[dict[str, Any]], questions: int, seed: int = 0) -> list[dict[str, Any]]:
    """Whole paragraphs drawn at random until they hold at least `questions` questions, in the original order."""
    places = [(a, p) for a, article in enumerate(articles) for p in range(len(article["paragraphs"]))]
    random.Random(seed).shuffle(places)
    picked, count = set(), 0
    for a, p in places:
        if count >= questions:
            break
        picked.add((a, p))
        count += len(articles[a]["paragraphs"][p]["qas"])
    out = []
    for a, article in enumerate(articles):
        kept = [para for p, para in enumerate(article["paragraphs"]) if (a, p) in picked]
        if kept:
            out.append({**article, "paragraphs": kept})
    return out


def packed(version: str, articles: list[dict[str, Any]]) -> bytes:
    """A SQuAD JSON document, gzip-compressed reproducibly (no file name or time in the header)."""
    text = json.dumps({"version": version, "data": articles}, ensure_ascii=False, separators=(",", ":"))
    return gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0)


def make(source: Path) -> dict[str, bytes]:
    """File name -> bytes of the demo's training and evaluation samples."""
    doc = json.loads(source.read_text(encoding="utf-8"))
    return {TRAIN_NAME: packed(doc["version"], sample_paragraphs(doc["data"][TRAIN_ARTICLES], TRAIN_QUESTIONS)),
            DEV_NAME: packed(doc["version"], doc["data"][DEV_ARTICLES])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="SQuAD v1.1 dev-v1.1.json")
    parser.add_argument("out", type=Path, help="folder to write the two samples to")
    args = parser.parse_args()
    for name, data in make(args.source).items():
        with atomic_open(args.out / name, "wb", encoding=None) as f:
            f.write(data)
        print(f"{args.out / name}: {len(data):,} bytes")


if __name__ == "__main__":
    main()
