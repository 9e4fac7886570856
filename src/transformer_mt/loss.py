"""The training losses: label-smoothed cross-entropy (§5.4), summed over real target tokens,
and guided alignment's KL divergence of one cross-attention head (Garg et al. 2019).

Plain torch, so that benchmarks and notebooks use the loss the trainer uses without Lightning.
"""

from __future__ import annotations

import torch
from torch import Tensor

from transformer_mt.model import Transformer
from transformer_mt.model.vocab import PAD_ID


def label_smoothed_nll(
    logits: Tensor, target: Tensor, epsilon: float, per_sentence: bool = False
) -> tuple[Tensor, Tensor]:
    """Summed label-smoothed loss and summed NLL over non-pad targets.

    The smoothed target puts 1 - ε on the reference and spreads ε uniformly over the
    vocabulary (Szegedy et al. 2016, as in the paper); padding positions count for nothing.

    Args:
        logits: (B, T, V); target: (B, T).

    Returns:
        (loss, nll), both scalars summed over the real target tokens; ``per_sentence``: both
        (B,), each sentence's sums (validation sums them over the rows of a whole split).
    """
    lprobs = logits.float().log_softmax(dim=-1)  # (B, T, V)
    real = target != PAD_ID  # (B, T)
    # Masked sums, not boolean indexing: no data-dependent shape (torch.compile keeps one graph)
    nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1) * real  # (B, T)
    smooth = -lprobs.mean(dim=-1) * real  # (B, T): cross-entropy with the uniform distribution
    loss = (1.0 - epsilon) * nll + epsilon * smooth
    if per_sentence:
        return loss.sum(dim=1), nll.sum(dim=1)
    return loss.sum(), nll.sum()


def translation_loss(
    model: Transformer,
    src: Tensor,
    tgt_in: Tensor,
    tgt_out: Tensor,
    epsilon: float,
    per_sentence: bool = False,
) -> tuple[Tensor, Tensor]:
    """``label_smoothed_nll`` of the model's teacher-forced logits: the training step's forward
    pass in one function, which ``trainer.compile=true`` compiles as one graph."""
    return label_smoothed_nll(model(src, tgt_in), tgt_out, epsilon, per_sentence)


def guided_translation_loss(
    model: Transformer,
    src: Tensor,
    tgt_in: Tensor,
    tgt_out: Tensor,
    epsilon: float,
    layer: int,
    head: int,
    full_context: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    """``translation_loss`` that also returns the guided head's (B, T, S) weights
    (``Transformer.forward_with_head``, 0-based ``layer``/``head``); ``alignment_loss`` is applied
    to them outside, where the batch's variable number of links does not change the graph."""
    logits, weights = model.forward_with_head(src, tgt_in, layer, head, full_context)
    loss, nll = label_smoothed_nll(logits, tgt_out, epsilon)
    return loss, nll, weights


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
