"""What fine-tuning, distillation and pre-training refuse before they train or resume: a start that diverges, a
resume with other data or settings, an output folder a running job holds or the model it reads, data from another
tokenizer of the same size, and a teacher distillation cannot use; a refused or failed job leaves the folder's
records alone. Tiny models, a few steps each. (The 2026-11-24 attack report's findings N1, N2, N7, L2, C1, C5, C6.)"""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest
import torch

import bertkit
from bertkit.cli import main
from bertkit.io import folder_lock
from bertkit.model import BertConfig, BertForPreTraining, BertForSequenceClassification, BertModel
from bertkit.tokenizer import BertTokenizer


DEMO = Path(bertkit.__file__).parent / "demo_data" / "shakespeare.txt.gz"


# The classic tiny test model, with bertkit-mini's 8,192-token vocabulary (small embeddings: fast runs).
TINY = dict(vocab_size=8192, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37)


@pytest.fixture(scope="module")
def tok() -> BertTokenizer:
    return BertTokenizer.from_pretrained("bertkit-mini")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("refused_runs")


@pytest.fixture(scope="module")
def sst(root: Path) -> dict[str, Path]:
    """A tiny SST-2-style pair of files (sentence, label), 24 training and 8 dev rows."""
    out = {}
    for name, n in (("train", 24), ("dev", 8)):
        rows = [f"{'a fine good movie' if i % 2 else 'a dull bad film'} number {i}\t{i % 2}" for i in range(n)]
        out[name] = root / f"{name}.tsv"
        out[name].write_text("sentence\tlabel\n" + "\n".join(rows) + "\n")
    return out


def _model_folder(folder: Path, model: torch.nn.Module, tok: BertTokenizer) -> Path:
    """`model` saved with bertkit-mini's tokenizer into `folder`."""
    model.save_pretrained(str(folder))
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny_dir(root: Path, tok: BertTokenizer) -> Path:
    torch.manual_seed(0)
    return _model_folder(root / "tiny", BertModel(BertConfig(**TINY)), tok)


@pytest.fixture(scope="module")
def teacher(root: Path, tiny_dir: Path, sst: dict[str, Path]) -> Path:
    """A fine-tuned (2-layer) classifier: a task-distillation teacher."""
    out = root / "teacher_run"
    assert main(["finetune", "--task", "classification", "--model", str(tiny_dir), "--train", str(sst["train"]),
                 "--dev", str(sst["dev"]), "--max-length", "16", "--max-steps", "2", "--batch-size", "8",
                 "--output", str(out), "--no-progress"]) == 0
    return out / "best"


@pytest.fixture(scope="module")
def mlm_dir(root: Path, tok: BertTokenizer) -> Path:
    """A tiny BertForPreTraining with bertkit-mini's vocabulary: a model to continue pre-training or to distil."""
    torch.manual_seed(0)
    return _model_folder(root / "mlm", BertForPreTraining(BertConfig(**TINY)), tok)


@pytest.fixture(scope="module")
def prepared(root: Path, tok: BertTokenizer) -> dict[str, Path]:
    """Prepared masked-LM folders: 'a' and 'b' (the same text with 'the' made 'a': other data of the same size)
    with bertkit-mini's tokenizer; 'swapped' with the same vocabulary but lines 1001 and 1002 exchanged (another
    tokenizer's ids, the same size)."""
    from bertkit.data import PretrainingDataConfig, prepare_pretraining

    tokens = [t for t, _ in sorted(tok.vocab.items(), key=lambda kv: kv[1])]
    tokens[1000], tokens[1001] = tokens[1001], tokens[1000]
    (root / "swapped_tok").mkdir()
    (root / "swapped_tok" / "vocab.txt").write_text("".join(t + "\n" for t in tokens))
    swapped = BertTokenizer.from_pretrained(root / "swapped_tok")
    text = "\n".join(gzip.open(DEMO, "rt", encoding="utf-8").read().splitlines()[:200]) + "\n"
    out = {}
    for name, tokenizer in (("a", tok), ("b", tok), ("swapped", swapped)):
        (root / f"{name}.txt").write_text(text.replace(" the ", " a ") if name == "b" else text)
        cfg = PretrainingDataConfig(max_length=32, dupe_factor=1, layout="lines", dynamic_masking=True,
                                    max_predictions_per_seq=5, instances="full_sentences")
        out[name] = prepare_pretraining([root / f"{name}.txt"], root / f"pt_{name}", tokenizer, cfg).output_dir
    return out


def _err(capsys: pytest.CaptureFixture) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


# --- a start that diverges ------------------------------------------------------------------------------------
def test_finetune_with_a_diverging_loss_exits_with_the_message(tmp_path: Path, tiny_dir: Path,
                                                               sst: dict[str, Path], capsys) -> None:
    """N2 through the CLI: rc 1 and the message (no traceback), no best/, final/ or results.json from NaN weights.
    The report diverged it with --lr 1e30, which the options layer now refuses before training; here the start's
    word embeddings overflow float32 in the first forward pass."""
    args = ["finetune", "--task", "classification", "--train", str(sst["train"]), "--dev", str(sst["dev"]),
            "--max-length", "16", "--epochs", "2", "--batch-size", "8", "--warmup", "0", "--no-progress"]
    assert main([*args, "--model", str(tiny_dir), "--lr", "1e30", "--output", str(tmp_path / "refused")]) == 1
    assert "FinetuneConfig.training.lr: expected a number > 0 and <= 1, found 1e+30" in _err(capsys)
    assert not (tmp_path / "refused").exists()
    huge = tmp_path / "huge"
    shutil.copytree(tiny_dir, huge)
    model = BertModel.from_pretrained(str(huge))
    with torch.no_grad():
        model.embeddings.word_embeddings.weight.mul_(1e37)
    model.save_pretrained(str(huge))
    out = tmp_path / "run"
    code = main([*args, "--model", str(huge), "--output", str(out)])
    err = _err(capsys)
    assert code == 1 and "bertkit finetune: error:" in err and "training stopped at step 1" in err, err
    assert "the loss is nan" in err
    assert not (out / "best").exists() and not (out / "final").exists() and not (out / "results.json").exists()


# --- a resume must continue the same run -----------------------------------------------------------------------
def test_finetune_resume_refuses_other_data_and_settings(tmp_path: Path, tiny_dir: Path, sst: dict[str, Path],
                                                        capsys) -> None:
    """N7: --resume accepted another training file (labels flipped), another LR and max length. Now each is
    refused naming the field with the checkpoint's and this run's value, and nothing of the run changes; the same
    data under another name and a longer run are fine; --resume-mismatch warn continues and records the change."""
    out = tmp_path / "run"
    base = ["finetune", "--task", "classification", "--model", str(tiny_dir), "--dev", str(sst["dev"]),
            "--max-length", "16", "--batch-size", "8", "--lr", "1e-3", "--output", str(out), "--no-progress"]
    assert main([*base, "--train", str(sst["train"]), "--max-steps", "2"]) == 0
    flipped = tmp_path / "flipped.tsv"
    lines = sst["train"].read_text().splitlines()
    flipped.write_text("\n".join([lines[0]] + [x[:-1] + str(1 - int(x[-1])) for x in lines[1:]]) + "\n")
    records = {p: (out / p).read_bytes() for p in ("results.json", "metrics.jsonl")}
    capsys.readouterr()
    for extra, expected in [(["--train", str(flipped)], f"train: {sst['train']} (sha256 "),
                            (["--train", str(flipped)], f"in the checkpoint, {flipped} (sha256 "),
                            (["--lr", "5e-3"], "training.lr: 0.001 in the checkpoint, 0.005 now"),
                            (["--max-length", "32"], "options.max_length: 16 in the checkpoint, 32 now")]:
        assert main([*base, "--train", str(sst["train"]), "--max-steps", "4", "--resume", *extra]) == 1
        err = _err(capsys)
        assert "differ from the checkpoint's" in err and expected in err, err
        assert "--resume-mismatch warn" in err
    assert {p: (out / p).read_bytes() for p in records} == records  # a refused resume changes nothing

    moved = tmp_path / "moved.tsv"
    shutil.copy(sst["train"], moved)  # the same bytes: the same data; a longer run: allowed
    assert main([*base, "--train", str(moved), "--max-steps", "4", "--resume"]) == 0
    summary = json.loads((out / "results.json").read_text())
    assert summary["resumes"] == [{"step": 2, "split": "resume", "checkpoint": "step-2", "changed": {}}]

    assert main([*base, "--train", str(moved), "--max-steps", "6", "--resume", "--lr", "5e-3",
                 "--resume-mismatch", "warn"]) == 0
    err = _err(capsys)
    assert "WARNING" in err and "training.lr: 0.001 in the checkpoint, 0.005 now" in err
    summary = json.loads((out / "results.json").read_text())
    assert summary["resumes"][-1] == {"step": 4, "split": "resume", "checkpoint": "step-4",
                                      "changed": {"training.lr": [0.001, 0.005]}}
    assert summary["training"]["lr"] == 0.005 and len(summary["resumes"]) == 2


def test_distill_resume_refuses_another_teacher_and_temperature(tmp_path: Path, teacher: Path,
                                                               sst: dict[str, Path], capsys) -> None:
    """N7: a distillation resumed with another teacher (same shapes, other weights) or another temperature was
    accepted and its records named only the second. Now both are refused and distill_config.yaml stays."""
    from safetensors.torch import load_file, save_file

    other = tmp_path / "other_teacher"
    shutil.copytree(teacher, other)
    weights = load_file(other / "model.safetensors")
    weights = {k: v + 0.01 if k.startswith("classifier") else v for k, v in weights.items()}
    save_file(weights, other / "model.safetensors")
    out = tmp_path / "student"
    args = ["distill", "--student-layers", "1", "--train", str(sst["train"]), "--dev", str(sst["dev"]),
            "--batch-size", "8", "--output", str(out), "--no-progress"]
    assert main([*args, "--teacher", str(teacher), "--max-steps", "2"]) == 0
    record = (out / "distill_config.yaml").read_text()
    capsys.readouterr()
    for extra, expected in [(["--teacher", str(other)], f"teacher: {teacher} (sha256 "),
                            (["--teacher", str(teacher), "--temperature", "9.0"],
                             "distill.temperature: 2.0 in the checkpoint, 9.0 now")]:
        assert main([*args, "--max-steps", "4", "--resume", *extra]) == 1
        err = _err(capsys)
        assert expected in err, err
    assert f"{other} (sha256" not in err  # (the temperature run names no teacher difference)
    assert (out / "distill_config.yaml").read_text() == record


def test_pretrain_resume_refuses_other_data(tmp_path: Path, mlm_dir: Path, prepared: dict[str, Path],
                                           capsys) -> None:
    """N7 for pre-training: continued pre-training resumed on another prepared folder is refused, naming it."""
    out = tmp_path / "pt"
    base = ["pretrain", "--model", str(mlm_dir), "--output_dir", str(out), "--batch_size", "8", "--warmup", "1",
            "--progress_bar", "false"]
    assert main([*base, "--train_data", str(prepared["a"]), "--max_steps", "1"]) == 0
    capsys.readouterr()
    assert main([*base, "--train_data", str(prepared["b"]), "--max_steps", "2", "--resume"]) == 1
    err = _err(capsys)
    assert f"train_data: {prepared['a']} (sha256" in err and f"{prepared['b']} (sha256" in err, err
    assert main([*base, "--train_data", str(prepared["a"]), "--max_steps", "2", "--resume"]) == 0


# --- a refused or failed job leaves the folder's records alone -------------------------------------------------
def test_a_refused_or_failed_job_leaves_the_records_alone(tmp_path: Path, teacher: Path, sst: dict[str, Path],
                                                          prepared: dict[str, Path], capsys) -> None:
    """L2: distill and pretrain wrote distill_config.yaml / pretrain_config.yaml before taking the folder's lock,
    so a refused second job overwrote the running job's record; a distill failing on --student-layers left one."""
    busy = tmp_path / "busy"
    busy.mkdir()
    for name in ("distill_config.yaml", "pretrain_config.yaml"):
        (busy / name).write_text("the running job's record\n")
    with folder_lock(busy):  # another job holds the folder
        assert main(["distill", "--teacher", str(teacher), "--train", str(sst["train"]), "--dev", str(sst["dev"]),
                     "--temperature", "7", "--max-steps", "1", "--output", str(busy), "--no-progress"]) == 1
        assert "another job is writing into this folder" in _err(capsys)
        assert main(["pretrain", "--model", "tiny", "--train_data", str(prepared["a"]), "--max_steps", "1",
                     "--output_dir", str(busy), "--training.lr", "9e-3"]) == 1
        assert "another job is writing into this folder" in _err(capsys)
    for name in ("distill_config.yaml", "pretrain_config.yaml"):
        assert (busy / name).read_text() == "the running job's record\n"
    fresh = tmp_path / "fresh"
    assert main(["distill", "--teacher", str(teacher), "--student-layers", "5", "--train", str(sst["train"]),
                 "--dev", str(sst["dev"]), "--output", str(fresh), "--no-progress"]) == 1
    assert "student_layers = 5: expected 1 to the teacher's 2 layers" in _err(capsys)
    assert not fresh.exists()


# --- data from another tokenizer of the same size ----------------------------------------------------------------
def test_data_from_another_tokenizer_of_the_same_size_is_refused(tmp_path: Path, mlm_dir: Path,
                                                                prepared: dict[str, Path], capsys) -> None:
    """N1: continued pre-training and pre-training-time distillation only compared the vocabulary's size, so data
    whose ids mean other tokens trained (and saved) a scrambled model. Now both are refused, naming both vocab
    files and the first differing line."""
    data_vocab = prepared["swapped"] / "tokenizer" / "vocab.txt"
    for argv in (["pretrain", "--model", str(mlm_dir), "--train_data", str(prepared["swapped"]), "--max_steps", "1",
                  "--output_dir", str(tmp_path / "pt")],
                 ["distill", "--teacher", str(mlm_dir), "--train", str(prepared["swapped"]), "--max-steps", "1",
                  "--output", str(tmp_path / "dpt"), "--no-progress"]):
        assert main(argv) == 1
        err = _err(capsys)
        assert f"{data_vocab} differs from {mlm_dir / 'vocab.txt'} at line 1001" in err, err
    assert not (tmp_path / "pt").exists() and not (tmp_path / "dpt").exists()


# --- distillation's teacher checks; an output folder on the model it reads ----------------------------------------
@pytest.mark.parametrize("problem, labels", [("regression", None), ("multi_label_classification", ["a", "b", "c"])])
def test_a_regression_or_multi_label_teacher_is_refused_for_the_real_reason(
        tmp_path: Path, tok: BertTokenizer, sst: dict[str, Path], problem: str, labels, capsys) -> None:
    """C1: the student re-read the file as single-label and failed on the head's size; the real reason is that
    distillation compares softmax distributions. Said now, before any data is read."""
    folder = tmp_path / "teacher"
    settings = {"max_length": 16, "problem": "regression" if labels is None else "multi_label"}
    config = BertConfig(**TINY, num_labels=len(labels or [0]), label_names=labels, problem_type=problem,
                        task="classification", task_settings=settings)
    _model_folder(folder, BertForSequenceClassification(config), tok)
    assert main(["distill", "--teacher", str(folder), "--train", str(sst["train"]), "--dev", str(sst["dev"]),
                 "--output", str(tmp_path / "out"), "--no-progress"]) == 1
    err = _err(capsys)
    assert f"problem_type is {problem!r}" in err and "distillation compares softmax distributions" in err, err


def test_empty_teacher_layers_is_an_error(tmp_path: Path, teacher: Path, sst: dict[str, Path], capsys) -> None:
    """C5: `--teacher-layers []` silently meant the default spread."""
    assert main(["distill", "--teacher", str(teacher), "--train", str(sst["train"]), "--dev", str(sst["dev"]),
                 "--teacher-layers", "[]", "--output", str(tmp_path / "o"), "--print-config"]) == 1
    assert "DistillConfig.teacher_layers: expected a non-empty list (a teacher layer index per student layer, " \
        "e.g. [0, 2, 4]; leave it out for the default spread), found []" in _err(capsys)


def test_an_output_folder_on_the_model_it_reads_is_refused(tmp_path: Path, teacher: Path, tiny_dir: Path,
                                                          mlm_dir: Path, sst: dict[str, Path],
                                                          prepared: dict[str, Path], capsys) -> None:
    """C6: `distill --output <teacher>` nested checkpoints/, best/ and final/ in the model folder; an output
    holding the teacher would replace the best/ it is; finetune and continued pre-training had the same hole."""
    listing = {p: sorted(os.listdir(p)) for p in (teacher, tiny_dir, mlm_dir)}
    for output, relation in ((teacher, "is"), (teacher / "student", "is inside"), (teacher.parent, "holds")):
        assert main(["distill", "--teacher", str(teacher), "--train", str(sst["train"]), "--dev", str(sst["dev"]),
                     "--max-steps", "1", "--output", str(output), "--no-progress"]) == 1
        assert f"the output folder {output} {relation} the teacher folder {teacher}" in _err(capsys)
    assert main(["finetune", "--task", "classification", "--model", str(tiny_dir), "--train", str(sst["train"]),
                 "--dev", str(sst["dev"]), "--max-steps", "1", "--output", str(tiny_dir), "--no-progress"]) == 1
    assert f"the output folder {tiny_dir} is the model folder" in _err(capsys)
    assert main(["pretrain", "--model", str(mlm_dir), "--train_data", str(prepared["a"]), "--max_steps", "1",
                 "--output_dir", str(mlm_dir / "more")]) == 1
    assert f"the output folder {mlm_dir / 'more'} is inside the model folder" in _err(capsys)
    assert {p: sorted(os.listdir(p)) for p in listing} == listing
