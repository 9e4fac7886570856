"""The encoder-decoder Transformer (§3, Figure 1).

Legend: B batch, S source length, T target length, D d_model, V vocabulary, L layers,
H heads. Masks are bool with True = may attend, built only in ``masks.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from transformer_mt.model.cache import DecoderCache
from transformer_mt.model.config import TransformerConfig
from transformer_mt.model.embeddings import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    TokenEmbedding,
)
from transformer_mt.model.layers import DecoderLayer, EncoderLayer
from transformer_mt.model.masks import decoder_self_mask, padding_mask, without_trivial
from transformer_mt.model.vocab import PAD_ID


@dataclass
class AttentionMaps:
    """Attention weights of one forward pass, one (B, H, rows, keys) tensor per layer."""

    encoder: list[Tensor]  # self-attention, each (B, H, S, S)
    decoder: list[Tensor]  # masked self-attention, each (B, H, T, T)
    cross: list[Tensor]  # encoder-decoder attention, each (B, H, T, S)

    def stacked(self, kind: str) -> Tensor:
        """``"encoder" | "decoder" | "cross"`` -> (L, B, H, rows, keys)."""
        if kind not in ("encoder", "decoder", "cross"):
            raise ValueError(f"unknown attention {kind!r}: use encoder, decoder or cross")
        return torch.stack(getattr(self, kind))


class Embed(nn.Module):
    """Token embedding · √d_model + position, then dropout (§3.4, §3.5, §5.4)."""

    def __init__(self, cfg: TransformerConfig, tokens: TokenEmbedding) -> None:
        super().__init__()
        self.tokens = tokens
        positional = (
            LearnedPositionalEmbedding
            if cfg.positional == "learned"
            else SinusoidalPositionalEncoding
        )
        self.positions = positional(cfg.d_model, cfg.max_positions)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, ids: Tensor, offset: int | Tensor = 0) -> Tensor:
        """(B, T) ids at positions offset.. -> (B, T, D); a tensor ``offset`` is 0-d."""
        return self.dropout(self.tokens(ids) + self.positions(ids.size(1), offset))


class Encoder(nn.Module):
    """N identical layers of self-attention and FFN (§3.1)."""

    def __init__(self, cfg: TransformerConfig, embed: Embed) -> None:
        super().__init__()
        self.embed = embed
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.n_layers))
        # Pre-LN leaves the residual stream un-normalised, so it needs one last LayerNorm.
        self.final_norm = nn.LayerNorm(cfg.d_model) if cfg.norm_first else nn.Identity()

    def forward(
        self, src: Tensor, src_mask: Tensor, need_weights: bool = False
    ) -> tuple[Tensor, list[Tensor]]:
        """src (B, S), src_mask (B, 1, 1, S) -> memory (B, S, D), self-attention weights per layer."""
        x = self.embed(src)  # (B, S, D)
        weights = []
        attn_mask = without_trivial(src_mask)  # no padding in the batch: no mask to read
        for layer in self.layers:
            x, w = layer(x, attn_mask, need_weights)
            if w is not None:
                weights.append(w)  # (B, H, S, S)
        return self.final_norm(x), weights


class Decoder(nn.Module):
    """N identical layers of masked self-attention, cross-attention and FFN (§3.1)."""

    def __init__(self, cfg: TransformerConfig, embed: Embed) -> None:
        super().__init__()
        self.embed = embed
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_layers))
        self.final_norm = nn.LayerNorm(cfg.d_model) if cfg.norm_first else nn.Identity()

    def forward(
        self,
        tgt_in: Tensor,
        memory: Tensor | None,
        memory_mask: Tensor,
        self_mask: Tensor | None,
        cache: DecoderCache | None = None,
        need_weights: bool = False,
        cross_head: tuple[int, int] | None = None,
    ) -> tuple[Tensor, list[Tensor], list[Tensor]]:
        """Decoder states for ``tgt_in`` (B, T), updating ``cache`` in place when one is given.

        Args:
            cross_head: (layer, head), 0-based: that one cross-attention head's weights are
                returned (as the only cross entry, (B, 1, T, S)), everything else fast.

        Returns:
            states (B, T, D); with ``need_weights`` the self-attention weights per layer, each
            (B, H, T, T_seen), and the cross-attention weights per layer, each (B, H, T, S)
            (the order of ``DecoderLayer``); otherwise two empty lists.
        """
        offset = cache.offset if cache is not None else 0
        x = self.embed(tgt_in, offset)  # (B, T, D)
        cross_weights, self_weights = [], []
        # No source padding: no mask to read. A compiled step keeps its mask: the check would
        # read a value and split the graph.
        static = cache is not None and cache.static
        attn_mask = memory_mask if static else without_trivial(memory_mask)
        for i, layer in enumerate(self.layers):
            self_cache = cache.self_attn[i] if cache is not None else None
            cross_cache = cache.cross_attn[i] if cache is not None else None
            probe = cross_head[1] if cross_head is not None and cross_head[0] == i else None
            out = layer(
                x,
                attn_mask,
                memory=memory,
                self_mask=self_mask,
                self_cache=self_cache,
                cross_cache=cross_cache,
                need_weights=need_weights,
                cross_head=probe,
            )
            x = out.states
            if cache is not None:
                cache.self_attn[i] = out.self_kv
            if out.self_weights is not None:
                self_weights.append(out.self_weights)
            if out.cross_weights is not None:
                cross_weights.append(out.cross_weights)
        if cache is not None:
            cache.offset = cache.offset + tgt_in.size(1)  # not +=: in place on a tensor offset
        return self.final_norm(x), self_weights, cross_weights

    def head_weights(
        self,
        tgt_in: Tensor,
        memory: Tensor,
        memory_mask: Tensor,
        target_mask: Tensor,
        layer: int,
        head: int,
    ) -> Tensor:
        """One cross-attention head's weights with the *full* target as context.

        The layers up to ``layer`` run without the causal mask (padding only), so the row
        that produces target piece t also sees t and every later piece: Garg et al.'s (2019)
        "full context" alignment, which fairseq's ``--full-context-alignment`` trains. The
        layers above ``layer``, the FFN of ``layer`` and the output are not computed.

        Args:
            tgt_in: (B, T) BOS + target, right-padded; memory (B, S, D), memory_mask (B, 1, 1, S).
            target_mask: (B, 1, 1, T) the target's padding mask, which replaces the causal one
                (given even when all true: None would mean causal to the layers).
            layer, head: 0-based.

        Returns:
            (B, T, S) weights, rows summing to 1 over real source positions.
        """
        x = self.embed(tgt_in)  # (B, T, D)
        attn_mask = without_trivial(memory_mask)
        for i in range(layer + 1):
            last = i == layer  # its FFN would feed nothing that is read
            out = self.layers[i](
                x,
                attn_mask,
                memory=memory,
                self_mask=target_mask,
                cross_head=head if last else None,
                skip_ffn=last,
            )
            x = out.states
        return out.cross_weights[:, 0]


class Transformer(nn.Module):
    """Encoder, decoder and the linear + softmax head (Figure 1).

    With ``tie_embeddings`` (a joint source/target vocabulary) the encoder embedding, the
    decoder embedding and the pre-softmax projection are one matrix (§3.4).
    """

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        if cfg.vocab_size <= 0:
            raise ValueError("model.vocab_size must be set (it comes from the tokenizer)")
        self.cfg = cfg
        src_tokens = TokenEmbedding(cfg.vocab_size, cfg.d_model, padding_idx=PAD_ID)
        tgt_tokens = (
            src_tokens
            if cfg.tie_embeddings
            else TokenEmbedding(cfg.vocab_size, cfg.d_model, padding_idx=PAD_ID)
        )
        self.encoder = Encoder(cfg, Embed(cfg, src_tokens))
        self.decoder = Decoder(cfg, Embed(cfg, tgt_tokens))
        self.generator = nn.Linear(
            cfg.d_model, cfg.vocab_size, bias=False
        )  # pre-softmax projection
        self.reset_parameters()
        if cfg.tie_embeddings:
            self.generator.weight = src_tokens.weight

    def reset_parameters(self) -> None:
        """Xavier-uniform matrices, zero biases, N(0, d^-0.5) embeddings with a zero pad row.

        With the √d_model scaling the embeddings then enter the model with unit variance, and
        as the tied output projection they give logits of unit scale.
        """
        for name, p in self.named_parameters():
            if "tokens" in name:
                nn.init.normal_(p, std=self.cfg.d_model**-0.5)
                with torch.no_grad():
                    p[PAD_ID].zero_()
            elif p.dim() > 1 and "positions" not in name:
                nn.init.xavier_uniform_(p)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """src (B, S) -> memory (B, S, D) and its padding mask (B, 1, 1, S)."""
        src_mask = padding_mask(src, PAD_ID)
        memory, _ = self.encoder(src, src_mask)
        return memory, src_mask

    def decode(self, tgt_in: Tensor, memory: Tensor, memory_mask: Tensor) -> Tensor:
        """Teacher-forced decoding of a whole target.

        Args:
            tgt_in: (B, T) BOS + target, padded.
            memory: (B, S, D); memory_mask: (B, 1, 1, S).

        Returns:
            logits (B, T, V).
        """
        # Targets are right-padded, so the causal mask alone leaves every real position with
        # real keys only; pad positions compute garbage the loss ignores.
        states, _, _ = self.decoder(tgt_in, memory, memory_mask, None)
        return self.generator(states)  # (B, T, V)

    def attention_maps(
        self, src: Tensor, tgt_in: Tensor, full_context: bool = False
    ) -> tuple[Tensor, AttentionMaps]:
        """A teacher-forced forward pass that also captures every attention weight.

        The one way to capture attention (``transformer_mt.analysis`` builds on it): only this
        call takes the slower path that materialises the weights; ``forward`` and decoding use
        the fused kernel and keep nothing.

        Args:
            src: (B, S) source ids; tgt_in: (B, T) BOS + target ids, padded.
            full_context: the decoder's self-attention sees the whole target (padding mask
                only), as ``head_weights`` does; the logits are then no prediction.

        Returns:
            logits (B, T, V) and the weights of every layer and head.
        """
        src_mask = padding_mask(src, PAD_ID)
        memory, encoder = self.encoder(src, src_mask, need_weights=True)
        # The full mask here, so that pad keys get exactly zero weight in what is returned.
        if full_context:
            self_mask = padding_mask(tgt_in, PAD_ID)  # (B, 1, 1, T)
        else:
            self_mask = decoder_self_mask(tgt_in, PAD_ID)  # (B, 1, T, T)
        states, decoder, cross = self.decoder(
            tgt_in, memory, src_mask, self_mask, need_weights=True
        )
        return self.generator(states), AttentionMaps(encoder, decoder, cross)

    def forward_with_head(
        self, src: Tensor, tgt_in: Tensor, layer: int, head: int, full_context: bool = False
    ) -> tuple[Tensor, Tensor]:
        """``forward`` that also returns one cross-attention head's weights (guided alignment).

        Args:
            layer, head: 0-based indices (``HeadReading`` resolves what users write).
            full_context: read the head from a second pass that sees the whole target
                (``Decoder.head_weights``) instead of from the causal pass that predicts.

        Returns:
            logits (B, T, V) and the head's weights (B, T, S), rows summing to 1 over real
            source positions (pad keys get zero).
        """
        if not (0 <= layer < self.cfg.n_layers and 0 <= head < self.cfg.n_heads):
            raise IndexError(
                f"head ({layer}, {head}) of a model with {self.cfg.n_layers} layers and "
                f"{self.cfg.n_heads} heads (0-based)"
            )
        memory, src_mask = self.encode(src)
        if full_context:  # a second, unmasked pass up to ``layer`` gives the head's weights
            logits = self.decode(tgt_in, memory, src_mask)
            target_mask = padding_mask(tgt_in, PAD_ID)  # (B, 1, 1, T)
            weights = self.decoder.head_weights(tgt_in, memory, src_mask, target_mask, layer, head)
            return logits, weights
        states, _, cross = self.decoder(tgt_in, memory, src_mask, None, cross_head=(layer, head))
        return self.generator(states), cross[0][:, 0]

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """src (B, S), tgt_in (B, T) -> logits (B, T, V); softmax is left to the loss."""
        memory, src_mask = self.encode(src)
        return self.decode(tgt_in, memory, src_mask)

    # Incremental decoding: the search algorithms only use these two methods.

    def start_decoding(self, memory: Tensor, memory_mask: Tensor) -> DecoderCache:
        """Project the encoder output to every layer's cross-attention K/V once."""
        cross = [layer.cross_attn.project_memory(memory) for layer in self.decoder.layers]
        return DecoderCache([None] * len(cross), cross, memory_mask)

    def decode_step(self, tokens: Tensor, cache: DecoderCache) -> Tensor:
        """Log-probabilities (B, V) of the next token given the newest ``tokens`` (B, 1) and the cache.

        The cache is extended in place by one position per call.
        """
        states, _, _ = self.decoder(tokens, None, cache.memory_mask, cache.step_mask(), cache)
        return self.generator(states[:, -1]).log_softmax(dim=-1)  # (B, V)
