"""The only place masks are built.

Convention (that of ``torch.nn.functional.scaled_dot_product_attention``): a mask is a
bool tensor and ``True`` means *may attend*. Masks cover keys only and broadcast over
heads and, for padding, over queries, so no query row is ever fully masked and no NaN
can appear in a softmax.

Legend: B batch, S source length, T target length.
"""

from __future__ import annotations

import torch
from torch import Tensor


def padding_mask(tokens: Tensor, pad_id: int) -> Tensor:
    """Keys that are real tokens.

    Args:
        tokens: (B, S) token ids.
        pad_id: the padding id.

    Returns:
        (B, 1, 1, S) bool, True where ``tokens != pad_id``.
    """
    return (tokens != pad_id)[:, None, None, :]  # (B, 1, 1, S)


def causal_mask(size: int, device: torch.device | None = None) -> Tensor:
    """Position t may attend to positions <= t (§3.2.3: "prevent leftward information flow").

    Returns:
        (1, 1, T, T) bool, lower-triangular.
    """
    ones = torch.ones(size, size, dtype=torch.bool, device=device)
    return torch.tril(ones)[None, None]  # (1, 1, T, T)


def decoder_self_mask(tokens: Tensor, pad_id: int) -> Tensor:
    """Padding AND causal mask for the decoder's self-attention.

    Targets are right-padded, so every row keeps at least its first key (BOS) and no row
    is empty.

    Args:
        tokens: (B, T) decoder input ids.

    Returns:
        (B, 1, T, T) bool.
    """
    return padding_mask(tokens, pad_id) & causal_mask(tokens.size(1), tokens.device)  # (B, 1, T, T)


def without_trivial(mask: Tensor) -> Tensor | None:
    """None for a padding mask that is all true on the CPU, where attention runs faster
    without one; the mask itself otherwise (on a GPU the check would cost a device sync,
    and masks cost little there). Called once per stack, not per layer.
    """
    if torch.compiler.is_compiling():  # reading a value would split the graph
        return mask
    if mask.device.type == "cpu" and bool(mask.all()):
        return None
    return mask
