"""The training losses: label-smoothed cross-entropy (§5.4), summed over real target tokens,
and guided alignment's KL divergence of one cross-attention head (Garg et al. 2019).

Plain torch, so that benchmarks and notebooks use the loss the trainer uses without Lightning.
"""

from __future__ import annotations

import torch
from torch import Tensor

from transformer_mt.model.vocab import PAD_ID


def label_smoothed_nll(logits: Tensor, target: Tensor, epsilon: float) -> tuple[Tensor, Tensor]:
    """Summed label-smoothed loss and summed NLL over non-pad targets.

    The smoothed target puts 1 - ε on the reference and spreads ε uniformly over the
    vocabulary (Szegedy et al. 2016, as in the paper); padding positions count for nothing.

    Args:
        logits: (B, T, V); target: (B, T).

    Returns:
        (loss, nll), both scalars summed over the real target tokens.
    """
    lprobs = logits.float().log_softmax(dim=-1)  # (B, T, V)
    real = target != PAD_ID  # (B, T)
    nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)[real]  # (N,)
    smooth = -lprobs.mean(dim=-1)[real]  # (N,): cross-entropy with the uniform distribution
    return ((1.0 - epsilon) * nll + epsilon * smooth).sum(), nll.sum()


def alignment_loss(
    weights: Tensor, index: Tensor, weight: Tensor, n_rows: int, shift: bool = False
) -> Tensor:
    """KL(target || head) per supervised target row, averaged over those rows.

    Args:
        weights: (B, T, S) one head's attention (rows sum to 1).
        index, weight, n_rows: from ``transformer_mt.data.supervision.supervision``.
        shift: supervise, for target piece t, the row where it is the decoder's input
            (row t + 1: ``tgt_in`` is BOS and the pieces) instead of the row that predicts it.

    Zero exactly when the head puts on every supervised row the target distribution; the
    gradient is that of Garg et al.'s cross-entropy (the two differ by the target's entropy).
    """
    if n_rows == 0:
        return weights.sum() * 0.0  # keeps the graph (DDP) without a host read
    rows = index[:, 1] + 1 if shift else index[:, 1]
    picked = weights[index[:, 0], rows, index[:, 2]].float()  # (N,)
    tiny = torch.finfo(torch.float32).tiny
    kl = weight * (weight.log() - picked.clamp_min(tiny).log())
    return kl.sum() / n_rows
