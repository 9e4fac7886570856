"""Parallel corpora as Hugging Face ``datasets``: the demo corpus, the hub, or local files.

Every corpus becomes a ``DatasetDict`` with splits ``train``/``valid``/``test`` and string
columns ``src`` and ``tgt``; a training subset, held-out valid/test (``data.holdout``), the
gold sets' sentences (``data.extra_train``) and the word links of guided alignment
(``data.alignments``: a file, or eflomal's, cached) are applied here, before tokenizing.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
from datasets import (
    Dataset,
    DatasetDict,
    Features,
    Value,
    concatenate_datasets,
    load_dataset,
)

from transformer_mt.align.eflomal import align_corpus, corpus_key
from transformer_mt.align.gold import load_gold_set
from transformer_mt.config import DataConfig, GoldSetConfig
from transformer_mt.data import demo_corpus
from transformer_mt.data.files import decode_line, load_local, open_text
from transformer_mt.errors import UserError

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
    """The raw text pairs of ``cfg``'s corpus: splits train/valid/test (and further test sets that
    ``data.files`` or ``data.local_files`` name, e.g. Multi30k's test2017), columns src and tgt.

    A training subset (``train_subset``) is taken here, before anything is tokenized.
    """
    if cfg.holdout and cfg.source != "local":
        raise UserError(
            f"data.holdout draws valid/test from local files; data={cfg.name} has its own"
        )
    if cfg.source == "demo":
        files = demo_files(cfg)
        corpus = load_dataset("json", data_files=files, cache_dir=str(Path(cfg.cache_dir) / "hf"))
    elif cfg.source == "hub" and cfg.local_dir is None:
        corpus = _load_hub(cfg)
    else:
        # train/valid/test, then any further test sets the files name (Multi30k's test2017...)
        names = [*SPLITS, *(name for name in cfg.split_files() if name not in SPLITS)]
        corpus = DatasetDict(
            {split: load_local(cfg, split) for split in names if split not in cfg.holdout}
        )
    for split, ds in corpus.items():
        if len(ds) == 0:
            raise UserError(f"split {split!r} of data={cfg.name} has no pairs; check its source")
    pinned = cfg.alignments not in (None, "builtin", "eflomal")  # a Pharaoh file
    if pinned and not cfg.extra_train:  # one line per line of the training files
        corpus["train"] = _with_alignment_file(corpus["train"], cfg)
    if cfg.holdout:
        corpus = _hold_out(corpus["train"], cfg)
    if cfg.train_subset is not None and cfg.train_subset < len(corpus["train"]):
        train = corpus["train"]
        if cfg.subset_strategy == "random":
            train = train.shuffle(seed=cfg.seed)
        corpus["train"] = train.select(range(cfg.train_subset))
    if cfg.extra_train:
        corpus["train"] = _with_extra_pairs(corpus["train"], cfg)
        if pinned:  # one line per pair trained on, added ones included: eflomal's file is that
            corpus["train"] = _with_alignment_file(corpus["train"], cfg)
    if cfg.alignments == "eflomal":
        corpus["train"] = _with_eflomal(corpus["train"], cfg)
    return corpus


def _with_extra_pairs(train: Dataset, cfg: DataConfig) -> Dataset:
    """The training split followed by the sentence pairs of ``data.extra_train``'s gold sets."""
    if cfg.alignments == "builtin":
        raise UserError(
            "data.extra_train adds pairs that data.alignments=builtin has no links for; use "
            "data.alignments=eflomal (it aligns the added pairs too) or leave one out"
        )
    stamps = []
    for name, gold in cfg.extra_train.items():
        path = Path(gold.path).expanduser()
        files = [path, *(Path(f).expanduser() for f in (gold.src, gold.tgt) if f)]
        files = [f for p in files for f in (sorted(p.rglob("*")) if p.is_dir() else [p])]
        missing = [str(f) for f in files if not f.exists()]
        if missing:
            raise UserError(f"data.extra_train.{name}: {', '.join(missing)} does not exist")
        state = [[str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns] for f in files]
        stamps.append(json.dumps([name, asdict(gold), cfg.src_lang, cfg.tgt_lang, state]))
    extra = Dataset.from_generator(
        _read_gold_text,
        gen_kwargs={"stamps": stamps},
        cache_dir=str(Path(cfg.cache_dir) / "hf"),
        features=Features({"src": Value("string"), "tgt": Value("string")}),
    )
    log.info("data.extra_train: %d pairs added to %d training pairs", len(extra), len(train))
    return concatenate_datasets([train.select_columns(["src", "tgt"]), extra])


def _read_gold_text(stamps: list[str]):
    for stamp in stamps:
        name, gold, src_lang, tgt_lang, _ = json.loads(stamp)
        pairs = load_gold_set(name, GoldSetConfig(**gold), src_lang, tgt_lang)
        for src, tgt in zip(pairs.sources, pairs.targets):
            yield {"src": src, "tgt": tgt}


def _hold_out(train: Dataset, cfg: DataConfig) -> DatasetDict:
    """valid/test drawn (seeded) from the training pairs; no sentence of theirs stays in train.

    Corpora like Tatoeba repeat a sentence with several translations ("Go." -> "Ve." / "Vete."):
    a training pair that shares its source or its target with a held-out pair is dropped too,
    so that the held-out scores are on unseen sentences.
    """
    wanted = sum(cfg.holdout.values())
    if wanted >= len(train):
        raise UserError(
            f"data.holdout asks for {wanted} pairs but the training files of data={cfg.name} "
            f"hold {len(train)}"
        )
    order = np.random.default_rng(cfg.seed).permutation(len(train))
    picked, start = {}, 0
    for split in ("valid", "test"):
        n = cfg.holdout.get(split, 0)
        picked[split], start = np.sort(order[start : start + n]), start + n
    held = np.concatenate(list(picked.values()))
    if train._indices is not None:  # rows are read from the Arrow table below: make it the split's
        train = train.flatten_indices()
    table = train.data.table
    src, tgt = table.column("src"), table.column("tgt")
    shared = pc.or_(
        pc.is_in(src, value_set=pc.take(src, held)), pc.is_in(tgt, value_set=pc.take(tgt, held))
    )
    keep = np.flatnonzero(~shared.to_numpy(zero_copy_only=False))
    log.info(
        "data.holdout: %s held out of %d training pairs; %d pairs sharing a sentence with them "
        "left out of training",
        ", ".join(f"{len(rows)} {split}" for split, rows in picked.items() if len(rows)),
        len(train),
        len(train) - len(keep) - len(held),
    )
    out = DatasetDict({"train": train.select(keep)})
    for split in ("valid", "test"):
        out[split] = train.select(picked[split]) if len(picked[split]) else load_local(cfg, split)
    return out


def _read_lines(stamp: str):
    path = Path(json.loads(stamp)[0])
    with open_text(path) as f:
        for number, line in enumerate(f, 1):
            yield {"alignment": decode_line(line, str(path), number).strip()}


def _with_alignment_file(train: Dataset, cfg: DataConfig, path: str | None = None) -> Dataset:
    """The training split with an ``alignment`` column: line n of a Pharaoh file for pair n.

    With ``data.extra_train`` the split ends with the added pairs, which the file must cover
    too (a file written by eflomal for a run with the same data does: the teacher its log names).
    """
    file = Path(path or cfg.alignments).expanduser()
    if not file.is_file():
        raise UserError(
            f"data.alignments={cfg.alignments}: no such file; give a Pharaoh file (source-target, "
            f"one line per training pair), eflomal, or builtin (demo corpus)"
        )
    if path is None:  # a file of the user's (eflomal's own is named by _with_eflomal)
        log.info("guided alignment's teacher: %s", file.resolve())
    stamp = json.dumps([str(file.resolve()), file.stat().st_size, file.stat().st_mtime_ns])
    links = Dataset.from_generator(
        _read_lines,
        gen_kwargs={"stamp": stamp},
        cache_dir=str(Path(cfg.cache_dir) / "hf"),
        features=Features({"alignment": Value("string")}),
    )
    if len(links) != len(train):
        needs = (
            f"the run trains on {len(train)} pairs (data={cfg.name} and data.extra_train's); "
            "with data.extra_train it needs one line per pair trained on, in order, the added "
            "ones last: the eflomal file that a guided run with the same data names in its log "
            "('guided alignment's teacher: ...')"
            if cfg.extra_train
            else f"the training split of data={cfg.name} has {len(train)} pairs; it needs one "
            "line per pair, in order"
        )
        raise UserError(f"data.alignments: {file} has {len(links)} lines but {needs}")
    return concatenate_datasets([train, links], axis=1)


def text_key(ds: Dataset) -> str:
    """``corpus_key`` of the split's src/tgt text, read in batches.

    Unlike ``ds._fingerprint`` it does not change when a file is copied or touched (``datasets``
    fingerprints local files by their modification time). One pass over the text: about a
    second per million pairs.
    """

    def column(name: str):
        for batch in ds.select_columns([name]).iter(batch_size=100_000):
            yield from batch[name]

    return corpus_key(column("src"), column("tgt"))


def _with_eflomal(train: Dataset, cfg: DataConfig) -> Dataset:
    """The training split with eflomal's grow-diag-final-and links, aligned once per text.

    The cache is keyed by the text itself, not by the split's fingerprint: eflomal seeds itself
    at random, so aligning the same pairs again (after the files were copied or touched) would
    give a run another teacher, and takes hours on a WMT-sized corpus.
    """
    paths = align_corpus(
        lambda: (train["src"], train["tgt"]),
        Path(cfg.cache_dir) / "alignments",
        text_key(train),
    )
    # named in the log: runs compared with each other must share this file (their teacher)
    log.info("guided alignment's teacher: %s", paths["gdfa"])
    return _with_alignment_file(train, cfg, str(paths["gdfa"]))


def _load_hub(cfg: DataConfig) -> DatasetDict:
    """``load_dataset(hf_path, hf_config)``, its ``translation`` column split into src and tgt."""
    try:
        raw = load_dataset(cfg.hf_path, cfg.hf_config, cache_dir=str(Path(cfg.cache_dir) / "hf"))
    except Exception as err:  # noqa: BLE001 -- any failure to reach or read the hub is reported alike
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise UserError(
            f"could not load the data set {cfg.hf_path!r} (config {cfg.hf_config!r}) for data={cfg.name}: "
            f"{type(err).__name__}: {first_line}. If this machine cannot reach the Hugging Face hub, "
            f"download the data set where it can (hf download {cfg.hf_path} "
            "--repo-type dataset --local-dir DIR) and set data.hf_path=DIR, point data.local_dir "
            "at a copy of the release files (presets with data.local_files), use data=local "
            "with your own files (data.files.train=[train.src,train.tgt] ...), or data=demo_es_en"
        ) from err
    corpus = DatasetDict()
    for split, hub_split in cfg.hf_splits.items():
        if hub_split not in raw:
            raise UserError(
                f"{cfg.hf_path} ({cfg.hf_config}) has no split {hub_split!r} (data.hf_splits.{split}); "
                f"it has {sorted(raw)}"
            )
        ds = raw[hub_split]
        languages = _languages(ds)
        if not {cfg.src_lang, cfg.tgt_lang} <= languages:
            raise UserError(
                f"{cfg.hf_path} ({cfg.hf_config}) has languages {sorted(languages)}, "
                f"not data.src_lang={cfg.src_lang} and data.tgt_lang={cfg.tgt_lang}"
            )
        corpus[split] = ds.map(
            _split_translation,
            batched=True,
            remove_columns=ds.column_names,
            num_proc=cfg.num_proc if cfg.num_proc > 1 and len(ds) >= 10_000 else None,
            fn_kwargs={"src": cfg.src_lang, "tgt": cfg.tgt_lang},
            desc=f"reading {split}",
        )
    return corpus


def _languages(ds: Dataset) -> set[str]:
    """Languages of a hub data set: WMT's {"translation": {lang: text}} or one column per language."""
    if "translation" in ds.features:
        feature = ds.features["translation"]
        return set(getattr(feature, "languages", None) or feature.keys())
    return set(ds.column_names)


def _split_translation(batch: dict[str, list], src: str, tgt: str) -> dict[str, list]:
    if "translation" in batch:
        return {
            "src": [t[src] for t in batch["translation"]],
            "tgt": [t[tgt] for t in batch["translation"]],
        }
    return {"src": batch[src], "tgt": batch[tgt]}
