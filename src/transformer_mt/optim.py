"""Adam and the learning-rate schedule of §5.3 (Eq. 3)."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch.optim.lr_scheduler import LambdaLR

from transformer_mt.config import OptimConfig


def noam_lambda(step: int, d_model: int, warmup: int, factor: float = 1.0) -> float:
    """lrate = factor · d_model^-0.5 · min(step^-0.5, step · warmup^-1.5), for step >= 1.

    Linear warm-up for ``warmup`` steps, then decay with the inverse square root of the step;
    the peak, at ``step == warmup``, is d_model^-0.5 · warmup^-0.5 (6.988e-4 for base).
    """
    step = max(step, 1)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def build_optimizer(
    params: Iterable[torch.nn.Parameter], cfg: OptimConfig, d_model: int, fused: bool = False
) -> tuple[torch.optim.Optimizer, LambdaLR]:
    """Adam(β1=0.9, β2=0.98, ε=1e-9) and the schedule, to be stepped once per optimizer step.

    Adam's base lr is 1 so the scheduler's lambda is the learning rate itself; LambdaLR calls
    it with the number of steps taken so far (0 before the first), hence the +1.
    ``fused`` uses PyTorch's single-kernel Adam (one launch for all parameters on a GPU).
    """
    optimizer = torch.optim.Adam(
        params,
        lr=1.0,
        betas=tuple(cfg.betas),
        eps=cfg.eps,
        weight_decay=cfg.weight_decay,
        fused=fused or None,
    )
    schedule = LambdaLR(optimizer, lambda n: noam_lambda(n + 1, d_model, cfg.warmup, cfg.lr_factor))
    return optimizer, schedule
