"""TrainingConfig.head_lr_scale: the parameters outside the encoder get lr * scale, the encoder lr."""

from __future__ import annotations

from bertkit.model import BertConfig
from bertkit.model.heads import BertForSequenceClassification
from bertkit.training.config import TrainingConfig
from bertkit.training.optim import build_optimizer


def test_head_parameters_get_the_scaled_rate() -> None:
    model = BertForSequenceClassification(BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2,
                                                     num_attention_heads=4, intermediate_size=37,
                                                     tabular_inputs={"numeric": 2, "categories": [3]}))
    opt = build_optimizer(model, TrainingConfig(output_dir="x", lr=1e-4, head_lr_scale=10.0))
    rate = {id(p): g["lr"] for g in opt.param_groups for p in g["params"]}
    for name, p in model.named_parameters():
        assert rate[id(p)] == (1e-4 if name.startswith("bert.") else 1e-3), name
    assert opt.param_groups[0]["lr"] == 1e-4  # what the trainer logs: the encoder's rate
    assert len(rate) == len(list(model.parameters()))


def test_scale_one_keeps_the_two_groups() -> None:
    model = BertForSequenceClassification(BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2,
                                                     num_attention_heads=4, intermediate_size=37))
    opt = build_optimizer(model, TrainingConfig(output_dir="x", lr=1e-4))
    assert len(opt.param_groups) == 2 and {g["lr"] for g in opt.param_groups} == {1e-4}
