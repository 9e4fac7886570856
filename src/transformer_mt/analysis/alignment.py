"""Word alignments read from cross-attention, scored against gold with ``transformer_mt.align``.

Links are (source word i, target word j) pairs, the Pharaoh ``i-j`` convention; which head is
read, and which of its rows stands for a target word, is a ``HeadReading``.

Legend: L layers, H heads, W_tgt target words, W_src source words.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor
from tqdm import tqdm

from transformer_mt.align.extract import ARGMAX, Extraction
from transformer_mt.align.gold import GoldSet
from transformer_mt.align.links import Gold, Links, corpus_scores, scores_by_length
from transformer_mt.align.reading import HeadReading
from transformer_mt.analysis.capture import pair_attention
from transformer_mt.analysis.stats import coverage, row_entropy, with_temperature
from transformer_mt.model import Transformer


def translation_links(
    model: Transformer,
    tokenizer,
    src_ids: list[int],
    tgt_ids: list[int],
    reading: HeadReading,
    extraction: Extraction = ARGMAX,
) -> Links:
    """Word links of a translation (piece ids, no EOS): ``reading``'s head read by ``extraction``.

    The EOS row and column are left out, so every link joins two real words.
    """
    pair = pair_attention(model, tokenizer, src_ids, tgt_ids, full_context=reading.full_context)
    return extraction.links(head_rows(pair.words("cross"), reading)[:, :-1])


def head_rows(words: Tensor, reading: HeadReading) -> Tensor:
    """One reading's word rows of captured cross-attention.

    Args:
        words: (L, H, W_tgt + 1, W_src + 1) word-level cross-attention, EOS last on both axes.

    Returns:
        (W_tgt, W_src + 1): row j for target word j (the next row in ``shift`` mode), the
        head alone or the layer's heads averaged.
    """
    layer = words[reading.layer - 1]  # (H, W_tgt + 1, W_src + 1)
    picked = layer if reading.head is None else layer[reading.head - 1 : reading.head]
    rows = picked[:, 1:] if reading.shift else picked[:, :-1]  # (h, W_tgt, W_src + 1)
    return rows.mean(dim=0)


@torch.no_grad()
def corpus_attention(
    model: Transformer,
    tokenizer,
    sources: list[str],
    targets: list[str],
    progress: bool = False,
    full_context: bool = False,
) -> list[Tensor]:
    """Word-level cross-attention of every pair, teacher-forced on the given targets.

    Words are the whitespace-separated tokens of each line (gold alignments count them so).
    ``full_context``: the decoder sees the whole target (``capture``), as a head trained
    with ``align.mode=full`` is read.

    Returns:
        per pair (L, H, W_tgt + 1, W_src + 1): the last row and column are EOS.

    Raises:
        ValueError: when a line's pieces do not fold back into its whitespace words.
    """
    out = []
    pairs = zip(sources, targets, strict=True)
    for n, (src, tgt) in enumerate(
        tqdm(pairs, total=len(sources), disable=not progress, desc="attention")
    ):
        pair = pair_attention(model, tokenizer, src, tgt, full_context=full_context)
        words, src_words, tgt_words = pair.words("cross"), pair.src_words, pair.tgt_words
        for side, text, got in (("source", src, src_words), ("target", tgt, tgt_words)):
            if len(got) - 1 != len(text.split()):
                raise ValueError(
                    f"line {n + 1}: the {side} has {len(text.split())} words but its pieces make "
                    f"{len(got) - 1} ({got[:-1]}); check that the text is normalised like the "
                    f"tokenizer's training data"
                )
        out.append(words)
    return out


@dataclass
class LayerScores:
    """How well one decoder layer's head-averaged cross-attention aligns, and how it looks."""

    layer: int  # 1-based
    aer: float | None  # None without gold
    precision: float | None
    recall: float | None
    links: list[Links]  # per sentence, (source i, target j)
    entropy: float  # mean per-head row entropy in nats (target words, EOS column included)
    uniform: float  # mean log(n) over the same rows: the entropy of uniform attention
    entropy_by_tau: dict[float, float]  # the same mean entropy at other softmax temperatures
    uncovered: float  # fraction of source words whose coverage (column sum) is below 0.25
    head: int | None = None  # 1-based head read alone; None: the heads averaged

    @property
    def name(self) -> str:
        """``L:H`` (a head) or ``L`` (the layer's mean), as ``--head`` takes it."""
        return f"{self.layer}:{self.head}" if self.head is not None else str(self.layer)


def score_layers(
    attention: list[Tensor],
    gold: Gold | None = None,
    method: str | Extraction = "argmax",
    mode: str = "causal",
    temperatures: tuple[float, ...] = (0.5, 2.0),
    head: int | None = None,
) -> list[LayerScores]:
    """Alignments, AER and diagnostics of every decoder layer.

    Args:
        attention: ``corpus_attention`` output.
        gold: (sure, possible) per pair, or None to align without scoring.
        method: an ``Extraction`` or its method (``transformer_mt.align.extract``).
        mode: a ``HeadReading`` mode; ``shift`` reads target word j from the row where it is
            the decoder's *input* (the next row; Chen et al. 2020) instead of the row that
            produces it (``full`` attention is captured so by ``corpus_attention``).
        head: align with this head alone (1-based) instead of the heads' mean; the
            diagnostics (entropy, coverage) are then this head's as well.
    """
    if gold is not None and len(gold) != len(attention):
        raise ValueError(f"{len(gold)} gold lines for {len(attention)} sentence pairs")
    n_layers = attention[0].size(0) if attention else 0
    extraction = method if isinstance(method, Extraction) else Extraction(method)
    scores = []
    for layer in range(n_layers):
        links, entropies, uniforms, uncovered, n_src = [], [], [], 0, 0
        by_tau: dict[float, list[Tensor]] = {t: [] for t in temperatures}
        reading = HeadReading(layer + 1, head, mode)
        for words in attention:
            picked = words[layer] if head is None else words[layer, head - 1 : head]
            heads = picked[:, :-1, :]  # (H, W_tgt, W_src + 1): target words' rows
            links.append(extraction.links(head_rows(words, reading)[:, :-1]))
            entropies.append(row_entropy(heads).flatten())
            uniforms.append(torch.full((heads[0].size(0),), math.log(heads.size(-1))))
            for tau in temperatures:
                by_tau[tau].append(row_entropy(with_temperature(heads, tau)).flatten())
            cover = coverage(heads.mean(dim=0)[:, :-1])
            uncovered += int((cover < 0.25).sum())
            n_src += cover.numel()
        aer = precision = recall = None
        if gold is not None:
            aer, precision, recall = corpus_scores(links, gold)
        scores.append(
            LayerScores(
                layer=layer + 1,
                aer=aer,
                precision=precision,
                recall=recall,
                links=links,
                entropy=float(torch.cat(entropies).mean()),
                uniform=float(torch.cat(uniforms).mean()),
                entropy_by_tau={t: float(torch.cat(v).mean()) for t, v in by_tau.items()},
                uncovered=uncovered / max(n_src, 1),
                head=head,
            )
        )
    return scores


def score_heads(
    attention: list[Tensor],
    gold: Gold | None = None,
    method: str | Extraction = "argmax",
    mode: str = "causal",
) -> list[list[LayerScores]]:
    """``score_layers`` for every head alone and for the mean: per layer, H + 1 entries.

    ``grid[l][h]`` is head h + 1 of layer l + 1; ``grid[l][-1]`` the layer's heads averaged.
    """
    n_heads = attention[0].size(1) if attention else 0
    columns = [
        score_layers(attention, gold, method, mode, head=h) for h in [*range(1, n_heads + 1), None]
    ]
    return [list(row) for row in zip(*columns)]


def gold_aer(
    model: Transformer,
    tokenizer,
    gold: GoldSet,
    reading: HeadReading | None = None,
    extraction: Extraction = ARGMAX,
) -> dict[str, float]:
    """AER of one head (read by ``extraction``) and of the best layer's heads averaged
    (argmax), as training logs it.

    The model is put in eval mode by the caller; the layers' means are read as the model
    predicts (causal), the head in its own reading.

    Returns:
        ``{"head": ..., "best_layer": ..., "best_layer_aer": ...}`` (no "head" without one), and
        ``"by_length"``: {source-length bucket: AER} of the head, else of the best layer.
    """
    attention = corpus_attention(model, tokenizer, gold.sources, gold.targets)
    means = score_layers(attention, gold.gold)
    best = min(means, key=lambda s: s.aer)
    out = {"best_layer": float(best.layer), "best_layer_aer": best.aer}
    links = best.links
    if reading is not None:
        if reading.full_context:
            attention = corpus_attention(
                model, tokenizer, gold.sources, gold.targets, full_context=True
            )
        links = [extraction.links(head_rows(words, reading)[:, :-1]) for words in attention]
        out["head"] = corpus_scores(links, gold.gold)[0]
    lengths = [len(s.split()) for s in gold.sources]
    out["by_length"] = {
        name: aer for name, (aer, *_) in scores_by_length(links, gold.gold, lengths).items()
    }
    return out
