"""Distillation's pieces against hand computations: the student's layers, the losses, a frozen teacher."""

from __future__ import annotations

import math

import pytest
import torch

from bertkit.errors import ConfigError
from bertkit.model import BertConfig, BertForPreTraining, BertForSequenceClassification
from bertkit.training.distill import (
    Distiller,
    hidden_alignment_loss,
    soft_target_loss,
    spread_layers,
    student_from_teacher,
)

# google-research/bert's modeling_test.py model, 4 layers deep so a student can skip some; no dropout, so a student
# equal to its teacher computes exactly the teacher's numbers in training mode.
TINY = dict(vocab_size=99, hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=37,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=3)


def _teacher(cls: type = BertForSequenceClassification) -> torch.nn.Module:
    torch.manual_seed(0)
    return cls(BertConfig(**TINY))


def _batch(labels: torch.Tensor) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 99, (3, 7), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0  # padding the losses must leave out
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids), "labels": labels}


def _distiller(student: torch.nn.Module, teacher: torch.nn.Module, layers: list[int], **alphas: float) -> Distiller:
    weights = dict(alpha_ce=5.0, alpha_hard=2.0, alpha_cos=1.0) | alphas
    return Distiller(student, teacher, layers, temperature=2.0, **weights)


def test_spread_layers_is_every_other_layer_for_half_the_depth() -> None:
    assert spread_layers(6, 3) == [0, 2, 4]
    assert spread_layers(12, 6) == [0, 2, 4, 6, 8, 10]
    assert spread_layers(4, 4) == [0, 1, 2, 3] and spread_layers(6, 1) == [0]
    with pytest.raises(ConfigError, match="student_layers = 7: expected 1 to the teacher's 6"):
        spread_layers(6, 7)


def test_student_weights_are_the_teachers_chosen_layers() -> None:
    teacher = _teacher()
    student = student_from_teacher(teacher, [0, 3])
    assert student.config.num_hidden_layers == 2 and type(student) is type(teacher)
    t, s = teacher.state_dict(), student.state_dict()
    for name, value in s.items():
        source = name.replace("encoder.layer.1.", "encoder.layer.3.")  # student layer 1 <- teacher layer 3
        assert torch.equal(value, t[source]), name
    assert any(k.startswith("bert.encoder.layer.1.") for k in s) and not any("layer.2." in k for k in s)
    assert torch.equal(s["classifier.weight"], t["classifier.weight"])  # the head comes along
    assert torch.equal(s["bert.embeddings.word_embeddings.weight"], t["bert.embeddings.word_embeddings.weight"])
    s["bert.encoder.layer.0.output.dense.weight"].add_(1.0)  # a copy, not shared storage
    assert not torch.equal(s["bert.encoder.layer.0.output.dense.weight"], t["bert.encoder.layer.0.output.dense.weight"])
    with pytest.raises(ConfigError, match=r"teacher_layers = \[0, 4\]: expected indices 0..3"):
        student_from_teacher(teacher, [0, 4])


@pytest.mark.parametrize("cls, labels", [
    (BertForSequenceClassification, torch.tensor([0, 2, 1])),
    (BertForPreTraining, torch.tensor([[-100, 7, -100, -100, 9, -100, -100]] * 3)),  # masked LM at 2 positions
])
def test_a_student_equal_to_its_teacher_has_only_the_hard_loss(cls: type, labels: torch.Tensor) -> None:
    """Soft-target KL and cosine alignment vanish when the student computes what the teacher computes."""
    teacher = _teacher(cls)
    distiller = _distiller(student_from_teacher(teacher, [0, 1, 2, 3]), teacher, [0, 1, 2, 3]).train()
    batch = _batch(labels)
    out = distiller(**batch)
    hard = teacher(**batch).loss
    assert torch.allclose(out.loss, 2.0 * hard, atol=1e-5), (out.loss, hard)
    # the same student against a different teacher: both extra losses are positive
    other = _distiller(student_from_teacher(teacher, [0, 1, 2, 3]), _teacher(cls).apply(_perturb), [0, 1, 2, 3])
    assert float(other.train()(**batch).loss.detach()) > float(2.0 * hard.detach()) + 1e-3


def _perturb(module: torch.nn.Module) -> None:
    if isinstance(module, torch.nn.Linear):
        with torch.no_grad():
            module.weight.add_(0.05 * torch.randn_like(module.weight))


def test_gradients_reach_only_the_student_and_the_teacher_stays_frozen_in_eval_mode() -> None:
    teacher = _teacher()
    distiller = _distiller(student_from_teacher(teacher, [0, 2]), teacher, [0, 2])
    distiller.train()
    assert distiller.student.training and not teacher.training  # train() does not reach the teacher
    assert all(not p.requires_grad for p in teacher.parameters())
    assert {id(p) for p in distiller.parameters()} == {id(p) for p in distiller.student.parameters()}
    assert all(k.startswith("student.") for k in distiller.state_dict())  # checkpoints hold the student only
    distiller(**_batch(torch.tensor([0, 2, 1]))).loss.backward()
    assert all(p.grad is None for p in teacher.parameters())
    grads = [p.grad for p in distiller.student.parameters()]
    assert all(g is not None for g in grads) and sum(float(g.abs().sum()) for g in grads) > 0
    # eval mode: the student alone, no teacher forward, the student's own loss
    distiller.eval()
    batch = _batch(torch.tensor([0, 2, 1]))
    assert torch.equal(distiller(**batch).logits, distiller.student(**batch).logits)


def test_soft_target_loss_matches_a_hand_computation_at_temperature() -> None:
    s, t, temp = [1.0, 2.0, 3.0], [3.0, 1.0, 0.0], 2.0

    def softmax(x: list[float]) -> list[float]:
        e = [math.exp(v / temp) for v in x]
        return [v / sum(e) for v in e]

    p, q = softmax(t), softmax(s)
    expected = sum(pi * math.log(pi / qi) for pi, qi in zip(p, q)) * temp**2  # KL(teacher || student) * T^2
    got = soft_target_loss(torch.tensor([s, s]), torch.tensor([t, t]), temp)  # mean over the two rows
    assert got.item() == pytest.approx(expected, rel=1e-6)
    assert soft_target_loss(torch.tensor([s]), torch.tensor([s]), 5.0).item() == pytest.approx(0.0, abs=1e-7)


def test_hidden_alignment_loss_counts_real_tokens_only() -> None:
    s = torch.tensor([[[1.0, 0.0], [1.0, 0.0], [5.0, 5.0]]])  # (batch 1, seq 3, hidden 2)
    t = torch.tensor([[[2.0, 0.0], [0.0, 3.0], [-1.0, 0.0]]])
    mask = torch.tensor([[1, 1, 0]])  # the third token is padding
    # token 1: cos 1 -> 0; token 2: cos 0 -> 1; mean 0.5 (the padded token's cos -0.707 is left out)
    assert hidden_alignment_loss([s], [t], mask).item() == pytest.approx(0.5)
    assert hidden_alignment_loss([s, t], [s, t], mask).item() == pytest.approx(0.0, abs=1e-6)


def test_distiller_refuses_a_regression_teacher() -> None:
    torch.manual_seed(0)
    teacher = BertForSequenceClassification(BertConfig(**{**TINY, "num_labels": 1, "problem_type": "regression"}))
    with pytest.raises(ConfigError, match="problem_type is 'regression'"):
        _distiller(student_from_teacher(teacher, [0]), teacher, [0])
