"""Properties of the pure parts, over generated inputs (hypothesis): Pharaoh round trips,
symmetrization bounds, AER's range, masks that never leak weight to padding, and the
piece <-> word link mapping."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_mt import Transformer, TransformerConfig
from transformer_mt.align.links import (
    alignment_error_rate,
    format_pharaoh,
    read_pharaoh,
    symmetrize,
)
from transformer_mt.align.pieces import piece_links, piece_words
from transformer_mt.model.vocab import EOS_ID, N_SPECIAL, PAD_ID

links = st.sets(st.tuples(st.integers(0, 60), st.integers(0, 60)), max_size=40)
nonempty_links = st.sets(st.tuples(st.integers(0, 60), st.integers(0, 60)), min_size=1, max_size=40)


@given(sure=links, extra=links)
def test_pharaoh_lines_round_trip(sure, extra) -> None:
    assert read_pharaoh(format_pharaoh(sure)) == (sure, sure)
    possible_only = extra - sure
    line = format_pharaoh(sure) + " " + " ".join(f"{i}p{j}" for i, j in sorted(possible_only))
    assert read_pharaoh(line) == (sure, sure | possible_only)
    shifted = " ".join(f"{i + 1}-{j + 1}" for i, j in sorted(sure))
    assert read_pharaoh(shifted, one_indexed=True) == (sure, sure)


@given(forward=links, backward=links)
def test_grow_diag_final_and_lies_between_intersection_and_union(forward, backward) -> None:
    both = symmetrize(forward, backward, "intersect")
    grown = symmetrize(forward, backward, "grow-diag-final-and")
    assert (
        both == forward & backward and symmetrize(forward, backward, "union") == forward | backward
    )
    assert both <= grown <= forward | backward
    assert symmetrize(forward, forward) == forward  # agreeing directions: nothing to decide


@given(predicted=links, sure=nonempty_links, maybe=links)
def test_aer_is_between_0_and_1_and_0_on_the_gold_itself(predicted, sure, maybe) -> None:
    possible = sure | maybe
    aer = alignment_error_rate(predicted, sure, possible)
    assert 0.0 <= aer <= 1.0
    assert alignment_error_rate(sure, sure, possible) == 0.0
    assert alignment_error_rate(sure, sure) == 0.0
    if not predicted & possible:
        assert aer == 1.0  # nothing right: the worst score


MODEL = Transformer(
    TransformerConfig(
        n_layers=2, d_model=16, d_ff=32, n_heads=2, vocab_size=30, max_positions=32, dropout=0.0
    )
).eval()


@settings(max_examples=30, deadline=None)
@given(
    src_lens=st.lists(st.integers(1, 12), min_size=1, max_size=4),
    tgt_lens=st.lists(st.integers(1, 12), min_size=4, max_size=4),
    seed=st.integers(0, 2**16),
)
def test_a_padded_position_never_receives_weight(src_lens, tgt_lens, seed) -> None:
    """For any lengths: encoder, decoder and cross-attention put zero weight on pad keys, and the
    decoder none on later positions; every real row sums to 1."""
    g = torch.Generator().manual_seed(seed)
    batch = len(src_lens)
    tgt_lens = tgt_lens[:batch]
    src = torch.full((batch, max(src_lens)), PAD_ID)
    tgt = torch.full((batch, max(tgt_lens)), PAD_ID)
    for b, (s, t) in enumerate(zip(src_lens, tgt_lens)):
        src[b, :s] = torch.randint(N_SPECIAL, 30, (s,), generator=g)
        tgt[b, :t] = torch.randint(N_SPECIAL, 30, (t,), generator=g)
    with torch.no_grad():
        _, maps = MODEL.attention_maps(src, tgt)
    src_pad, tgt_pad = src == PAD_ID, tgt == PAD_ID  # (B, S), (B, T)
    future = torch.ones(tgt.size(1), tgt.size(1), dtype=torch.bool).triu(1)  # (T, T)
    for enc, dec, cross in zip(maps.encoder, maps.decoder, maps.cross):
        assert enc.masked_fill(~src_pad[:, None, None, :], 0.0).abs().sum() == 0.0
        assert cross.masked_fill(~src_pad[:, None, None, :], 0.0).abs().sum() == 0.0
        hidden = tgt_pad[:, None, None, :] | future[None, None]
        assert dec.masked_fill(~hidden, 0.0).abs().sum() == 0.0
        for weights in (enc, dec, cross):
            torch.testing.assert_close(weights.sum(-1), torch.ones_like(weights.sum(-1)))


@st.composite
def pieced(draw, n_words: int) -> tuple[list[int], list[int]]:
    """A sentence of ``n_words`` words cut into 1-3 pieces each: (piece ids + EOS, pieces per word)."""
    sizes = [draw(st.integers(1, 3)) for _ in range(n_words)]
    ids = []
    for size in sizes:
        ids += [draw(st.integers(10, 19))] + [draw(st.integers(20, 29)) for _ in range(size - 1)]
    return ids + [EOS_ID], sizes


STARTS = np.array([False] * 10 + [True] * 10 + [False] * 10)  # ids 10-19 begin a word


@given(data=st.data(), n_src=st.integers(1, 8), n_tgt=st.integers(1, 8))
def test_word_links_become_exactly_the_pieces_of_their_words(data, n_src, n_tgt) -> None:
    (src, src_sizes), (tgt, tgt_sizes) = data.draw(pieced(n_src)), data.draw(pieced(n_tgt))
    word_links = data.draw(st.sets(st.tuples(st.integers(0, n_src - 1), st.integers(0, n_tgt - 1))))
    src_words, tgt_words = piece_words(src, STARTS), piece_words(tgt, STARTS)
    assert src_words[-1] == -1 and list(np.bincount(src_words[:-1])) == src_sizes
    flat = piece_links(src, tgt, word_links, n_src, n_tgt, STARTS)
    pairs = list(zip(flat[::2], flat[1::2]))
    assert {(int(src_words[s]), int(tgt_words[t])) for s, t in pairs} == word_links
    assert len(pairs) == len(set(pairs)) == sum(src_sizes[i] * tgt_sizes[j] for i, j in word_links)
    # pieces that do not fold into the text's words: the pair goes unsupervised, never shifted
    assert piece_links(src, tgt, word_links, n_src + 1, n_tgt, STARTS) is None
