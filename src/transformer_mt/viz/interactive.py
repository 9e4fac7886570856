"""Interactive figures (Plotly) for the attention explorer: a heatmap whose cells name their two
words on hover, a sentence pair joined by its hard alignment, and per-word entropy and coverage.

Every function takes plain tensors and labels and returns a ``plotly.graph_objects.Figure``;
nothing here runs a model. Plotly comes with the ``app`` extra (``pip install -e ".[app]"``).

Legend: rows are queries (e.g. target words), columns keys (e.g. source words); rows sum to 1.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots
from torch import Tensor

from transformer_mt.analysis.stats import coverage, row_entropy

COLORSCALE = "Viridis"


def _escaped(labels: list[str]) -> list[str]:
    """Labels as Plotly text: it reads "<" as markup ("</s>" would vanish as a closing tag)."""
    return [
        label.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") for label in labels
    ]


def attention_heatmap(
    weights: Tensor,
    row_labels: list[str],
    col_labels: list[str],
    title: str = "",
    row_name: str = "target",
    col_name: str = "source",
) -> go.Figure:
    """One (rows, keys) attention matrix; hovering a cell shows its two words and its weight.

    Cells are placed on numeric axes with the words as tick labels, so a word that occurs
    twice keeps two rows (categorical axes would merge them).
    """
    if tuple(weights.shape) != (len(row_labels), len(col_labels)):
        raise ValueError(
            f"weights of shape {tuple(weights.shape)} need {weights.shape[0]} row and "
            f"{weights.shape[1]} column labels, got {len(row_labels)} and {len(col_labels)}"
        )
    z = weights.detach().float().cpu().numpy()
    row_labels, col_labels = _escaped(row_labels), _escaped(col_labels)
    words = np.empty((*z.shape, 2), dtype=object)
    words[..., 0] = np.asarray(row_labels, dtype=object)[:, None]
    words[..., 1] = np.asarray(col_labels, dtype=object)[None, :]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            customdata=words,
            colorscale=COLORSCALE,
            zmin=0.0,
            zmax=1.0,
            hovertemplate=(
                f"{row_name} %{{customdata[0]}}<br>{col_name} %{{customdata[1]}}"
                "<br>weight %{z:.3f}<extra></extra>"
            ),
            colorbar={"title": "weight", "thickness": 12},
        )
    )
    cell = 34
    fig.update_layout(
        title=title,
        xaxis={
            "tickmode": "array",
            "tickvals": list(range(len(col_labels))),
            "ticktext": col_labels,
            "side": "top",
            "tickangle": -45,
            "title": col_name,
        },
        yaxis={
            "tickmode": "array",
            "tickvals": list(range(len(row_labels))),
            "ticktext": row_labels,
            "autorange": "reversed",
            "title": row_name,
        },
        height=max(320, 150 + cell * len(row_labels)),
        margin={"l": 110, "r": 20, "t": 130, "b": 20},
    )
    return fig


def alignment_lines(
    links: dict[tuple[int, int], float],
    src_words: list[str],
    tgt_words: list[str],
    title: str = "",
) -> go.Figure:
    """The source sentence above the target, a line for each link (source i, target j),
    as dark as its attention weight."""
    src_words, tgt_words = _escaped(src_words), _escaped(tgt_words)
    n = max(len(src_words), len(tgt_words), 1)
    xs = {"src": _spread(len(src_words), n), "tgt": _spread(len(tgt_words), n)}
    fig = go.Figure()
    for (i, j), weight in sorted(links.items()):
        fig.add_trace(
            go.Scatter(
                x=[xs["src"][i], xs["tgt"][j]],
                y=[1.0, 0.0],
                mode="lines",
                line={
                    "width": 1.5 + 3.0 * weight,
                    "color": f"rgba(31, 90, 170, {0.25 + 0.75 * weight:.3f})",
                },
                hovertemplate=f"{src_words[i]} - {tgt_words[j]}<br>weight {weight:.3f}<extra></extra>",
                showlegend=False,
            )
        )
    for side, words, y, position in (
        ("src", src_words, 1.0, "top center"),
        ("tgt", tgt_words, 0.0, "bottom center"),
    ):
        fig.add_trace(
            go.Scatter(
                x=xs[side],
                y=[y] * len(words),
                mode="markers+text",
                text=words,
                textposition=position,
                marker={"size": 6, "color": "black"},
                hoverinfo="text",
                showlegend=False,
            )
        )
    fig.update_layout(
        title=title,
        xaxis={"visible": False, "range": [-0.8, n - 0.2]},
        yaxis={"visible": False, "range": [-0.35, 1.35]},
        height=260,
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
    )
    return fig


def entropy_and_coverage(
    weights: Tensor, src_words: list[str], tgt_words: list[str], title: str = ""
) -> go.Figure:
    """Two bar charts of one (target, source) matrix: each target word's row entropy (nats;
    low = focused) and each source word's coverage (the attention it receives in total)."""
    src_words, tgt_words = _escaped(src_words), _escaped(tgt_words)
    entropy = row_entropy(weights).detach().cpu().numpy()
    covered = coverage(weights).detach().cpu().numpy()
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=("entropy per target word (nats)", "coverage per source word"),
    )
    for col, (labels, values) in enumerate(((tgt_words, entropy), (src_words, covered)), 1):
        fig.add_trace(
            go.Bar(
                x=list(range(len(labels))),
                y=values,
                customdata=labels,
                hovertemplate="%{customdata}: %{y:.3f}<extra></extra>",
                showlegend=False,
            ),
            row=1,
            col=col,
        )
        fig.update_xaxes(
            tickmode="array",
            tickvals=list(range(len(labels))),
            ticktext=labels,
            tickangle=-45,
            row=1,
            col=col,
        )
    fig.update_layout(title=title, height=300, margin={"l": 40, "r": 10, "t": 70, "b": 60})
    return fig


def _spread(count: int, width: int) -> list[float]:
    """``count`` positions centred in ``width`` slots."""
    offset = (width - count) / 2.0
    return [offset + k for k in range(count)]
