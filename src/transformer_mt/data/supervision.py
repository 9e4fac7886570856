"""Guided-alignment supervision of a batch (Garg et al. 2019): piece links -> target rows.

Each training pair carries piece links (``transformer_mt.align.pieces.piece_links``); per batch
they become, for each target piece that has links, a target distribution uniform over the
source pieces it is linked to. ``transformer_mt.loss.alignment_loss`` trains one
cross-attention head towards it; rows without a link are left alone.

Legend: B batch, T target pieces (with EOS), S source pieces (with EOS), N links in a batch.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


def supervision(flat: np.ndarray, lens: np.ndarray) -> tuple[Tensor, Tensor, int]:
    """A batch's piece links -> (index (N, 3) of [sentence, target row, source column],
    weight (N,), number of supervised rows).

    Args:
        flat: every sentence's flattened ``[s, t, ...]`` links, end to end.
        lens: (B,) the length of each sentence's part of ``flat`` (twice its link count).

    Each supervised row's weights sum to 1 (uniform over its linked source pieces).
    """
    pairs = flat.reshape(-1, 2).astype(np.int64)
    sentence = np.repeat(np.arange(len(lens)), lens // 2)
    index = np.stack([sentence, pairs[:, 1], pairs[:, 0]], axis=1)  # b, t, s
    if len(index) == 0:
        return torch.zeros((0, 3), dtype=torch.long), torch.zeros(0), 0
    rows, inverse, counts = np.unique(index[:, :2], axis=0, return_inverse=True, return_counts=True)
    weight = 1.0 / counts[inverse.reshape(-1)]
    return torch.from_numpy(index), torch.from_numpy(weight.astype(np.float32)), len(rows)
