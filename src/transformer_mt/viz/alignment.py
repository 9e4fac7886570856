"""Cross-attention as an alignment: capture it, fold pieces into words, draw it.

Legend: L decoder layers, H heads, T target pieces, S source pieces, W words.
"""

from __future__ import annotations

from pathlib import Path

import torch
from matplotlib.figure import Figure
from torch import Tensor

from transformer_mt.data.tokenizer import BOS_ID, EOS_ID
from transformer_mt.decoding import greedy_decode
from transformer_mt.model import AttentionMaps, Transformer

WORD_START = "\u2581"  # SentencePiece's "▁", which starts every word
CONTROL_PIECES = frozenset({"<s>", "</s>", "<pad>"})


@torch.no_grad()
def capture(model: Transformer, src: Tensor, tgt: Tensor) -> AttentionMaps:
    """Teacher-forced attention of one pair: encoder, decoder self- and cross-attention.

    Row t of the decoder's maps is the distribution while the decoder *produces* ``tgt[t]``
    (its input is BOS, tgt[0], .., tgt[t-1]). The model is put in eval mode (no dropout)
    for the call and restored afterwards.

    Args:
        src: (S,) EOS-terminated source ids of one sentence.
        tgt: (T,) EOS-terminated target ids: a reference, or the model's own translation.

    Returns:
        maps with batch size 1.
    """
    was_training = model.training
    model.eval()
    tgt_in = torch.cat([tgt.new_tensor([BOS_ID]), tgt[:-1]])[None]  # (1, T)
    _, maps = model.attention_maps(src[None], tgt_in)
    model.train(was_training)
    return maps


def cross_attention(model: Transformer, src: Tensor, tgt: Tensor) -> Tensor:
    """Teacher-forced cross-attention of every decoder layer and head: (L, H, T, S)."""
    return capture(model, src, tgt).stacked("cross")[:, 0]


def word_groups(pieces: list[str]) -> list[list[int]]:
    """Indices of the pieces of each word: a new word starts at every piece with "▁".

    Control pieces (``</s>``, ``<s>``, ``<pad>``) form words of their own; ``<unk>`` stays
    inside the word it interrupts.
    """
    groups: list[list[int]] = []
    for i, piece in enumerate(pieces):
        if (
            not groups
            or piece.startswith(WORD_START)
            or piece in CONTROL_PIECES
            or pieces[i - 1] in CONTROL_PIECES
        ):
            groups.append([i])
        else:
            groups[-1].append(i)
    return groups


def words_of(pieces: list[str], groups: list[list[int]]) -> list[str]:
    return ["".join(pieces[i] for i in g).replace(WORD_START, "") for g in groups]


def to_words(weights: Tensor, tgt_groups: list[list[int]], src_groups: list[list[int]]) -> Tensor:
    """Piece-level (..., T, S) weights to word level (..., W_tgt, W_src).

    A target word's row is the mean of its pieces' rows (it stays a distribution); a source
    word's column is the sum of its pieces' columns (the mass given to the word).
    """
    rows = torch.stack(
        [weights[..., g, :].mean(dim=-2) for g in tgt_groups], dim=-2
    )  # (..., W_tgt, S)
    return torch.stack(
        [rows[..., g].sum(dim=-1) for g in src_groups], dim=-1
    )  # (..., W_tgt, W_src)


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
    size = max(3.0, 0.45 * max(w.shape) + 1.5)
    fig = Figure(figsize=(size + 1.0, size))  # no pyplot: no global state, any backend
    ax = fig.subplots()
    image = ax.imshow(w, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(src_words)), src_words, rotation=60, ha="left", rotation_mode="anchor")
    ax.set_yticks(range(len(tgt_words)), tgt_words)
    ax.xaxis.tick_top()
    ax.xaxis.set_label_position("top")
    ax.set_xlabel("source")
    ax.set_ylabel("target")
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="attention weight")
    if title:
        ax.set_title(title, fontsize=10, y=-0.08, va="top")
    fig.tight_layout()
    return fig


def word_attention(
    model: Transformer, tokenizer, src_ids: list[int], tgt_ids: list[int]
) -> tuple[Tensor, list[str], list[str]]:
    """Word-level cross-attention of every layer and head for one pair of piece-id sequences.

    Args:
        src_ids, tgt_ids: piece ids without EOS (it is appended here and kept as a word "</s>").

    Returns:
        weights (L, H, W_tgt, W_src), the source words and the target words.
    """
    src, tgt = torch.tensor(src_ids + [EOS_ID]), torch.tensor(tgt_ids + [EOS_ID])
    weights = cross_attention(model, src, tgt)  # (L, H, T, S)
    src_pieces = [tokenizer.sp.id_to_piece(i) for i in src.tolist()]
    tgt_pieces = [tokenizer.sp.id_to_piece(i) for i in tgt.tolist()]
    src_groups, tgt_groups = word_groups(src_pieces), word_groups(tgt_pieces)
    words = to_words(weights, tgt_groups, src_groups)  # (L, H, W_tgt, W_src)
    return words, words_of(src_pieces, src_groups), words_of(tgt_pieces, tgt_groups)


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
    cell = max(1.6, 0.22 * max(w.shape[2:]) + 0.8)
    fig = Figure(figsize=(cell * H + 1.2, cell * L + 0.8))
    axes = fig.subplots(L, H, squeeze=False)
    for layer in range(L):
        for head in range(H):
            ax = axes[layer, head]
            image = ax.imshow(w[layer, head], cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
            ax.set_title(f"layer {layer + 1}, head {head + 1}", fontsize=8)
            ax.set_xticks(
                range(len(src_words)),
                src_words if layer == 0 else [],
                rotation=60,
                ha="left",
                rotation_mode="anchor",
                fontsize=6,
            )
            ax.set_yticks(range(len(tgt_words)), tgt_words if head == 0 else [], fontsize=6)
            ax.xaxis.tick_top()
    fig.colorbar(image, ax=axes, fraction=0.02, pad=0.01, label="attention weight")
    return fig


def draw_pair(
    model: Transformer,
    tokenizer,
    src: str,
    tgt: str | None,
    stem: Path,
    layer: int = -1,
    formats: tuple[str, ...] = ("png",),
    heads: bool = True,
) -> dict:
    """Draw one pair's cross-attention: ``<stem>_layer<N>.<fmt>`` and ``<stem>_heads.<fmt>``.

    Args:
        tgt: the target to teacher-force; None translates ``src`` greedily first.
        layer: the decoder layer of the heads-averaged heatmap (1-based, or negative from the end).
        formats: file suffixes matplotlib understands, e.g. ``("png", "svg")``.
        heads: also draw the grid of every head of every layer.

    Returns:
        the source, the target drawn (translation or given), the layer, the files written, and
        per target word the source word it attends to most.
    """
    model.eval()
    src_ids = tokenizer.encode([src])[0]
    if tgt is None:
        tgt_ids = greedy_decode(model, torch.tensor([src_ids + [EOS_ID]]))[0]
    else:
        tgt_ids = tokenizer.encode([tgt])[0]
    weights, src_words, tgt_words = word_attention(model, tokenizer, src_ids, tgt_ids)
    n_layers = weights.size(0)
    if not (-n_layers <= layer < 0 or 1 <= layer <= n_layers):
        raise ValueError(
            f"layer {layer}: the decoder has layers 1..{n_layers} (or -1..-{n_layers})"
        )
    index = layer - 1 if layer > 0 else layer % n_layers
    words = weights[index].mean(dim=0)  # heads averaged: (W_tgt, W_src)
    title = f"decoder layer {index + 1} cross-attention, heads averaged"
    stem.parent.mkdir(parents=True, exist_ok=True)
    files = []
    figures = [
        (f"{stem.name}_layer{index + 1}", plot_alignment(words, src_words, tgt_words, title), 150)
    ]
    if heads:
        figures.append((f"{stem.name}_heads", plot_heads(weights, src_words, tgt_words), 110))
    for name, fig, dpi in figures:
        for fmt in formats:
            path = stem.parent / f"{name}.{fmt}"
            fig.savefig(path, dpi=dpi)
            files.append(path.name)
    best = words.argmax(dim=-1).tolist()
    return {
        "source": src,
        "target": tokenizer.decode([tgt_ids])[0],
        "translated": tgt is None,
        "layer": index + 1,
        "strongest": [[t, src_words[j]] for t, j in zip(tgt_words, best)],
        "files": files,
    }
