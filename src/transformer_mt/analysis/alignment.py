"""Word alignments read from cross-attention, and how to judge them.

Links are (source word i, target word j) pairs, the Pharaoh ``i-j`` convention. Gold sets mark
sure links ``i-j`` and possible links ``ipj`` (Och & Ney 2003); possible includes sure.

Legend: L layers, H heads, W_tgt target words, W_src source words.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor
from tqdm import tqdm

from transformer_mt.analysis.capture import pair_attention
from transformer_mt.analysis.stats import coverage, row_entropy, with_temperature
from transformer_mt.errors import UserError
from transformer_mt.model import Transformer

Links = set[tuple[int, int]]


def read_pharaoh(line: str, one_indexed: bool = False) -> tuple[Links, Links]:
    """Sure and possible links of one line: ``"0-0 1-2 3p4"`` -> ({(0,0),(1,2)}, {(0,0),(1,2),(3,4)}).

    A possible link is written ``ipj`` (talp) or ``i?j`` (as in our Graca copy).

    Args:
        one_indexed: the file counts words from 1 (the Hansards and RO-EN gold sets do).

    Raises:
        ValueError: on a token that is neither ``i-j`` nor ``ipj``/``i?j``.
    """
    sure: Links = set()
    possible: Links = set()
    shift = 1 if one_indexed else 0
    for token in line.split():
        sep = next((c for c in "-p?" if c in token), "-")
        left, _, right = token.partition(sep)
        if not (left.isdigit() and right.isdigit()):
            raise ValueError(
                f"{token!r} is not a link: expected i-j (sure) or ipj / i?j (possible)"
            )
        link = (int(left) - shift, int(right) - shift)
        possible.add(link)
        if sep == "-":
            sure.add(link)
    return sure, possible


def format_pharaoh(links: Links) -> str:
    """``{(0, 0), (2, 1)}`` -> ``"0-0 2-1"``, sorted."""
    return " ".join(f"{i}-{j}" for i, j in sorted(links))


def hard_alignment(weights: Tensor, method: str = "argmax") -> Links:
    """Word links read from one attention matrix.

    Args:
        weights: (W_tgt, W_src) word-level attention.
        method: ``argmax``: one link per target word, to its most attended source word
            (target->source); ``intersect``: only the links that are also the source word's
            most attending target word (source->target), fewer links and higher precision.
    """
    rows = {(int(i), j) for j, i in enumerate(weights.argmax(dim=-1).tolist())}
    if method == "argmax":
        return rows
    if method == "intersect":
        columns = {(i, int(j)) for i, j in enumerate(weights.argmax(dim=-2).tolist())}
        return rows & columns
    raise ValueError(f"unknown alignment method {method!r}: use argmax or intersect")


def translation_links(
    model: Transformer,
    tokenizer,
    src_ids: list[int],
    tgt_ids: list[int],
    layer: int = -1,
    head: int | None = None,
    shift: bool = False,
    full_context: bool = False,
) -> Links:
    """Word links of a translation (piece ids, no EOS): argmax rows of one layer's cross-attention.

    Args:
        layer: 1-based, or negative from the end.
        head: one head (1-based), or None for the heads averaged.
        shift: read target word j from the row where it is the decoder's input (row j + 1).
        full_context: capture with the whole translation as context (``capture``).

    The EOS row and column are left out, so every link joins two real words.
    """
    pair = pair_attention(model, tokenizer, src_ids, tgt_ids, full_context=full_context)
    words = pair.words("cross")  # (L, H, W_t, W_s)
    index = layer - 1 if layer > 0 else layer
    picked = words[index] if head is None else words[index, head - 1 : head]
    rows = picked[:, 1:] if shift else picked[:, :-1]
    return hard_alignment(rows.mean(dim=0)[:, :-1])


def symmetrize(forward: Links, backward: Links, method: str = "grow-diag-final-and") -> Links:
    """Combine two directional alignments (both as (source i, target j) links).

    ``intersect`` and ``union`` are the set operations; ``grow-diag-final-and`` (Koehn et al.
    2003) starts from the intersection, adds union links next to (also diagonally) an aligned
    pair while one of their words is still unaligned, then adds the remaining union links
    whose two words are both unaligned.
    """
    if method == "intersect":
        return forward & backward
    if method == "union":
        return forward | backward
    if method != "grow-diag-final-and":
        raise ValueError(
            f"unknown symmetrization {method!r}: intersect, union or grow-diag-final-and"
        )
    union = forward | backward
    links = forward & backward
    src_done = {i for i, _ in links}
    tgt_done = {j for _, j in links}
    neighbours = [(-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1)]
    grown = True
    while grown:
        grown = False
        for i, j in sorted(links):
            for di, dj in neighbours:
                link = (i + di, j + dj)
                if (
                    link in union
                    and link not in links
                    and (link[0] not in src_done or link[1] not in tgt_done)
                ):
                    links.add(link)
                    src_done.add(link[0])
                    tgt_done.add(link[1])
                    grown = True
    for direction in (forward, backward):
        for i, j in sorted(direction):
            if i not in src_done and j not in tgt_done:
                links.add((i, j))
                src_done.add(i)
                tgt_done.add(j)
    return links


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


def read_gold(
    path: str | Path, one_indexed: bool = False, reverse: bool = False
) -> list[tuple[Links, Links]]:
    """Sure and possible links per sentence of a gold file, as (source i, target j).

    Two formats are read: Pharaoh/talp (one line per sentence, ``i-j`` sure and ``ipj``
    possible) and NAACL (one link per line, ``sentence i j [S|P]`` with 1-based sentence
    numbers). ``reverse`` swaps i and j, for gold written in the other direction than the
    model translates.
    """
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    shift = 1 if one_indexed else 0
    tokens = lines[0].split() if lines else []
    naacl = len(tokens) in (3, 4) and all(t.isdigit() for t in tokens[:3])
    if naacl:
        by_sentence: dict[int, tuple[Links, Links]] = {}
        for n, line in enumerate(lines, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) not in (3, 4) or not all(t.isdigit() for t in parts[:3]):
                raise UserError(f"{path}:{n}: {line!r} is not 'sentence i j [S|P]'")
            sent, i, j = (int(t) for t in parts[:3])
            sure, possible = by_sentence.setdefault(sent, (set(), set()))
            link = (i - shift, j - shift)
            possible.add(link)
            if len(parts) == 3 or parts[3].upper() == "S":
                sure.add(link)
        gold = [by_sentence.get(n, (set(), set())) for n in range(1, max(by_sentence) + 1)]
    else:
        gold = []
        for n, line in enumerate(lines, 1):
            try:
                gold.append(read_pharaoh(line, one_indexed))
            except ValueError as err:
                raise UserError(f"{path}:{n}: {err}") from None
    return _swap(gold) if reverse else gold


def _swap(gold: list[tuple[Links, Links]]) -> list[tuple[Links, Links]]:
    return [({(j, i) for i, j in s}, {(j, i) for i, j in p}) for s, p in gold]


def read_xlwa(
    path: str | Path, reverse: bool = False
) -> tuple[list[str], list[str], list[tuple[Links, Links]]]:
    """An XL-WA file (Martelli et al. 2023): ``English<TAB>other<TAB>i-j ...`` per line.

    Links are 0-indexed, English first, and all sure (XL-WA has no possible links).

    Returns:
        English sentences, other-language sentences, and (sure, possible) per line with
        i counting English words; ``reverse`` makes i count the other language's words
        (e.g. for Spanish->English).
    """
    english, other, gold = [], [], []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        fields = line.split("\t")
        if len(fields) < 3:
            raise UserError(
                f"{path}:{n}: expected English<TAB>sentence<TAB>links, found {len(fields)} column(s)"
            )
        try:
            sure, _ = read_pharaoh(fields[2])
        except ValueError as err:
            raise UserError(f"{path}:{n}: {err}") from None
        english.append(fields[0].strip())
        other.append(fields[1].strip())
        gold.append((sure, set(sure)))
    return english, other, _swap(gold) if reverse else gold


def read_tagged_sentences(path: str | Path) -> list[str]:
    """Sentences marked up as ``<s snum=N> words </s>`` (Graca et al. 2008), in snum order."""
    sentences: dict[int, str] = {}
    pattern = re.compile(r"^\s*<s snum=(\d+)>(.*)</s>\s*$")
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        match = pattern.match(line)
        if match is None:
            raise UserError(f"{path}:{n}: expected '<s snum=N> words </s>', found {line[:60]!r}")
        sentences[int(match.group(1))] = " ".join(match.group(2).split())
    if sorted(sentences) != list(range(1, len(sentences) + 1)):
        raise UserError(f"{path}: sentence numbers are not 1..{len(sentences)}")
    return [sentences[k] for k in range(1, len(sentences) + 1)]


def drop_outside(
    gold: list[tuple[Links, Links]], sources: list[str], targets: list[str]
) -> tuple[list[tuple[Links, Links]], dict[int, Links]]:
    """Gold links that fall outside their sentence pair removed, and which they were.

    Returns:
        the cleaned gold, and {1-based sentence number: the links left out}.

    Raises:
        ValueError: when the gold and the pairs differ in number.
    """
    if len(gold) != len(sources):
        raise ValueError(f"{len(gold)} sentences of gold for {len(sources)} sentence pairs")
    cleaned, dropped = [], {}
    for n, ((sure, possible), src, tgt) in enumerate(zip(gold, sources, targets), 1):
        S, T = len(src.split()), len(tgt.split())
        bad = {(i, j) for i, j in possible if not (0 <= i < S and 0 <= j < T)}
        if bad:
            dropped[n] = bad
        cleaned.append((sure - bad, possible - bad))
    return cleaned, dropped


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
    with ``align.full_context`` is read.

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


def corpus_scores(
    links: list[Links], gold: list[tuple[Links, Links]]
) -> tuple[float, float, float]:
    """AER, precision and recall of per-sentence links against per-sentence (sure, possible) gold."""
    predicted = {(n, i, j) for n, ls in enumerate(links) for i, j in ls}
    sure = {(n, i, j) for n, (s, _) in enumerate(gold) for i, j in s}
    possible = {(n, i, j) for n, (_, p) in enumerate(gold) for i, j in p}
    return (
        alignment_error_rate(predicted, sure, possible),
        *precision_recall(predicted, sure, possible),
    )


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
    gold: list[tuple[Links, Links]] | None = None,
    method: str = "argmax",
    shift: bool = False,
    temperatures: tuple[float, ...] = (0.5, 2.0),
    head: int | None = None,
) -> list[LayerScores]:
    """Alignments, AER and diagnostics of every decoder layer.

    Args:
        attention: ``corpus_attention`` output.
        gold: (sure, possible) per pair, or None to align without scoring.
        method: ``hard_alignment`` method.
        shift: read target word j from the row where it is the decoder's *input* (the next
            row; Chen et al. 2020) instead of the row that produces it.
        head: align with this head alone (1-based) instead of the heads' mean; the
            diagnostics (entropy, coverage) are then this head's as well.
    """
    if gold is not None and len(gold) != len(attention):
        raise ValueError(f"{len(gold)} gold lines for {len(attention)} sentence pairs")
    n_layers = attention[0].size(0) if attention else 0
    scores = []
    for layer in range(n_layers):
        links, entropies, uniforms, uncovered, n_src = [], [], [], 0, 0
        by_tau: dict[float, list[Tensor]] = {t: [] for t in temperatures}
        for words in attention:
            picked = words[layer] if head is None else words[layer, head - 1 : head]
            heads = picked[:, :-1, :]  # (H, W_tgt, W_src + 1): target words' rows
            rows = picked[:, 1:, :] if shift else heads
            mean = rows.mean(dim=0)[:, :-1]  # heads averaged, EOS column dropped
            links.append(hard_alignment(mean, method))
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
    gold: list[tuple[Links, Links]] | None = None,
    method: str = "argmax",
    shift: bool = False,
) -> list[list[LayerScores]]:
    """``score_layers`` for every head alone and for the mean: per layer, H + 1 entries.

    ``grid[l][h]`` is head h + 1 of layer l + 1; ``grid[l][-1]`` the layer's heads averaged.
    """
    n_heads = attention[0].size(1) if attention else 0
    columns = [
        score_layers(attention, gold, method, shift, head=h) for h in [*range(1, n_heads + 1), None]
    ]
    return [list(row) for row in zip(*columns)]


def parse_head(text: str, n_layers: int, n_heads: int) -> tuple[int, int | None]:
    """``"L:H"`` (a head) or ``"L"`` (the layer's mean), 1-based, checked against the model.

    Negative numbers count from the end (``-2:1``: the penultimate layer's first head).
    """
    layer_text, _, head_text = text.partition(":")
    try:
        layer = int(layer_text)
        head = int(head_text) if head_text else None
    except ValueError:
        raise UserError(f"--head {text!r}: expected LAYER:HEAD or LAYER, e.g. 5:3") from None
    layer = layer + n_layers + 1 if layer < 0 else layer
    if head is not None and head < 0:
        head += n_heads + 1
    if not 1 <= layer <= n_layers or (head is not None and not 1 <= head <= n_heads):
        raise UserError(
            f"--head {text!r}: the model has layers 1..{n_layers} and heads 1..{n_heads}"
        )
    return layer, head
