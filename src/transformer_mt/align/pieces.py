"""SentencePiece pieces <-> whitespace words, and word links -> piece links.

Gold sets and aligners count whitespace-separated words; the model attends over pieces. A
piece that starts with SentencePiece's ``▁`` begins a word, so the pieces fold back into the
words by a running count (the tokenizer must not have merged or removed a word).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from transformer_mt.align.links import Links
from transformer_mt.model.vocab import N_SPECIAL

WORD_START = "\u2581"  # SentencePiece's word-boundary mark


def word_starts(sp) -> np.ndarray:
    """Per piece id of a ``SentencePieceProcessor``: does the piece begin a word?"""
    return np.array(
        [sp.id_to_piece(i).startswith(WORD_START) for i in range(sp.get_piece_size())], dtype=bool
    )


def piece_words(ids: Sequence[int], starts: np.ndarray) -> np.ndarray:
    """The word each piece belongs to (0-based); special ids (the trailing EOS) get -1."""
    ids = np.asarray(ids)
    words = np.cumsum(starts[ids]) - 1
    words[ids < N_SPECIAL] = -1
    return words


def folds(ids: Sequence[int], text: str, starts: np.ndarray) -> bool:
    """Do the pieces ``ids`` fold back into exactly the whitespace words of ``text``?"""
    return int(piece_words(ids, starts).max(initial=-1)) + 1 == len(text.split())


def piece_links(
    src_ids: Sequence[int],
    tgt_ids: Sequence[int],
    links: Links,
    n_src_words: int,
    n_tgt_words: int,
    starts: np.ndarray,
) -> list[int] | None:
    """Word links -> piece links, flattened ``[s0, t0, s1, t1, ...]`` (EOS-terminated ids).

    Every piece of source word i is linked with every piece of target word j.

    Returns None when the pieces do not fold back into the text's whitespace words (the
    tokenizer's normalisation removed or merged a word): that pair is left unsupervised
    rather than supervised with shifted links.
    """
    src_words, tgt_words = piece_words(src_ids, starts), piece_words(tgt_ids, starts)
    if src_words.max(initial=-1) + 1 != n_src_words or tgt_words.max(initial=-1) + 1 != n_tgt_words:
        return None
    src_pieces = [np.flatnonzero(src_words == i) for i in range(n_src_words)]
    tgt_pieces = [np.flatnonzero(tgt_words == j) for j in range(n_tgt_words)]
    flat: list[int] = []
    for i, j in sorted(links):
        if i >= n_src_words or j >= n_tgt_words:
            return None  # a link outside the pair: the alignment belongs to another line
        for s in src_pieces[i]:
            for t in tgt_pieces[j]:
                flat += (int(s), int(t))
    return flat
