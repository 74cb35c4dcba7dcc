"""The shipped model bertkit-mini: it loads by name, matches its recipe, fills masks, scores what its README says;
(slow) the CPU recipe's first steps reproduce bitwise from its committed config. The shipped weights come from the
GPU recipe, whose CUDA runs are not bitwise repeatable (PRETRAINING.md), so the bitwise replay is the CPU run's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

import bertkit
from bertkit.model import BertForPreTraining
from bertkit.pretrained import resolve_model_dir, shipped_dir

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "configs" / "bertkit-mini-gpu.yaml"  # the run that made the shipped folder
CPU_RECIPE = ROOT / "configs" / "bertkit-mini.yaml"
CPU_RUN = ROOT / "docs" / "results" / "bertkit-mini-cpu"  # the CPU run's log and config
FOLDER = shipped_dir("bertkit-mini")


def test_ships_a_complete_small_folder() -> None:
    for name in ("config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json", "PRETRAINING.md",
                 "pretrain_config.yaml", "metrics.jsonl", "curves.png"):
        assert (FOLDER / name).is_file(), name
    assert (FOLDER / "model.safetensors").stat().st_size <= 25 * 2**20
    assert resolve_model_dir("bertkit-mini") == FOLDER
    assert resolve_model_dir(str(FOLDER)) == FOLDER


def test_config_and_vocabulary_match_the_recipe() -> None:
    model = BertForPreTraining.from_pretrained("bertkit-mini", strict=True)  # every tensor, pre-training heads too
    recipe = yaml.safe_load(RECIPE.read_text())
    c = model.config
    assert (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.intermediate_size) == (4, 256, 4, 1024)
    for key, value in recipe["model_overrides"].items():
        assert getattr(c, key) == value, key
    vocab = (FOLDER / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert len(vocab) == c.vocab_size == 8192
    assert bertkit.BertTokenizer.from_pretrained("bertkit-mini").vocab_size == 8192
    ran = yaml.safe_load((FOLDER / "pretrain_config.yaml").read_text())
    assert ran["model_overrides"] == recipe["model_overrides"] and ran["training"]["lr"] == recipe["training"]["lr"]


def test_fill_mask_answers_with_words_that_fit() -> None:
    from bertkit.inference.fill_mask import fill_mask

    model = BertForPreTraining.from_pretrained("bertkit-mini").eval()
    tok = bertkit.BertTokenizer.from_pretrained("bertkit-mini")
    (top,) = fill_mask(model, tok, "he was born in london , [MASK] .", top_k=5)
    assert "england" in [p.token for p in top]
    (top,) = fill_mask(model, tok, "the film is one of the [MASK] of the year .", top_k=5)
    assert "best" in [p.token for p in top]


def test_heldout_mlm_accuracy_is_what_the_readme_says(tmp_path: Path, data_dir: Path) -> None:
    """Masked-LM accuracy on WikiText-2 test (never trained on) recomputed here, at the paper's 15% / 80-10-10."""
    from bertkit.data import PretrainingDataConfig, PretrainingDataset, prepare_pretraining
    from bertkit.jobs.pretrain import PretrainConfig, make_evaluate, pretraining_collator

    tok = bertkit.BertTokenizer.from_pretrained("bertkit-mini")
    cfg = PretrainingDataConfig(instances="full_sentences", dupe_factor=1)
    prepare_pretraining([data_dir / "wikitext2" / "test.txt"], tmp_path / "wt2", tok, cfg)
    ds = PretrainingDataset(tmp_path / "wt2")
    evaluate = make_evaluate(ds, pretraining_collator(ds, 42, PretrainConfig(), evaluation=True), 64, 24)
    model = BertForPreTraining.from_pretrained("bertkit-mini").eval()
    with torch.no_grad():
        metrics = evaluate(model)
    final = [json.loads(x) for x in (FOLDER / "metrics.jsonl").read_text().splitlines() if '"eval"' in x][-1]
    # the same 1,536 sequences; the run evaluated under bf16 autocast on the GPU, this is fp32 on CPU (0.6413 vs 0.6416)
    assert metrics["mlm_accuracy"] == pytest.approx(final["mlm_accuracy"], abs=1e-3)
    assert metrics["mlm_accuracy"] >= 0.35


def train_records(metrics: Path) -> dict[int, dict]:
    """A metrics.jsonl's training records by step."""
    records = (json.loads(x) for x in metrics.read_text().splitlines())
    return {r["step"]: r for r in records if r["split"] == "train"}


def replay(tmp_path: Path, data_dir: Path, recipe: str, config: Path, steps: int) -> dict[int, dict]:
    """Build the data with the committed script's data steps (RECIPE=cpu|gpu), run the config's first `steps` steps
    (its warm-up LR does not depend on max_steps, so they are the run's own), and return their training records."""
    env = {**os.environ, "DATA": str(data_dir), "PYTHONPATH": str(ROOT / "src"), "RECIPE": recipe}
    script = ROOT / "benchmarks" / "pretraining_payoff.sh"
    prefix = script.read_text().split("[ -f $RUN/final")[0]  # the data steps only
    subprocess.run(["bash", "-c", prefix, str(script), str(tmp_path)], check=True, env=env, cwd=ROOT)
    subprocess.run([sys.executable, "-m", "bertkit", "pretrain", "--config", str(config), "--max_steps", str(steps),
                    "--eval_every", "100000", "--training.output_dir", "runs/repro"],
                   check=True, env=env, cwd=tmp_path)
    return train_records(tmp_path / "runs/repro/metrics.jsonl")


@pytest.mark.slow
def test_first_steps_reproduce_bitwise_from_the_committed_config(tmp_path: Path, data_dir: Path) -> None:
    """The CPU recipe's first 50 steps, rebuilt from the committed script and config, equal its run's log bitwise."""
    ours = replay(tmp_path, data_dir, "cpu", CPU_RECIPE, 50)
    logged = train_records(CPU_RUN / "metrics.jsonl")
    for step in (25, 50):
        a, b = ours[step], logged[step]
        assert (a["loss"], a["grad_norm"], a["lr"]) == (b["loss"], b["grad_norm"], b["lr"]), step


@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="the shipped run was made on a CUDA GPU")
def test_gpu_run_first_steps_reproduce_closely(tmp_path: Path, data_dir: Path) -> None:
    """On a CUDA machine, the shipped GPU run's first 200 steps rebuilt the same way. CUDA's atomic-add kernels make
    two runs of the same config differ in the last digits (measured on an H100: loss 7.714024 and 7.714026 at step
    100, 6.3667 and 6.3718 at step 200), so this replay is close, not bitwise."""
    ours = replay(tmp_path, data_dir, "gpu", RECIPE, 200)
    logged = train_records(FOLDER / "metrics.jsonl")
    for step in (100, 200):
        a, b = ours[step], logged[step]
        assert a["lr"] == b["lr"] and a["loss"] == pytest.approx(b["loss"], rel=2e-3), step
