"""Parallel corpora as Hugging Face ``datasets``: loaded, length-filtered, tokenized once and cached.

Every corpus becomes a ``DatasetDict`` with splits ``train``/``valid``/``test`` and string
columns ``src`` and ``tgt``; tokenization adds ``src_ids``/``tgt_ids`` (each ending in EOS)
and their lengths, kept in the Arrow cache so a second run does not tokenize again.
"""

from __future__ import annotations

import json
import logging
import shutil
from functools import lru_cache
from pathlib import Path

from datasets import DatasetDict, load_dataset

from transformer_mt.config import DataConfig
from transformer_mt.data import demo_corpus
from transformer_mt.data.tokenizer import EOS_ID, Tokenizer

log = logging.getLogger(__name__)
SPLITS = ("train", "valid", "test")
DEMO_VERSION = 2  # bump when the demo grammar changes, so caches are rebuilt


def demo_files(cfg: DataConfig) -> dict[str, str]:
    """Write the demo corpus as JSON lines under the cache (once) and return a path per split."""
    sizes = {"train": cfg.train_size, "valid": cfg.valid_size, "test": cfg.test_size}
    key = f"demo_es_en_v{DEMO_VERSION}_seed{cfg.seed}_" + "_".join(str(n) for n in sizes.values())
    folder = Path(cfg.cache_dir) / "corpora" / key
    if not folder.exists():
        tmp = folder.with_name(folder.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        for split, pairs in demo_corpus.generate(cfg.seed, sizes).items():
            with open(tmp / f"{split}.jsonl", "w", encoding="utf-8") as f:
                for p in pairs:
                    f.write(
                        json.dumps(
                            {"src": p.src, "tgt": p.tgt, "alignment": p.alignment},
                            ensure_ascii=False,
                        )
                        + "\n"
                    )
        tmp.rename(folder)  # atomic: an interrupted run leaves no half-written corpus
    return {split: str(folder / f"{split}.jsonl") for split in SPLITS}


def load_corpus(cfg: DataConfig) -> DatasetDict:
    """The raw text pairs of ``cfg``'s corpus: splits train/valid/test, columns src and tgt."""
    if cfg.source == "demo":
        files = demo_files(cfg)
        return load_dataset("json", data_files=files, cache_dir=str(Path(cfg.cache_dir) / "hf"))
    raise ValueError(f"data.source={cfg.source!r} is not known; use 'demo'")


def train_tokenizer(corpus: DatasetDict, cfg: DataConfig) -> Tokenizer:
    """Joint BPE on both sides of the training split, cached by the split's fingerprint."""
    train = corpus["train"]
    sentences = (
        s for batch in train.iter(batch_size=10_000) for side in ("src", "tgt") for s in batch[side]
    )
    return Tokenizer.train(
        sentences,
        cfg.vocab_size,
        Path(cfg.cache_dir) / "spm",
        seed=cfg.seed,
        fingerprint=train._fingerprint,
    )


@lru_cache(maxsize=4)
def _processor(model_path: str) -> Tokenizer:
    return Tokenizer(model_path)


def _encode_batch(batch: dict[str, list], indices: list[int], model_path: str) -> dict[str, list]:
    tok = _processor(model_path)
    out: dict[str, list] = {"index": indices}
    for side in ("src", "tgt"):
        ids = [seq + [EOS_ID] for seq in tok.encode(batch[side])]
        out[f"{side}_ids"], out[f"{side}_len"] = ids, [len(s) for s in ids]
    return out


def _fits(batch: dict[str, list], limit: int) -> list[bool]:
    return [max(s, t) <= limit for s, t in zip(batch["src_len"], batch["tgt_len"])]


def tokenize(
    corpus: DatasetDict, tokenizer: Tokenizer, cfg: DataConfig, num_proc: int | None = None
) -> DatasetDict:
    """Add ``src_ids``/``tgt_ids`` (EOS-terminated) and lengths; drop and count over-long pairs.

    Pairs longer than ``cfg.max_len`` pieces on either side are never cut: they are dropped
    from the training split and reported; valid and test keep every pair (the decoder handles
    any length the positions allow) so that scores are always on the whole split.
    """
    out = DatasetDict()
    for split, ds in corpus.items():
        ds = ds.map(
            _encode_batch,
            batched=True,
            with_indices=True,
            fn_kwargs={"model_path": str(tokenizer.path)},
            num_proc=num_proc,
            desc=f"tokenizing {split}",
        )
        read = len(ds)
        if split == "train":
            ds = ds.filter(
                _fits, batched=True, fn_kwargs={"limit": cfg.max_len + 1}, desc=f"filtering {split}"
            )
        dropped = read - len(ds)
        log.info(
            "%s: %d pairs read, %d kept, %d dropped (longer than data.max_len=%d pieces)",
            split,
            read,
            len(ds),
            dropped,
            cfg.max_len,
        )
        if len(ds) == 0:
            raise ValueError(
                f"split {split!r} of data={cfg.name} is empty after filtering; "
                f"check its files or raise data.max_len"
            )
        out[split] = ds
    return out
