"""The training loss (§5.4): label-smoothed cross-entropy, summed over real target tokens.

Plain torch, so that benchmarks and notebooks use the loss the trainer uses without Lightning.
"""

from __future__ import annotations

from torch import Tensor

from transformer_mt.data.tokenizer import PAD_ID


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
