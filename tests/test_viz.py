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


def test_a_long_pair_keeps_every_label_in_a_figure_of_bounded_size() -> None:
    """80 words a side: every word labelled, smaller, in at most MAX_SIDE inches (not 37), and
    the grid of heads in at most MAX_CELL inches a panel."""
    from transformer_mt.viz.alignment import MAX_CELL, MAX_SIDE, plot_heads

    words = [f"w{i}" for i in range(80)]
    fig = plot_alignment(torch.rand(80, 80).softmax(-1), words, words)
    assert max(fig.get_size_inches()) <= MAX_SIDE + 1.0
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == words
    small = ax.get_yticklabels()[0].get_fontsize()
    short = plot_alignment(torch.rand(4, 4).softmax(-1), words[:4], words[:4])
    assert small < short.axes[0].get_yticklabels()[0].get_fontsize() == 10.0
    grid = plot_heads(torch.rand(1, 2, 80, 80).softmax(-1), words, words)
    assert tuple(grid.get_size_inches()) == (2 * MAX_CELL + 1.2, MAX_CELL + 0.8)


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
    # the words along the top row and the left column only; inner panels carry no ticks
    assert [t.get_text() for t in panels[2].get_xticklabels()] == src  # layer 1, head 3
    assert [t.get_text() for t in panels[3].get_yticklabels()] == tgt  # layer 2, head 1
    assert list(panels[5].get_xticks()) == [] and list(panels[5].get_yticks()) == []
    assert list(panels[1].get_yticks()) == [] and list(panels[3].get_xticks()) == []
    fig.savefig(tmp_path / "grid.svg")  # SVG as well as PNG
    assert (tmp_path / "grid.svg").read_text().startswith("<?xml")


def test_training_curves_gain_an_alignment_panel_when_gold_sets_were_scored() -> None:
    from transformer_mt.viz.curves import plot_curves

    base = {"train/loss": [(1, 3.0), (2, 2.0)], "val/bleu": [(2, 10.0)]}
    assert sum(ax.get_visible() for ax in plot_curves(base).axes) == 6
    with_aer = {
        **base,
        "val/aer_graca": [(2, 0.5)],
        "val/aer_graca_layer1": [(2, 0.6)],
        "val/aer_graca_layer2": [(2, 0.4)],
    }
    fig = plot_curves(with_aer)
    panel = [ax for ax in fig.axes if ax.get_title() == "alignment error rate"]
    assert len(panel) == 1 and sum(ax.get_visible() for ax in fig.axes) == 7
    assert sorted(line.get_label() for line in panel[0].lines) == [
        "val/aer_graca",
        "val/aer_graca_layer1",
        "val/aer_graca_layer2",
    ]


def test_the_aer_grid_outlines_the_best_head() -> None:
    from matplotlib.patches import Rectangle

    from transformer_mt.viz.alignment import plot_aer_grid

    fig = plot_aer_grid([[0.5, 0.4, 0.45], [0.2, 0.6, 0.3]])  # 2 layers, 2 heads + mean
    ax = fig.axes[0]
    (box,) = [p for p in ax.patches if isinstance(p, Rectangle)]
    assert box.get_xy() == (-0.5, 0.5)  # layer 2, head 1
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "mean"]
