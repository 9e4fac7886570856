"""Long training inputs from short pairs: ``data.concat`` joins training pairs into examples.

A model trained only on short sentences (Tatoeba's average about 6 words) has never attended
over a source as long as the Europarl or Wikipedia sentences it is later read on (gold
alignment sets of 15-30 words), and its alignments degrade with length. ``join_pairs`` adds to
the tokenized training split examples made of 2..``max_parts`` training pairs drawn at random
(seeded), joined part by part on both sides. Between the parts each inner EOS becomes ``<s>``
(BOS) on both sides, a separator piece no real source holds and decoding never writes (its
log-probability is -inf there): EOS keeps meaning "the input has ended", and a single sentence,
whose source has no separator, gives the model no reason to write one. (Keeping each part's EOS
cost 0.9 BLEU at equal steps; dropping it on one side or both did not buy that back: the log.)

The guided-alignment links of a joined example are its parts' piece links moved by the pieces
before them: no aligner runs on the joined text. Validation and test are never joined.

Legend: M joined examples, K = max_parts, P parts in all.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
from datasets import Dataset, concatenate_datasets
from datasets.table import InMemoryTable

from transformer_mt.align.links import LENGTH_BUCKETS, bucket_name
from transformer_mt.config import ConcatConfig
from transformer_mt.data.batching import TokenRows
from transformer_mt.model.vocab import BOS_ID, N_SPECIAL

log = logging.getLogger(__name__)


def plan_joins(
    src_lens: np.ndarray,
    tgt_lens: np.ndarray,
    cfg: ConcatConfig,
    max_len: int,
    seed: int,
) -> list[np.ndarray]:
    """Which training rows each joined example is made of.

    Args:
        src_lens, tgt_lens: every training row's length in pieces, EOS included.
        max_len: the longest a side may be, EOS aside (``data.max_len``): a draw is cut to the
            parts that fit, and dropped if fewer than two do.

    Returns:
        per joined example, its rows in order (2..``cfg.max_parts`` of them).
    """
    n = len(src_lens)
    count = int(round(cfg.share * n))
    if count == 0 or n < 2:
        return []
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, n, size=(count, cfg.max_parts))  # (M, K)
    wanted = rng.integers(2, cfg.max_parts + 1, size=count)  # (M,)
    joined_src = np.cumsum(src_lens[rows], axis=1)  # (M, K) the first k+1 parts
    joined_tgt = np.cumsum(tgt_lens[rows], axis=1)
    fits = (joined_src <= max_len + 1) & (joined_tgt <= max_len + 1)  # a prefix: lengths grow
    parts = np.minimum(wanted, fits.sum(axis=1))
    return [rows[m, : parts[m]] for m in np.flatnonzero(parts >= 2)]


def _joined_side(
    flat: np.ndarray, lens: np.ndarray, parts_per_example: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The parts' sequences (end to end, ``lens`` each) -> the joined examples' sequences end to
    end, each inner part's EOS turned into the separator ``<s>``, and their lengths."""
    example = np.repeat(np.arange(len(parts_per_example)), parts_per_example)  # (P,)
    inner = np.ones(len(lens), dtype=bool)
    inner[np.cumsum(parts_per_example) - 1] = False  # every part but its example's last
    flat = flat.copy()  # the parts themselves stay as they are
    flat[(np.cumsum(lens) - 1)[inner]] = BOS_ID
    return flat, np.bincount(example, weights=lens, minlength=len(parts_per_example)).astype(
        np.int64
    )


def join_rows(rows: TokenRows, plan: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    """Build the planned examples from ``rows``: per side the ids end to end and the lengths,
    and, when the rows carry guided-alignment links, the joined links.

    A part's links ``[s, t, ...]`` are moved by the source and target pieces of the parts
    before it, so they point at the same pieces.
    """
    counts = np.array([len(p) for p in plan], dtype=np.int64)  # (M,)
    cols = rows.__getitems__(np.concatenate(plan))  # every part, in example order
    starts = np.cumsum(counts) - counts  # each example's first part
    out = {}
    for side in ("src", "tgt"):
        flat, lens = getattr(cols, side), getattr(cols, f"{side}_lens")
        before = np.cumsum(lens) - lens  # pieces of every earlier part, examples running on
        out[f"{side}_offset"] = before - np.repeat(before[starts], counts)  # (P,)
        out[f"{side}_ids"], out[f"{side}_len"] = _joined_side(flat, lens, counts)
    if cols.links is not None:
        pairs = cols.links.reshape(-1, 2).astype(np.int64)
        part_of_link = np.repeat(np.arange(len(cols.links_lens)), cols.links_lens // 2)
        pairs[:, 0] += out["src_offset"][part_of_link]
        pairs[:, 1] += out["tgt_offset"][part_of_link]
        example = np.repeat(np.arange(len(counts)), counts)
        out["links"] = pairs.reshape(-1)
        out["links_len"] = np.bincount(
            example, weights=cols.links_lens, minlength=len(counts)
        ).astype(np.int64)
    return out


def _list_array(values: np.ndarray, lens: np.ndarray) -> pa.ListArray:
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values.astype(np.int32)))


def join_pairs(train: Dataset, cfg: ConcatConfig, max_len: int, seed: int) -> Dataset:
    """The tokenized training split with ``cfg.share`` x its size joined examples appended.

    Joined rows get ``index`` numbers after the split's largest, so error messages that name
    training rows never confuse one with a real pair. The examples are built in memory (for
    WMT14 EN-DE at share 0.1 about 450k rows, a few hundred MB) and not cached: the plan is a
    function of the seed, and building takes a numpy pass over the parts.
    """
    if cfg.share <= 0:
        return train
    rows = TokenRows(train)
    src_lens, tgt_lens = rows.lengths()
    plan = plan_joins(src_lens, tgt_lens, cfg, max_len, seed)
    if not plan:
        log.warning("data.concat: no joined example fits in data.max_len=%d pieces", max_len)
        return train
    built = join_rows(rows, plan)
    first = int(np.asarray(train.data.table.column("index")).max()) + 1
    columns = {
        "index": pa.array(np.arange(first, first + len(plan), dtype=np.int64)),
        "src_ids": _list_array(built["src_ids"], built["src_len"]),
        "src_len": pa.array(built["src_len"].astype(np.int32)),
        "tgt_ids": _list_array(built["tgt_ids"], built["tgt_len"]),
        "tgt_len": pa.array(built["tgt_len"].astype(np.int32)),
    }
    if "links" in train.column_names:
        columns["links"] = _list_array(built["links"], built["links_len"])
    table = InMemoryTable(pa.table(columns))
    joined = Dataset(table.cast(train.features.arrow_schema))
    parts = sum(len(p) for p in plan)
    log.info(
        "data.concat: %d joined examples of %d training pairs (%.1f parts each) "
        "added to %d pairs; they hold %.0f%% of the training source pieces",
        len(plan),
        parts,
        parts / len(plan),
        len(train),
        100 * built["src_len"].sum() / (built["src_len"].sum() + src_lens.sum()),
    )
    return concatenate_datasets([train, joined])


def source_word_lengths(ds: Dataset, starts: np.ndarray, limit: int = 200_000) -> np.ndarray:
    """Source lengths in words (pieces that begin a word; EOS and other specials are not
    words), as gold alignment sets count them: of every row, or of a seeded sample of
    ``limit`` rows of a larger split."""
    rows = np.arange(len(ds), dtype=np.int64)
    if len(rows) > limit:
        rows = np.sort(np.random.default_rng(0).choice(rows, size=limit, replace=False))
    cols = TokenRows(ds).__getitems__(rows)
    is_word = starts[cols.src] & (cols.src >= N_SPECIAL)
    row_of = np.repeat(np.arange(len(cols.src_lens)), cols.src_lens)
    return np.bincount(row_of, weights=is_word, minlength=len(rows)).astype(np.int64)


def length_histogram(lengths: np.ndarray) -> dict[str, float]:
    """Share of sentences per source-length bucket (``LENGTH_BUCKETS``, words)."""
    total = max(len(lengths), 1)
    return {
        bucket_name(low, high): float(((lengths >= low) & (lengths <= (high or np.inf))).sum())
        / total
        for low, high in LENGTH_BUCKETS
    }
