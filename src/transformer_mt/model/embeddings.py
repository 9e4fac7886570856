"""Token embeddings and positional encodings (§3.4, §3.5; Table 3 row E).

Legend: B batch, T length, D d_model, V vocabulary.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


class TokenEmbedding(nn.Embedding):
    """Embedding whose output is multiplied by √d_model (§3.4)."""

    def forward(self, tokens: Tensor) -> Tensor:
        """(B, T) ids -> (B, T, D)."""
        return super().forward(tokens) * math.sqrt(self.embedding_dim)


def sinusoidal_table(max_len: int, d_model: int) -> Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)).

    Returns:
        (max_len, D) float32.
    """
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]  # (L, 1)
    inv_freq = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)  # (D/2,)
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(pos * inv_freq)
    table[:, 1::2] = torch.cos(pos * inv_freq[: d_model // 2])
    return table.float()


class SinusoidalPositionalEncoding(nn.Module):
    """Fixed sinusoids (§3.5), kept in a non-persistent buffer: not in checkpoints, no parameters."""

    def __init__(self, d_model: int, max_len: int) -> None:
        super().__init__()
        self.max_len = max_len
        self.register_buffer("table", sinusoidal_table(max_len, d_model), persistent=False)

    def forward(self, length: int, offset: int | Tensor = 0) -> Tensor:
        """Encodings of positions offset .. offset+length-1, shape (length, D).

        ``offset`` may be a 0-d tensor (a compiled decoding step, whose position must not be a
        Python number that the graph would be specialised on); the caller checks its range.
        """
        return _rows(self.table, length, offset, self.max_len)


class LearnedPositionalEmbedding(nn.Module):
    """Learned positions, the variant of Table 3 row (E)."""

    def __init__(self, d_model: int, max_len: int) -> None:
        super().__init__()
        self.max_len = max_len
        self.weight = nn.Parameter(torch.empty(max_len, d_model))
        nn.init.normal_(self.weight, std=d_model**-0.5)

    def forward(self, length: int, offset: int | Tensor = 0) -> Tensor:
        """Embeddings of positions offset .. offset+length-1, shape (length, D) (``offset`` as above)."""
        return _rows(self.weight, length, offset, self.max_len)


def _rows(table: Tensor, length: int, offset: int | Tensor, max_len: int) -> Tensor:
    """Rows offset .. offset+length-1 of a (max_len, D) table."""
    if isinstance(offset, Tensor):  # () int64: a gather, so the graph does not depend on its value
        return table.index_select(0, offset + torch.arange(length, device=table.device))
    _check_length(offset + length, max_len)
    return table[offset : offset + length]


def _check_length(needed: int, max_len: int) -> None:
    if needed > max_len:
        raise ValueError(
            f"sequence of {needed} positions exceeds the model's max_positions={max_len}; "
            "filter longer pairs (data.max_len) or build the model with a larger model.max_positions"
        )
