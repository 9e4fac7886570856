"""Key/value caches for incremental decoding, as explicit data.

Legend: B batch (times beam), H heads, Tk cached length, Dh head dim.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor


@dataclass
class LayerCache:
    """Keys and values of one attention module.

    Self-attention caches grow by one position per decoding step; cross-attention caches
    hold the projected encoder output, computed once per source batch.

    Attributes:
        k: (B, H, Tk, Dh)
        v: (B, H, Tk, Dh)
    """

    k: Tensor
    v: Tensor

    def reorder(self, index: Tensor) -> LayerCache:
        """Keep batch rows ``index`` (B',), e.g. the surviving beams' parents."""
        return LayerCache(self.k.index_select(0, index), self.v.index_select(0, index))


@dataclass
class DecoderCache:
    """Everything the decoder carries from one step to the next.

    Attributes:
        self_attn: one growing cache per decoder layer (None before the first step).
        cross_attn: one cache per decoder layer of the projected encoder output.
        memory_mask: (B, 1, 1, S) source padding mask, True = real token.
        offset: how many target positions have been decoded so far.
    """

    self_attn: list[LayerCache | None]
    cross_attn: list[LayerCache]
    memory_mask: Tensor
    offset: int = 0

    def reorder(self, index: Tensor) -> DecoderCache:
        """Select batch rows (B',) of every tensor, for beam search or pruning finished sentences."""
        return DecoderCache(
            self_attn=[c.reorder(index) if c is not None else None for c in self.self_attn],
            cross_attn=[c.reorder(index) for c in self.cross_attn],
            memory_mask=self.memory_mask.index_select(0, index),
            offset=self.offset,
        )
