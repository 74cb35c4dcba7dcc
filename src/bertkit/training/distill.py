"""Knowledge distillation (DistilBERT, Sanh et al. 2019) as a model the one Trainer trains.

A student is the teacher with fewer layers, initialised from some of the teacher's layers plus its embeddings and
head (`student_from_teacher`). `Distiller` wraps student and frozen teacher: in training mode its forward runs both
on the batch and returns the student's own output whose `loss` is

    alpha_hard * hard loss (the head's: the task loss, or masked LM)
    + alpha_ce * KL(teacher || student) of the logits at temperature T, times T^2 (Hinton et al. 2015)
    + alpha_cos * mean(1 - cos) of each student layer's hidden states against the teacher layer it was taken from;

in eval mode it is the student alone, so evaluation callbacks and `save_pretrained` see the student. The teacher
is not a submodule: it is neither trained, nor checkpointed, nor put in training mode by the Trainer.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertkit.errors import ConfigError

LOGIT_FIELDS = ("logits", "prediction_logits", "start_logits", "end_logits")
"""Output fields the soft-target loss compares (the heads' outputs; MLM logits are at the masked positions)."""
_LAYER = re.compile(r"encoder\.layer\.(\d+)\.")


def spread_layers(teacher_layers: int, student_layers: int, where: str = "student_layers") -> list[int]:
    """The teacher layers a student of `student_layers` keeps: i * L // N, evenly spread from layer 0; for half the
    depth that is every other layer (6 -> 3: 0, 2, 4), DistilBERT's initialisation."""
    if not 0 < student_layers <= teacher_layers:
        raise ConfigError(f"{where} = {student_layers}: expected 1 to the teacher's {teacher_layers} layers")
    return [i * teacher_layers // student_layers for i in range(student_layers)]


def check_teacher(config: Any, layers: Sequence[int], where: str = "the teacher") -> None:
    """ConfigError for a teacher (its BertConfig) or a choice of its layers that distillation cannot use: a
    regression or multi-label head, shared layers, or layer indices it does not have. Jobs call it before they
    read any data; the Distiller and `student_from_teacher` check again."""
    problem = getattr(config, "problem_type", None)
    if problem in ("regression", "multi_label_classification"):
        raise ConfigError(f"{where}: its problem_type is {problem!r}, but distillation compares softmax "
                          "distributions (the soft targets), so the teacher must be a single-label classifier, a "
                          "tagger, a QA or multiple-choice model, or a masked LM; regression and multi-label "
                          "teachers are refused")
    if config.share_layers:
        raise ConfigError(f"{where} shares one layer across its depth (BertConfig.share_layers, ALBERT): there "
                          "are no separate layers to take a student from")
    bad = [i for i in layers if not 0 <= i < config.num_hidden_layers]
    if not layers or bad:
        raise ConfigError(f"teacher_layers = {list(layers)}: expected indices 0..{config.num_hidden_layers - 1} "
                          "of the teacher's layers")


def student_from_teacher(teacher: nn.Module, layers: Sequence[int]) -> nn.Module:
    """A model of the teacher's class and config with len(layers) layers: student layer j is a copy of teacher
    layer layers[j]; embeddings, pooler and head are copies of the teacher's."""
    config = teacher.config
    check_teacher(config, layers)
    student = type(teacher)(dataclasses.replace(config, num_hidden_layers=len(layers)))
    source = teacher.state_dict()

    def teacher_name(name: str) -> str:
        return _LAYER.sub(lambda m: f"encoder.layer.{layers[int(m[1])]}.", name)

    student.load_state_dict({name: source[teacher_name(name)] for name in student.state_dict()})
    return student.to(next(teacher.parameters()).device)


def soft_target_loss(student_logits: Tensor, teacher_logits: Tensor, temperature: float) -> Tensor:
    """KL(teacher || student) of the softmaxes at temperature T, times T^2 so the gradients keep their scale as T
    changes (Hinton et al. 2015, section 2); the mean over rows (the last dimension is the classes)."""
    s = F.log_softmax(student_logits.float().reshape(-1, student_logits.shape[-1]) / temperature, dim=-1)
    t = F.log_softmax(teacher_logits.float().reshape(-1, teacher_logits.shape[-1]) / temperature, dim=-1)
    return F.kl_div(s, t, reduction="batchmean", log_target=True) * temperature**2


def hidden_alignment_loss(student_hidden: Sequence[Tensor], teacher_hidden: Sequence[Tensor],
                          attention_mask: Tensor) -> Tensor:
    """Mean over the pairs of mean(1 - cos) over the real tokens: DistilBERT's cosine embedding loss (target 1)."""
    keep = attention_mask.reshape(-1, attention_mask.shape[-1]).bool()  # (batch [* choices], seq)
    losses = [(1 - F.cosine_similarity(s[keep].float(), t[keep].float(), dim=-1)).mean()
              for s, t in zip(student_hidden, teacher_hidden)]
    return torch.stack(losses).mean()


def _logits(output: Any, attention_mask: Tensor | None) -> list[Tensor]:
    """The output's logits; per-token ones (batch, seq, labels) at the real tokens only."""
    found = []
    for name in LOGIT_FIELDS:
        x = getattr(output, name, None)
        if x is None:
            continue
        if attention_mask is not None and x.dim() == 3 and x.shape[:2] == attention_mask.shape:
            x = x[attention_mask.bool()]
        found.append(x)
    return found


class Distiller(nn.Module):
    """Student + frozen teacher: the distillation loss in training mode, the student alone in eval mode."""

    def __init__(self, student: nn.Module, teacher: nn.Module, teacher_layers: Sequence[int], temperature: float,
                 alpha_ce: float, alpha_hard: float, alpha_cos: float) -> None:
        super().__init__()
        check_teacher(teacher.config, teacher_layers)
        if len(teacher_layers) != student.config.num_hidden_layers:
            raise ConfigError(f"teacher_layers has {len(teacher_layers)} entries, the student "
                              f"{student.config.num_hidden_layers} layers")
        if temperature <= 0:
            raise ConfigError(f"temperature = {temperature}: expected > 0")
        self.student = student
        teacher.eval().requires_grad_(False)
        object.__setattr__(self, "teacher", teacher)  # not a submodule: not trained, saved or put in train mode
        self.teacher_layers = list(teacher_layers)
        self.temperature, self.alpha_ce, self.alpha_hard, self.alpha_cos = temperature, alpha_ce, alpha_hard, alpha_cos

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> "Distiller":
        self.teacher._apply(fn)  # .to(device) / .float() move the teacher with the student
        return super()._apply(fn, recurse)

    def save_pretrained(self, folder: str) -> None:
        """The student's folder: what best/ and final/ hold."""
        self.student.save_pretrained(folder)

    def forward(self, **batch: Tensor) -> Any:
        """The student's output on `batch`; in training mode its `loss` is the weighted distillation loss."""
        if not self.training or self.alpha_ce == self.alpha_cos == 0:  # no teacher term: the student's own loss
            out = self.student(**batch)
            return out if not self.training else dataclasses.replace(out, loss=self.alpha_hard * out.loss)
        hidden = self.alpha_cos > 0
        out = self.student(**batch, output_hidden_states=hidden)
        if out.loss is None:
            raise ConfigError("distillation needs labelled batches (the hard loss, and for MLM the masked positions)")
        with torch.no_grad():
            ref = self.teacher(**batch, output_hidden_states=hidden)  # same labels: MLM logits at the same positions
        mask = batch.get("attention_mask")
        loss = self.alpha_hard * out.loss
        if self.alpha_ce > 0:
            pairs = list(zip(_logits(out, mask), _logits(ref, mask)))
            loss = loss + self.alpha_ce * sum(soft_target_loss(s, t, self.temperature) for s, t in pairs) / len(pairs)
        if hidden:
            if mask is None:
                mask = torch.ones_like(batch["input_ids"])
            chosen = [ref.hidden_states[i + 1] for i in self.teacher_layers]  # [0] is the embeddings
            loss = loss + self.alpha_cos * hidden_alignment_loss(out.hidden_states[1:], chosen, mask)
        return dataclasses.replace(out, loss=loss)
