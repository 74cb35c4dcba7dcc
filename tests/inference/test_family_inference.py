"""Inference on folders of BERT's family (tests/family_models.py: tiny random models with the family's own
tokenizer): a fine-tuned classifier exports to ONNX and onnxruntime computes PyTorch's logits; fill-mask answers what
transformers' fill-mask pipeline answers (the family's mask token, RoBERTa's positions); int8 and bf16 embeddings
stay close to float32's. Unmarked: one family each; `-m slow` runs every family."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import bertkit
from family_models import FAMILIES, fine_tuned, model_folder, task_files
from test_onnx_tasks import onnx_against_torch

transformers = pytest.importorskip("transformers", reason="the family tests compare with it (bertkit[test])")
TEXTS = ["The river floods the valley every spring.", "Banks lend money to families who buy houses.",
         "A violin and a cello played the old song.", "Salmon swim up the river to lay their eggs."]


def one_unmarked(chosen: str) -> list:
    return [f if f == chosen else pytest.param(f, marks=pytest.mark.slow) for f in FAMILIES]


@pytest.mark.parametrize("family", one_unmarked("roberta"))
def test_a_family_classifier_exports_to_onnx(family: str, tmp_path_factory: pytest.TempPathFactory,
                                             data_dir: Path, choice_questions: list[dict]) -> None:
    pytest.importorskip("onnxruntime")
    data = task_files(tmp_path_factory, data_dir, choice_questions)
    best = fine_tuned(family, "pairs", tmp_path_factory, data_dir, data)
    assert onnx_against_torch(best, data / "pairs.tsv", tmp_path_factory.mktemp(f"onnx-{family}")) <= 1e-4


@pytest.mark.parametrize("family", one_unmarked("xlm-roberta"))
def test_fill_mask_answers_what_transformers_pipeline_answers(family: str, tmp_path: Path, data_dir: Path) -> None:
    """The folder's masked-LM head (an untrained one: the ranking is the random weights', which both must read
    alike) on a text with the family's own mask token, and on two texts of different lengths in one batch."""
    folder = model_folder(family, tmp_path / "m", data_dir, head="BertForMaskedLM")
    model = bertkit.load(folder)
    mask = model.tokenizer.mask_token
    texts = [f"The river {mask} the valley every spring.", f"Banks {mask} money."]
    ours = model.fill_mask(texts, top_k=5)
    pipe = transformers.pipeline("fill-mask", model=str(folder), device="cpu")
    for text, answer in zip(texts, ours):
        ref = pipe(text, top_k=5)
        assert [a["token_id"] for a in answer[0]] == [r["token"] for r in ref]
        assert max(abs(a["probability"] - r["score"]) for a, r in zip(answer[0], ref)) <= 1e-5


@pytest.mark.parametrize("family", one_unmarked("electra"))
def test_int8_and_bf16_embeddings_stay_close_to_float32(family: str, tmp_path: Path, data_dir: Path) -> None:
    folder = model_folder(family, tmp_path / "m", data_dir, pooling="mean")
    model = bertkit.load(folder)
    ref = torch.as_tensor(model.encode(TEXTS, precision="fp32"))
    for precision, bound in (("bf16", 0.99), ("int8", 0.99)):
        got = torch.as_tensor(model.encode(TEXTS, precision=precision)).float()
        assert torch.nn.functional.cosine_similarity(ref, got).min() >= bound, precision
