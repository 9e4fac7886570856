"""Batches made by hand in tests: rows of ids to the ``Batch`` the loaders make."""

from __future__ import annotations

import itertools

import numpy as np

from transformer_mt.data.batching import Batch, Columns, collate_columns


def collate(rows: list[dict]) -> Batch:
    """Rows with ``src_ids``/``tgt_ids`` (EOS-terminated), ``index`` and optionally ``links``
    -> the ``Batch`` of ``collate_columns``, as the training loader pads them."""

    def side(name: str) -> tuple[np.ndarray, np.ndarray]:
        seqs = [row[name] for row in rows]
        lens = np.fromiter(map(len, seqs), dtype=np.int64, count=len(seqs))
        flat = itertools.chain.from_iterable(seqs)
        return np.fromiter(flat, dtype=np.int64, count=int(lens.sum())), lens

    (src, src_lens), (tgt, tgt_lens) = side("src_ids"), side("tgt_ids")
    index = np.array([int(row["index"]) for row in rows], dtype=np.int64)
    links = side("links") if "links" in rows[0] else (None, None)
    return collate_columns(Columns(src, src_lens, tgt, tgt_lens, index, *links))
