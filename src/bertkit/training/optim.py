"""Optimizers: weight-decay parameter groups, AdamW with the paper's settings, and LAMB for very large batches."""

from __future__ import annotations

import math
from typing import Any, Iterable

import torch
from torch import Tensor, nn
from torch.optim import Optimizer

from bertkit.training.config import TrainingConfig

# Normalisation layers whose weights (scales) must not be pulled towards 0.
_NORM_TYPES = (nn.LayerNorm, nn.GroupNorm, nn.BatchNorm1d, nn.BatchNorm2d, nn.RMSNorm)


def split_decay_names(model: nn.Module) -> tuple[list[str], list[str]]:
    """Names of the trainable parameters that get weight decay and those that do not: none on biases and
    normalisation weights, as google-research/bert's `exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"]`."""
    norm_params = {
        id(p) for m in model.modules() if isinstance(m, _NORM_TYPES) for p in m.parameters(recurse=False)
    }
    decay, no_decay = [], []
    for name, p in model.named_parameters():  # named_parameters() yields a tied tensor once
        if not p.requires_grad:
            continue
        leaf = name.rsplit(".", 1)[-1]
        if leaf == "bias" or id(p) in norm_params or "LayerNorm" in name or "layer_norm" in name:
            no_decay.append(name)
        else:
            decay.append(name)
    return decay, no_decay


def parameter_groups(model: nn.Module, weight_decay: float, lr: float | None = None,
                     head_lr_scale: float = 1.0) -> list[dict[str, Any]]:
    """Two optimizer groups: decayed weights, and biases + LayerNorm weights with weight_decay 0. With
    head_lr_scale != 1, each is split again: the parameters outside the encoder (`bert.`) get lr * head_lr_scale."""
    params = dict(model.named_parameters())
    decay, no_decay = split_decay_names(model)
    groups = [
        {"params": [params[n] for n in decay], "weight_decay": weight_decay},
        {"params": [params[n] for n in no_decay], "weight_decay": 0.0},
    ]
    if head_lr_scale == 1.0 or lr is None:
        return groups
    split = []
    for names, group in zip((decay, no_decay), groups):
        head = [params[n] for n in names if not n.startswith("bert.")]
        split += [{**group, "params": [params[n] for n in names if n.startswith("bert.")], "lr": lr},
                  {**group, "params": head, "lr": lr * head_lr_scale}]
    return [g for g in split if g["params"]]


class Lamb(Optimizer):
    """LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes"): Adam's
    update plus weight decay per tensor, scaled by the trust ratio ||p|| / ||update|| (1 when either is 0)."""

    def __init__(self, params: Iterable[Tensor] | Iterable[dict[str, Any]], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6, weight_decay: float = 0.01) -> None:
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure: Any = None) -> Tensor | None:  # noqa: D102 (Optimizer.step)
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad.float()
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32)
                    state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32)
                state["step"] += 1
                t = state["step"]
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.mul_(beta1).add_(g, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                m_hat = m / (1 - beta1**t)
                v_hat = v / (1 - beta2**t)
                update = m_hat / (v_hat.sqrt() + group["eps"])
                if group["weight_decay"]:
                    update.add_(p.float(), alpha=group["weight_decay"])
                w_norm, u_norm = float(p.float().norm()), float(update.norm())
                ratio = w_norm / u_norm if w_norm > 0 and u_norm > 0 and math.isfinite(u_norm) else 1.0
                p.add_(update.to(p.dtype), alpha=-group["lr"] * ratio)
        return loss


def build_optimizer(model: nn.Module, config: TrainingConfig) -> Optimizer:
    """AdamW (decoupled weight decay) or LAMB over `parameter_groups`, with the config's betas, eps and lr."""
    groups = parameter_groups(model, config.weight_decay, config.lr, config.head_lr_scale)
    betas = (config.adam_beta1, config.adam_beta2)
    if config.optimizer == "lamb":
        return Lamb(groups, lr=config.lr, betas=betas, eps=config.adam_eps, weight_decay=config.weight_decay)
    return torch.optim.AdamW(groups, lr=config.lr, betas=betas, eps=config.adam_eps, weight_decay=config.weight_decay,
                             fused=_fused_adamw_supported(groups))


def _fused_adamw_supported(groups: list[dict[str, Any]]) -> bool:
    """True when torch's single-kernel AdamW (the same update, within float rounding) can update every parameter:
    floating point, on CPU or CUDA."""
    params = [p for g in groups for p in g["params"]]
    return bool(params) and all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)
