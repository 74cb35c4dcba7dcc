"""NER's feature-based approach (`--frozen`): the cache holds the encoder's hidden states, the encoder runs once per
sentence however many epochs, a second run reuses the cache, and the CLI trains, evaluates and predicts with it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit.cli import main
from bertkit.errors import ConfigError
from bertkit.jobs.finetune import FinetuneConfig, finetune, finetune_training
from bertkit.model import BertModel
from bertkit.model.heads import BertForFrozenTokenClassification, FrozenTaggerSettings
from bertkit.tasks import get_task
from bertkit.tasks.feature_cache import CACHED_KEY, with_cached_layers


def test_cached_features_equal_the_encoders_hidden_states(tmp_path, data_dir, tiny_dir, tokenizer) -> None:
    task = get_task("ner")
    settings = task.settings({"max_length": 32, "frozen": True, "frozen_features": "last"})
    examples = task.read(data_dir / "conll2003/valid.txt", settings)[:6]
    settings = task.fit_labels(examples, settings)
    features = task.features(examples, tokenizer, settings, training=False)
    head = BertForFrozenTokenClassification.from_pretrained(str(tiny_dir), **task.head(settings).config)
    cached = with_cached_layers(head, features, tmp_path)
    assert len(list(tmp_path.glob("*.npy"))) == 1
    encoder = BertModel.from_pretrained(str(tiny_dir)).eval()
    for f in cached:
        ids = torch.tensor([f["input_ids"]])
        states = torch.stack(encoder(ids, output_hidden_states=True).hidden_states, 2)[0]  # (seq, L + 1, hidden)
        assert f[CACHED_KEY].dtype == np.float16 and f[CACHED_KEY].shape == tuple(states.shape)
        torch.testing.assert_close(torch.from_numpy(np.array(f[CACHED_KEY])).float(), states, rtol=2e-3, atol=2e-3)


@pytest.fixture(scope="module")
def small_train(tmp_path_factory, data_dir) -> Path:
    """The first 3,000 lines of CoNLL-2003's training file (every tag occurs): fast runs with real sentences."""
    path = tmp_path_factory.mktemp("conll") / "train.txt"
    lines = (data_dir / "conll2003/train.txt").read_text().splitlines()[:3000]
    path.write_text("\n".join(lines) + "\n")
    return path


def run_frozen(tiny_dir: Path, data_dir: Path, out: Path, cache: Path, train: Path, **options: object) -> dict:
    config = FinetuneConfig(task="ner", model=str(tiny_dir), train=str(train),
                            dev=str(data_dir / "conll2003/valid.txt"), max_eval_examples=8,
                            options={"max_length": 32, "frozen": True, "tagger_hidden": 8,
                                     "frozen_features": "last", "feature_cache": str(cache), **options})
    config.training = finetune_training(get_task("ner"), {"output_dir": str(out), "epochs": 2, "batch_size": 8,
                                                          "lr": 1e-3, "progress_bar": False})
    return finetune(config)


def test_encoder_runs_once_per_sentence_and_the_cache_is_reused(tmp_path, data_dir, tiny_dir, small_train,
                                                                monkeypatch) -> None:
    encoded: list[int] = []
    original = BertForFrozenTokenClassification.layer_features

    def counting(self, input_ids, *args, **kwargs):  # noqa: ANN001, ANN202
        encoded.append(input_ids.shape[0])
        return original(self, input_ids, *args, **kwargs)

    monkeypatch.setattr(BertForFrozenTokenClassification, "layer_features", counting)
    cache = tmp_path / "cache"
    summary = run_frozen(tiny_dir, data_dir, tmp_path / "a", cache, small_train)
    evals = [json.loads(line) for line in (tmp_path / "a/metrics.jsonl").read_text().splitlines()]
    assert sum(r["split"] == "eval" for r in evals) == 2  # two epochs, each evaluated on the cached dev features
    assert sum(encoded) == summary["train_examples"] + 8  # every sentence once (training, dev), not in epoch 2
    best = summary["best_metrics"]  # the best epoch's evaluation as the Trainer logged it
    (at_best,) = [r for r in evals if r["split"] == "eval" and r["step"] == best["step"]]
    assert best == {k: v for k, v in at_best.items() if k not in ("split", "epoch")}
    assert best["f1"] == max(r["f1"] for r in evals if r["split"] == "eval")
    encoded.clear()
    run_frozen(tiny_dir, data_dir, tmp_path / "b", cache, small_train, frozen_features="weighted_sum", tagger="linear")
    assert encoded == []  # another feature choice and tagger on the same data: all read from the cache
    assert len(list(cache.glob("*.npy"))) == 2  # training and dev


def test_cli_frozen_round_trip(tmp_path, data_dir, tiny_dir, small_train) -> None:
    out, dev = tmp_path / "run", data_dir / "conll2003/valid.txt"
    code = main(["finetune", "--task", "ner", "--frozen", "--frozen-features", "weighted_sum", "--tagger-hidden", "8",
                 "--model", str(tiny_dir), "--train", str(small_train), "--dev", str(dev),
                 "--max-eval-examples", "8", "--max-length", "32", "--epochs", "1",
                 "--batch-size", "8", "--output", str(out), "--no-progress"])
    assert code == 0
    best = out / "best"
    config = json.loads((best / "config.json").read_text())
    assert config["architectures"] == ["BertForFrozenTokenClassification"]
    assert config["task_settings"]["frozen_features"] == "weighted_sum"
    assert config["task_settings"]["encoder"] == str(tiny_dir)
    assert (out / "feature_cache").is_dir()
    assert main(["evaluate", "--model", str(best), "--input", str(dev), "--max-examples", "8",
                 "--output", str(tmp_path / "m.json")]) == 0
    assert "f1" in json.loads((tmp_path / "m.json").read_text())
    small = tmp_path / "small"
    small.write_text("EU B-ORG\nrejects O\n\nPeter B-PER\n")
    for name in ("p1", "p2"):  # the folder predicts on its own, the same way twice
        assert main(["predict", "--model", str(best), "--input", str(small), "--output", str(tmp_path / name)]) == 0
    blocks = (tmp_path / "p1").read_text().strip().split("\n\n")
    assert [len(b.splitlines()) for b in blocks] == [2, 1]
    assert (tmp_path / "p1").read_text() == (tmp_path / "p2").read_text()


def test_a_bad_feature_choice_names_the_field(tmp_path, data_dir, tiny_dir, small_train, capsys) -> None:
    with pytest.raises(SystemExit) as e:  # the option lists its choices (the field's spec): argparse refuses it
        main(["finetune", "--task", "ner", "--frozen", "--frozen-features", "concat", "--model", str(tiny_dir),
              "--train", "t", "--dev", "d", "--output", str(tmp_path)])
    assert e.value.code == 2
    assert "--frozen-features/--frozen_features: invalid choice: 'concat' (choose from 'last', 'sum_last_four'" \
        in capsys.readouterr().err
    with pytest.raises(ConfigError, match="FrozenTaggerSettings.frozen_features: expected one of last, sum_last_four"):
        FrozenTaggerSettings(frozen_features="concat")
    with pytest.raises(ConfigError, match="'concat_last_four' needs an encoder of 4 layers or more; this one has 2"):
        run_frozen(tiny_dir, data_dir, tmp_path / "run", tmp_path / "cache", small_train,
                   frozen_features="concat_last_four")
