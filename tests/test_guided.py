"""Guided alignment: word links -> piece links -> per-row targets -> a loss one head learns from."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch

from transformer_mt import Transformer, TransformerConfig
from transformer_mt.align.extract import hard_alignment
from transformer_mt.align.links import alignment_error_rate
from transformer_mt.align.pieces import piece_links, piece_words
from transformer_mt.data.supervision import supervision
from transformer_mt.loss import alignment_loss, label_smoothed_nll
from transformer_mt.model.vocab import EOS_ID

from .batches import collate

# A hand-made vocabulary: ids 0-3 special, then pieces; True where a piece begins a word (▁).
PIECES = [
    "<pad>",
    "<unk>",
    "<s>",
    "</s>",
    "▁el",
    "▁ga",
    "to",
    "▁negro",
    "▁the",
    "▁black",
    "▁c",
    "at",
]
STARTS = np.array([p.startswith("▁") for p in PIECES])


def test_word_links_become_links_between_all_their_pieces() -> None:
    src = [4, 5, 6, 7, EOS_ID]  # ▁el ▁ga to ▁negro </s>: "el gato negro"
    tgt = [8, 9, 10, 11, EOS_ID]  # ▁the ▁black ▁c at </s>: "the black cat"
    assert piece_words(src, STARTS).tolist() == [0, 1, 1, 2, -1]
    flat = piece_links(src, tgt, {(0, 0), (1, 2), (2, 1)}, 3, 3, STARTS)
    pairs = sorted(zip(flat[::2], flat[1::2]))
    # el-the; gato (pieces 1, 2) - cat (pieces 2, 3); negro-black
    assert pairs == [(0, 0), (1, 2), (1, 3), (2, 2), (2, 3), (3, 1)]
    # pieces that do not fold into the text's words, or a link outside the pair: no supervision
    assert piece_links(src, tgt, {(0, 0)}, 4, 3, STARTS) is None
    assert piece_links(src, tgt, {(5, 0)}, 3, 3, STARTS) is None


def test_each_supervised_row_is_a_distribution_over_its_linked_source_pieces() -> None:
    flat = np.array([0, 0, 1, 2, 2, 2, 3, 1, 0, 1], dtype=np.int32)  # sentence 0: 4 links, 1: 1
    index, weight, rows = supervision(flat, np.array([8, 2]))
    assert index.tolist() == [[0, 0, 0], [0, 2, 1], [0, 2, 2], [0, 1, 3], [1, 1, 0]]
    assert weight.tolist() == [1.0, 0.5, 0.5, 1.0, 1.0] and rows == 4


def test_the_loss_is_zero_for_the_target_distribution_and_positive_otherwise() -> None:
    index, weight, rows = supervision(np.array([0, 0, 1, 1, 2, 1]), np.array([6]))
    target = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 0.5, 0.5]]])  # (B=1, T=2, S=3)
    assert alignment_loss(target, index, weight, rows).item() == pytest.approx(0.0, abs=1e-7)
    uniform = torch.full((1, 2, 3), 1 / 3)
    expected = (np.log(3) + np.log(3 / 2)) / 2  # KL per row, averaged over the two rows
    assert alignment_loss(uniform, index, weight, rows).item() == pytest.approx(expected, rel=1e-5)
    # shift: piece t is supervised at row t + 1, where it is the decoder's input
    shifted = torch.cat([uniform, target], dim=1)[:, 1:]  # rows: uniform, target's 0, target's 1
    assert alignment_loss(shifted, index, weight, rows, shift=True).item() == pytest.approx(
        0.0, abs=1e-7
    )
    assert alignment_loss(shifted, index, weight, rows).item() > 0.1
    # no supervised row: zero, still attached to the graph
    empty = alignment_loss(uniform.requires_grad_(), *supervision(np.zeros(0), np.array([0])))
    assert empty.item() == 0.0 and empty.requires_grad


PAIRS = [  # Spanish -> English, adjective after the noun: the links cross
    ("el gato negro", "the black cat", {(0, 0), (1, 2), (2, 1)}),
    ("la casa blanca", "the white house", {(0, 0), (1, 2), (2, 1)}),
    ("un perro grande", "a big dog", {(0, 0), (1, 2), (2, 1)}),
    ("el perro duerme", "the dog sleeps", {(0, 0), (1, 1), (2, 2)}),
    ("la casa grande", "the big house", {(0, 0), (1, 2), (2, 1)}),
    ("un gato duerme", "a cat sleeps", {(0, 0), (1, 1), (2, 2)}),
]


@pytest.mark.slow  # a few hundred training steps of a tiny model
@pytest.mark.parametrize(("full_context", "shift"), [(False, False), (True, False), (False, True)])
def test_a_tiny_model_learns_the_given_alignment_in_its_guided_head(full_context, shift) -> None:
    torch.manual_seed(0)
    words = sorted({w for s, t, _ in PAIRS for w in f"{s} {t}".split()})
    ids = {w: i + 4 for i, w in enumerate(words)}
    starts = np.array([False] * 4 + [True] * len(words))  # one piece per word
    rows = []
    for n, (s, t, links) in enumerate(PAIRS):
        src = [ids[w] for w in s.split()] + [EOS_ID]
        tgt = [ids[w] for w in t.split()] + [EOS_ID]
        flat = piece_links(src, tgt, links, 3, 3, starts)
        rows.append({"src_ids": src, "tgt_ids": tgt, "index": n, "links": flat})
    batch = collate(rows)
    cfg = TransformerConfig(
        n_layers=2,
        d_model=32,
        d_ff=64,
        n_heads=4,
        dropout=0.0,
        vocab_size=len(ids) + 4,
        max_positions=16,
    )
    model = Transformer(cfg)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    layer, head = 0, 1  # the penultimate layer of two, its second head
    for _ in range(300):
        logits, weights = model.forward_with_head(
            batch.src, batch.tgt_in, layer, head, full_context
        )
        loss, _ = label_smoothed_nll(logits, batch.tgt_out, epsilon=0.0)
        align = alignment_loss(
            weights, batch.align_index, batch.align_weight, batch.align_rows, shift=shift
        )
        total = loss / batch.n_tgt_tokens + 0.5 * align
        optimizer.zero_grad()
        total.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        _, weights = model.forward_with_head(batch.src, batch.tgt_in, layer, head, full_context)
    rows = weights[:, 1:4, :3] if shift else weights[:, :3, :3]  # the 3 words' rows, columns
    predicted = {(n, i, j) for n in range(len(PAIRS)) for i, j in hard_alignment(rows[n])}
    gold = {(n, i, j) for n, (_, _, links) in enumerate(PAIRS) for i, j in links}
    assert alignment_error_rate(predicted, gold) == 0.0
    assert align.item() < 0.05


@pytest.mark.slow  # three Hydra compositions: seconds each
def test_guided_training_needs_word_links_and_a_real_head(compose_cfg) -> None:
    from transformer_mt.align.reading import HeadReading
    from transformer_mt.errors import UserError
    from transformer_mt.lit_module import TranslationModule
    from transformer_mt.train import guided_settings

    with pytest.raises(UserError, match="align.guided=true needs word alignments"):
        guided_settings(compose_cfg("align.guided=true"))
    settings = guided_settings(compose_cfg("align.guided=true", "data.alignments=builtin"))
    assert settings == {
        **{"weight": 0.05, "layer": -2, "head": 1, "mode": "causal"},
        **{"extract": "argmax", "tau": None, "diagonal": 0.0},
        **{"narrows_past": 0, "anchored_past": 0, "alike": 0.0},
    }
    cfg = TransformerConfig(n_layers=2, d_model=16, d_ff=32, n_heads=2, vocab_size=20)
    from dataclasses import asdict

    from transformer_mt.config import DecodeConfig, OptimConfig

    args = (asdict(cfg), asdict(OptimConfig()), asdict(DecodeConfig()))
    assert TranslationModule(*args, guided=settings).reading == HeadReading(1, 1)  # -2 of 2
    with pytest.raises(UserError, match="heads 1..2"):
        TranslationModule(*args, guided={**settings, "head": 3})
    from omegaconf import OmegaConf

    local = compose_cfg(
        "data=local", "data.alignments=builtin", "data.src_lang=es", "data.tgt_lang=en"
    )
    with pytest.raises(UserError, match="only the demo corpus has built-in alignments"):
        OmegaConf.to_object(local.data)  # the dataclass's checks run when it is built
    # a gold set can be added on the command line; a wrong key is named, with the right ones
    added = compose_cfg("+align.gold.mine={format:xlwa,path:/data/test.tsv}")
    assert OmegaConf.to_object(added.align).gold["mine"].format == "xlwa"
    typo = compose_cfg("+align.gold.mine={format:xlwa,pth:/data/test.tsv}")
    with pytest.raises(UserError, match=r"align.gold.mine: unknown keys \['pth'\]; .*'path'"):
        OmegaConf.to_object(typo.align)


@pytest.mark.slow  # builds a corpus, a tokenizer and its cache
def test_the_demo_corpus_links_reach_the_batches_in_pieces(tmp_path) -> None:
    from transformer_mt.align.links import read_pharaoh
    from transformer_mt.align.pieces import word_starts
    from transformer_mt.config import DataConfig
    from transformer_mt.datamodule import TranslationDataModule

    cfg = DataConfig(
        name="demo_es_en",
        train_size=400,
        valid_size=20,
        test_size=20,
        vocab_size=300,
        cache_dir=str(tmp_path),
        alignments="builtin",
        max_tokens=512,
    )
    data = TranslationDataModule(cfg)
    data.setup("fit")
    starts = word_starts(data.tokenizer.sp)
    batch = next(iter(data.train_dataloader()))
    assert batch.align_index is not None and batch.align_rows > 0
    text = data.text["train"]
    for b in range(batch.src.size(0)):
        row = text[int(batch.index[b])]
        links = batch.align_index[batch.align_index[:, 0] == b]
        src_words = piece_words(batch.src[b][batch.src[b] != 0].tolist(), starts)
        tgt_words = piece_words(batch.tgt_out[b][batch.tgt_out[b] != 0].tolist(), starts)
        words = {(int(src_words[s]), int(tgt_words[t])) for _, t, s in links.tolist()}
        assert words == read_pharaoh(row["alignment"])[0]  # every word link, and only those
    # each supervised row is a distribution
    sums = torch.zeros(batch.src.size(0), batch.tgt_out.size(1))
    sums.index_put_(
        (batch.align_index[:, 0], batch.align_index[:, 1]), batch.align_weight, accumulate=True
    )
    assert torch.allclose(sums[sums > 0], torch.ones(batch.align_rows))


def test_word_pieces_cut_each_word_alone_and_remember_its_owner() -> None:
    from transformer_mt.align.eflomal import WordPieces

    es = WordPieces("es")
    assert es("¿Vives en casa?") == (["¿", "vives", "en", "casa", "?"], [0, 0, 1, 2, 2])
    # Moses's rules for the language: a Spanish abbreviation stays whole, lowercased after
    assert es("El Sr. Pérez") == (["el", "sr.", "pérez"], [0, 1, 2])
    assert WordPieces("en")("Don't go.") == (["don", "'t", "go", "."], [0, 0, 1, 1])
    # no tokenizer: the whitespace words, lowercased (how eflomal saw words before)
    assert WordPieces(None)("Vivo  en casa.") == (["vivo", "en", "casa."], [0, 1, 2])
    assert es("") == ([], [])


def test_token_links_become_word_links() -> None:
    from transformer_mt.align.eflomal import word_links

    # "¿ vives en casa ?" (words 0 0 1 2 2) -> "do you live at home ." (words 0 1 2 3 4 4)
    src = (["¿", "vives", "en", "casa", "?"], [0, 0, 1, 2, 2])
    tgt = (["do", "you", "live", "at", "home", "."], [0, 1, 2, 3, 4, 4])
    tokens = {(1, 1), (1, 2), (2, 3), (3, 4), (4, 5), (0, 5)}
    # the union: a word pair is linked when any of their tokens are
    assert word_links(tokens, src, tgt) == {(0, 1), (0, 2), (1, 3), (2, 4), (0, 4)}
    # one per target word: "home ." keeps the links of "home", its longest linked token
    assert word_links(tokens, src, tgt, one_per=1) == {(0, 1), (0, 2), (1, 3), (2, 4)}
    # one per source word: "¿vives" keeps "vives" (both its links), "casa?" keeps "casa"
    assert word_links(tokens, src, tgt, one_per=0) == {(0, 1), (0, 2), (1, 3), (2, 4)}
    # a word whose only linked token is punctuation keeps that link
    assert word_links({(4, 5)}, src, tgt, one_per=1) == {(2, 4)}
    assert word_links(set(), src, tgt) == set()


def _needs_eflomal():
    import importlib.util

    return pytest.mark.skipif(
        importlib.util.find_spec("eflomal") is None,
        reason='eflomal is not installed (pip install -e ".[align]")',
    )


@pytest.mark.slow  # runs the aligner on 3,000 pairs
@_needs_eflomal()
def test_eflomal_aligns_the_training_split_once_and_the_links_are_cached(tmp_path, caplog) -> None:
    import gzip
    import logging

    from transformer_mt.align.eflomal import align_corpus, cached_links
    from transformer_mt.config import DataConfig
    from transformer_mt.data.sources import load_corpus, text_key

    from .conftest import SHARED

    with gzip.open(SHARED / "anki_spa_eng" / "spa-eng.es.gz", "rt") as f:
        es = [next(f).strip() for _ in range(3000)]
    with gzip.open(SHARED / "anki_spa_eng" / "spa-eng.en.gz", "rt") as f:
        en = [next(f).strip() for _ in range(3000)]
    (tmp_path / "train.es").write_text("\n".join(es) + "\n")
    (tmp_path / "train.en").write_text("\n".join(en) + "\n")
    cfg = DataConfig(
        name="local",
        source="local",
        files={"train": [str(tmp_path / "train.es"), str(tmp_path / "train.en")]},
        holdout={"valid": 50, "test": 50},
        alignments="eflomal",
        cache_dir=str(tmp_path / "cache"),
    )
    with caplog.at_level(logging.INFO):
        corpus = load_corpus(cfg)
    assert "aligning" in caplog.text and len(corpus["valid"]) == len(corpus["test"]) == 50
    held = set(corpus["valid"]["src"]) | set(corpus["test"]["src"])
    assert not held & set(corpus["train"]["src"])  # no held-out sentence left in training
    train = corpus["train"]
    lines = train["alignment"]
    assert len(lines) == len(train) and sum(bool(line) for line in lines) > 0.9 * len(train)
    for line, src, tgt in zip(lines[:200], train["src"][:200], train["tgt"][:200]):
        for link in line.split():
            i, j = map(int, link.split("-"))
            assert i < len(src.split()) and j < len(tgt.split())
    caplog.clear()
    with caplog.at_level(logging.INFO):
        again = load_corpus(cfg)
    assert "aligning" not in caplog.text and again["train"]["alignment"] == lines  # cached
    teacher = next((tmp_path / "cache" / "alignments").glob("eflomal_gdfa_*.pharaoh"))
    assert f"guided alignment's teacher: {teacher}" in caplog.text  # which file, in the run's log
    # a copy of the files (new paths, new modification times) is the same text: still cached,
    # so the run keeps its teacher (eflomal would start from another random state)
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("train.es", "train.en"):
        (copy / name).write_text((tmp_path / name).read_text())
    moved = replace(cfg, files={"train": [str(copy / "train.es"), str(copy / "train.en")]})
    caplog.clear()
    with caplog.at_level(logging.INFO):
        copied = load_corpus(moved)
    assert "aligning" not in caplog.text and copied["train"]["alignment"] == lines
    # each direction beside the symmetrized links, in the same cache (the benchmark's rows)
    folder, key = tmp_path / "cache" / "alignments", text_key(train)
    files = cached_links(folder, key)
    assert files["gdfa"] == teacher
    forward, reverse = (files[d].read_text().splitlines() for d in ("forward", "reverse"))
    assert forward != lines and reverse != lines
    for links, one_per in (
        (forward, 1),
        (reverse, 0),
    ):  # forward: a target word has one source word
        for line in links:
            pairs = [tuple(map(int, link.split("-"))) for link in line.split()]
            ends = [pair[one_per] for pair in pairs]
            assert len(ends) == len(set(ends)), line
    # grow-diag-final-and starts from the intersection of the two directions: it holds every link
    # both directions agree on
    for sym, fwd, rev in zip(lines[:200], forward[:200], reverse[:200]):
        assert set(fwd.split()) & set(rev.split()) <= set(sym.split())
    # each word cut by Moses (the benchmark's stronger baseline): aligned again, into other files
    caplog.clear()
    with caplog.at_level(logging.INFO):
        cut = align_corpus(lambda: (train["src"], train["tgt"]), folder, key, ("es", "en"))
    assert "aligning" in caplog.text and cut["gdfa"].name.endswith("-moses.pharaoh")
    tokenized = cut["gdfa"].read_text().splitlines()
    assert len(tokenized) == len(lines) and tokenized != lines

    # Anki's sentences end in punctuation glued to the last word: cut off, it gets its own
    # links, so the last words of both sides are linked to each other more often than when
    # "casa." and "casa" are two words to eflomal
    def last_words_linked(links):
        return sum(
            f"{len(s.split()) - 1}-{len(t.split()) - 1}" in line.split()
            for line, s, t in zip(links, train["src"], train["tgt"])
        )

    assert last_words_linked(tokenized) > max(last_words_linked(lines), 0.95 * len(train))


def test_the_eflomal_cache_key_is_the_text_not_the_files(tmp_path) -> None:
    import os

    from datasets import Dataset, load_dataset

    from transformer_mt.data.sources import text_key

    def read(path):
        return load_dataset("json", data_files=str(path), cache_dir=str(tmp_path / "hf"))["train"]

    rows = [{"src": "hola mundo", "tgt": "hello world"}, {"src": "adiós", "tgt": "bye"}]
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for path in (first, second):
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    os.utime(second, (1_000_000_000, 1_000_000_000))
    a, b = read(first), read(second)
    assert a._fingerprint != b._fingerprint  # datasets tells the two files apart by their times
    assert text_key(a) == text_key(b)  # the aligner's cache does not
    assert text_key(a.select([1, 0])) != text_key(a)  # line n's links are pair n's: order counts
    for changed in (
        [{"src": "hola mundo", "tgt": "hello  world"}, rows[1]],  # one character
        [{"src": "hola", "tgt": "mundo hello world"}, rows[1]],  # a word moved across the columns
        # a word moved across the rows
        [{"src": "hola mundoadiós", "tgt": "hello world"}, {"src": "", "tgt": "bye"}],
    ):
        assert text_key(Dataset.from_list(changed)) != text_key(a), changed


@pytest.mark.slow  # two ~30-step demo runs
def test_guided_training_lowers_its_kl_and_aligns_better_than_the_same_run_unguided(
    compose_cfg, tmp_path
) -> None:
    """Not plumbing: over 30 steps the guided head's KL to its links falls, and on the demo's
    gold it aligns better than the same head of the same run trained without guidance."""
    import csv
    import json

    from transformer_mt.align.gold import GoldSet
    from transformer_mt.align.links import read_pharaoh
    from transformer_mt.align.reading import HeadReading
    from transformer_mt.analysis import gold_aer
    from transformer_mt.checkpoint import load_model, run_data_config
    from transformer_mt.data.sources import demo_files
    from transformer_mt.train import run

    common = (
        *("data.train_size=400", "data.valid_size=60", "data.test_size=20", "data.vocab_size=200"),
        *("model.n_layers=2", "model.d_model=32", "model.d_ff=64", "model.n_heads=2"),
        *("trainer.max_epochs=6", "trainer.enable_progress_bar=false", "trainer.loggers=[csv]"),
        *("heatmaps.valid_sentences=0", "heatmaps.src=null", "checkpoint.keep_last=1"),
        "optim.warmup=20",
    )
    runs, steps = {}, {}
    for name, extra in (
        ("guided", ("data.alignments=builtin", "align.guided=true", "align.weight=1.0")),
        ("plain", ()),
    ):
        cfg = compose_cfg(*common, *extra, f"output_dir={tmp_path / name}")
        runs[name] = tmp_path / name
        steps[name] = run(cfg)["steps"]
    assert steps["guided"] == steps["plain"] and 20 <= steps["plain"] <= 45, steps  # ~30 each
    rows = list(csv.DictReader(next((tmp_path / "guided").rglob("metrics.csv")).open()))
    kl = [float(r["train/align_kl"]) for r in rows if r.get("train/align_kl")]
    # one value per epoch, falling every epoch (2.27 -> 1.65 when written)
    assert len(kl) == 6 and all(b < a for a, b in zip(kl, kl[1:])) and kl[-1] < 0.8 * kl[0], kl
    # the demo generator's gold links of the validation pairs, scored on the same head
    with open(demo_files(run_data_config(runs["plain"]))["valid"], encoding="utf-8") as f:
        pairs = [json.loads(line) for line in f]
    gold = GoldSet(
        "demo",
        [p["src"] for p in pairs],
        [p["tgt"] for p in pairs],
        [read_pharaoh(p["alignment"]) for p in pairs],
    )
    head = HeadReading(1, 1)  # align.layer -2 of 2 layers, head 1
    aer = {}
    for name, out in runs.items():
        model, tokenizer, _ = load_model(out)
        aer[name] = gold_aer(model, tokenizer, gold, head)["head"]
    print(f"steps {steps}, align_kl per epoch {kl}, head 1:1 AER {aer}")
    assert aer["guided"] < aer["plain"] - 0.1, aer
