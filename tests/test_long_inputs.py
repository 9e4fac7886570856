"""A line longer than the model reads: one policy (``fit_positions``) at every entry point.

Training's validation and test, ``evaluate.py``, ``translate.py``, ``align.py`` and the explorer
read such a line as its first ``max_positions - 1`` pieces, say so in one warning that counts the
lines and names the first, and still score every line.
"""

from __future__ import annotations

import gzip
import json
import logging

import pytest

from transformer_mt.errors import UserError
from transformer_mt.model.positions import fit_positions

from .conftest import SHARED, needs_shared
from .scripts import run_script

WARNING = "longer than the model reads"


def test_fit_positions_cuts_counts_and_names_the_first_long_line(caplog) -> None:
    seqs = [[1, 2], [1, 2, 3, 4, 5], [7], [1, 2, 3, 4, 5, 6, 7]]
    with caplog.at_level(logging.WARNING):
        fitted = fit_positions(seqs, max_positions=4, what="test source")
    # 4 positions: 3 pieces, EOS aside
    assert fitted == [[1, 2], [1, 2, 3], [7], [1, 2, 3]]
    (record,) = caplog.records  # one warning for the whole list
    assert record.getMessage() == (
        "2 test source(s) of 4 longer than the model reads (max_positions=4: 3 pieces, EOS "
        "aside); the first is line 2 (5 pieces): their first 3 pieces are read"
    )
    caplog.clear()
    assert fit_positions(seqs[:1], 4) == [[1, 2]] and not caplog.records
    assert fit_positions(seqs, 4, what="test source") == fitted and not caplog.records  # said
    with pytest.raises(UserError, match=r"the first is line 12 \(5 pieces\): shorten or split"):
        fit_positions(seqs, 4, first_line=11, error=True)


# one source line of ~260 words: every sentence of the first lines joined
def _anki(n: int, start: int = 0) -> tuple[list[str], list[str]]:
    sides = []
    for lang in ("es", "en"):
        with gzip.open(SHARED / "anki_spa_eng" / f"spa-eng.{lang}.gz", "rt", encoding="utf-8") as f:
            lines = [line.rstrip("\n") for _, line in zip(range(start + n), f)]
        sides.append(lines[start:])
    return sides[0], sides[1]


@pytest.fixture(scope="module")
def long_line_run(tmp_path_factory):
    """``data=local`` on Anki pairs with one ~260-word line in valid and in test, trained a few
    steps with max_positions=64: the run as a new user would make it."""
    from hydra import compose, initialize_config_dir

    from transformer_mt.train import run

    from .conftest import CONF

    tmp = tmp_path_factory.mktemp("long")
    es, en = _anki(800)
    long_es, long_en = " ".join(es[600:780]), " ".join(en[600:780])
    assert len(long_es.split()) > 200
    files = {
        "train": (es[:300], en[:300]),
        "valid": (es[400:408] + [long_es], en[400:408] + [long_en]),
        "test": (es[500:510] + [long_es], en[500:510] + [long_en]),
    }
    for split, (src, tgt) in files.items():
        (tmp / f"{split}.es").write_text("\n".join(src) + "\n")
        (tmp / f"{split}.en").write_text("\n".join(tgt) + "\n")
    overrides = [
        "data=local",
        "data.src_lang=es",
        "data.tgt_lang=en",
        *(f"data.files.{s}=[{tmp / f'{s}.es'},{tmp / f'{s}.en'}]" for s in files),
        f"output_dir={tmp / 'run'}",
        f"data.cache_dir={tmp / 'cache'}",
        "data.vocab_size=200",
        "data.max_len=60",
        "model.max_positions=64",
        "model.n_layers=1",
        "model.d_model=16",
        "model.d_ff=32",
        "model.n_heads=2",
        "trainer.max_steps=3",
        "trainer.max_epochs=null",
        "trainer.enable_progress_bar=false",
        "heatmaps.valid_sentences=0",
    ]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    said: list[str] = []  # the warnings of the run
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: said.append(record.getMessage())
    logging.getLogger().addHandler(handler)
    try:
        metrics = run(cfg)
    finally:
        logging.getLogger().removeHandler(handler)
    return metrics, said, tmp


@needs_shared(SHARED / "anki_spa_eng")
@pytest.mark.slow  # trains, then runs three scripts
def test_a_long_line_is_read_in_part_at_every_entry_point(long_line_run) -> None:
    metrics, said, tmp = long_line_run
    out = tmp / "run"
    # training: validation and test finish, every line scored, one warning per split and side
    assert metrics["test_sentences"] == 11
    assert len((out / "test.hyp.txt").read_text().split("\n")) == 11 + 1
    assert json.loads((out / "metrics.json").read_text())["test_sentences"] == 11
    said = [s for s in said if WARNING in s]
    for name, line in (("valid", 9), ("test", 11)):
        for side in ("source", "reference"):
            assert sum(f"{name} {side}(s)" in s for s in said) == 1, (name, side, said)
            assert any(f"1 {name} {side}(s) of {line} " in s and f"line {line} " in s for s in said)

    # evaluate.py: the whole test split decoded and scored, one warning
    scored = run_script("evaluate.py", f"run_dir={out}", "decode=greedy")
    assert scored.returncode == 0, scored.stderr[-3000:]
    told = scored.stdout + scored.stderr  # Hydra's log goes to stdout
    assert told.count(WARNING) == 1 and "the first is line 11 " in told
    assert "test of local (es->en), 11 sentences" in scored.stdout

    # translate.py: a hypothesis for every line, the long one among them
    test_src = (tmp / "test.es").read_text()
    translated = run_script("translate.py", out, input=test_src)
    assert translated.returncode == 0, translated.stderr[-3000:]
    assert translated.stderr.count(WARNING) == 1
    assert len(translated.stdout.split("\n")) == 11 + 1

    # align.py: the long pair scored with the others (its words past the cut unlinked)
    src, tgt = (tmp / "test.es").read_text(), (tmp / "test.en").read_text()
    diagonal = [
        " ".join(f"{i}-{i}" for i in range(min(len(s.split()), len(t.split()))))
        for s, t in zip(src.splitlines(), tgt.splitlines())
    ]
    (tmp / "test.wa").write_text("\n".join(diagonal) + "\n")
    links = tmp / "links.wa"
    files = ("--src", tmp / "test.es", "--tgt", tmp / "test.en", "--gold", tmp / "test.wa")
    aligned = run_script("align.py", out, *files, "--output", links)
    assert aligned.returncode == 0, aligned.stderr[-3000:]
    for side in ("source", "target"):  # once, though every reading mode reads the pairs
        assert aligned.stderr.count(f"1 {side}(s) of 11 {WARNING}") == 1, aligned.stderr[-3000:]
    written = links.read_text().split("\n")
    assert len(written) == 11 + 1
    cut_at = max(int(link.split("-")[0]) for link in written[10].split())
    assert cut_at < len(src.splitlines()[10].split())  # no link past the words read


@needs_shared(SHARED / "anki_spa_eng")
@pytest.mark.slow
def test_the_explorer_reads_a_long_source_in_part(long_line_run, caplog) -> None:
    from transformer_mt.app.session import Explorer

    *_, tmp = long_line_run
    explorer = Explorer(tmp / "run")
    long_source = (tmp / "test.es").read_text().splitlines()[10]
    with caplog.at_level(logging.WARNING):
        src_ids, hyps = explorer.translate(long_source)
        pair = explorer.attention(src_ids, hyps[0])
    assert len(src_ids) == explorer.model.cfg.max_positions - 1
    assert sum(WARNING in r.getMessage() for r in caplog.records) == 1
    assert pair.cross.shape[-1] == len(src_ids) + 1  # EOS
    with pytest.raises(UserError, match="the source is empty"):
        explorer.translate("  ")
