"""Write the unlabeled text of downstream *training* sets as pre-training text (one sentence per line).

Krishna et al. (ACL 2023, "Downstream Datasets Make Surprisingly Good Pretraining Corpora") pre-train on the
task's own training text and find it rivals large corpora. Only training splits belong here: never dev or test
text. The files use the "lines" layout of `bertkit prepare-pretraining` (a blank line between documents); each
copy lists the sentences in a new order, so `--copies N` up-weights a small task set in a mixed corpus.

    python3 benchmarks/task_text.py --sst2 ../shared/data/sst2/train.tsv \\
        --conll ../shared/data/conll2003/train.txt --copies 4 -o corpus/
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from bertkit.io import atomic_write_text, make_dir
from bertkit.tasks.classification import ClassificationTask
from bertkit.tasks.ner import read_conll

SENTENCES_PER_DOCUMENT = 20  # documents only bound how far apart packed sentences may come from


def sst2_sentences(path: Path) -> list[str]:
    """The sentences of a GLUE-style classification file (labels ignored)."""
    task = ClassificationTask()
    settings = task.settings({"glue": "sst2"})
    return [ex.text for ex in task.read(path, settings, labelled=False)]


def conll_sentences(path: Path) -> list[str]:
    """The sentences of a CoNLL file, words joined by spaces (tags ignored)."""
    return [" ".join(s.words) for s in read_conll(path, labelled=False)]


def write_lines(path: Path, sentences: list[str], copies: int, seed: int) -> int:
    """Write `copies` shuffled passes over the sentences, a blank line every SENTENCES_PER_DOCUMENT lines."""
    rng = random.Random(seed)
    lines: list[str] = []
    for _ in range(copies):
        order = list(sentences)
        rng.shuffle(order)
        for i in range(0, len(order), SENTENCES_PER_DOCUMENT):
            lines.extend(s.strip() for s in order[i : i + SENTENCES_PER_DOCUMENT])
            lines.append("")
    atomic_write_text(path, "\n".join(lines) + "\n")
    return len(sentences) * copies


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sst2", type=Path, help="SST-2 train.tsv (GLUE layout)")
    p.add_argument("--conll", type=Path, help="CoNLL-2003 train.txt")
    p.add_argument("--copies", type=int, default=1, help="shuffled passes written per set (default 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-o", "--output", type=Path, required=True, help="output folder")
    args = p.parse_args()
    make_dir(args.output)
    for name, path, read in (("sst2", args.sst2, sst2_sentences), ("conll", args.conll, conll_sentences)):
        if path is not None:
            n = write_lines(args.output / f"{name}_train.txt", read(path), args.copies, args.seed)
            print(f"{name}: {n:,} sentences -> {args.output / f'{name}_train.txt'}")


if __name__ == "__main__":
    main()
