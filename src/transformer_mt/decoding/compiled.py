"""A decoder step compiled with ``torch.compile`` (``decode.compile=true``, ``translate.py --compile``).

A cached decoding step of a small batch is a few hundred small operations (projections,
reshapes, masking, LayerNorms) whose Python and dispatch overhead costs as much as their
arithmetic. Compiled, the step runs as one graph with fused element-wise kernels. A graph is
built for fixed shapes and fixed Python values, so the state here differs from
``DecoderState``'s in three ways:

- the self-attention cache has a fixed capacity (the longest output the search allows, rounded
  up to a power of two): keys are written in place at a position held in a 0-d tensor, and
  the positions not yet written are masked rather than sliced off; a step reads a
  power-of-two window of it that covers the position (``MIN_WINDOW`` keys at least);
- the encoder output is padded to a power of two of positions (masked);
- the rows (sentences x beams) stay as many as the first step had until the live ones fit in
  half of them, then shrink to a power of two of sentences (dummy sentences pad it), never
  below ``MIN_SLOTS`` rows.

As in ``DecoderState``, the cross-attention K/V and the source mask are held once per
sentence, not once per beam (a sentence's beams attend as one block of queries,
``attention._one_query_attention``), and the state starts with one row per sentence (beam
search's first step: its beams would all start from BOS) until its first ``reorder`` widens it
to K rows per sentence.

A test set of length-sorted batches therefore compiles a handful of graphs, not one per batch;
``compile_count`` says how many. The encoder runs once per batch and stays eager. On CPUs the
fp32 matrix products of both go through oneDNN (``onednn.py``). Outputs are eager decoding's
(the same tokens, greedy and beam; tests pin them).
"""

from __future__ import annotations

import math
import os
import sys
import weakref
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from transformer_mt.decoding.onednn import PackedWeights, onednn_linears, packed_weights
from transformer_mt.model import Transformer
from transformer_mt.model.cache import LayerCache, StaticDecoderCache, StaticLayerCache
from transformer_mt.model.vocab import BOS_ID, PAD_ID

# Shapes are rounded up to powers of two from these minima: every rounding is a masked position
# or a dummy row of wasted work, every distinct shape is one more graph to compile (seconds).
MIN_CAPACITY = 32  # self-attention keys: BOS + tokens
MIN_WINDOW = 16  # self-attention keys a step reads (a window of the capacity; see ``step``)
MIN_SOURCE = 16  # encoder positions
MIN_SLOTS = 8  # rows (sentences x beams) once the batch shrinks; fewer would save little work
# Compiled steps kept per step function before dynamo falls back to eager (its default, 8, is
# shared by every model in a process, which a test session or a notebook soon uses up).
RECOMPILE_LIMIT = 64

_STEPS: weakref.WeakKeyDictionary[Transformer, Callable] = weakref.WeakKeyDictionary()
_GRAPHS: weakref.WeakKeyDictionary[Transformer, CountingInductor] = weakref.WeakKeyDictionary()


def bucket(n: int, minimum: int) -> int:
    """The smallest power of two >= n and >= ``minimum``."""
    return max(minimum, 1 << max(n - 1, 0).bit_length())


def row_slots(live: int, current: int, minimum: int = MIN_SLOTS) -> int:
    """Slots to run for ``live`` live ones when ``current`` run now: keep ``current`` while the
    live ones need more than half of it, else the power-of-two bucket that holds them (at
    least ``minimum``, never more than ``current``)."""
    if 2 * live > current:
        return current
    return min(current, bucket(live, minimum))


def _step(
    model: Transformer,
    tokens: Tensor,
    position: Tensor,
    self_k: list[Tensor],
    self_v: list[Tensor],
    cross_k: list[Tensor],
    cross_v: list[Tensor],
    memory_mask: Tensor,
) -> Tensor:
    """Log-probabilities (R, V) of the next token; writes this position's keys into ``self_k``/``self_v``."""
    cache = StaticDecoderCache(
        [StaticLayerCache(k, v, position) for k, v in zip(self_k, self_v)],
        [LayerCache.of(k, v) for k, v in zip(cross_k, cross_v)],
        memory_mask,
        position,
    )
    with onednn_linears(tokens.device):  # fp32 GEMMs by oneDNN on CPUs (see onednn.py)
        logprobs = model.decode_step(tokens, cache)  # (R, V)
    logprobs[:, PAD_ID] = -torch.inf  # never emit padding or BOS
    logprobs[:, BOS_ID] = -torch.inf
    return logprobs


class CountingInductor:
    """torch.compile's default backend (Inductor), counting the graphs it is given (dynamo calls
    its backend once per new graph: a first compile or a recompile).

    ``TRANSFORMER_MT_COMPILE_BACKEND=eager`` (or another dynamo backend's name) traces and counts
    the same graphs without generating code: the tests of graph counts and cache logic use it,
    as a cold Inductor compile costs seconds per graph.
    """

    def __init__(self) -> None:
        self.graphs = 0
        name = os.environ.get("TRANSFORMER_MT_COMPILE_BACKEND")
        if name:
            self.backend = torch._dynamo.lookup_backend(name)
        else:  # imported here, not with this module: it costs every script ~1-2 s of start-up
            from torch._inductor.compile_fx import compile_fx

            self.backend = compile_fx

    def __call__(self, graph: torch.fx.GraphModule, example_inputs: list) -> Callable:
        self.graphs += 1
        return self.backend(graph, example_inputs)


class BufferPool:
    """The self-attention buffers of a model's last compiled searches, reused by the next ones.

    A fresh multi-MB buffer costs a zero fill and a page fault per 4 KiB on first touch (the
    allocator hands large blocks back to the system): for 100 sentences x 4 beams of a base
    model that was about a tenth of the search, and more once other work had run in between.
    The pool holds the flat blocks under finished searches' buffers (self and spare, every
    layer) while the model lives, at most twice what the largest search has needed (the oldest
    go first): greedy and beam search in turn, or a test set's batches, reuse each other's
    memory. A request takes the smallest held block that is large enough, whatever shape it
    had. Every block holds finite numbers (zeros or earlier keys and values), which is all a
    masked, unwritten position needs.
    """

    def __init__(self) -> None:
        self.blocks: list[Tensor] = []  # flat, oldest first
        self.largest = 0  # bytes of the largest search handed back

    def take(self, shape: tuple[int, ...], like: Tensor) -> Tensor:
        """A buffer of ``shape`` (``like``'s dtype and device): a held block's prefix, or zeros."""
        size = math.prod(shape)
        fits = [
            i
            for i, block in enumerate(self.blocks)
            if block.numel() >= size and (block.dtype, block.device) == (like.dtype, like.device)
        ]
        if fits:
            block = self.blocks.pop(min(fits, key=lambda i: self.blocks[i].numel()))
        else:
            block = like.new_zeros(size)
        return block[:size].view(shape)

    def keep(self, buffers: list[Tensor]) -> None:
        """Hold the blocks under a finished search's ``buffers`` (made by ``take``)."""
        blocks = [_block(b) for b in buffers]
        self.largest = max(self.largest, sum(_bytes(b) for b in blocks))
        self.give(blocks)

    def give(self, buffers: list[Tensor]) -> None:
        """Hold the blocks under ``buffers`` that a running search no longer needs (a spare of
        a shape it will not use again), without counting them as a search's size."""
        self.blocks += [_block(b) for b in buffers]
        while sum(_bytes(b) for b in self.blocks) > 2 * self.largest:
            self.blocks.pop(0)


def _block(buffer: Tensor) -> Tensor:
    """The flat block a ``BufferPool.take`` buffer is a view of."""
    return buffer._base if buffer._base is not None else buffer.view(-1)


def _bytes(block: Tensor) -> int:
    return block.numel() * block.element_size()


def compiled_step(model: Transformer) -> Callable[..., Tensor]:
    """The model's compiled step function (compiled lazily, once per shape, kept with the model)."""
    step = _STEPS.get(model)
    if step is None:
        _GRAPHS[model] = counter = CountingInductor()
        compiled = torch.compile(_step, backend=counter, dynamic=False)
        weights, owner = PackedWeights(), weakref.ref(model)  # the cache must not keep the model

        def step(*args: Tensor | list[Tensor]) -> Tensor:
            with (
                torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT),
                packed_weights(weights),
            ):
                return compiled(owner(), *args)

        step.weights = weights  # refreshed once per search (CompiledDecoderState), not per step
        step.buffers = BufferPool()
        _STEPS[model] = step
    return step


def compile_count(model: Transformer) -> int:
    """How many graphs the compiled step of ``model`` has built in this process."""
    counter = _GRAPHS.get(model)
    return counter.graphs if counter is not None else 0


class CompiledDecoderState:
    """``DecoderState``'s interface (``step``, ``reorder``) over a fixed-shape cache and a compiled step.

    Args:
        model: in eval mode.
        src: (B, S) padded, EOS-terminated source ids: one row each until ``reorder`` widens
            them (beam search's first step).
        max_tokens: the most tokens any row will be fed after BOS (the search's length limit):
            the cache holds BOS and that many positions.
    """

    def __init__(self, model: Transformer, src: Tensor, max_tokens: int) -> None:
        self.model, self.step_fn = model, compiled_step(model)
        self.step_fn.weights.refresh(model)  # a model trained since the last search repacks
        with onednn_linears(src.device):  # the encoder runs eagerly, once per batch
            memory, mask = model.encode(src)  # (B, S, D), (B, 1, 1, S)
            pad = bucket(src.size(1), MIN_SOURCE) - src.size(1)
            if pad:  # masked source positions, so the graph sees few source lengths
                memory = F.pad(memory, (0, 0, 0, pad))
                mask = F.pad(mask, (0, pad), value=False)
            cache = model.start_decoding(memory, mask)
        # Rows come in groups of ``expand`` (a sentence's beams, once widened); slots count sentences.
        self.expand, self.min_sentences = 1, MIN_SLOTS
        self.live = src.size(0)  # the first ``live`` rows are real, the rest pad a bucket
        # (n, H, S', d), one row per sentence; contiguous, as every later selection will be
        # (the graph is specialised on strides)
        self.cross_k = [c.k.contiguous() for c in cache.cross_attn]
        self.cross_v = [c.v.contiguous() for c in cache.cross_attn]
        self.mask = mask  # (n, 1, 1, S')
        if src.size(0) < self.min_sentences:  # a small last batch runs as the smallest bucket
            sentences = torch.arange(src.size(0), device=src.device)
            self._select_sentences(
                torch.cat([sentences, sentences[-1:].expand(self.min_sentences - src.size(0))])
            )
        rows = self.slots
        # positions beyond the table are never written: no need to hold them
        capacity = min(bucket(max_tokens + 1, MIN_CAPACITY), model.cfg.max_positions)
        n_heads, dk, dv = model.cfg.n_heads, self.cross_k[0].size(3), self.cross_v[0].size(3)
        # Pooled blocks hold zeros or an earlier search's keys and values: finite, which is all
        # an unwritten position needs (masked, its value meets an exact zero weight).
        self.pool = self.step_fn.buffers
        self.self_k = [
            self.pool.take((rows, n_heads, capacity, dk), memory) for _ in cache.cross_attn
        ]
        self.self_v = [
            self.pool.take((rows, n_heads, capacity, dv), memory) for _ in cache.cross_attn
        ]
        # the previous buffers, recycled by the next reorder (fresh ones would cost page faults)
        self.spare_k: list[Tensor] = []
        self.spare_v: list[Tensor] = []
        self.position = torch.zeros((), dtype=torch.long, device=src.device)
        self.steps, self.capacity = 0, capacity

    @property
    def slots(self) -> int:
        """Sentences the step runs (live ones and dummies); rows are ``slots * expand``."""
        return self.mask.size(0)

    def _select_sentences(self, index: Tensor) -> None:
        self.cross_k = [k.index_select(0, index) for k in self.cross_k]
        self.cross_v = [v.index_select(0, index) for v in self.cross_v]
        self.mask = self.mask.index_select(0, index)

    def step(self, prefix: Tensor) -> Tensor:
        """Log-probabilities (R, V) of the next token after ``prefix`` (R, t), which starts with BOS."""
        if self.steps >= self.capacity:
            raise RuntimeError(f"decoding step {self.steps} beyond the cache's {self.capacity}")
        # (R, 1), a fresh tensor: a view's strides would be guarded on (a new graph per length)
        tokens = prefix[:, -1:].clone(memory_format=torch.contiguous_format)
        rows = self.slots * self.expand
        if rows > tokens.size(0):  # dummy rows repeat the last real one
            tokens = torch.cat([tokens, tokens[-1:].expand(rows - tokens.size(0), 1)])
        # self-attention reads a window of the buffers that follows the position (16, 32, 64...
        # keys): a capacity sized for the longest allowed output is mostly unwritten
        window = min(self.capacity, bucket(self.steps + 1, MIN_WINDOW))
        self_k, self_v = self.self_k, self.self_v
        if window < self.capacity:
            self_k = [k[:, :, :window] for k in self_k]
            self_v = [v[:, :, :window] for v in self_v]
        logprobs = self.step_fn(
            tokens, self.position, self_k, self_v, self.cross_k, self.cross_v, self.mask
        )
        self.position = self.position + 1
        self.steps += 1
        return logprobs[: self.live]

    def reorder(
        self, index: Tensor, sources_changed: bool = True, expand: int | None = None
    ) -> None:
        """Keep live rows ``index`` (R',), padded to the sentence slots ``row_slots`` picks.

        ``index`` comes in groups of ``expand`` rows that share a sentence (a search's beams of
        one sentence; any rows when ``expand`` is 1). ``expand`` changes the rows per sentence
        from now on: beam search runs its first step on one row per sentence (every beam would
        start from the same BOS), then widens to its K beams. ``sources_changed=False``: the
        live sentences are the last step's, in order (their cross-attention K/V stay put).
        """
        before, widen = self.expand, expand is not None and expand != self.expand
        if widen:
            self.expand, self.min_sentences = expand, -(-MIN_SLOTS // expand)
        K = self.expand
        self.live = index.numel()
        if self.live % K:
            raise ValueError(f"{self.live} rows kept: not whole sentences of {K} beams")
        live_sentences = self.live // K
        if widen:  # as a search that started with K rows would run: no bucketing yet
            slots = max(live_sentences, self.min_sentences)
        else:
            slots = row_slots(live_sentences, self.slots, self.min_sentences)
        sentences = index.view(-1, K)[:, 0] // before  # each kept group's slot before this step
        if slots > live_sentences:  # dummy sentences repeat the last live one
            index = torch.cat([index, index[-K:].repeat(slots - live_sentences)])
            sentences = torch.cat([sentences, sentences[-1:].expand(slots - live_sentences)])
        self.self_k, self.spare_k = (
            _gather(self.self_k, self.spare_k, index, self.steps, self.pool),
            self.self_k,
        )
        self.self_v, self.spare_v = (
            _gather(self.self_v, self.spare_v, index, self.steps, self.pool),
            self.self_v,
        )
        if sources_changed or slots != self.slots:
            self._select_sentences(sentences)

    def __del__(self) -> None:
        # the search is over: its buffers serve the next one (see BufferPool); not while the
        # interpreter shuts down (a state held by a script's globals), when this module's
        # functions may already be gone
        pool = getattr(self, "pool", None)
        if pool is not None and not sys.is_finalizing():
            pool.keep(self.self_k + self.self_v + self.spare_k + self.spare_v)


def _gather(
    buffers: list[Tensor], spares: list[Tensor], index: Tensor, written: int, pool: BufferPool
) -> list[Tensor]:
    """Rows ``index`` of each (R, H, capacity, d) buffer, written into a spare of the new shape.

    Only the ``written`` positions are copied: the rest are masked until a step overwrites
    them, and whatever a recycled spare or a pooled buffer holds there is finite (keys and
    values of earlier steps, or zeros: an unwritten value meets an exact zero weight).
    """
    out = []
    for i, buffer in enumerate(buffers):
        shape = (index.numel(), *buffer.shape[1:])
        target = spares[i] if i < len(spares) and spares[i].shape == shape else None
        if target is None:
            if i < len(spares):  # a spare of another shape: its block may serve this one
                pool.give([spares[i]])
            target = pool.take(shape, buffer)
        torch.index_select(buffer[:, :, :written], 0, index, out=target[:, :, :written])
        out.append(target)
    return out
