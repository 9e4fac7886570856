"""Word alignments read from attention, and how to judge them.

Links are (source word i, target word j) pairs, the Pharaoh ``i-j`` convention. Gold sets mark
sure links ``i-j`` and possible links ``ipj`` (Och & Ney 2003); possible includes sure.

Legend: L layers, H heads, W_tgt target words, W_src source words.
"""

from __future__ import annotations

import torch
from torch import Tensor

from transformer_mt.model import Transformer
from transformer_mt.viz.alignment import word_attention

Links = set[tuple[int, int]]


def read_pharaoh(line: str, one_indexed: bool = False) -> tuple[Links, Links]:
    """Sure and possible links of one line: ``"0-0 1-2 3p4"`` -> ({(0,0),(1,2)}, {(0,0),(1,2),(3,4)}).

    Args:
        one_indexed: the file counts words from 1 (the Hansards and RO-EN gold sets do).

    Raises:
        ValueError: on a token that is neither ``i-j`` nor ``ipj``.
    """
    sure: Links = set()
    possible: Links = set()
    shift = 1 if one_indexed else 0
    for token in line.split():
        sep = "-" if "-" in token else "p"
        left, _, right = token.partition(sep)
        if not (left.isdigit() and right.isdigit()):
            raise ValueError(f"{token!r} is not a link: expected i-j (sure) or ipj (possible)")
        link = (int(left) - shift, int(right) - shift)
        possible.add(link)
        if sep == "-":
            sure.add(link)
    return sure, possible


def format_pharaoh(links: Links) -> str:
    """``{(0, 0), (2, 1)}`` -> ``"0-0 2-1"``, sorted."""
    return " ".join(f"{i}-{j}" for i, j in sorted(links))


def hard_alignment(weights: Tensor) -> Links:
    """One link per target word: its most attended source word.

    Args:
        weights: (W_tgt, W_src) word-level attention.
    """
    return {(int(i), j) for j, i in enumerate(weights.argmax(dim=-1).tolist())}


def alignment_error_rate(predicted: Links, sure: Links, possible: Links | None = None) -> float:
    """AER = 1 - (|A∩S| + |A∩P|) / (|A| + |S|) (Och & Ney 2003), with P ⊇ S.

    Sets may hold links of many sentences at once, e.g. as (sentence, i, j) triples.
    """
    possible = (possible or set()) | sure
    if not predicted and not sure:
        return 0.0
    return 1.0 - (len(predicted & sure) + len(predicted & possible)) / (len(predicted) + len(sure))


def precision_recall(
    predicted: Links, sure: Links, possible: Links | None = None
) -> tuple[float, float]:
    """Precision against possible links (|A∩P| / |A|) and recall against sure ones (|A∩S| / |S|)."""
    possible = (possible or set()) | sure
    precision = len(predicted & possible) / len(predicted) if predicted else 1.0
    recall = len(predicted & sure) / len(sure) if sure else 1.0
    return precision, recall


def row_entropy(weights: Tensor) -> Tensor:
    """Entropy in nats of every attention row (..., T, S) -> (..., T); uniform over n keys gives log(n)."""
    return -(weights * weights.clamp_min(1e-30).log()).sum(dim=-1)


def coverage(weights: Tensor) -> Tensor:
    """Column sums (..., T, S) -> (..., S): how much attention each source word receives in total.

    Rows sum to 1, columns need not; a source word near 0 is one no target word attends to.
    """
    return weights.sum(dim=-2)


def layer_aer(
    model: Transformer, tokenizer, pairs: list[tuple[str, str, str]], shift: bool = False
) -> list[float]:
    """AER of each decoder layer's head-averaged cross-attention against gold alignments.

    Each target word is linked to its most attended source word (EOS row and column left
    out). With ``shift``, a target word's row is the one where it is the decoder's *input*
    (Chen et al. 2020), i.e. the next row.

    Args:
        pairs: (source text, target text, gold Pharaoh links "i-j ..." (0-indexed, may hold ipj)).

    Returns:
        AER per layer, first layer first.
    """
    predicted: list[set] = [set() for _ in model.decoder.layers]
    sure: set = set()
    possible: set = set()
    with torch.no_grad():
        for n, (src, tgt, links) in enumerate(pairs):
            src_ids, tgt_ids = tokenizer.encode([src, tgt])
            words, _, _ = word_attention(model, tokenizer, src_ids, tgt_ids)  # (L, H, W_tgt, W_src)
            words = words.mean(dim=1)[:, 1:, :-1] if shift else words.mean(dim=1)[:, :-1, :-1]
            for layer, w in enumerate(words):
                predicted[layer] |= {(n, i, j) for i, j in hard_alignment(w)}
            s, p = read_pharaoh(links)
            sure |= {(n, i, j) for i, j in s}
            possible |= {(n, i, j) for i, j in p}
    return [alignment_error_rate(a, sure, possible) for a in predicted]
