"""The figures of one sentence pair, written to disk: the heads-averaged heatmap of one layer
and the grid of every head. Used at the end of training and by ``scripts/plot_alignment.py``."""

from __future__ import annotations

from pathlib import Path

from transformer_mt.analysis.capture import pair_attention
from transformer_mt.errors import UserError
from transformer_mt.model import Transformer
from transformer_mt.viz.alignment import plot_alignment, plot_heads


def layer_index(layer: int, n_layers: int) -> int:
    """A 1-based layer number, or a negative one counted from the end, -> a 0-based index."""
    if not (-n_layers <= layer < 0 or 1 <= layer <= n_layers):
        raise UserError(f"layer {layer}: the decoder has layers 1..{n_layers} (or -1..-{n_layers})")
    return layer - 1 if layer > 0 else layer % n_layers


def save_pair_heatmaps(
    model: Transformer,
    tokenizer,
    src: str,
    tgt: str | list[int] | None,
    stem: Path,
    layer: int = -1,
    formats: tuple[str, ...] = ("png",),
    heads: bool = True,
    head: int | None = None,
    full_context: bool = False,
    shift: bool = False,
) -> dict:
    """Draw one pair's cross-attention: ``<stem>_layer<N>.<fmt>`` and ``<stem>_heads.<fmt>``.

    Args:
        tgt: the target to teacher-force (text, or piece ids without EOS, e.g. a beam
            hypothesis); None translates ``src`` greedily first.
        layer: the decoder layer of the heads-averaged heatmap (1-based, or negative from the end).
        formats: file suffixes matplotlib understands, e.g. ``("png", "svg")``.
        heads: also draw the grid of every head of every layer.
        head: draw this head of ``layer`` (1-based) instead of the heads averaged.
        full_context: capture with the whole target as the decoder's context (how a head
            trained with ``align.full_context`` is read); the titles say so.
        shift: each target word's row is the one where it is the decoder's input (how a head
            trained with ``align.shift`` is read); no EOS row then. The titles say so.

    Returns:
        the source, the target drawn (translation or given), the layer, the files written, and
        per target word the source word it attends to most.
    """
    pair = pair_attention(model, tokenizer, src, tgt, full_context=full_context)
    weights, src_words, tgt_words = pair.words("cross"), pair.src_words, pair.tgt_words
    index = layer_index(layer, weights.size(0))
    if head is not None and not 1 <= head <= weights.size(1):
        raise UserError(f"head {head}: the decoder has heads 1..{weights.size(1)}")
    if head is None:
        words = weights[index].mean(dim=0)  # heads averaged: (W_tgt, W_src)
        title = f"decoder layer {index + 1} cross-attention, heads averaged"
        name = f"{stem.name}_layer{index + 1}"
    else:
        words = weights[index, head - 1]
        title = f"decoder layer {index + 1}, head {head}: cross-attention"
        name = f"{stem.name}_layer{index + 1}_head{head}"
    if full_context:
        title += " (full target context)"
    rows = tgt_words
    if shift:
        words, rows = words[1:], tgt_words[:-1]  # word j: the row where it is the input
        title += " (shift reading)"
    stem.parent.mkdir(parents=True, exist_ok=True)
    figures = [(name, plot_alignment(words, src_words, rows, title), 150)]
    if heads:
        figures.append((f"{stem.name}_heads", plot_heads(weights, src_words, tgt_words), 110))
    files = []
    for name, fig, dpi in figures:
        for fmt in formats:
            path = stem.parent / f"{name}.{fmt}"
            fig.savefig(path, dpi=dpi)
            files.append(path.name)
    best = words.argmax(dim=-1).tolist()
    return {
        "source": src,
        "target": tokenizer.decode([pair.tgt_ids])[0],
        "translated": pair.translated,
        "layer": index + 1,
        "head": head,
        "strongest": [[t, src_words[j]] for t, j in zip(rows, best, strict=True)],
        "files": files,
    }
