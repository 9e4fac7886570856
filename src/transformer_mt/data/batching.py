"""Token-based, length-bucketed batches (§5.1: "batched together by approximate sequence length").

Legend: B sentences in a batch, S source length, T target length (with BOS/EOS).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Sampler

from transformer_mt.data.supervision import supervision
from transformer_mt.model.vocab import BOS_ID, PAD_ID


@dataclass
class Batch:
    """A padded batch. ``tgt_in`` is BOS + y, ``tgt_out`` is y + EOS (teacher forcing)."""

    src: Tensor  # (B, S)
    tgt_in: Tensor  # (B, T)
    tgt_out: Tensor  # (B, T)
    index: Tensor  # (B,) row numbers in the split, to put outputs back in order
    n_tgt_tokens: int  # real target tokens (EOS included), counted on the CPU: no device sync
    n_src_tokens: int = 0  # real source tokens
    first_rows: tuple[int, ...] = ()  # the first few row numbers, on the host (error messages)
    # guided alignment (data/guided.py): [sentence, target row, source column] per link, its
    # weight in its row's target distribution, and the number of supervised rows
    align_index: Tensor | None = None  # (N, 3)
    align_weight: Tensor | None = None  # (N,)
    align_rows: int = 0

    def describe(self) -> str:
        """Its shape and first rows in words, for error messages (no device read)."""
        rows = ""
        if self.first_rows:
            more = "..." if self.src.size(0) > len(self.first_rows) else ""
            rows = f", training rows {list(self.first_rows)}{more}"
        return (
            f"{self.src.size(0)} sentences x {self.src.size(1)} source / {self.tgt_out.size(1)} "
            f"target tokens ({self.n_tgt_tokens} real target tokens){rows}"
        )

    def pin_memory(self) -> Batch:
        """Page-locked copies of the tensors: ``DataLoader(pin_memory=True)`` calls this on a
        batch type it does not know, and passes the batch through unpinned if it is missing."""
        guided = {}
        if self.align_index is not None:
            guided = {
                "align_index": self.align_index.pin_memory(),
                "align_weight": self.align_weight.pin_memory(),
            }
        return replace(
            self,
            src=self.src.pin_memory(),
            tgt_in=self.tgt_in.pin_memory(),
            tgt_out=self.tgt_out.pin_memory(),
            index=self.index.pin_memory(),
            **guided,
        )

    @property
    def padding(self) -> float:
        """The share of both sides' padded tensors that is padding."""
        real = self.n_src_tokens + self.n_tgt_tokens
        return 1.0 - real / (self.src.numel() + self.tgt_out.numel())


def round_up(n: np.ndarray | int, multiple: int) -> np.ndarray | int:
    """``n`` rounded up to a multiple of ``multiple`` (1: unchanged)."""
    return -(-n // multiple) * multiple


def _pad_flat(
    values: np.ndarray, lens: np.ndarray, value: int = PAD_ID, multiple: int = 1
) -> np.ndarray:
    """Sequences stored end to end (``values``, lengths ``lens``) -> (B, width), right-padded,
    width the longest length rounded up to a multiple of ``multiple``.

    One boolean-mask assignment: the mask's True cells, read row by row, are exactly the
    sequences' positions in order, so no Python runs per sentence.
    """
    width = int(round_up(int(lens.max()), multiple))
    out = np.full((len(lens), width), value, dtype=np.int64)
    out[np.arange(width) < lens[:, None]] = values
    return out


@dataclass
class Columns:
    """A batch's rows before padding: each side's token ids end to end, with their lengths."""

    src: np.ndarray  # all source ids of the batch, concatenated (EOS-terminated sequences)
    src_lens: np.ndarray  # (B,)
    tgt: np.ndarray
    tgt_lens: np.ndarray
    index: np.ndarray  # (B,) row numbers in the split
    links: np.ndarray | None = None  # guided alignment: flattened [s, t, ...] piece links
    links_lens: np.ndarray | None = None  # (B,) each sentence's share of ``links``


def collate_columns(cols: Columns, pad_multiple: int = 1) -> Batch:
    """Pad a batch and shift its target (BOS + y in, y + EOS out) with whole-array numpy ops.

    Args:
        pad_multiple: each side's width is rounded up to a multiple of this (``data.pad_multiple``):
            a compiled training step then meets a few shapes instead of one per length.
    """
    src = _pad_flat(cols.src, cols.src_lens, multiple=pad_multiple)
    tgt_out = _pad_flat(cols.tgt, cols.tgt_lens, multiple=pad_multiple)
    tgt_in = np.empty_like(tgt_out)
    tgt_in[:, 0] = BOS_ID
    tgt_in[:, 1:] = tgt_out[:, :-1]
    tgt_in[np.arange(tgt_in.shape[1]) >= cols.tgt_lens[:, None]] = PAD_ID  # where EOS moved to
    guided = {}
    if cols.links is not None:
        index, weight, rows = supervision(cols.links, cols.links_lens)
        guided = {"align_index": index, "align_weight": weight, "align_rows": rows}
    return Batch(
        src=torch.from_numpy(src),
        tgt_in=torch.from_numpy(tgt_in),
        tgt_out=torch.from_numpy(tgt_out),
        index=torch.from_numpy(cols.index.astype(np.int64)),
        n_tgt_tokens=int(cols.tgt_lens.sum()),
        n_src_tokens=int(cols.src_lens.sum()),
        first_rows=tuple(cols.index[:5].tolist()),
        **guided,
    )


class _ListColumn:
    """One ``list<int>`` column of a memory-mapped Arrow table, read a row at a time without copies.

    Arrow keeps the column as record batches (chunks) of about a thousand rows, each an offsets
    array and a values array; both are exposed as numpy views of the memory map. A row is then
    two offset reads and a slice.
    """

    def __init__(self, column) -> None:  # a pyarrow.ChunkedArray
        chunks = column.chunks
        self.starts = np.cumsum([0] + [len(c) for c in chunks])  # first row of each chunk
        self.offsets = [c.offsets.to_numpy() for c in chunks]
        self.values = [c.values.to_numpy() for c in chunks]

    def gather(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The rows' sequences end to end, and their lengths."""
        chunk = np.searchsorted(self.starts, rows, side="right") - 1
        local = rows - self.starts[chunk]
        offsets, values = self.offsets, self.values
        pieces = [
            values[c][offsets[c][i] : offsets[c][i + 1]]
            for c, i in zip(chunk.tolist(), local.tolist())
        ]
        lens = np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces))
        return np.concatenate(pieces), lens


class TokenRows(torch.utils.data.Dataset):
    """A tokenized split (``src_ids``, ``tgt_ids``, ``index`` columns) served a batch at a time.

    ``DataLoader`` hands a batch sampler's whole list of indices to ``__getitems__``, which reads
    the rows straight from the Arrow memory map as numpy views; ``collate_columns`` pads them. No
    Python object is made per token, and nothing per row beyond one slice per side. (Arrow's own
    ``take`` would be simpler, but on a table of many chunks it first concatenates the whole
    column: milliseconds per batch on 200k pairs, and seconds and gigabytes on 4.5M.) The
    Arrow views are opened lazily in each process, so a worker receives only the data set's
    file paths when it is started.
    """

    def __init__(self, ds) -> None:  # a datasets.Dataset
        self.ds = ds
        self._opened: tuple | None = None

    def __len__(self) -> int:
        return len(self.ds)

    def __getstate__(self) -> dict:
        return {"ds": self.ds, "_opened": None}  # workers reopen the memory map themselves

    def _mapping(self) -> np.ndarray | None:
        """Stored row of each of the split's rows; None when the split is read as stored.

        A filtered or subset split keeps all rows on disk and maps its row numbers to them
        (datasets' indices mapping).
        """
        mapping = self.ds._indices
        return None if mapping is None else mapping.column(0).to_numpy().astype(np.int64)

    def _open(self) -> tuple:
        if self._opened is None:
            table = self.ds.data.table  # the whole Arrow table, before any row selection
            index = table.column("index").to_numpy()
            links = table.column("links") if "links" in table.column_names else None
            self._opened = (
                _ListColumn(table.column("src_ids")),
                _ListColumn(table.column("tgt_ids")),
                index,
                self._mapping(),
                None if links is None else _ListColumn(links),
            )
        return self._opened

    def lengths(self) -> tuple[np.ndarray, np.ndarray]:
        """Every row's source and target length (EOS included), for planning batches.

        Read column-wise from Arrow: a second for 36M rows, where a numpy-formatted
        ``Dataset`` slice converts the columns a record batch at a time.
        """
        table, mapping = self.ds.data.table, self._mapping()
        src, tgt = table.column("src_len").to_numpy(), table.column("tgt_len").to_numpy()
        return (src, tgt) if mapping is None else (src[mapping], tgt[mapping])

    def __getitems__(self, indices: Sequence[int]) -> Columns:
        src_col, tgt_col, index, mapping, links_col = self._open()
        rows = np.asarray(indices, dtype=np.int64)
        if mapping is not None:
            rows = mapping[rows]
        src, src_lens = src_col.gather(rows)
        tgt, tgt_lens = tgt_col.gather(rows)
        links = links_col.gather(rows) if links_col is not None else (None, None)
        return Columns(src, src_lens, tgt, tgt_lens, index[rows], *links)

    def __getitem__(self, i: int) -> Columns:
        return self.__getitems__([i])


class TokenBatchSampler(Sampler[list[int]]):
    """Batches of at most ``max_tokens`` padded tokens on each side, of similar lengths.

    With ``pad_multiple`` > 1 the lengths are counted rounded up to that multiple, as
    ``collate_columns(..., pad_multiple)`` pads them.

    Each epoch the order is drawn from ``seed + epoch``: sentences are sorted by length
    with random tie-breaking, cut into batches that fill the token budget, and the batches
    shuffled. Under data parallelism, rank r takes every ``num_replicas``-th batch, and the
    batch list is padded with its own first batches so that every rank gets the same number
    (ranks that stop at different steps would hang in all-reduce).
    """

    def __init__(
        self,
        src_lens: Sequence[int],
        tgt_lens: Sequence[int],
        max_tokens: int,
        shuffle: bool = True,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
        pad_multiple: int = 1,
    ) -> None:
        # + BOS on the target side; widths as collate_columns pads them, so that the budget
        # holds for the padded batch and batches group by padded width
        self.lens = round_up(
            np.maximum(np.asarray(src_lens), np.asarray(tgt_lens) + 1), pad_multiple
        )
        too_long = np.flatnonzero(self.lens > max_tokens)
        if too_long.size:
            raise ValueError(
                f"{too_long.size} pairs (e.g. row {too_long[0]}, {self.lens[too_long[0]]} tokens) do not fit in "
                f"data.max_tokens={max_tokens}; raise max_tokens or filter with a lower data.max_len"
            )
        self.max_tokens, self.shuffle, self.seed = max_tokens, shuffle, seed
        self.num_replicas, self.rank, self.epoch = num_replicas, rank, 0
        self._cached: tuple[int, list[list[int]]] | None = None
        self._resume: tuple[int, int] | None = None  # (epoch, batches already trained)
        # Lightning calls set_epoch on ``loader.sampler`` and ``loader.batch_sampler.sampler``,
        # not on the batch sampler itself: without this, every epoch would replay epoch 0's order.
        self.sampler = self

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        if self._resume is not None and self._resume[0] != epoch:
            self._resume = None  # the resumed epoch is over

    def resume_at(self, epoch: int, batches_done: int) -> None:
        """Make the passes over ``epoch`` start after its first ``batches_done`` batches, until
        the sampler is set to another epoch.

        A run resumed from a checkpoint written mid-epoch then sees exactly the batches it
        would have seen without the interruption (the order is a function of seed and epoch).
        The sampler is also set to ``epoch``: Lightning creates a resumed run's first iterator
        before it sets the epoch. Every pass skips, not only the first: a ``DataLoader`` with
        workers calls ``iter`` on its batch sampler twice when it builds its iterator, and
        keeps the second.
        """
        self.epoch = epoch
        self._resume = (epoch, batches_done)

    def _batches(self) -> list[list[int]]:
        if self._cached is None or self._cached[0] != self.epoch:
            self._cached = (self.epoch, self._make_batches())
        return list(self._cached[1])

    def _make_batches(self) -> list[list[int]]:
        """Epoch ``self.epoch``'s batches (all ranks')."""
        rng = np.random.default_rng(self.seed + self.epoch)
        return self._pack(np.arange(len(self.lens)), rng)

    def _pack(self, rows: np.ndarray, rng: np.random.Generator) -> list[list[int]]:
        """``rows`` in batches: sorted by length (ties in ``rng``'s random order), packed
        greedily, the batches shuffled."""
        order = rows[rng.permutation(len(rows))] if self.shuffle else rows
        order = order[
            np.argsort(self.lens[order], kind="stable")
        ]  # by length, ties in random order
        # Greedy packing in length order: a batch takes sentences while its longest (the last,
        # lengths ascending) times its size fits the budget. One numpy pass per batch, not per
        # sentence: a 4.5M-pair epoch is planned in a fraction of a second.
        lens = self.lens[order]
        batches, start = [], 0
        while start < len(order):
            window = lens[start : start + self.max_tokens // lens[start]]  # at most this many fit
            fits = window * np.arange(1, len(window) + 1) <= self.max_tokens  # True..True False..
            count = len(window) if fits[-1] else int(np.argmin(fits))
            batches.append(order[start : start + count].tolist())
            start += count
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches

    def __iter__(self) -> Iterator[list[int]]:
        batches = self._batches()
        per_rank = -(-len(batches) // self.num_replicas)
        batches += batches[: per_rank * self.num_replicas - len(batches)]
        mine = batches[self.rank :: self.num_replicas]
        if self._resume is not None and self._resume[0] == self.epoch:
            mine = mine[self._resume[1] :]
        return iter(mine)

    def __len__(self) -> int:
        return -(-len(self._batches()) // self.num_replicas)
