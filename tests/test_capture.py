"""Capturing attention: pieces to words, every map of a pair, teacher-forced or translated."""

from __future__ import annotations

import pytest
import torch

from transformer_mt import Transformer, TransformerConfig
from transformer_mt.analysis import capture, pair_attention, to_words, word_groups, words_of
from transformer_mt.data.tokenizer import Tokenizer
from transformer_mt.decoding import greedy_decode
from transformer_mt.model.vocab import EOS_ID

SENTENCES = [
    "el gato negro duerme en casa",
    "the black cat sleeps at home",
    "la casa blanca es grande",
    "the white house is big",
] * 20


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    return Tokenizer.train(SENTENCES, 60, tmp_path_factory.mktemp("spm"))


def test_word_groups_follow_the_word_start_marker() -> None:
    pieces = ["▁el", "▁gat", "o", "▁neg", "r", "o", "</s>"]
    groups = word_groups(pieces)
    assert groups == [[0], [1, 2], [3, 4, 5], [6]]
    assert words_of(pieces, groups) == ["el", "gato", "negro", "</s>"]


def test_to_words_means_target_rows_and_sums_source_columns() -> None:
    w = torch.tensor(
        [[0.1, 0.2, 0.7], [0.3, 0.3, 0.4], [0.5, 0.5, 0.0]]
    )  # (T=3 pieces, S=3 pieces)
    words = to_words(w, row_groups=[[0, 1], [2]], col_groups=[[0], [1, 2]])
    expected = torch.tensor([[0.2, 0.8], [0.5, 0.5]])
    torch.testing.assert_close(words, expected)
    torch.testing.assert_close(words.sum(-1), torch.ones(2))  # rows stay distributions


def test_capture_shapes_rows_and_restored_mode(tiny_cfg: TransformerConfig) -> None:
    model = Transformer(tiny_cfg)
    maps = capture(model, torch.tensor([5, 6, 7, EOS_ID]), torch.tensor([8, 9, EOS_ID]))
    weights = maps.stacked("cross")[:, 0]
    assert weights.shape == (tiny_cfg.n_layers, tiny_cfg.n_heads, 3, 4)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 2, 3))
    assert model.training  # the mode is restored


def test_pair_attention_folds_every_map_into_words(tiny_cfg: TransformerConfig, tokenizer) -> None:
    from dataclasses import replace

    model = Transformer(replace(tiny_cfg, vocab_size=tokenizer.vocab_size))
    pair = pair_attention(model, tokenizer, "el gato negro", "the black cat")
    assert pair.src_words == ["el", "gato", "negro", "</s>"]
    assert pair.tgt_words == ["the", "black", "cat", "</s>"]
    assert not pair.translated
    S, T = len(pair.src_pieces), len(pair.tgt_pieces)
    assert pair.encoder.shape == (2, 2, S, S) and pair.decoder.shape == (2, 2, T, T)
    assert pair.cross.shape == (2, 2, T, S)
    assert pair.decoder.triu(1).abs().max() == 0.0  # no weight on the future
    for kind, shape in (("encoder", (4, 4)), ("decoder", (4, 4)), ("cross", (4, 4))):
        words = pair.words(kind)
        assert words.shape == (2, 2, *shape)
        torch.testing.assert_close(words.sum(-1), torch.ones(2, 2, shape[0]))
    with pytest.raises(ValueError, match="unknown attention 'self'"):
        pair.words("self")


def test_pair_attention_without_target_uses_the_greedy_translation(
    tiny_cfg: TransformerConfig, tokenizer
) -> None:
    from dataclasses import replace

    model = Transformer(replace(tiny_cfg, vocab_size=tokenizer.vocab_size)).eval()
    pair = pair_attention(model, tokenizer, "la casa blanca")
    src = torch.tensor([tokenizer.encode(["la casa blanca"])[0] + [EOS_ID]])
    assert pair.translated and pair.tgt_ids == greedy_decode(model, src)[0]
    assert pair.cross.shape[2] == len(pair.tgt_ids) + 1
