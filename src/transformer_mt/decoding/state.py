"""What a search carries from one step to the next, with or without the key/value cache.

Legend: B rows (sentences times beams), S source length, t prefix length, V vocabulary.
"""

from __future__ import annotations

import torch
from torch import Tensor

from transformer_mt.decoding.compiled import CompiledDecoderState
from transformer_mt.model import DecoderCache, Transformer
from transformer_mt.model.cache import LayerCache
from transformer_mt.model.vocab import BOS_ID, EOS_ID, PAD_ID


class DecoderState:
    """The encoder output and the decoder's memory of the prefix, for ``B`` rows.

    With the cache (the default) each step feeds only the newest token: self-attention keys
    and values grow by one position and cross-attention K/V were projected once. Without it,
    each step re-runs the decoder over the whole prefix (every position's states, cross-attention
    K/V included) and sends only the last position through the output layer, as the Annotated
    Transformer's loop does: the stricter uncached baseline, for greedy and beam search alike.
    The benchmark compares the two and a test pins their outputs together.

    ``max_tokens`` (the search's length limit), when given, sizes the self-attention caches
    once for BOS and that many tokens, instead of growing them on the way.
    """

    def __init__(
        self,
        model: Transformer,
        src: Tensor,
        use_cache: bool = True,
        max_tokens: int | None = None,
    ) -> None:
        memory, mask = model.encode(src)  # (B, S, D), (B, 1, 1, S)
        self.model, self.use_cache = model, use_cache
        self.cache: DecoderCache | None = None
        self.expand = 1  # rows per sentence: 1, then a beam search's K once it widens
        if use_cache:
            cache = model.start_decoding(memory, mask)
            # cross-attention K/V projected once and held once per sentence: a sentence's
            # beams attend to them as one block of queries (``_one_query_attention``), so
            # they are never copied per beam; contiguous, or every step's matmul copies them
            cache.cross_attn = [
                LayerCache.of(c.k.contiguous(), c.v.contiguous()) for c in cache.cross_attn
            ]
            if max_tokens is not None:  # self-attention caches sized once: BOS + max_tokens
                cache.self_attn = [LayerCache.empty(c, max_tokens + 1) for c in cache.cross_attn]
            self.cache = cache
            self.memory = self.mask = None  # all in the cache
        else:
            self.memory, self.mask = memory, mask

    def step(self, prefix: Tensor) -> Tensor:
        """Log-probabilities (B, V) of the next token after ``prefix`` (B, t), which starts with BOS."""
        if self.cache is not None:
            logprobs = self.model.decode_step(prefix[:, -1:], self.cache)
        else:  # the decoder over the whole prefix again; only its last position is scored
            states, _, _ = self.model.decoder(prefix, self.memory, self.mask, None)  # (B, t, D)
            logprobs = self.model.generator(states[:, -1]).log_softmax(dim=-1)  # (B, V)
        logprobs[:, PAD_ID] = -torch.inf  # never emit padding or BOS
        logprobs[:, BOS_ID] = -torch.inf
        return logprobs

    def reorder(
        self, index: Tensor, sources_changed: bool = True, expand: int | None = None
    ) -> None:
        """Keep rows ``index`` (B'): surviving beams' parents, or unfinished sentences.

        ``index`` comes in groups of ``expand`` rows that share a sentence (a search's beams
        of one sentence; any rows when it is 1); ``expand`` changes the rows per sentence from
        now on (beam search's first reorder widens 1 row to K). ``sources_changed=False`` says
        the live sentences are the ones of the last step, in the same order (no sentence
        left): the per-sentence cross-attention K/V then stay as they are.
        """
        group = self.expand if expand is None else expand
        if index.numel() % group:
            raise ValueError(f"{index.numel()} rows kept: not whole sentences of {group} rows")
        if self.cache is None:  # every row holds its own copy of its source's encoder output
            if sources_changed or group != self.expand:
                self.memory = self.memory.index_select(0, index)
                self.mask = self.mask.index_select(0, index)
        else:
            # each group's sentence: the cross-attention K/V are held once per sentence
            sentences = index.view(-1, group)[:, 0] // self.expand if sources_changed else None
            self.cache = self.cache.reorder(index, sources_changed, sentences)
        self.expand = group


def decoder_state(
    model: Transformer, src: Tensor, use_cache: bool, compile: bool, max_tokens: int
) -> DecoderState | CompiledDecoderState:
    """The state a search steps through, one row per sentence at first (beam search widens it
    to K rows with its first ``reorder``): eager with or without the cache, or compiled.

    ``max_tokens``: the most tokens a row may receive (the compiled cache's capacity).
    """
    if not compile:
        return DecoderState(model, src, use_cache=use_cache, max_tokens=max_tokens)
    if not use_cache:
        raise ValueError("compile=True needs use_cache=True: the compiled step is the cached one")
    return CompiledDecoderState(model, src, max_tokens)


def length_limits(src: Tensor, max_len_a: float, max_len_b: int, max_positions: int) -> Tensor:
    """Most output tokens per sentence before EOS, a · |x| + b (§6.1: input length + 50).

    Capped so that BOS, the tokens and EOS fit in the model's positions.

    Args:
        src: (B, S) padded source ids (EOS counts in |x|).

    Returns:
        (B,) int64.
    """
    src_len = (src != PAD_ID).sum(dim=1)  # (B,)
    return (max_len_a * src_len + max_len_b).long().clamp(min=0, max=max_positions - 2)


def constrain_length(logprobs: Tensor, step: int, min_len: int, limit: Tensor) -> Tensor:
    """No EOS before ``min_len`` tokens; only EOS once a row has ``limit`` (B,) tokens.

    ``step`` is the number of tokens already chosen (BOS not counted).
    """
    if step < min_len:
        logprobs[:, EOS_ID] = -torch.inf
    at_limit = step >= limit  # (B,)
    if at_limit.any():
        eos = logprobs[at_limit, EOS_ID].clone()
        logprobs[at_limit] = -torch.inf
        logprobs[at_limit, EOS_ID] = eos.clamp_min(
            torch.finfo(logprobs.dtype).min
        )  # finite even if masked
    return logprobs
