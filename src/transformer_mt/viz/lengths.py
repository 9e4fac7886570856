"""Source-length histograms: what a model trains on next to what it is scored on.

Arrays in, a matplotlib ``Figure`` out (no pyplot): ``data.concat``'s before/after training
lengths and the gold sets' lengths, in words, as shares of their sentences.
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure


def plot_length_histograms(
    training: dict[str, np.ndarray], gold: dict[str, np.ndarray], max_words: int = 60
) -> Figure:
    """Share of sentences per source length (words), one line per series.

    Args:
        training: name -> source lengths of training examples (e.g. the pairs, and the
            pairs with the joined examples).
        gold: name -> source lengths of a gold set's sentences (dashed).
        max_words: lengths above it are counted in the last bin.
    """
    fig = Figure(figsize=(8, 4), layout="constrained")
    ax = fig.add_subplot()
    bins = np.arange(1, max_words + 2)
    for style, series in (("-", training), ("--", gold)):
        for name, lengths in series.items():
            clipped = np.clip(np.asarray(lengths), 1, max_words)
            counts = np.histogram(clipped, bins=bins)[0] / max(len(clipped), 1)
            ax.step(
                bins[:-1],
                counts,
                where="mid",
                linestyle=style,
                label=f"{name} (mean {np.mean(lengths):.1f})",
            )
    ax.set_xlabel(f"source length (words; the last bin is {max_words} or more)")
    ax.set_ylabel("share of sentences")
    ax.set_title("source lengths: training examples and gold sets")
    ax.legend()
    return fig
