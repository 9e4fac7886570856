"""Encoder and decoder layers (§3.1, §3.3, Figure 1).

Each sub-layer is wrapped as ``LayerNorm(x + Dropout(Sublayer(x)))`` (post-LN, the paper)
or, with ``norm_first``, as ``x + Dropout(Sublayer(LayerNorm(x)))`` (pre-LN).

Legend: B batch, S source length, T target length, D d_model, F d_ff, H heads.
"""

from __future__ import annotations

from typing import NamedTuple

import torch.nn.functional as F
from torch import Tensor, nn

from transformer_mt.model.attention import MultiHeadAttention
from transformer_mt.model.cache import LayerCache
from transformer_mt.model.config import TransformerConfig


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2 (§3.3, Eq. 2), applied at every position."""

    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(d_model, d_ff)
        self.w2 = nn.Linear(d_ff, d_model)

    def forward(self, x: Tensor) -> Tensor:
        """(B, T, D) -> (B, T, D)."""
        # Not in place: w1's 3-D output is a view of a 2-D matmul, and an in-place op on a view
        # makes autograd copy the whole (B, T, F) activation back in the backward pass.
        return self.w2(F.relu(self.w1(x)))  # (B, T, F) -> (B, T, D)


class AddNorm(nn.Module):
    """Residual connection, dropout and LayerNorm around one sub-layer (§3.1, §5.4).

    Used as ``y = sublayer(add_norm.enter(x)); x = add_norm.exit(x, y)``: post-LN
    normalises on the way out, pre-LN on the way in, and the sub-layer sits in between
    with its own arguments (masks, caches), so no closures are needed.
    """

    def __init__(self, d_model: int, dropout: float, norm_first: bool) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def enter(self, x: Tensor) -> Tensor:
        """The sub-layer's input: LayerNorm(x) for pre-LN, x itself for post-LN."""
        return self.norm(x) if self.norm_first else x

    def exit(self, x: Tensor, y: Tensor) -> Tensor:
        """x + Dropout(y), normalised afterwards for post-LN."""
        out = x + self.dropout(y)
        return out if self.norm_first else self.norm(out)


class EncoderLayer(nn.Module):
    """Self-attention, then the FFN, each wrapped in Add & Norm (Figure 1, left)."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(
            cfg.d_model, cfg.n_heads, cfg.attention_dropout, d_k=cfg.d_k
        )
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff)
        self.norm_attn = AddNorm(cfg.d_model, cfg.dropout, cfg.norm_first)
        self.norm_ffn = AddNorm(cfg.d_model, cfg.dropout, cfg.norm_first)

    def forward(
        self, x: Tensor, src_mask: Tensor, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """x (B, S, D), src_mask (B, 1, 1, S) -> (B, S, D) and self-attention weights (B, H, S, S) or None."""
        y, _, weights = self.self_attn(self.norm_attn.enter(x), src_mask, need_weights=need_weights)
        x = self.norm_attn.exit(x, y)
        x = self.norm_ffn.exit(x, self.ffn(self.norm_ffn.enter(x)))
        return x, weights


class DecoderOutput(NamedTuple):
    """What one decoder layer returns."""

    states: Tensor  # (B, T, D); after cross-attention only when the layer ran with skip_ffn
    self_kv: LayerCache  # the self-attention keys/values, including this call's positions
    cross_kv: LayerCache  # the cross-attention keys/values of the encoder output
    self_weights: Tensor | None  # (B, H, T, T_seen) with need_weights, else None
    cross_weights: Tensor | None  # (B, H, T, S), (B, 1, T, S) for cross_head, else None


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention over the encoder output, then the FFN (Figure 1, right)."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(
            cfg.d_model, cfg.n_heads, cfg.attention_dropout, d_k=cfg.d_k
        )
        self.cross_attn = MultiHeadAttention(
            cfg.d_model, cfg.n_heads, cfg.attention_dropout, cross=True, d_k=cfg.d_k
        )
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff)
        self.norm_self = AddNorm(cfg.d_model, cfg.dropout, cfg.norm_first)
        self.norm_cross = AddNorm(cfg.d_model, cfg.dropout, cfg.norm_first)
        self.norm_ffn = AddNorm(cfg.d_model, cfg.dropout, cfg.norm_first)

    def forward(
        self,
        x: Tensor,
        memory_mask: Tensor,
        *,
        memory: Tensor | None = None,
        self_mask: Tensor | None = None,
        self_cache: LayerCache | None = None,
        cross_cache: LayerCache | None = None,
        need_weights: bool = False,
        cross_head: int | None = None,
        skip_ffn: bool = False,
    ) -> DecoderOutput:
        """One decoder layer, for a whole target (training) or new positions (decoding).

        Args:
            x: (B, T, D) decoder states.
            memory: (B, S, D) encoder output (may be None when ``cross_cache`` holds it).
            self_mask: (B, 1, T, T) causal and padding mask; None for one new position,
                which may see every cached one, or for a whole right-padded target with
                the causal mask alone (a real position's earlier keys are all real);
                (1, 1, 1, capacity) for one new position over a fixed-capacity cache.
            memory_mask: (B, 1, 1, S) source padding mask.
            self_cache, cross_cache: K/V from earlier steps (see ``MultiHeadAttention``).
            need_weights: also return the attention weights (slower reference path).
            cross_head: return this cross-attention head's weights only (0-based, as
                (B, 1, T, S); self-attention's are then None), the rest on the fast path.
            skip_ffn: stop after cross-attention (the states returned are then not the
                layer's output): for a pass that only wants the attention weights.

        Returns:
            a ``DecoderOutput``.
        """
        # 1) Masked self-attention.
        y, self_kv, self_weights = self.self_attn(
            self.norm_self.enter(x),
            self_mask,
            cache=self_cache,
            need_weights=need_weights,
            causal=self_mask is None and self_cache is None,
        )
        x = self.norm_self.exit(x, y)
        # 2) Encoder-decoder attention: queries from the decoder, keys and values from the encoder.
        y, cross_kv, cross_weights = self.cross_attn(
            self.norm_cross.enter(x),
            memory_mask,
            memory=memory,
            cache=cross_cache,
            need_weights=need_weights,
            head=cross_head,
        )
        x = self.norm_cross.exit(x, y)
        # 3) Position-wise feed-forward.
        if not skip_ffn:
            x = self.norm_ffn.exit(x, self.ffn(self.norm_ffn.enter(x)))
        return DecoderOutput(x, self_kv, cross_kv, self_weights, cross_weights)
