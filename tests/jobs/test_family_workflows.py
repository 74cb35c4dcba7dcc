"""The jobs on folders of BERT's family (DistilBERT, RoBERTa, XLM-R, ALBERT, ELECTRA), through the real CLI, each
folder a tiny random model with the family's own tokenizer (tests/family_models.py): every task fine-tunes,
evaluates and predicts, and the saved folder is the family's class that transformers loads and computes bertkit's
logits with; distillation takes one as its teacher; embed reads the folder's sentence-transformers pooling and gives
sentence-transformers' vectors, which index and search then find.

Unmarked: one family per task (every family once) and one family for the other jobs; `-m slow` runs every family."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bertkit.cli import main
from bertkit.model.folder import load_model, open_folder
from family_models import FAMILIES, TASKS, fine_tuned, finetune, max_diffs, model_folder, task_files

transformers = pytest.importorskip("transformers", reason="the family workflows compare with it (bertkit[test])")

# Unmarked: each family fine-tunes one task; the rest of the matrix is slow.
DIAGONAL = {("roberta", "pairs"), ("xlm-roberta", "single"), ("distilbert", "ner"), ("albert", "qa"),
            ("electra", "multiple-choice")}


def matrix(pairs: set[tuple[str, str]], names: list[str]) -> list:
    return [pytest.param(f, n, marks=() if (f, n) in pairs else pytest.mark.slow, id=f"{f}-{n}")
            for f in FAMILIES for n in names]


@pytest.fixture(scope="module")
def task_data(tmp_path_factory: pytest.TempPathFactory, data_dir: Path, choice_questions: list[dict]) -> Path:
    return task_files(tmp_path_factory, data_dir, choice_questions)


def transformers_logits_agree(folder: Path, texts: list[str], pairs: list[str] | None = None) -> float:
    """transformers' class named in the folder's config.json, loaded from it, against bertkit's model on the
    folder's own tokenization of `texts` (and pairs): the largest difference of any output both compute."""
    config = json.loads((folder / "config.json").read_text())
    theirs = getattr(transformers, config["architectures"][0]).from_pretrained(folder).eval()
    opened = open_folder(folder)
    batch = opened.tokenizer(texts, pairs, padding=True, max_length=32).to_tensors()
    if opened.config.type_vocab_size < 2:  # DistilBERT takes none; RoBERTa's are all 0 anyway
        batch.pop("token_type_ids")
    return max(max_diffs(opened.model, theirs, batch).values())


@pytest.mark.parametrize("family, task", matrix(DIAGONAL, list(TASKS)))
def test_every_task_fine_tunes_into_the_familys_class(family: str, task: str, tmp_path: Path, data_dir: Path,
                                                      task_data: Path,
                                                      tmp_path_factory: pytest.TempPathFactory) -> None:
    """finetune writes the family's own class (transformers computes bertkit's logits from it, within 1e-5);
    evaluate on best/ gives the metrics training recorded for it; predict writes the task's file."""
    if task == "pairs":
        best = fine_tuned(family, "pairs", tmp_path_factory, data_dir, task_data)
        summary = json.loads((best.parent / "results.json").read_text())
    else:
        base = model_folder(family, tmp_path / "base", data_dir)
        summary = finetune(base, tmp_path / "run", task, task_data)
        best = tmp_path / "run" / "best"
    name, file, _ = TASKS[task]
    config = json.loads((best / "config.json").read_text())
    heads = {"classification": "ForSequenceClassification", "ner": "ForTokenClassification",
             "qa": "ForQuestionAnswering", "multiple-choice": "ForMultipleChoice"}
    assert config["model_type"] == family and config["architectures"][0].endswith(heads[name])
    assert transformers_logits_agree(best, ["The river floods the valley.", "Banks lend money, twice."],
                                     ["It rained.", "They do."] if task == "pairs" else None) <= 1e-5
    assert main(["evaluate", "--model", str(best), "--input", str(task_data / file), "--max-examples", "12",
                 "--output", str(tmp_path / "m.json")]) == 0
    metrics = json.loads((tmp_path / "m.json").read_text())  # the same 12 examples (seed 42) as training's dev
    recorded = {k: v for k, v in summary["best_metrics"].items() if k != "step"}
    assert {k: metrics[k] for k in recorded} == pytest.approx(recorded, abs=1e-9)
    assert main(["predict", "--model", str(best), "--input", str(task_data / file), "--output",
                 str(tmp_path / "p")]) == 0
    assert (tmp_path / "p").stat().st_size > 0


@pytest.mark.parametrize("family", [f if f == "roberta" else pytest.param(f, marks=pytest.mark.slow)
                                    for f in FAMILIES])
def test_distillation_takes_a_family_teacher(family: str, tmp_path: Path, data_dir: Path, task_data: Path,
                                             tmp_path_factory: pytest.TempPathFactory,
                                             capsys: pytest.CaptureFixture) -> None:
    """A one-layer student of a fine-tuned family classifier is the family's class too (layer 0 of the teacher,
    trained a little); transformers loads it whole and computes bertkit's logits. An ALBERT teacher whose one layer
    is shared by every depth has no layers to take a student from: refused, saying so."""
    teacher = fine_tuned(family, "pairs", tmp_path_factory, data_dir, task_data)
    out = tmp_path / "student"
    code = main(["distill", "--teacher", str(teacher), "--student-layers", "1", "--train", str(task_data / "pairs.tsv"),
                 "--dev", str(task_data / "pairs.tsv"), "--max-train-examples", "16", "--max-eval-examples", "8",
                 "--epochs", "1", "--batch-size", "8", "--output", str(out), "--no-progress"])
    if family == "albert":
        assert code != 0 and "shares one layer across its depth" in capsys.readouterr().err
        return
    assert code == 0
    student = load_model(out / "best")
    assert student.config.num_hidden_layers == 1 and student.config.family == family
    config = json.loads((out / "best" / "config.json").read_text())
    _, info = getattr(transformers, config["architectures"][0]).from_pretrained(out / "best",
                                                                                output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert transformers_logits_agree(out / "best", ["A short text."], ["Another one."]) <= 1e-5


DOCUMENTS = ["The river floods the valley every spring.", "Banks lend money to families who buy houses.",
             "A violin and a cello played the old song.", "The train to the city leaves at nine.",
             "Salmon swim up the river to lay their eggs.", "Interest rates rose again this year."]


@pytest.mark.parametrize("family", [f if f == "xlm-roberta" else pytest.param(f, marks=pytest.mark.slow)
                                    for f in FAMILIES])
def test_embed_reads_the_folders_pooling_and_search_finds_the_text(family: str, tmp_path: Path, data_dir: Path,
                                                                   capsys: pytest.CaptureFixture) -> None:
    """A family folder with sentence-transformers' files (mean pooling, normalisation, max length 48): `bertkit
    embed` gives the vectors sentence-transformers computes from the same folder (float32, within 1e-5); the
    embeddings folder indexes, and searching each document finds it first."""
    st = pytest.importorskip("sentence_transformers", reason="the embedding parity needs sentence-transformers")
    folder = model_folder(family, tmp_path / "m", data_dir, pooling="mean")
    (tmp_path / "docs.txt").write_text("\n".join(DOCUMENTS) + "\n")
    assert main(["embed", str(tmp_path / "docs.txt"), "-o", str(tmp_path / "e.npy"), "--model", str(folder),
                 "--precision", "fp32"]) == 0
    ours = np.load(tmp_path / "e.npy")
    theirs = st.SentenceTransformer(str(folder), device="cpu").encode(DOCUMENTS, convert_to_numpy=True)
    assert ours.shape == theirs.shape == (len(DOCUMENTS), 32)
    assert np.abs(ours - theirs).max() <= 1e-5
    assert np.allclose(np.linalg.norm(ours, axis=1), 1, atol=1e-5)
    assert main(["embed", str(tmp_path / "docs.txt"), "-o", str(tmp_path / "emb"), "--model", str(folder),
                 "--precision", "fp32"]) == 0
    assert main(["index", str(tmp_path / "emb"), "-o", str(tmp_path / "index")]) == 0
    capsys.readouterr()
    assert main(["search", "--index", str(tmp_path / "index"), "--top-k", "1", *DOCUMENTS[:3]]) == 0
    hits = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [h["results"][0]["text"] for h in hits] == DOCUMENTS[:3]


def test_a_folder_keeps_its_tokenizer_through_fine_tuning(data_dir: Path, task_data: Path,
                                                          tmp_path_factory: pytest.TempPathFactory) -> None:
    """The fine-tuned folder tokenizes as its start folder did (the family's tokenizer, saved beside the model),
    and its pad id is the one RoBERTa's positions skip."""
    best = fine_tuned("roberta", "pairs", tmp_path_factory, data_dir, task_data)
    start = open_folder(best.parent.parent / "base").tokenizer
    text = "Banks lend money to families who buy houses in Zürich."
    assert open_folder(best).tokenizer.encode(text).input_ids == start.encode(text).input_ids
    assert start.pad_token_id == load_model(best).config.pad_token_id == 1
