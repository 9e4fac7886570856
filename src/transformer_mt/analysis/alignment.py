"""Word alignments read from cross-attention, scored against gold with ``transformer_mt.align``.

Links are (source word i, target word j) pairs, the Pharaoh ``i-j`` convention; which head is
read, and which of its rows stands for a target word, is a ``HeadReading``.

Legend: L layers, H heads, W_tgt target words, W_src source words.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import Tensor
from tqdm import tqdm

from transformer_mt.align.gold import GoldSet
from transformer_mt.align.links import Gold, Links, corpus_scores, scores_by_length
from transformer_mt.align.reading import HeadReading
from transformer_mt.analysis.capture import pair_attention
from transformer_mt.analysis.stats import coverage, row_entropy, with_temperature
from transformer_mt.model import Transformer
from transformer_mt.model.positions import fit_positions


def translation_links(
    model: Transformer, tokenizer, src_ids: list[int], tgt_ids: list[int], reading: HeadReading
) -> Links:
    """Word links of a translation (piece ids, no EOS), read as ``reading`` says.

    The EOS row and column are left out, so every link joins two real words.
    """
    pair = pair_attention(model, tokenizer, src_ids, tgt_ids, full_context=reading.full_context)
    return reading.links(pair.words("cross"), pair.linked_words)


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
    if len(sources) != len(targets):
        raise ValueError(f"{len(sources)} sources but {len(targets)} targets")
    # a side longer than the model reads is read as its first pieces (one warning per side);
    # its words past the cut have no row or column, so their gold links count as missed
    limit = model.cfg.max_positions
    src_ids = fit_positions(tokenizer.encode(list(sources)), limit, "source")
    tgt_ids = fit_positions(tokenizer.encode(list(targets)), limit, "target")
    pairs = zip(sources, targets, src_ids, tgt_ids, strict=True)
    for n, (src, tgt, src_pieces, tgt_pieces) in enumerate(
        tqdm(pairs, total=len(sources), disable=not progress, desc="attention")
    ):
        pair = pair_attention(model, tokenizer, src_pieces, tgt_pieces, full_context=full_context)
        words, src_words, tgt_words = pair.words("cross"), pair.src_words, pair.tgt_words
        for side, text, got, ids in (
            ("source", src, src_words, src_pieces),
            ("target", tgt, tgt_words, tgt_pieces),
        ):
            expected = len(text.split())
            cut = len(ids) == limit - 1  # possibly cut: its words up to the cut at most
            if len(got) - 1 > expected or (not cut and len(got) - 1 != expected):
                raise ValueError(
                    f"line {n + 1}: the {side} has {expected} words but its pieces make "
                    f"{len(got) - 1} ({got[:-1]}); check that the text is normalised like the "
                    f"tokenizer's training data"
                )
        out.append(words)
    return out


@dataclass
class LayerScores:
    """How well one reading (a head, or a layer's heads averaged) aligns, and how it looks."""

    reading: HeadReading
    aer: float | None  # None without gold
    precision: float | None
    recall: float | None
    links: list[Links]  # per sentence, (source i, target j)
    entropy: float  # mean per-head row entropy in nats (target words, EOS column included)
    uniform: float  # mean log(n) over the same rows: the entropy of uniform attention
    entropy_by_tau: dict[float, float]  # the same mean entropy at other softmax temperatures
    uncovered: float  # fraction of source words whose coverage (column sum) is below 0.25

    @property
    def layer(self) -> int:
        return self.reading.layer


def score_reading(
    attention: list[Tensor],
    gold: Gold | None,
    reading: HeadReading,
    temperatures: tuple[float, ...] = (0.5, 2.0),
) -> LayerScores:
    """Links, AER and diagnostics of one reading over a corpus.

    Args:
        attention: ``corpus_attention`` output (captured with the whole target as context for
            a ``full`` reading).
        gold: (sure, possible) per pair, or None to align without scoring.
    """
    if gold is not None and len(gold) != len(attention):
        raise ValueError(f"{len(gold)} gold lines for {len(attention)} sentence pairs")
    links, entropies, uniforms, uncovered, n_src = [], [], [], 0, 0
    by_tau: dict[float, list[Tensor]] = {t: [] for t in temperatures}
    layer, head = reading.layer - 1, reading.head
    for words in attention:
        picked = words[layer] if head is None else words[layer, head - 1 : head]
        heads = picked[:, :-1, :]  # (H, W_tgt, W_src + 1): target words' rows
        links.append(reading.links(words))
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
    return LayerScores(
        reading=reading,
        aer=aer,
        precision=precision,
        recall=recall,
        links=links,
        entropy=float(torch.cat(entropies).mean()),
        uniform=float(torch.cat(uniforms).mean()),
        entropy_by_tau={t: float(torch.cat(v).mean()) for t, v in by_tau.items()},
        uncovered=uncovered / max(n_src, 1),
    )


LAYER_MEAN = HeadReading(1, None)  # each layer's heads averaged, as the model predicts, by argmax


def score_layers(
    attention: list[Tensor], gold: Gold | None = None, like: HeadReading = LAYER_MEAN
) -> list[LayerScores]:
    """``score_reading`` of every decoder layer, each read as ``like`` (its head, mode and
    extraction; its layer is the one that varies)."""
    n_layers = attention[0].size(0) if attention else 0
    return [score_reading(attention, gold, replace(like, layer=n + 1)) for n in range(n_layers)]


def score_heads(
    attention: list[Tensor], gold: Gold | None = None, mode: str = "causal"
) -> list[list[LayerScores]]:
    """Every head alone and every layer's mean, read in ``mode`` by argmax: per layer, H + 1
    entries; ``grid[l][h]`` is head h + 1 of layer l + 1, ``grid[l][-1]`` the layer's mean."""
    n_heads = attention[0].size(1) if attention else 0
    columns = [
        score_layers(attention, gold, HeadReading(1, h, mode))
        for h in [*range(1, n_heads + 1), None]
    ]
    return [list(row) for row in zip(*columns)]


def gold_aer(
    model: Transformer, tokenizer, gold: GoldSet, reading: HeadReading | None = None
) -> dict[str, float]:
    """AER of one reading and of every layer's heads averaged (argmax), as training logs it.

    Every layer is scored and none is picked: the gold sets a run scores while training may be
    test sets, which choose nothing. The model is put in eval mode by the caller; the layers'
    means are read as the model predicts (causal), the head in its own reading.

    Returns:
        ``{"head": ..., "layers": [layer 1's AER, ...]}`` (no "head" without one), and
        ``"by_length"``: {source-length bucket: AER} of the head, else of the last layer.
    """
    attention = corpus_attention(model, tokenizer, gold.sources, gold.targets)
    means = score_layers(attention, gold.gold)
    out = {"layers": [s.aer for s in means]}
    links = means[-1].links
    if reading is not None:
        if reading.full_context:
            attention = corpus_attention(
                model, tokenizer, gold.sources, gold.targets, full_context=True
            )
        links = [reading.links(w, pair) for w, pair in zip(attention, gold.words, strict=True)]
        out["head"] = corpus_scores(links, gold.gold)[0]
    lengths = [len(s.split()) for s in gold.sources]
    out["by_length"] = {
        name: aer for name, (aer, *_) in scores_by_length(links, gold.gold, lengths).items()
    }
    return out
