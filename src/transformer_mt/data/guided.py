"""Word alignments as a training signal: guided alignment (Garg et al. 2019).

A statistical aligner (or a gold corpus) gives word links per training pair. Here they become
piece links (every piece of source word i with every piece of target word j), then, per batch,
a target distribution for each target piece that has links: uniform over the source pieces it
is linked to. One cross-attention head is trained towards it (``alignment_loss``); rows without
a link are left alone.

Legend: B batch, T target pieces (with EOS), S source pieces (with EOS), N links in a batch.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

Links = set[tuple[int, int]]

WORD_START = "\u2581"  # SentencePiece's word-boundary mark


def word_starts(sp) -> np.ndarray:
    """Per piece id of a ``SentencePieceProcessor``: does the piece begin a word?"""
    return np.array(
        [sp.id_to_piece(i).startswith(WORD_START) for i in range(sp.get_piece_size())], dtype=bool
    )


def piece_words(ids: Sequence[int], starts: np.ndarray) -> np.ndarray:
    """The word each piece belongs to (0-based); the trailing EOS gets -1."""
    ids = np.asarray(ids)
    words = np.cumsum(starts[ids]) - 1
    words[ids < 4] = -1  # pad/unk/bos/eos ids are 0..3; only EOS occurs here
    return words


def piece_links(
    src_ids: Sequence[int],
    tgt_ids: Sequence[int],
    links: Links,
    n_src_words: int,
    n_tgt_words: int,
    starts: np.ndarray,
) -> list[int] | None:
    """Word links -> piece links, flattened ``[s0, t0, s1, t1, ...]`` (EOS-terminated ids).

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


def supervision(flat: np.ndarray, lens: np.ndarray) -> tuple[Tensor, Tensor, int]:
    """A batch's piece links -> (index (N, 3) of [sentence, target row, source column],
    weight (N,), number of supervised rows).

    Args:
        flat: every sentence's flattened ``[s, t, ...]`` links, end to end.
        lens: (B,) the length of each sentence's part of ``flat`` (twice its link count).

    Each supervised row's weights sum to 1 (uniform over its linked source pieces).
    """
    pairs = flat.reshape(-1, 2).astype(np.int64)
    sentence = np.repeat(np.arange(len(lens)), lens // 2)
    index = np.stack([sentence, pairs[:, 1], pairs[:, 0]], axis=1)  # b, t, s
    if len(index) == 0:
        return torch.zeros((0, 3), dtype=torch.long), torch.zeros(0), 0
    rows, inverse, counts = np.unique(index[:, :2], axis=0, return_inverse=True, return_counts=True)
    weight = 1.0 / counts[inverse.reshape(-1)]
    return torch.from_numpy(index), torch.from_numpy(weight.astype(np.float32)), len(rows)


def alignment_loss(
    weights: Tensor, index: Tensor, weight: Tensor, n_rows: int, shift: bool = False
) -> Tensor:
    """KL(target || head) per supervised target row, averaged over those rows.

    Args:
        weights: (B, T, S) one head's attention (rows sum to 1).
        index, weight, n_rows: from ``supervision``.
        shift: supervise, for target piece t, the row where it is the decoder's input
            (row t + 1: ``tgt_in`` is BOS and the pieces) instead of the row that predicts it.

    Zero exactly when the head puts on every supervised row the target distribution; the
    gradient is that of Garg et al.'s cross-entropy (the two differ by the target's entropy).
    """
    if n_rows == 0:
        return weights.sum() * 0.0  # keeps the graph (DDP) without a host read
    rows = index[:, 1] + 1 if shift else index[:, 1]
    picked = weights[index[:, 0], rows, index[:, 2]].float()  # (N,)
    tiny = torch.finfo(torch.float32).tiny
    kl = weight * (weight.log() - picked.clamp_min(tiny).log())
    return kl.sum() / n_rows
