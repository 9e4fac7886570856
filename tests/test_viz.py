"""Pieces to words, and the heatmap."""

from __future__ import annotations

import torch

from transformer_mt import Transformer, TransformerConfig
from transformer_mt.data.tokenizer import EOS_ID
from transformer_mt.viz.alignment import (
    cross_attention,
    plot_alignment,
    to_words,
    word_groups,
    words_of,
)


def test_word_groups_follow_the_word_start_marker() -> None:
    pieces = ["▁el", "▁gat", "o", "▁neg", "r", "o", "</s>"]
    groups = word_groups(pieces)
    assert groups == [[0], [1, 2], [3, 4, 5], [6]]
    assert words_of(pieces, groups) == ["el", "gato", "negro", "</s>"]


def test_to_words_means_target_rows_and_sums_source_columns() -> None:
    w = torch.tensor(
        [[0.1, 0.2, 0.7], [0.3, 0.3, 0.4], [0.5, 0.5, 0.0]]
    )  # (T=3 pieces, S=3 pieces)
    words = to_words(w, tgt_groups=[[0, 1], [2]], src_groups=[[0], [1, 2]])
    expected = torch.tensor([[0.2, 0.8], [0.5, 0.5]])
    torch.testing.assert_close(words, expected)
    torch.testing.assert_close(words.sum(-1), torch.ones(2))  # rows stay distributions


def test_cross_attention_shape_and_rows(tiny_cfg: TransformerConfig) -> None:
    model = Transformer(tiny_cfg)
    weights = cross_attention(model, torch.tensor([5, 6, 7, EOS_ID]), torch.tensor([8, 9, EOS_ID]))
    assert weights.shape == (tiny_cfg.n_layers, tiny_cfg.n_heads, 3, 4)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 2, 3))
    assert model.training  # the mode is restored


def test_heatmap_is_labelled_with_words(tmp_path) -> None:
    src, tgt = ["el", "gato", "negro", "</s>"], ["the", "black", "cat", "</s>"]
    fig = plot_alignment(torch.rand(4, 4).softmax(-1), src, tgt, "test")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == src
    assert [t.get_text() for t in ax.get_yticklabels()] == tgt
    fig.savefig(tmp_path / "a.png")
    assert (tmp_path / "a.png").stat().st_size > 5_000


def test_heatmap_refuses_mismatched_labels() -> None:
    import pytest

    with pytest.raises(ValueError, match="do not match 2 target x 3 source words"):
        plot_alignment(torch.rand(3, 3), ["a", "b", "c"], ["x", "y"])


def test_head_grid_has_one_labelled_panel_per_head(tmp_path) -> None:
    from transformer_mt.viz.alignment import plot_heads

    src, tgt = ["el", "gato", "</s>"], ["the", "cat", "</s>"]
    fig = plot_heads(torch.rand(2, 3, 3, 3).softmax(-1), src, tgt)
    panels = [ax for ax in fig.axes if ax.get_title().startswith("layer")]
    assert len(panels) == 6 and panels[-1].get_title() == "layer 2, head 3"
    assert [t.get_text() for t in panels[0].get_xticklabels()] == src
    assert [t.get_text() for t in panels[0].get_yticklabels()] == tgt
    fig.savefig(tmp_path / "grid.svg")  # SVG as well as PNG
    assert (tmp_path / "grid.svg").read_text().startswith("<?xml")
