"""The heatmaps: labelled, refusing mismatched labels, one panel per head."""

from __future__ import annotations

import torch

from transformer_mt.viz.alignment import plot_alignment


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
