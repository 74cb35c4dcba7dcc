"""ONNX export of fine-tuned folders through their task's inputs (`bertkit.inference.onnx_export.export_folder`):
every head bertkit trains exports, a frozen tagger (BiLSTM on the frozen encoder) and a multiple-choice head
included, and equals PyTorch within 1e-4 on the task's own features, in batches unlike the traced one."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit.cli import main

ort = pytest.importorskip("onnxruntime")
def onnx_against_torch(folder: Path, data: Path, out: Path) -> float:
    """`bertkit export-onnx` of a fine-tuned folder, run by onnxruntime on its task's features of `data` (the
    graph's inputs are the task's), against the PyTorch model: the largest absolute difference of any output."""
    from bertkit.jobs.finetune import _load_finetuned
    from bertkit.tasks.base import collator

    path = out / "m.onnx"
    assert main(["export-onnx", str(folder), "-o", str(path)]) == 0
    task, settings, model, tokenizer = _load_finetuned(str(folder))
    features = task.features(task.read(data, settings)[:5], tokenizer, settings, training=False)
    batch = collator(task.head(settings), tokenizer)(features)
    session = ort.InferenceSession(str(path))
    names = [i.name for i in session.get_inputs()]
    got = session.run(None, {n: batch[n].numpy() for n in names})
    with torch.no_grad():
        want = model.eval()(**{n: batch[n] for n in names})
    outputs = task.head(settings).outputs
    return max(float(np.abs(getattr(want, k).numpy() - v).max()) for k, v in zip(outputs, got))


def test_frozen_tagger_and_multiple_choice_export_equal_pytorch(  # noqa: ANN001 (finetune_best: a function)
        tmp_path: Path, tiny_dir: Path, data_dir: Path, finetune_best, choice_questions: list[dict]) -> None:
    conll = tmp_path / "train.txt"
    conll.write_text("\n".join((data_dir / "conll2003" / "train.txt").read_text().splitlines()[:200]) + "\n")
    choices = tmp_path / "choices.jsonl"
    choices.write_text("".join(json.dumps(q) + "\n" for q in choice_questions * 3))
    frozen = finetune_best(tiny_dir, tmp_path / "frozen", "ner", conll, "--max-length", "24", "--frozen",
                           "--tagger-hidden", "8", "--feature-cache", str(tmp_path / "cache"))
    choose = finetune_best(tiny_dir, tmp_path / "choose", "multiple-choice", choices, "--max-length", "24")
    for folder, data in ((frozen, conll), (choose, choices)):
        diff = onnx_against_torch(folder, data, folder.parent)
        print(f"ONNX of {folder.parent.name}: max |diff| {diff:.2e}")
        assert diff <= 1e-4
