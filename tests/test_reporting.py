"""The small pieces around the scripts: one-line errors, the alignment report, the sweep table."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from transformer_mt.align.gold import clean_gold, read_sentences
from transformer_mt.align.reading import HeadReading
from transformer_mt.analysis import LayerScores
from transformer_mt.analysis.pipeline import HeadScan, format_layers
from transformer_mt.cli import report_user_errors
from transformer_mt.errors import UserError
from transformer_mt.sweep import collect, write_table


def test_user_errors_become_one_line_and_bugs_keep_their_traceback(capsys) -> None:
    @report_user_errors
    def bad_input() -> None:
        raise UserError("data.files.train: x.de does not exist")

    with pytest.raises(SystemExit) as exit_:
        bad_input()
    assert exit_.value.code == 2
    assert capsys.readouterr().err == "error: data.files.train: x.de does not exist\n"

    @report_user_errors
    def missing() -> None:
        open("/nonexistent/file.txt")

    with pytest.raises(SystemExit):
        missing()
    assert capsys.readouterr().err == "error: /nonexistent/file.txt: no such file\n"

    @report_user_errors
    def bug() -> None:
        raise KeyError("a bug")

    with pytest.raises(KeyError):  # not swallowed
        bug()


def _scores(layer: int, aer: float | None, head: int | None = None, mode="causal") -> LayerScores:
    return LayerScores(
        reading=HeadReading(layer, head, mode),
        aer=aer,
        precision=None if aer is None else 1 - aer,
        recall=None if aer is None else 0.5,
        links=[{(0, 0)}],
        entropy=0.5,
        uniform=1.0,
        entropy_by_tau={0.5: 0.25, 2.0: 0.75},
        uncovered=0.1,
    )


def test_head_scan_picks_the_best_head_of_every_mode() -> None:
    def grid(mode: str, aers: list[list[float]]) -> list[list[LayerScores]]:
        return [
            [
                _scores(layer, aer, h if h <= len(row) - 1 else None, mode)
                for h, aer in enumerate(row, 1)
            ]
            for layer, row in enumerate(aers, 1)
        ]

    scan = HeadScan(
        {
            "causal": grid("causal", [[0.5, 0.4, 0.45], [0.3, 0.25, 0.2]]),
            "shift": grid("shift", [[0.9, 0.15, 0.6], [0.8, 0.7, 0.75]]),
            "full": grid("full", [[0.5, 0.5, 0.5], [0.5, 0.5, 0.5]]),
        }
    )
    assert scan.best.reading == HeadReading(1, 2, "shift") and scan.best.aer == 0.15
    assert scan.best_of("causal", heads=False).reading == HeadReading(2, None)  # a layer mean
    assert scan.best_of("causal").reading == HeadReading(2, 2)
    assert scan.cell(HeadReading(2, None, "shift")).aer == 0.75
    rows = {
        "causal": [_scores(1, 0.4), _scores(2, 0.2)],
        "shift": [_scores(1, 0.9), _scores(2, 0.1)],
    }
    table = format_layers(rows).splitlines()
    assert table[0].startswith("layer  causal AER/P/R") and len(table) == 3
    assert table[2].split()[:4] == ["2", "0.200", "0.800", "0.500"]


def test_alignment_report_inputs(tmp_path: Path) -> None:
    (tmp_path / "ok").write_text("el gato\nla casa\n", encoding="utf-8")
    assert read_sentences(tmp_path / "ok") == ["el gato", "la casa"]
    (tmp_path / "blank").write_text("el gato\n\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"blank:2: empty line"):
        read_sentences(tmp_path / "blank")
    (tmp_path / "latin1").write_bytes("el ni\xf1o\n".encode("latin-1"))
    with pytest.raises(UserError, match="not UTF-8"):
        read_sentences(tmp_path / "latin1")
    gold = [({(0, 0), (5, 1)}, {(0, 0), (5, 1)})]
    cleaned, warnings = clean_gold(gold, ["el gato"], ["the cat"], Path("g.wa"))
    assert cleaned == [({(0, 0)}, {(0, 0)})]
    assert warnings == [
        "g.wa sentence 1: links 5-1 fall outside 2 source x 2 target words; left out "
        "(wrong --one-indexed or --reverse-gold?)"
    ]


def test_sweep_table_lists_every_job_and_what_differs(tmp_path: Path) -> None:
    for job, heads in ((0, 1), (1, 4)):
        (tmp_path / str(job) / ".hydra").mkdir(parents=True)
        (tmp_path / str(job) / ".hydra" / "overrides.yaml").write_text(
            f"- model.n_heads={heads}\n- trainer.max_steps=3\n"
        )
    metrics = {
        "parameters": 1_500_000,
        "steps": 3,
        "val_ppl": 9.5,
        "val_bleu": 1.2,
        "test_bleu": 0.9,
    }
    (tmp_path / "0" / "metrics.json").write_text(json.dumps(metrics))  # job 1 did not finish
    rows = collect(tmp_path)
    assert [r["overrides"] for r in rows] == ["model.n_heads=1", "model.n_heads=4"]
    assert rows[1]["val_bleu"] == "did not finish"
    markdown = write_table(tmp_path, rows).read_text()
    assert "| 0 | model.n_heads=1 | 1.5M | 3 | 9.5 | 1.2 | 0.9 |" in markdown
    assert [r["job"] for r in csv.DictReader(open(tmp_path / "results.csv"))] == ["0", "1"]


def test_pipeline_captures_full_context_only_when_a_full_reading_asks(tmp_path: Path) -> None:
    import torch

    from transformer_mt.align.extract import Extraction
    from transformer_mt.align.gold import GoldSet
    from transformer_mt.analysis.pipeline import CorpusAttention, Row, dev_sets, every_method

    causal = [torch.tensor([[[[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4]]]])]  # (1,1,3,3)
    full = [causal[0].flip(-2)]
    calls = []
    pairs = GoldSet("one", ["a b"], ["x y"], [({(0, 0), (1, 1)}, {(0, 0), (1, 1)})])
    attention = CorpusAttention(pairs, causal, lambda: calls.append(1) or full)
    assert attention.links(HeadReading(1, None)) == [{(0, 0), (1, 1)}]
    # shift: word j from row j + 1 (the EOS row reads word 1: a tie, the first source word)
    assert attention.links(HeadReading(1, None, "shift")) == [{(1, 0), (0, 1)}]
    assert calls == []  # causal and shift read the model's own capture
    assert (
        attention.matrices(HeadReading(1, None, "full"))[0].tolist()
        == full[0][0, 0, :-1, :-1].tolist()
    )
    attention.words("full")
    assert calls == [1]  # captured once, kept
    row = Row.of("x", attention.links(HeadReading(1, None)), pairs.gold)
    assert (row.aer, row.precision, row.recall) == (0.0, 1.0, 1.0)
    # every method on one head: the reading itself first, then the other, the rest kept
    tuned = HeadReading(2, 1, extraction=Extraction("grow-diag", 0.2, 4.0))
    readings = every_method(tuned)
    assert [r.extraction for r in readings] == [tuned.extraction, Extraction("argmax", None, 4.0)]
    with pytest.raises(UserError, match="--tune-on 'dev.tsv': expected xlwa_dev, epps_dev, xlwa"):
        dev_sets(["dev.tsv"], ("es", "en"), None)
    # a shared test set is never a development set
    with pytest.raises(UserError, match="--tune-on graca: a test set, scored only"):
        dev_sets(["xlwa_dev", "graca"], ("es", "en"), tmp_path)
