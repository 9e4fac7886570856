"""Key/value caches for incremental decoding, as explicit data.

Legend: B batch (times beam), H heads, Tk cached length, Dh head dim.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor


@dataclass
class LayerCache:
    """Keys and values of one attention module; the first ``length`` positions are valid.

    Self-attention caches grow by one position per decoding step. They are written in place
    into buffers with spare capacity (doubled when full), so a step costs O(1) copies rather
    than re-concatenating the whole prefix. Cross-attention caches hold the projected encoder output,
    computed once per source batch.

    After ``append`` or ``reorder``, use the returned cache: the old one's buffers are reused.

    Attributes:
        k: (B, H, capacity, Dh) buffer.
        v: (B, H, capacity, Dh) buffer.
        length: how many positions are filled.
    """

    k: Tensor
    v: Tensor
    length: int
    # Buffers of a previous reorder, recycled by the next one: fresh multi-MB allocations at
    # every beam step cost more (page faults) than the copy itself.
    spare: tuple[Tensor, Tensor] | None = field(default=None, repr=False)

    @classmethod
    def of(cls, k: Tensor, v: Tensor) -> LayerCache:
        """A full cache of (B, H, T, Dh) keys and values."""
        return cls(k, v, k.size(2))

    @classmethod
    def empty(cls, like: LayerCache, capacity: int) -> LayerCache:
        """An empty cache with room for ``capacity`` positions, rows and heads as ``like``'s.

        A search that knows its longest output sizes its self-attention caches once: growing
        them on the way copies the keys and faults in fresh pages (a third of an eager int8
        beam search's time at the base shape).
        """
        (rows, heads, _, dk), dv = like.k.shape, like.v.size(3)
        return cls(
            like.k.new_empty(rows, heads, capacity, dk),
            like.v.new_empty(rows, heads, capacity, dv),
            0,
        )

    @property
    def keys(self) -> Tensor:
        return self.k[:, :, : self.length]  # (B, H, length, Dh)

    @property
    def values(self) -> Tensor:
        return self.v[:, :, : self.length]  # (B, H, length, Dh)

    def append(self, k: Tensor, v: Tensor) -> LayerCache:
        """Add (B, H, t, Dh) new positions, growing the buffers when they are full."""
        new = self.length + k.size(2)
        cache = self
        if new > self.k.size(2):
            capacity = max(2 * self.k.size(2), new, 16)
            grown_k = self.k.new_empty(*self.k.shape[:2], capacity, self.k.size(3))
            grown_v = self.v.new_empty(*self.v.shape[:2], capacity, self.v.size(3))
            grown_k[:, :, : self.length] = self.keys
            grown_v[:, :, : self.length] = self.values
            cache = LayerCache(grown_k, grown_v, self.length)
        cache.k[:, :, cache.length : new] = k
        cache.v[:, :, cache.length : new] = v
        cache.length = new
        return cache

    def reorder(self, index: Tensor) -> LayerCache:
        """Keep batch rows ``index`` (B',), e.g. the surviving beams' parents.

        The filled positions are selected into buffers of the same capacity (so the next
        ``append`` writes in place instead of growing), recycled when the shape allows; this
        cache's own buffers become the new cache's spares.
        """
        if torch.is_grad_enabled() and self.k.requires_grad:  # out= cannot record autograd
            return LayerCache(
                self.k.index_select(0, index), self.v.index_select(0, index), self.length
            )
        # keys and values may differ in width (Table 3 row B: d_k below d_model / h = d_v)
        k_shape = (index.numel(), *self.k.shape[1:])
        v_shape = (index.numel(), *self.v.shape[1:])
        if self.spare is not None and (self.spare[0].shape, self.spare[1].shape) == (
            k_shape,
            v_shape,
        ):
            k, v = self.spare
        else:
            k, v = self.k.new_empty(k_shape), self.v.new_empty(v_shape)
        n = self.length  # only the filled positions: a buffer sized for the longest output is
        # mostly empty early in a search, and the copy is memory-bound
        torch.index_select(self.k[:, :, :n], 0, index, out=k[:, :, :n])
        torch.index_select(self.v[:, :, :n], 0, index, out=v[:, :, :n])
        return LayerCache(k, v, self.length, spare=(self.k, self.v))


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

    # A growing cache holds exactly the positions decoded so far: a new query sees them all.
    static = False

    def step_mask(self) -> Tensor | None:
        """The self-attention mask of a decoding step's query: None, every cached key is real."""
        return None

    def reorder(
        self, index: Tensor, sources_changed: bool = True, sentences: Tensor | None = None
    ) -> DecoderCache:
        """Select batch rows (B',) for beam search or pruning finished sentences.

        Args:
            sources_changed: False when ``index`` only permutes rows that share a source
                sentence (beams of the same sentence): the cross-attention K/V are then
                identical row for row and are kept as they are, saving a copy per layer.
            sentences: the rows of the cross-attention K/V and mask to keep, when they are
                held once per sentence (``DecoderState``) rather than once per row; default
                ``index``.
        """
        if not sources_changed:
            cross, mask = self.cross_attn, self.memory_mask
        else:
            keep = index if sentences is None else sentences
            cross = [c.reorder(keep) for c in self.cross_attn]
            mask = self.memory_mask.index_select(0, keep)
        return DecoderCache(
            self_attn=[c.reorder(index) if c is not None else None for c in self.self_attn],
            cross_attn=cross,
            memory_mask=mask,
            offset=self.offset,
        )


@dataclass
class StaticLayerCache:
    """Self-attention keys and values in buffers of fixed capacity, written at ``position``.

    The compiled decoding step (``transformer_mt.decoding.compiled``) needs every tensor shape
    and every Python number in its graph to stay the same from one step to the next: the
    buffers never grow, the position is a 0-d tensor, and the keys not yet written are masked
    (``StaticDecoderCache.step_mask``) instead of sliced off.

    Attributes:
        k, v: (B, H, capacity, Dh) buffers, written in place.
        position: () int64, where the next key goes.
    """

    k: Tensor
    v: Tensor
    position: Tensor

    @property
    def keys(self) -> Tensor:
        return self.k  # (B, H, capacity, Dh); positions > position masked by the caller

    @property
    def values(self) -> Tensor:
        return self.v

    def append(self, k: Tensor, v: Tensor) -> StaticLayerCache:
        """Write one new position (B, H, 1, Dh) at ``position``; returns this cache."""
        index = self.position.view(1)
        self.k.index_copy_(2, index, k)
        self.v.index_copy_(2, index, v)
        return self


@dataclass
class StaticDecoderCache(DecoderCache):
    """A ``DecoderCache`` whose self-attention buffers have a fixed capacity (compiled decoding).

    ``offset`` is a 0-d int64 tensor (the position of the token being fed), shared by the
    layers' ``StaticLayerCache``; the cross-attention caches and ``memory_mask`` may carry
    padded source positions (masked). Built afresh for every step by the compiled step function.
    """

    static = True

    def step_mask(self) -> Tensor:
        """(1, 1, 1, capacity): the keys up to and including the current position."""
        capacity = self.self_attn[0].k.size(2)
        keys = torch.arange(capacity, device=self.memory_mask.device)
        return (keys <= self.offset).view(1, 1, 1, capacity)
