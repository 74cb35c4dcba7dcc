"""The feature-based approach's head (BertForFrozenTokenClassification): its features are the encoder's hidden
states, the feature choices equal hand computations, the encoder stays frozen, the BiLSTM tagger learns a task that
needs context, and a saved folder predicts as the model did."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bertkit.errors import ConfigError
from bertkit.model import BertConfig, BertModel
from bertkit.model.heads import BertForFrozenTokenClassification, FrozenTaggerSettings, ScalarMix, combine_layers
from bertkit.tasks.base import Collator
from bertkit.training import Trainer, TrainingConfig


def tiny_config(**task_settings: object) -> BertConfig:
    """The classic tiny test config (google-research/bert modeling_test.py) with a 5-tag head."""
    return BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
                      num_labels=5, task="ner", task_settings=dict(task_settings))


def test_layer_features_are_the_encoders_hidden_states(tmp_path: Path) -> None:
    torch.manual_seed(0)
    encoder = BertModel(tiny_config()).eval()
    encoder.save_pretrained(str(tmp_path))
    head = BertForFrozenTokenClassification.from_pretrained(str(tmp_path), num_labels=5,
                                                            task_settings={"frozen_features": "weighted_sum"})
    ids = torch.randint(1, 99, (3, 7))
    mask = torch.tensor([[1] * 7, [1] * 4 + [0] * 3, [1] * 6 + [0]])
    expected = encoder(ids, mask, output_hidden_states=True).hidden_states
    got = head.layer_features(ids, mask)  # (batch, seq, L + 1, hidden)
    assert got.shape == (3, 7, 3, 32)
    for layer, states in enumerate(expected):
        torch.testing.assert_close(got[:, :, layer], states, rtol=0, atol=0)
    assert head.config.task_settings["encoder"] == str(tmp_path)  # the folder records its encoder


def test_feature_choices_equal_hand_computations() -> None:
    layers = torch.randn(2, 3, 5, 4)  # (batch, seq, L + 1, hidden): embeddings, then 4 layers
    h = [layers[..., i, :] for i in range(5)]
    torch.testing.assert_close(combine_layers(layers, "last"), h[4])
    torch.testing.assert_close(combine_layers(layers, "sum_last_four"), h[1] + h[2] + h[3] + h[4])
    torch.testing.assert_close(combine_layers(layers, "concat_last_four"), torch.cat([h[4], h[3], h[2], h[1]], -1))
    mix = ScalarMix(5)
    with torch.no_grad():
        mix.scalar_weights.copy_(torch.tensor([0.0, 1.0, -1.0, 2.0, 0.5]))
        mix.scale.fill_(1.5)
    e = [float(torch.tensor(w).exp()) for w in (0.0, 1.0, -1.0, 2.0, 0.5)]
    by_hand = 1.5 * sum(e[i] / sum(e) * h[i] for i in range(5))
    torch.testing.assert_close(combine_layers(layers, "weighted_sum", mix), by_hand)
    with pytest.raises(ValueError, match="frozen_features = 'first'"):
        combine_layers(layers, "first")


def test_settings_errors_name_the_field() -> None:
    with pytest.raises(ConfigError,
                       match="FrozenTaggerSettings.frozen_features: expected one of last, sum_last_four.*found 'concat'"):
        FrozenTaggerSettings(frozen_features="concat")
    with pytest.raises(ConfigError, match="FrozenTaggerSettings.tagger: expected one of bilstm, linear, found 'crf'"):
        FrozenTaggerSettings(tagger="crf")
    with pytest.raises(ConfigError, match="FrozenTaggerSettings.tagger_hidden: expected an integer >= 1 .*found 0"):
        FrozenTaggerSettings(tagger_hidden=0)


def test_encoder_stays_frozen_and_in_eval_mode() -> None:
    torch.manual_seed(0)
    head = BertForFrozenTokenClassification(tiny_config(frozen_features="last", tagger_hidden=8)).train()
    assert not head.bert.training and head.lstm.training
    before = {k: v.clone() for k, v in head.bert.state_dict().items()}
    ids = torch.randint(1, 99, (2, 5))
    out = head(ids, torch.ones_like(ids), labels=torch.randint(0, 5, (2, 5)))
    out.loss.backward()
    assert all(p.grad is None for p in head.bert.parameters())
    assert head.classifier.weight.grad is not None and head.lstm.weight_ih_l0.grad is not None
    torch.optim.SGD([p for p in head.parameters() if p.requires_grad], lr=1.0).step()
    assert all(torch.equal(before[k], v) for k, v in head.bert.state_dict().items())


def synthetic_tagging(n: int, length: int, hidden: int, seed: int) -> list[dict]:
    """Sequences of 5 token kinds, each a fixed random vector as its 'last layer' feature; tag = (token + previous
    token) mod 5, so a tagger must read its left neighbour (a linear layer on one token cannot)."""
    g = torch.Generator().manual_seed(seed)
    vectors = torch.randn(5, hidden, generator=torch.Generator().manual_seed(0))
    out = []
    for _ in range(n):
        tokens = torch.randint(0, 5, (length,), generator=g)
        prev = torch.cat([torch.zeros(1, dtype=torch.long), tokens[:-1]])
        layers = torch.zeros(length, 3, hidden)
        layers[:, -1] = vectors[tokens]
        out.append({"input_ids": tokens.tolist(), "hidden_layers": layers.numpy(),
                    "labels": ((tokens + prev) % 5).tolist()})
    return out


def tag_accuracy(model: torch.nn.Module, data: list[dict]) -> float:
    batch = Collator(model_keys=("hidden_layers", "labels"))(data)
    model.eval()
    with torch.no_grad():
        logits = model(hidden_layers=batch["hidden_layers"], attention_mask=batch["attention_mask"]).logits
    return float((logits.argmax(-1) == batch["labels"]).float().mean())


@pytest.mark.parametrize("tagger, floor, ceiling", [("bilstm", 0.95, 1.0), ("linear", 0.0, 0.6)])
def test_tagger_learns_a_task_that_needs_the_previous_token(tmp_path: Path, tagger: str, floor: float,
                                                            ceiling: float) -> None:
    """Trained by the one Trainer on given features (no encoder run): the BiLSTM learns it, a linear layer cannot."""
    config = BertConfig(vocab_size=99, hidden_size=8, num_hidden_layers=2, num_attention_heads=2, intermediate_size=16,
                        num_labels=5, task="ner",
                        task_settings={"frozen_features": "last", "tagger": tagger, "tagger_hidden": 24,
                                       "tagger_dropout": 0.0})
    torch.manual_seed(0)
    model = BertForFrozenTokenClassification(config)
    train, test = synthetic_tagging(256, 10, 8, seed=1), synthetic_tagging(64, 10, 8, seed=2)
    cfg = TrainingConfig(output_dir=str(tmp_path / "run"), lr=2e-2, batch_size=32, epochs=25, warmup=0.0,
                         weight_decay=0.0, metric_for_best=None, precision="fp32", device="cpu", progress_bar=False,
                         log_every=1000)
    Trainer(model, cfg, train, Collator(model_keys=("hidden_layers", "labels"))).train()
    assert floor <= tag_accuracy(model, test) <= ceiling


def test_save_and_load_give_identical_predictions(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = BertForFrozenTokenClassification(tiny_config(frozen_features="weighted_sum", tagger_hidden=8)).eval()
    with torch.no_grad():  # a mix away from its even start, so a lost weight would show
        model.scalar_mix.scalar_weights.copy_(torch.tensor([0.3, -0.2, 0.9]))
    ids = torch.randint(1, 99, (3, 6))
    mask = torch.tensor([[1] * 6, [1] * 3 + [0] * 3, [1] * 5 + [0]])
    before = model(ids, mask).logits
    model.save_pretrained(str(tmp_path))
    loaded = BertForFrozenTokenClassification.from_pretrained(str(tmp_path), strict=True).eval()
    assert loaded.config.task_settings["frozen_features"] == "weighted_sum"
    torch.testing.assert_close(loaded(ids, mask).logits, before, rtol=0, atol=0)
    # padding does not change a sequence's logits: the BiLSTM reads each sequence's real tokens only
    torch.testing.assert_close(loaded(ids[1:2, :3], mask[1:2, :3]).logits, before[1:2, :3], rtol=1e-5, atol=1e-6)


def test_convert_to_hf_refuses_the_frozen_tagger(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """transformers has no such head: export is refused (the encoder alone can go with --class BertModel)."""
    from bertkit.cli import main

    BertForFrozenTokenClassification(tiny_config(frozen_features="last")).save_pretrained(str(tmp_path / "m"))
    (tmp_path / "m" / "vocab.txt").write_text("".join(f"t{i}\n" for i in range(99)))
    assert main(["convert", "--to-hf", str(tmp_path / "m"), "--out", str(tmp_path / "hf")]) == 1
    assert "BertForFrozenTokenClassification is a bertkit-only head" in capsys.readouterr().err
    assert not (tmp_path / "hf").exists()
    out = tmp_path / "encoder"
    assert main(["convert", "--to-hf", str(tmp_path / "m"), "--class", "BertModel", "--out", str(out)]) == 0
    assert (out / "model.safetensors").is_file()
