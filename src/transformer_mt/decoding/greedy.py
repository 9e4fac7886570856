"""Batched greedy search with the key/value cache.

Legend: B batch, S source length, V vocabulary.
"""

from __future__ import annotations

import torch
from torch import Tensor

from transformer_mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from transformer_mt.model import Transformer


def max_output_lengths(src: Tensor, max_len_a: float, max_len_b: int, max_positions: int) -> Tensor:
    """a · |x| + b per sentence (§6.1: input length + 50), capped by the model's positions.

    Args:
        src: (B, S) padded source ids (EOS included in |x|).

    Returns:
        (B,) int64.
    """
    src_len = (src != PAD_ID).sum(dim=1)  # (B,)
    return (max_len_a * src_len + max_len_b).long().clamp(min=1, max=max_positions - 1)


@torch.no_grad()
def greedy_decode(
    model: Transformer, src: Tensor, max_len_a: float = 1.0, max_len_b: int = 50
) -> list[list[int]]:
    """The most probable token at every step, until EOS or the length limit.

    Finished sentences are dropped from the batch (and from the cache), so the cost follows the
    sentences still being written.

    Args:
        src: (B, S) padded, EOS-terminated source ids.

    Returns:
        B lists of token ids, without BOS and EOS.
    """
    memory, src_mask, _ = model.encode(src)
    cache = model.start_decoding(memory, src_mask)
    limit = max_output_lengths(src, max_len_a, max_len_b, model.cfg.max_positions)  # (B,)
    B = src.size(0)
    alive = torch.arange(B, device=src.device)  # rows of the original batch still decoding
    last = torch.full((B, 1), BOS_ID, dtype=torch.long, device=src.device)  # (B', 1)
    out: list[list[int]] = [[] for _ in range(B)]
    for step in range(int(limit.max())):
        logprobs, _ = model.decode_step(last, cache)  # (B', V)
        logprobs[:, PAD_ID] = -torch.inf  # never emit padding or BOS
        logprobs[:, BOS_ID] = -torch.inf
        token = logprobs.argmax(dim=-1)  # (B',)
        done = (token == EOS_ID) | (step + 1 >= limit[alive])
        for row, tok in zip(alive.tolist(), token.tolist()):
            if tok != EOS_ID:
                out[row].append(tok)
        if done.all():
            break
        keep = (~done).nonzero().squeeze(1)  # (B'',)
        if keep.numel() < alive.numel():
            cache = cache.reorder(keep)
            alive, token = alive[keep], token[keep]
        last = token[:, None]
    return out
