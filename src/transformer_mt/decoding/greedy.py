"""Batched greedy search: the fast path for beam size 1.

Legend: B batch, S source length, V vocabulary.
"""

from __future__ import annotations

import torch
from torch import Tensor

from transformer_mt.decoding.state import constrain_length, decoder_state, length_limits
from transformer_mt.model import Transformer
from transformer_mt.model.vocab import BOS_ID, EOS_ID


@torch.inference_mode()
def greedy_decode(
    model: Transformer,
    src: Tensor,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
    min_len: int = 0,
    use_cache: bool = True,
    compile: bool = False,
) -> list[list[int]]:
    """The most probable token at every step, until EOS or the length limit.

    Finished sentences leave the batch (and the cache), so the cost follows the sentences
    still being written.

    Args:
        src: (B, S) padded, EOS-terminated source ids.
        max_len_a, max_len_b: at most a · |x| + b tokens, then EOS.
        min_len: EOS is not allowed before this many tokens.
        use_cache: False recomputes the whole prefix every step (for comparison only).
        compile: run the cached step as a compiled graph (``decoding.compiled``); the same tokens.

    Returns:
        B lists of token ids, without BOS and EOS.
    """
    limit = length_limits(src, max_len_a, max_len_b, model.cfg.max_positions)  # (B,)
    state = decoder_state(model, src, use_cache, compile, int(limit.max()))
    alive = torch.arange(src.size(0), device=src.device)  # rows of the batch still decoding
    prefix = torch.full((src.size(0), 1), BOS_ID, dtype=torch.long, device=src.device)  # (B', t)
    out: list[list[int]] = [[] for _ in range(src.size(0))]
    for step in range(int(limit.max()) + 1):
        logprobs = constrain_length(state.step(prefix), step, min_len, limit[alive])  # (B', V)
        token = logprobs.argmax(dim=-1)  # (B',)
        for row, tok in zip(alive.tolist(), token.tolist()):
            if tok != EOS_ID:
                out[row].append(tok)
        keep = (token != EOS_ID).nonzero().squeeze(1)  # (B'',)
        if keep.numel() == 0:
            break
        prefix = torch.cat([prefix, token[:, None]], dim=1)
        if keep.numel() < alive.numel():
            state.reorder(keep)
            alive, prefix = alive[keep], prefix[keep]
    return out
