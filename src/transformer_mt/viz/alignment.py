"""Attention heatmaps: arrays and labels in, a matplotlib ``Figure`` out; nothing is computed here.

Capturing the weights and folding pieces into words is ``transformer_mt.analysis``'s job;
saving is the caller's. Figures are built without pyplot (no global state, any backend).

Legend: L layers, H heads, W words (or pieces) of the rows and of the columns.
"""

from __future__ import annotations

from matplotlib.figure import Figure
from torch import Tensor

# The largest side of one heatmap, in inches: past it, a long pair's rows and columns get
# narrower and their labels smaller, instead of a figure of tens of megapixels that takes
# seconds to save and cannot be looked at whole.
MAX_SIDE = 16.0
MAX_CELL = 4.0  # the same for each heatmap of the grid of every head


def _side(words: int, per_word: float, margin: float, low: float, high: float) -> float:
    return min(high, max(low, per_word * words + margin))


def _label_size(words: int, inches: float, largest: float) -> float:
    """A font size (points) that fits ``words`` labels along ``inches``, at most ``largest``."""
    return max(2.0, min(largest, 0.75 * 72 * inches / max(words, 1)))


def _label_columns(ax, words: list[str], font: float) -> None:
    """The source words along the top of a heatmap, slanted so that long words do not overlap."""
    ax.set_xticks(
        range(len(words)), words, rotation=60, ha="left", rotation_mode="anchor", fontsize=font
    )
    ax.xaxis.tick_top()


def plot_alignment(
    weights: Tensor, src_words: list[str], tgt_words: list[str], title: str = ""
) -> Figure:
    """A labelled heatmap: rows target words, columns source words, values in [0, 1].

    Args:
        weights: (W_tgt, W_src).
    """
    w = weights.detach().float().cpu().numpy()
    if w.shape != (len(tgt_words), len(src_words)):
        raise ValueError(
            f"weights of shape {w.shape} do not match {len(tgt_words)} target x {len(src_words)} source words"
        )
    size = _side(max(w.shape), 0.45, 1.5, 3.0, MAX_SIDE)
    fig = Figure(figsize=(size + 1.0, size))  # no pyplot: no global state, any backend
    ax = fig.subplots()
    image = ax.imshow(w, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    font = _label_size(max(w.shape), size - 1.5, 10.0)
    _label_columns(ax, src_words, font)
    ax.set_yticks(range(len(tgt_words)), tgt_words, fontsize=font)
    ax.xaxis.set_label_position("top")
    ax.set_xlabel("source")
    ax.set_ylabel("target")
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="attention weight")
    if title:
        ax.set_title(title, fontsize=10, y=-0.08, va="top")
    fig.tight_layout()
    return fig


def plot_heads(weights: Tensor, src_words: list[str], tgt_words: list[str]) -> Figure:
    """Every head of every layer: a grid of heatmaps, rows layers, columns heads.

    Args:
        weights: (L, H, W_tgt, W_src) word-level attention.
    """
    w = weights.detach().float().cpu().numpy()
    L, H = w.shape[:2]
    if w.shape[2:] != (len(tgt_words), len(src_words)):
        raise ValueError(
            f"weights of shape {w.shape[2:]} do not match {len(tgt_words)} target x {len(src_words)} source words"
        )
    cell = _side(max(w.shape[2:]), 0.22, 0.8, 1.6, MAX_CELL)
    font = _label_size(max(w.shape[2:]), cell - 0.8, 6.0)
    fig = Figure(figsize=(cell * H + 1.2, cell * L + 0.8))
    axes = fig.subplots(L, H, squeeze=False)
    for layer in range(L):
        for head in range(H):
            ax = axes[layer, head]
            image = ax.imshow(w[layer, head], cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
            ax.set_title(f"layer {layer + 1}, head {head + 1}", fontsize=8)
            # words along the grid's top row and left column only: ticks on every inner
            # heatmap would repeat them unlabelled, and made most of the figure's drawing time
            if layer == 0:
                _label_columns(ax, src_words, font)
            else:
                ax.set_xticks([])
            if head == 0:
                ax.set_yticks(range(len(tgt_words)), tgt_words, fontsize=font)
            else:
                ax.set_yticks([])
    fig.colorbar(image, ax=axes, fraction=0.02, pad=0.01, label="attention weight")
    return fig


def plot_aer_grid(aer: list[list[float]], title: str = "") -> Figure:
    """AER of every decoder layer (rows) and head (columns), the last column the heads' mean.

    Args:
        aer: (L, H + 1) values in [0, 1], lower is better; the best cell is outlined.
    """
    import numpy as np
    from matplotlib.patches import Rectangle

    grid = np.asarray(aer, dtype=float)
    n_layers, n_cols = grid.shape
    fig = Figure(figsize=(1.0 + 0.8 * n_cols, 1.2 + 0.55 * n_layers))
    ax = fig.subplots()
    image = ax.imshow(grid, cmap="magma_r", vmin=0.0, vmax=1.0, aspect="auto")
    for (r, c), value in np.ndenumerate(grid):
        ax.text(
            c,
            r,
            f"{value:.2f}",
            ha="center",
            va="center",
            fontsize=8,
            color="white" if value > 0.55 else "black",
        )
    best = np.unravel_index(np.argmin(grid), grid.shape)
    ax.add_patch(Rectangle((best[1] - 0.5, best[0] - 0.5), 1, 1, fill=False, lw=2.5, ec="cyan"))
    ax.set_xticks(range(n_cols), [str(h + 1) for h in range(n_cols - 1)] + ["mean"])
    ax.set_yticks(range(n_layers), [str(layer + 1) for layer in range(n_layers)])
    ax.set_xlabel("head")
    ax.set_ylabel("decoder layer")
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="AER (lower is better)")
    ax.set_title(title or "alignment error rate per head", fontsize=10)
    fig.tight_layout()
    return fig
