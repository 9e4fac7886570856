"""Capturing attention: every map of one sentence pair, and SentencePiece pieces folded into words.

One API: ``pair_attention(model, tokenizer, src, tgt=None)`` returns encoder self-, decoder
self- and cross-attention of every layer and head, teacher-forced on ``tgt`` or, without one,
on the model's own greedy translation. It runs ``Transformer.attention_maps``, the only path
that materialises weights; training and decoding keep the fused kernel.

Legend: L layers, H heads, S source pieces, T target pieces (EOS included), W words.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from transformer_mt.decoding import greedy_decode
from transformer_mt.model import AttentionMaps, Transformer
from transformer_mt.model.positions import fit_positions
from transformer_mt.model.vocab import BOS_ID, EOS_ID

WORD_START = "\u2581"  # SentencePiece's "▁", which starts every word
CONTROL_PIECES = frozenset({"<s>", "</s>", "<pad>"})
KINDS = ("encoder", "decoder", "cross")


@torch.no_grad()
def capture(
    model: Transformer, src: Tensor, tgt: Tensor, full_context: bool = False
) -> AttentionMaps:
    """Teacher-forced attention of one pair: encoder, decoder self- and cross-attention.

    Row t of the decoder's maps is the distribution while the decoder *produces* ``tgt[t]``
    (its input is BOS, tgt[0], .., tgt[t-1]). The model is put in eval mode (no dropout)
    for the call and restored afterwards.

    Args:
        src: (S,) EOS-terminated source ids of one sentence.
        tgt: (T,) EOS-terminated target ids: a reference, or the model's own translation.
        full_context: the decoder sees the whole target (no causal mask), as a head trained
            with ``align.mode=full`` is read; row t still stands for ``tgt[t]``.

    Returns:
        maps with batch size 1.
    """
    was_training = model.training
    model.eval()
    tgt_in = torch.cat([tgt.new_tensor([BOS_ID]), tgt[:-1]])[None]  # (1, T)
    _, maps = model.attention_maps(src[None], tgt_in, full_context=full_context)
    model.train(was_training)
    return maps


def word_groups(pieces: list[str]) -> list[list[int]]:
    """Indices of the pieces of each word: a new word starts at every piece with "▁".

    Control pieces (``</s>``, ``<s>``, ``<pad>``) form words of their own; ``<unk>`` stays
    inside the word it interrupts.
    """
    groups: list[list[int]] = []
    for i, piece in enumerate(pieces):
        if (
            not groups
            or piece.startswith(WORD_START)
            or piece in CONTROL_PIECES
            or pieces[i - 1] in CONTROL_PIECES
        ):
            groups.append([i])
        else:
            groups[-1].append(i)
    return groups


def words_of(pieces: list[str], groups: list[list[int]]) -> list[str]:
    """The words that ``groups`` of ``pieces`` spell, without SentencePiece's "▁"."""
    return ["".join(pieces[i] for i in g).replace(WORD_START, "") for g in groups]


def to_words(weights: Tensor, row_groups: list[list[int]], col_groups: list[list[int]]) -> Tensor:
    """Piece-level (..., T, S) weights to word level (..., W_rows, W_cols).

    A query word's row is the mean of its pieces' rows (it stays a distribution); a key
    word's column is the sum of its pieces' columns (the mass given to the word).
    """
    rows = torch.stack(
        [weights[..., g, :].mean(dim=-2) for g in row_groups], dim=-2
    )  # (..., W_rows, S)
    return torch.stack(
        [rows[..., g].sum(dim=-1) for g in col_groups], dim=-1
    )  # (..., W_rows, W_cols)


@dataclass
class PairAttention:
    """Every attention map of one sentence pair, in pieces, and in words on request."""

    src_ids: list[int]  # piece ids, without EOS
    tgt_ids: list[int]
    src_pieces: list[str]  # S pieces, EOS included
    tgt_pieces: list[str]  # T pieces, EOS included
    encoder: Tensor  # (L, H, S, S) encoder self-attention
    decoder: Tensor  # (L, H, T, T) masked decoder self-attention
    cross: Tensor  # (L, H, T, S) cross-attention; row t produces target piece t
    translated: bool  # the target is the model's own translation, not a given one

    @property
    def src_words(self) -> list[str]:
        return words_of(self.src_pieces, word_groups(self.src_pieces))

    @property
    def tgt_words(self) -> list[str]:
        return words_of(self.tgt_pieces, word_groups(self.tgt_pieces))

    @property
    def linked_words(self) -> tuple[list[str], list[str]]:
        """(source, target) words without EOS: what links join (``Extraction.links``)."""
        return self.src_words[:-1], self.tgt_words[:-1]

    @property
    def input_pieces(self) -> list[str]:
        """The decoder's input pieces: BOS, then the target shifted right (the self-attention keys)."""
        return ["<s>", *self.tgt_pieces[:-1]]

    def labels(self, kind: str, unit: str = "words") -> tuple[list[str], list[str]]:
        """Row and column labels of ``view(kind, unit)``: queries, then keys.

        Cross-attention rows are the target pieces produced (EOS last), its keys the source;
        decoder self-attention's keys are the decoder's inputs (BOS, then the target so far).
        """
        pieces = {
            "encoder": (self.src_pieces, self.src_pieces),
            "decoder": (self.tgt_pieces, self.input_pieces),
            "cross": (self.tgt_pieces, self.src_pieces),
        }[self._kind(kind)]
        if unit == "pieces":
            return list(pieces[0]), list(pieces[1])
        if unit != "words":
            raise ValueError(f"unknown unit {unit!r}: use words or pieces")
        return words_of(pieces[0], word_groups(pieces[0])), words_of(
            pieces[1], word_groups(pieces[1])
        )

    def view(self, kind: str, unit: str = "words") -> Tensor:
        """The ``kind`` map in ``unit`` (``words`` or ``pieces``): (L, H, rows, keys)."""
        if unit == "pieces":
            return self.pieces(kind)
        if unit != "words":
            raise ValueError(f"unknown unit {unit!r}: use words or pieces")
        return self.words(kind)

    @staticmethod
    def _kind(kind: str) -> str:
        if kind not in KINDS:
            raise ValueError(f"unknown attention {kind!r}: use encoder, decoder or cross")
        return kind

    def pieces(self, kind: str) -> Tensor:
        """``encoder | decoder | cross`` -> its (L, H, rows, keys) piece-level weights."""
        return getattr(self, self._kind(kind))

    def words(self, kind: str = "cross") -> Tensor:
        """The ``kind`` map at word level: (L, H, rows' words, keys' words)."""
        weights = self.pieces(kind)  # refuses an unknown kind
        src, tgt = word_groups(self.src_pieces), word_groups(self.tgt_pieces)
        inputs = word_groups(self.input_pieces)  # decoder self-attention's keys
        rows, cols = {"encoder": (src, src), "decoder": (tgt, inputs), "cross": (tgt, src)}[kind]
        return to_words(weights, rows, cols)


def pair_attention(
    model: Transformer,
    tokenizer,
    src: str | list[int],
    tgt: str | list[int] | None = None,
    full_context: bool = False,
) -> PairAttention:
    """Capture every attention map of ``src`` and ``tgt`` (text, or piece ids without EOS).

    Args:
        tgt: the target to teacher-force; None translates ``src`` greedily first and
            captures the attention of that translation. A side longer than the model reads is
            read as its first pieces (``fit_positions``).
        full_context: capture with the whole target as the decoder's context (``capture``).
    """
    limit = model.cfg.max_positions  # a longer side is read as its first pieces
    src_ids = tokenizer.encode([src])[0] if isinstance(src, str) else list(src)
    src_ids = fit_positions([src_ids], limit, "source")[0]
    translated = tgt is None
    if tgt is None:
        model.eval()
        src_batch = torch.tensor([src_ids + [EOS_ID]], device=next(model.parameters()).device)
        tgt_ids = greedy_decode(model, src_batch)[0]
    else:
        tgt_ids = tokenizer.encode([tgt])[0] if isinstance(tgt, str) else list(tgt)
        tgt_ids = fit_positions([tgt_ids], limit, "target")[0]
    src_eos, tgt_eos = src_ids + [EOS_ID], tgt_ids + [EOS_ID]
    device = next(model.parameters()).device
    maps = capture(
        model,
        torch.tensor(src_eos, device=device),
        torch.tensor(tgt_eos, device=device),
        full_context,
    )
    return PairAttention(
        src_ids=src_ids,
        tgt_ids=tgt_ids,
        src_pieces=[tokenizer.sp.id_to_piece(i) for i in src_eos],
        tgt_pieces=[tokenizer.sp.id_to_piece(i) for i in tgt_eos],
        encoder=maps.stacked("encoder")[:, 0].float().cpu(),
        decoder=maps.stacked("decoder")[:, 0].float().cpu(),
        cross=maps.stacked("cross")[:, 0].float().cpu(),
        translated=translated,
    )
