"""Real corpora through datasets: the hub code path on a local copy of WMT14's schema, local files on
../shared/data, subsets, caching, and every kind of bad input."""

from __future__ import annotations

import gzip
import logging
from pathlib import Path

import pytest
from datasets import Dataset
from omegaconf import OmegaConf

from transformer_mt.config import DataConfig
from transformer_mt.data.sources import load_corpus
from transformer_mt.data.tokenize import tokenize, train_tokenizer
from transformer_mt.errors import UserError

from .conftest import SHARED, needs_shared

PAIRS = [
    ("Ein Hund läuft im Park.", "A dog runs in the park."),
    ("Zwei Kinder spielen Fußball.", "Two children play football."),
    ("Die Frau liest ein Buch.", "The woman reads a book."),
    ("Ein Mann fährt Fahrrad.", "A man rides a bike."),
]


def _data_cfg(compose_cfg, name: str, *overrides: str) -> DataConfig:
    cfg = compose_cfg(f"data={name}", *overrides)
    return OmegaConf.to_object(cfg.data)


@pytest.fixture
def fake_wmt14(tmp_path: Path) -> Path:
    """A folder laid out like the hub's wmt/wmt14 repository: parquet shards per config, a README declaring them."""
    repo = tmp_path / "wmt14"
    for split, n in (("train", 40), ("validation", 4), ("test", 4)):
        rows = [
            {"de": PAIRS[i % 4][0] + f" {i}", "en": PAIRS[i % 4][1] + f" {i}"} for i in range(n)
        ]
        (repo / "de-en").mkdir(parents=True, exist_ok=True)
        Dataset.from_dict({"translation": rows}).to_parquet(
            repo / "de-en" / f"{split}-00000-of-00001.parquet"
        )
    (repo / "README.md").write_text(
        "---\nconfigs:\n- config_name: de-en\n  data_files:\n"
        + "".join(
            f"  - split: {s}\n    path: de-en/{s}-*\n" for s in ("train", "validation", "test")
        )
        + "---\n"
    )
    return repo


def test_wmt14_config_loads_through_load_dataset(compose_cfg, fake_wmt14: Path) -> None:
    cfg = _data_cfg(compose_cfg, "wmt14_en_de", f"data.hf_path={fake_wmt14}")
    assert (cfg.hf_config, cfg.src_lang, cfg.tgt_lang, cfg.vocab_size) == (
        "de-en",
        "en",
        "de",
        37000,
    )
    corpus = load_corpus(cfg)
    assert {k: len(v) for k, v in corpus.items()} == {"train": 40, "valid": 4, "test": 4}
    assert corpus["train"][1] == {
        "src": "Two children play football. 1",
        "tgt": "Zwei Kinder spielen Fußball. 1",
    }
    reverse = load_corpus(
        _data_cfg(
            compose_cfg,
            "wmt14_en_de",
            f"data.hf_path={fake_wmt14}",
            "data.src_lang=de",
            "data.tgt_lang=en",
        )
    )
    assert reverse["test"][0]["src"].startswith("Ein Hund")


def test_subsets_first_and_random(compose_cfg, fake_wmt14: Path) -> None:
    first = load_corpus(
        _data_cfg(compose_cfg, "wmt14_en_de", f"data.hf_path={fake_wmt14}", "data.train_subset=10")
    )
    assert len(first["train"]) == 10 and first["train"][9]["src"].endswith(" 9")
    rand = [
        load_corpus(
            _data_cfg(
                compose_cfg,
                "wmt14_en_de",
                f"data.hf_path={fake_wmt14}",
                "data.train_subset=10",
                "data.subset_strategy=random",
                f"data.seed={s}",
            )
        )["train"]["src"]
        for s in (1, 1, 2)
    ]
    assert list(rand[0]) == list(rand[1]) != list(rand[2])
    assert len(first["valid"]) == 4  # only training is subset


def test_unreachable_hub_names_the_data_set_and_the_alternatives(
    compose_cfg, tmp_path: Path
) -> None:
    cfg = _data_cfg(compose_cfg, "wmt14_en_de", f"data.hf_path={tmp_path / 'nowhere'}")
    with pytest.raises(
        UserError,
        match=r"could not load the data set .*nowhere.*point data.local_dir .*use data=local .*or data=demo_es_en$",
    ) as err:
        load_corpus(cfg)
    assert "\n" not in str(err.value)  # one line


def test_wrong_language_pair_is_a_clear_error(compose_cfg, fake_wmt14: Path) -> None:
    cfg = _data_cfg(compose_cfg, "wmt14_en_de", f"data.hf_path={fake_wmt14}", "data.tgt_lang=fr")
    with pytest.raises(
        ValueError, match=r"has languages \['de', 'en'\], not data.src_lang=en and data.tgt_lang=fr"
    ):
        load_corpus(cfg)


def _write(path: Path, lines: list[str] | bytes) -> Path:
    data = lines if isinstance(lines, bytes) else "".join(line + "\n" for line in lines).encode()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


def _local(compose_cfg, tmp_path: Path, train: list[str], **splits: list[str]) -> DataConfig:
    files = {"train": train, "valid": splits.get("valid", train), "test": splits.get("test", train)}
    overrides = [f"data.files.{k}=[{','.join(v)}]" for k, v in files.items()]
    return _data_cfg(compose_cfg, "local", "data.src_lang=de", "data.tgt_lang=en", *overrides)


def test_local_files_plain_gzip_and_tsv(compose_cfg, tmp_path: Path) -> None:
    src = _write(tmp_path / "a.de.gz", [p[0] for p in PAIRS])
    tgt = _write(tmp_path / "a.en", [p[1] for p in PAIRS])
    tsv = _write(tmp_path / "b.tsv", [f"{s}\t{t}" for s, t in PAIRS])
    corpus = load_corpus(_local(compose_cfg, tmp_path, [str(src), str(tgt)], test=[str(tsv)]))
    assert list(corpus["train"]["src"]) == [p[0] for p in PAIRS]
    assert list(corpus["test"]["tgt"]) == [p[1] for p in PAIRS]


def test_files_of_different_lengths_name_both_and_the_line(compose_cfg, tmp_path: Path) -> None:
    src = _write(tmp_path / "s.de", [p[0] for p in PAIRS])
    tgt = _write(tmp_path / "t.en", [p[1] for p in PAIRS[:3]])
    with pytest.raises(
        ValueError,
        match=r"t.en ends at line 3 but .*s.de goes on \(line 4\); .* same number of lines",
    ):
        load_corpus(_local(compose_cfg, tmp_path, [str(src), str(tgt)]))


def test_invalid_utf8_names_the_file_and_line(compose_cfg, tmp_path: Path) -> None:
    src = _write(tmp_path / "s.de", b"Ein Hund.\nDer \xe4rger.\n")
    tgt = _write(tmp_path / "t.en", ["A dog.", "The anger."])
    with pytest.raises(ValueError, match=r"s.de, line 2: not valid UTF-8"):
        load_corpus(_local(compose_cfg, tmp_path, [str(src), str(tgt)]))


def test_missing_file_and_empty_split(compose_cfg, tmp_path: Path) -> None:
    tgt = _write(tmp_path / "t.en", ["A dog."])
    with pytest.raises(FileNotFoundError, match=r"data.files.train: .*missing.de does not exist"):
        load_corpus(_local(compose_cfg, tmp_path, [str(tmp_path / "missing.de"), str(tgt)]))
    empty_src, empty_tgt = _write(tmp_path / "e.de", []), _write(tmp_path / "e.en", [])
    src = _write(tmp_path / "s.de", ["Ein Hund."])
    with pytest.raises(
        ValueError, match=r"split 'valid' of data=local has no pairs: .*e.de.*are empty"
    ):
        load_corpus(
            _local(
                compose_cfg, tmp_path, [str(src), str(tgt)], valid=[str(empty_src), str(empty_tgt)]
            )
        )


def test_long_and_empty_pairs_are_dropped_and_counted_never_cut(
    compose_cfg, tmp_path: Path, caplog
) -> None:
    long = " ".join(["Hund"] * 60)
    src = _write(tmp_path / "s.de", [p[0] for p in PAIRS] * 10 + [long, ""])
    tgt = _write(tmp_path / "t.en", [p[1] for p in PAIRS] * 10 + ["dog", "nothing"])
    cfg = _local(compose_cfg, tmp_path, [str(src), str(tgt)])
    cfg.max_len, cfg.vocab_size = 40, 60
    corpus = load_corpus(cfg)
    with caplog.at_level(logging.INFO):
        splits = tokenize(corpus, train_tokenizer(corpus, cfg), cfg)
    assert len(splits["train"]) == 40 and len(splits["test"]) == 42  # test keeps every pair
    assert (
        "train: 42 pairs read, 40 kept, 2 dropped (1 longer than data.max_len=40 pieces, 1 with an empty side)"
        in caplog.text
    )
    assert max(splits["train"]["src_len"]) <= 41


def test_tokenization_is_cached_for_the_next_run(compose_cfg, tmp_path: Path) -> None:
    src = _write(tmp_path / "s.de", [p[0] for p in PAIRS] * 5)
    tgt = _write(tmp_path / "t.en", [p[1] for p in PAIRS] * 5)
    cfg = _local(compose_cfg, tmp_path, [str(src), str(tgt)])
    cfg.vocab_size = 60
    corpus = load_corpus(cfg)
    tokenizer = train_tokenizer(corpus, cfg)
    first = tokenize(corpus, tokenizer, cfg)["train"].cache_files
    again = load_corpus(cfg)
    assert train_tokenizer(again, cfg).path == tokenizer.path  # SentencePiece reused
    assert (
        tokenize(again, tokenizer, cfg)["train"].cache_files == first
    )  # the Arrow cache, not a new map
    cfg.vocab_size = 70
    assert train_tokenizer(again, cfg).path != tokenizer.path  # other settings: retrained


@pytest.mark.slow  # reads 120k lines
@needs_shared()
@pytest.mark.parametrize(
    ("folder", "files", "n"),
    [
        ("multi30k_task1", ["test_2016_flickr.en.gz", "test_2016_flickr.de.gz"], 1000),
        ("anki_spa_eng", ["spa-eng.es.gz", "spa-eng.en.gz"], 116_319),
        ("wmt13_newstest2013_esen", ["newstest2013.es", "newstest2013.en"], 3000),
        ("wmt14_newstest2014_deen", ["newstest2014-full.en", "newstest2014-full.de"], 3003),
    ],
)
def test_local_reads_the_shared_corpora(compose_cfg, folder: str, files: list[str], n: int) -> None:
    paths = ",".join(str(SHARED / folder / f) for f in files)
    cfg = _data_cfg(
        compose_cfg,
        "local",
        "data.src_lang=xx",
        "data.tgt_lang=yy",
        *(f"data.files.{s}=[{paths}]" for s in ("train", "valid", "test")),
    )
    corpus = load_corpus(cfg)
    assert len(corpus["test"]) == n
    assert corpus["test"][0]["src"] and corpus["test"][0]["tgt"]


@needs_shared()
def test_a_hub_preset_reads_a_local_copy_through_local_dir(compose_cfg) -> None:
    cfg = _data_cfg(compose_cfg, "multi30k_en_de", f"data.local_dir={SHARED / 'multi30k_task1'}")
    corpus = load_corpus(cfg)
    assert {s: len(d) for s, d in corpus.items()} == {
        "train": 29_000,
        "valid": 1_014,
        "test": 1_000,
        "test2017": 1_000,  # the preset's further test sets, each read whole
        "mscoco2017": 461,
    }
    assert corpus["test"][0]["src"].startswith("A man")  # English first: src_lang en


def test_files_of_blank_lines_are_refused_before_sentencepiece(compose_cfg, tmp_path: Path) -> None:
    src, tgt = _write(tmp_path / "b.de", ["", " ", ""]), _write(tmp_path / "b.en", ["", "", "\t"])
    cfg = _local(compose_cfg, tmp_path, [str(src), str(tgt)])
    corpus = load_corpus(cfg)
    with pytest.raises(UserError, match=r"split 'train' of data=local has no text .* are empty"):
        train_tokenizer(corpus, cfg)


@pytest.mark.slow  # a subprocess
def test_the_train_script_prints_bad_input_on_one_line(tmp_path: Path) -> None:
    from .scripts import run_script

    src, tgt = _write(tmp_path / "b.de", ["", ""]), _write(tmp_path / "b.en", ["", ""])
    files = f"[{src},{tgt}]"
    result = run_script(
        "train.py",
        "data=local",
        "data.src_lang=de",
        "data.tgt_lang=en",
        *(f"data.files.{split}={files}" for split in ("train", "valid", "test")),
        f"data.cache_dir={tmp_path / 'cache'}",
        f"output_dir={tmp_path / 'run'}",
    )
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "has no text to learn pieces from" in errors[0]
    assert "Traceback" not in result.stderr and "HYDRA_FULL_ERROR" not in result.stderr


@pytest.mark.slow  # reads files into Arrow twice
def test_holdout_draws_valid_and_test_without_shared_sentences(tmp_path) -> None:
    from transformer_mt.errors import UserError

    # "Go." has three translations and "Run!" two: a held-out pair takes its twins out of training
    pairs = [
        ("Go.", "Ve."),
        ("Go.", "Vete."),
        ("Go.", "Vaya."),
        ("Run!", "¡Corre!"),
        ("Run!", "¡Corran!"),
    ]
    pairs += [(f"Sentence {i}.", f"Frase {i}.") for i in range(60)]
    (tmp_path / "train.en").write_text("".join(s + "\n" for s, _ in pairs))
    (tmp_path / "train.es").write_text("".join(t + "\n" for _, t in pairs))
    cfg = DataConfig(
        name="local",
        source="local",
        src_lang="en",
        tgt_lang="es",
        files={"train": [str(tmp_path / "train.en"), str(tmp_path / "train.es")]},
        holdout={"valid": 10, "test": 10},
        cache_dir=str(tmp_path / "cache"),
    )
    corpus = load_corpus(cfg)
    held = {s for split in ("valid", "test") for s in corpus[split]["src"]}
    held_tgt = {t for split in ("valid", "test") for t in corpus[split]["tgt"]}
    assert len(corpus["valid"]) == len(corpus["test"]) == 10
    assert not held & set(corpus["train"]["src"]) and not held_tgt & set(corpus["train"]["tgt"])
    # brute force: training keeps exactly the pairs sharing no sentence with a held-out pair
    expected = [(s, t) for s, t in pairs if s not in held and t not in held_tgt]
    assert sorted(zip(corpus["train"]["src"], corpus["train"]["tgt"])) == sorted(expected)
    assert load_corpus(cfg)["valid"]["src"] == corpus["valid"]["src"]  # seeded: the same draw
    with pytest.raises(UserError, match="data.holdout asks for 80 pairs"):
        load_corpus(DataConfig(**{**cfg.__dict__, "holdout": {"valid": 40, "test": 40}}))
    with pytest.raises(UserError, match="data.holdout draws valid/test from local files"):
        load_corpus(DataConfig(name="demo_es_en", holdout={"valid": 5}, cache_dir=str(tmp_path)))


@pytest.mark.slow  # reads files into Arrow
def test_extra_train_appends_gold_sentences_after_the_holdout(tmp_path, caplog) -> None:
    import logging

    from transformer_mt.config import GoldSetConfig

    pairs = [(f"frase {i} .", f"sentence {i} .") for i in range(40)]
    (tmp_path / "train.es").write_text("".join(s + "\n" for s, _ in pairs))
    (tmp_path / "train.en").write_text("".join(t + "\n" for _, t in pairs))
    (tmp_path / "gold.es").write_text("el gato negro\nla casa\n")
    (tmp_path / "gold.en").write_text("the black cat\nthe house\n")
    (tmp_path / "gold.links").write_text("0-0 1-2 2-1\n0-0 1-1\n")
    gold = GoldSetConfig(
        format="pharaoh",
        path=str(tmp_path / "gold.links"),
        src=str(tmp_path / "gold.es"),
        tgt=str(tmp_path / "gold.en"),
    )
    cfg = DataConfig(
        name="local",
        source="local",
        files={"train": [str(tmp_path / "train.es"), str(tmp_path / "train.en")]},
        holdout={"valid": 5, "test": 5},
        extra_train={"tiny": gold},
        cache_dir=str(tmp_path / "cache"),
    )
    corpus = load_corpus(cfg)
    train = list(zip(corpus["train"]["src"], corpus["train"]["tgt"]))
    assert len(train) == 30 + 2  # 40 minus the 10 held out, plus the two gold sentences
    assert train[-2:] == [("el gato negro", "the black cat"), ("la casa", "the house")]
    held = {s for split in ("valid", "test") for s in corpus[split]["src"]}
    assert "el gato negro" not in held  # never held out: the gold text is for training
    # a Pharaoh file of the training lines has no lines for the added pairs: refused
    (tmp_path / "train.links").write_text("0-0\n" * 40)
    with pytest.raises(UserError, match=r"has 40 lines but the run trains on 32 pairs .* teacher"):
        load_corpus(DataConfig(**{**cfg.__dict__, "alignments": str(tmp_path / "train.links")}))
    # one line per pair trained on, the added ones last (eflomal's file): each pair its own line
    (tmp_path / "run.links").write_text("".join(f"0-{i % 3}\n" for i in range(32)))
    with caplog.at_level(logging.INFO, logger="transformer_mt.data.sources"):
        pinned = load_corpus(
            DataConfig(**{**cfg.__dict__, "alignments": str(tmp_path / "run.links")})
        )
    assert f"guided alignment's teacher: {(tmp_path / 'run.links').resolve()}" in caplog.text
    assert list(zip(pinned["train"]["src"], pinned["train"]["tgt"])) == train
    assert pinned["train"]["alignment"] == [f"0-{i % 3}" for i in range(32)]
    # without data.extra_train the file is per line of the training files (before the holdout)
    alone = {**cfg.__dict__, "extra_train": {}, "alignments": str(tmp_path / "run.links")}
    with pytest.raises(UserError, match=r"32 lines but the training split of data=local has 40"):
        load_corpus(DataConfig(**alone))
    with pytest.raises(UserError, match="data.extra_train adds pairs that data.alignments=builtin"):
        load_corpus(
            DataConfig(
                name="demo_es_en",
                alignments="builtin",
                extra_train={"tiny": gold},
                cache_dir=str(tmp_path / "cache"),
            )
        )
    missing = GoldSetConfig(format="graca", path=str(tmp_path / "nowhere"))
    with pytest.raises(UserError, match=r"data.extra_train.lost: .*nowhere does not exist"):
        load_corpus(DataConfig(**{**cfg.__dict__, "extra_train": {"lost": missing}}))
