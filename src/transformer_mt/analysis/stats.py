"""Statistics of attention distributions: entropy, coverage, temperature.

Legend: rows are queries (target words), columns keys (source words); rows sum to 1.
"""

from __future__ import annotations

from torch import Tensor


def row_entropy(weights: Tensor) -> Tensor:
    """Entropy in nats of every attention row (..., T, S) -> (..., T); uniform over n keys gives log(n)."""
    return -(weights * weights.clamp_min(1e-30).log()).sum(dim=-1)


def coverage(weights: Tensor) -> Tensor:
    """Column sums (..., T, S) -> (..., S): how much attention each source word receives in total.

    Rows sum to 1, columns need not; a source word near 0 is one no target word attends to.
    """
    return weights.sum(dim=-2)


def with_temperature(weights: Tensor, tau: float) -> Tensor:
    """The same attention at softmax temperature ``tau``: softmax(scores / tau) along the last dim.

    The scores are recovered as log(weights) (up to a per-row constant, which the softmax
    ignores). tau -> 0 approaches the row's argmax, tau -> inf the uniform distribution.
    """
    if tau <= 0:
        raise ValueError(f"temperature must be > 0, got {tau}")
    return (weights.clamp_min(1e-30).log() / tau).softmax(dim=-1)
