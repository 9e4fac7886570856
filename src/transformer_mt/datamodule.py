"""The ``LightningDataModule``: corpus, tokenizer and token-bucketed loaders for one data config."""

from __future__ import annotations

import functools
import logging

import lightning as L
import numpy as np
import torch
from datasets import Dataset, DatasetDict
from lightning.pytorch.accelerators import CUDAAccelerator
from torch.utils.data import DataLoader

from transformer_mt.align.pieces import word_starts
from transformer_mt.config import DataConfig
from transformer_mt.data.batching import TokenBatchSampler, TokenRows, collate_columns
from transformer_mt.data.concat import join_pairs, length_histogram, source_word_lengths
from transformer_mt.data.sources import load_corpus
from transformer_mt.data.tokenize import tokenize, train_tokenizer
from transformer_mt.data.tokenizer import Tokenizer
from transformer_mt.data.workers import worker_context
from transformer_mt.model.positions import fit_positions
from transformer_mt.model.vocab import EOS_ID

log = logging.getLogger(__name__)


def fit_split(ds: Dataset, split: str, max_positions: int) -> Dataset:
    """A tokenized evaluation split whose sources and references fit ``max_positions``: a
    longer side keeps its first pieces (and EOS); every row stays, so scores cover the split."""
    src_lens, tgt_lens = TokenRows(ds).lengths()  # EOS included
    if max(src_lens.max(initial=0), tgt_lens.max(initial=0)) <= max_positions:
        return ds
    fitted = {}
    for side, what in (("src", "source"), ("tgt", "reference")):
        pieces = [ids[:-1] for ids in ds[f"{side}_ids"]]  # EOS aside
        fitted[side] = [
            ids + [EOS_ID] for ids in fit_positions(pieces, max_positions, f"{split} {what}")
        ]

    def cut(row: dict, n: int) -> dict:
        return {
            "src_ids": fitted["src"][n],
            "src_len": len(fitted["src"][n]),
            "tgt_ids": fitted["tgt"][n],
            "tgt_len": len(fitted["tgt"][n]),
        }

    return ds.map(cut, with_indices=True, keep_in_memory=True, desc=f"fitting {split}")


class TranslationDataModule(L.LightningDataModule):
    """Builds (once, cached on disk) and serves the splits of ``cfg``'s corpus."""

    def __init__(
        self,
        cfg: DataConfig,
        seed: int = 1234,
        pin_memory: bool | None = None,
        max_positions: int | None = None,
    ) -> None:
        """
        Args:
            pin_memory: page-locked batches; None decides by the trainer (on a CUDA GPU only).
            max_positions: the model's; a validation or test side longer than it reads is cut
                to its first pieces (``fit_positions``), with one warning per split and side.
                Training pairs over ``cfg.max_len`` are dropped instead (``tokenize``).
        """
        super().__init__()
        self.cfg, self.seed, self.pin_memory = cfg, seed, pin_memory
        self.max_positions = max_positions
        self.tokenizer: Tokenizer | None = None
        self.text: DatasetDict | None = None
        self.splits: DatasetDict | None = None
        self.train_sampler: TokenBatchSampler | None = None  # the current epoch plan's owner
        self._resume_at: tuple[int, int] | None = None  # (epoch, batches done) to skip
        # data.concat: source lengths in words of the training pairs, and with the joined ones
        self.source_lengths: dict[str, np.ndarray] = {}

    def prepare_data(self) -> None:
        """Generate or load the corpus, train SentencePiece and tokenize: all cached for later runs."""
        if self.splits is not None:  # already built in this process by setup()
            return
        corpus = load_corpus(self.cfg)
        tokenize(corpus, train_tokenizer(corpus, self.cfg), self.cfg)

    def setup(self, stage: str | None = None) -> None:
        if self.splits is not None:
            return
        self.text = load_corpus(self.cfg)
        self.tokenizer = train_tokenizer(self.text, self.cfg)
        self.splits = tokenize(self.text, self.tokenizer, self.cfg)
        if self.max_positions is not None:
            for split in ("valid", "test"):
                self.splits[split] = fit_split(self.splits[split], split, self.max_positions)
        if self.cfg.concat.share > 0:
            self._join_training_pairs()

    def _join_training_pairs(self) -> None:
        """Append ``data.concat``'s joined examples to training; log the source lengths before
        and after (words, the gold sets' buckets)."""
        train = self.splits["train"]
        starts = word_starts(self.tokenizer.sp)
        joined = join_pairs(train, self.cfg.concat, self.cfg.max_len, self.seed)
        self.splits["train"] = joined
        self.source_lengths = {
            "training pairs": source_word_lengths(train, starts),
            "training pairs + joined examples": source_word_lengths(joined, starts),
        }
        for name, lengths in self.source_lengths.items():
            shares = ", ".join(f"{k} {v:.1%}" for k, v in length_histogram(lengths).items())
            log.info("source lengths (words), %s: mean %.1f; %s", name, lengths.mean(), shares)

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        rows = TokenRows(self.splits[split])
        src_lens, tgt_lens = rows.lengths()
        trainer = self.trainer
        sampler = TokenBatchSampler(
            src_lens,
            tgt_lens,
            self.cfg.max_tokens,
            shuffle=shuffle,
            seed=self.seed,
            num_replicas=trainer.world_size if trainer else 1,
            rank=trainer.global_rank if trainer else 0,
            pad_multiple=self.cfg.pad_multiple,
        )
        return DataLoader(
            rows,  # a batch's rows read from the Arrow memory map, padded by numpy
            batch_sampler=sampler,
            collate_fn=functools.partial(collate_columns, pad_multiple=self.cfg.pad_multiple),
            num_workers=self.cfg.num_workers,
            multiprocessing_context=worker_context(self.cfg.num_workers),
            # Its own generator: creating an iterator then draws no number from the global one,
            # whose state (dropout's) an exact resume restores.
            generator=torch.Generator().manual_seed(self.seed),
            persistent_workers=self.cfg.num_workers > 0,
            # page-locked host memory lets the copy to the GPU overlap compute
            pin_memory=self.pin_memory
            if self.pin_memory is not None
            else trainer is not None and isinstance(trainer.accelerator, CUDAAccelerator),
        )

    def train_dataloader(self) -> DataLoader:
        loader = self._loader("train", shuffle=True)
        self.train_sampler = loader.batch_sampler
        if self.trainer is not None:  # a resumed run's first epoch is not 0
            self.train_sampler.set_epoch(self.trainer.current_epoch)
        if self._resume_at is not None:
            self.train_sampler.resume_at(*self._resume_at)
            self._resume_at = None
        return loader

    def resume_at(self, epoch: int, batches_done: int) -> None:
        """Skip the batches of ``epoch`` that a resumed run already trained on (see the sampler)."""
        self._resume_at = (epoch, batches_done)
        if self.train_sampler is not None:
            self.train_sampler.resume_at(epoch, batches_done)

    def val_dataloader(self) -> DataLoader:
        return self._loader("valid", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)
