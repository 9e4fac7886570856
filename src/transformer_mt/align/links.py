"""Word links as sets: Pharaoh I/O, symmetrization, AER, precision and recall.

Pure set algebra on (source word i, target word j) pairs, the Pharaoh ``i-j`` convention; no
model and no torch. Gold sets mark sure links ``i-j`` and possible links ``ipj`` (Och & Ney
2003); possible includes sure.
"""

from __future__ import annotations

Links = set[tuple[int, int]]
Gold = list[tuple[Links, Links]]  # per sentence: (sure, possible)


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
        if min(link) < 0:
            raise ValueError(f"{token!r} counts from 0 in a file read as counting from 1")
        possible.add(link)
        if sep == "-":
            sure.add(link)
    return sure, possible


def format_pharaoh(links: Links) -> str:
    """``{(0, 0), (2, 1)}`` -> ``"0-0 2-1"``, sorted."""
    return " ".join(f"{i}-{j}" for i, j in sorted(links))


def turned_round(links: Links) -> Links:
    """Each link turned round, (i, j) -> (j, i): the links of the other translation direction."""
    return {(j, i) for i, j in links}


def swap(gold: Gold) -> Gold:
    """Gold for the other translation direction: its sure and possible links turned round."""
    return [(turned_round(s), turned_round(p)) for s, p in gold]


SYMMETRIZATIONS = ("intersect", "union", "grow-diag-final-and")


def symmetrize(forward: Links, backward: Links, method: str = "grow-diag-final-and") -> Links:
    """Combine two directional alignments (both as (source i, target j) links).

    ``intersect`` and ``union`` are the set operations; ``grow-diag-final-and`` (Koehn et al.
    2003) starts from the intersection, adds union links next to (also diagonally) an aligned
    pair while one of their words is still unaligned, then adds the remaining union links
    whose two words are both unaligned. Always intersection ⊆ result ⊆ union.
    """
    if method == "intersect":
        return forward & backward
    if method == "union":
        return forward | backward
    if method != "grow-diag-final-and":
        raise ValueError(f"unknown symmetrization {method!r}: {', '.join(SYMMETRIZATIONS)}")
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

    Raises:
        ValueError: without a sure link, where AER means nothing (it would read 0 or 1
            whatever the prediction).
    """
    if not sure:
        raise ValueError("AER needs at least one sure gold link; the gold set has none")
    possible = (possible or set()) | sure
    return 1.0 - (len(predicted & sure) + len(predicted & possible)) / (len(predicted) + len(sure))


def precision_recall(
    predicted: Links, sure: Links, possible: Links | None = None
) -> tuple[float, float]:
    """Precision against possible links (|A∩P| / |A|) and recall against sure ones (|A∩S| / |S|)."""
    possible = (possible or set()) | sure
    precision = len(predicted & possible) / len(predicted) if predicted else 1.0
    recall = len(predicted & sure) / len(sure) if sure else 1.0
    return precision, recall


def corpus_scores(links: list[Links], gold: Gold) -> tuple[float, float, float]:
    """AER, precision and recall of per-sentence links against per-sentence (sure, possible) gold."""
    if len(links) != len(gold):
        raise ValueError(f"{len(links)} aligned sentences for {len(gold)} sentences of gold")
    predicted = {(n, i, j) for n, ls in enumerate(links) for i, j in ls}
    sure = {(n, i, j) for n, (s, _) in enumerate(gold) for i, j in s}
    possible = {(n, i, j) for n, (_, p) in enumerate(gold) for i, j in p}
    return (
        alignment_error_rate(predicted, sure, possible),
        *precision_recall(predicted, sure, possible),
    )


def drop_outside(
    gold: Gold, sources: list[str], targets: list[str]
) -> tuple[Gold, dict[int, Links]]:
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


# Source-length buckets (words) that reports break AER down by: gold sets of long sentences are
# where an aligner trained on short pairs loses most.
LENGTH_BUCKETS = ((1, 10), (11, 20), (21, 30), (31, 50), (51, None))


def bucket_name(low: int, high: int | None) -> str:
    """``1-10`` ... ``31-50``, ``>50``."""
    return f"{low}-{high}" if high is not None else f">{low - 1}"


def scores_by_length(
    links: list[Links], gold: Gold, source_lengths: list[int]
) -> dict[str, tuple[float, float, float, int]]:
    """``corpus_scores`` per source-length bucket: {name: (AER, P, R, sentences)}.

    Buckets without a sentence, or without a sure link, are left out.
    """
    out = {}
    for low, high in LENGTH_BUCKETS:
        picked = [n for n, length in enumerate(source_lengths) if low <= length <= (high or length)]
        if any(gold[n][0] for n in picked):
            scores = corpus_scores([links[n] for n in picked], [gold[n] for n in picked])
            out[bucket_name(low, high)] = (*scores, len(picked))
    return out
