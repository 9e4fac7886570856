"""The figures of one sentence pair, written to disk: the heads-averaged heatmap of one layer
and the grid of every head. Used at the end of training and by ``scripts/plot_alignment.py``."""

from __future__ import annotations

from pathlib import Path

from transformer_mt.align.reading import HeadReading
from transformer_mt.analysis.capture import pair_attention
from transformer_mt.model import Transformer
from transformer_mt.viz.alignment import plot_alignment, plot_heads


def save_pair_heatmaps(
    model: Transformer,
    tokenizer,
    src: str,
    tgt: str | list[int] | None,
    stem: Path,
    reading: HeadReading,
    formats: tuple[str, ...] = ("png",),
    heads: bool = True,
) -> dict:
    """Draw one pair's cross-attention: ``<stem>_layer<N>.<fmt>`` and ``<stem>_heads.<fmt>``.

    Args:
        tgt: the target to teacher-force (text, or piece ids without EOS, e.g. a beam
            hypothesis); None translates ``src`` greedily first.
        reading: the layer, head (or the heads averaged) and rows drawn: ``full`` captures
            with the whole target as the decoder's context, ``shift`` draws each target
            word's row where it is the decoder's input (no EOS row then); the titles say so.
        formats: file suffixes matplotlib understands, e.g. ``("png", "svg")``.
        heads: also draw the grid of every head of every layer.

    Returns:
        the source, the target drawn (translation or given), the layer, the files written, and
        per target word the source word it attends to most.
    """
    pair = pair_attention(model, tokenizer, src, tgt, full_context=reading.full_context)
    weights, src_words, tgt_words = pair.words("cross"), pair.src_words, pair.tgt_words
    layer, head = reading.layer, reading.head
    chosen = weights[layer - 1]  # (H, W_tgt + 1, W_src + 1)
    words = chosen.mean(dim=0) if head is None else chosen[head - 1]
    if head is None:
        title = f"decoder layer {layer} cross-attention, heads averaged"
        name = f"{stem.name}_layer{layer}"
    else:
        title = f"decoder layer {layer}, head {head}: cross-attention"
        name = f"{stem.name}_layer{layer}_head{head}"
    rows = tgt_words
    if reading.full_context:
        title += " (full target context)"
    if reading.shift:
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
        "layer": layer,
        "head": head,
        "strongest": [[t, src_words[j]] for t, j in zip(rows, best, strict=True)],
        "files": files,
    }
