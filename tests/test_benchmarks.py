"""The benchmark scripts still run (at toy sizes) and print their figures: they must not rot.

The figures themselves are measured by running the scripts with their defaults (see README).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
import torch

from .conftest import ROOT, SHARED, needs_shared

pytestmark = pytest.mark.slow  # training runs and subprocesses: not in the fast lane

BENCH = ROOT / "benchmarks"


def _run(script: str, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, str(BENCH / script), *args], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_train_step_compares_with_nn_transformer_and_reports_mfu() -> None:
    out = _run(
        "train_step.py",
        "--shapes",
        "tiny",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--batch",
        "4",
        "--length",
        "6",
        "--vocab",
        "50",
        "--ragged",
    )
    assert "matmul peak measured here" in out
    assert (
        "transformer_mt" in out
        and "nn.Transformer" in out
        and "speed-up over nn.Transformer" in out
    )
    assert "%" in out.split("transformer_mt")[1].splitlines()[0]  # its MFU


def test_guided_step_times_plain_guided_and_full_context_steps() -> None:
    out = _run(
        *("guided_step.py", "--layers", "2", "--d-model", "16", "--d-ff", "32", "--heads", "2"),
        *("--vocab", "50", "--batch", "4", "--length", "6", "--steps", "2", "--warmup", "1"),
    )
    rows = [line for line in out.splitlines() if "ms/step" in line]
    assert [r.split("  ")[0].strip() for r in rows] == [
        "plain",
        "guided",
        "guided, shift",
        "full context",
    ]
    assert rows[0].rstrip().endswith("1.000x the plain step's time")


def test_memory_reports_both_attention_paths() -> None:
    out = _run("memory.py", "--lengths", "16")  # each point is a fresh process: one is enough here
    rows = [line.split() for line in out.splitlines() if line.strip().split(" ")[0] == "16"]
    assert len(rows) == 1 and rows[0].count("MiB") == 2


def test_decode_benchmark_runs_every_variant() -> None:
    # --no-compile: compiling the base shape takes a minute (tests/test_compiled.py compiles)
    out = _run(
        "decode.py",
        "--sentences",
        "2",
        "--length",
        "3",
        "--vocab",
        "50",
        "--repeats",
        "1",
        "--no-compile",
    )
    assert "cached/uncached, greedy:" in out and "cached/uncached, beam 4:" in out
    assert out.count("ours, cached, int8 ") == 2
    assert out.count("oneDNN GEMMs, fp32") == 2 and "compiled" not in out
    if importlib.util.find_spec("ctranslate2"):  # the same weights in CTranslate2, both searches
        rows = [line for line in out.splitlines() if line.startswith(("greedy ", "beam 4 "))]
        assert (
            sum("CTranslate2 fp32" in r for r in rows)
            == sum("CTranslate2 int8" in r for r in rows)
            == 2
        )
        assert "1.00x" in out
    assert "fp32 GEMM ceiling, (8 x 512) x (512 x 2048): MKL " in out


def test_decode_benchmark_counts_a_search_by_hand() -> None:
    from types import SimpleNamespace

    sys.path.insert(0, str(BENCH))
    try:
        from decode import search_flops
    finally:
        sys.path.remove(str(BENCH))
    cfg = SimpleNamespace(d_model=2, d_ff=4, n_layers=1, vocab_size=3)
    # one 1-token source, one row, two steps (the token, then EOS), multiply-adds:
    # encoder 4d^2 + 2 d ff + 2 S d = 36; cross K/V 2 d^2 = 8; per step 6d^2 + 2 d ff + 2 S d
    # = 44 and d V = 6, self-attention over 1 then 2 keys 2 d (1 + 2) = 12: 2 * 44 + 12 + 2 * 6
    assert search_flops(cfg, sentences=1, length=1, rows=1) == 2 * (36 + 8 + 112)
    # rows multiply the decoder's work only; sentences multiply everything
    per_row = search_flops(cfg, 1, 1, 2) - search_flops(cfg, 1, 1, 1)
    assert per_row == 2 * 112 and search_flops(cfg, 3, 1, 1) == 3 * 2 * (36 + 8 + 112)


@needs_shared(SHARED / "multi30k_task1")
def test_padding_benchmark_compares_bucketed_and_random_batches() -> None:
    out = _run("padding.py")
    bucketed = float(out.split("length-bucketed (ours)")[1].split()[0].rstrip("%"))
    shuffled = float(out.split("random order")[1].split()[0].rstrip("%"))
    assert bucketed < shuffled  # the point of bucketing

    def row(name: str) -> list[str]:
        return out.split(name)[1].split()[:3]  # padding, batches, shapes

    plain, x16 = row("length-bucketed (ours)"), row("ours, widths rounded up to x16")
    # rounding costs padding and buys far fewer shapes (graphs of a compiled step)
    assert float(x16[0].rstrip("%")) > bucketed and int(x16[2]) * 4 < int(plain[2])


def test_loop_overhead_compares_the_bare_and_the_lightning_loop() -> None:
    out = _run("loop_overhead.py", "--steps", "60", "--rounds", "1")
    bare = float(out.split("bare PyTorch loop")[1].split()[0])
    ours = float(out.split("our Lightning loop")[1].split()[0])
    overhead = float(out.split("overhead")[-1].split()[0])
    assert bare > 0 and ours > 0 and overhead == pytest.approx(ours - bare, abs=0.011)


@needs_shared(SHARED / "wmt_ende_toy10k_opennmt")
def test_loader_benchmark_plans_an_epoch_and_times_the_real_loader(tmp_path) -> None:
    out = _run(
        "loader.py",
        *("--pairs", "3000", "--batches", "5", "--vocab", "500", "--max-tokens", "2000"),
        *("--workers", "0", "--workdir", str(tmp_path)),
    )
    assert "epoch plan for 2,999 pairs" in out  # one pair of the sample has an empty side
    rate = float(out.split("num_workers=0:")[1].split()[0])
    assert rate > 0 and "5 batches" in out and "peak RSS" in out


@needs_shared(SHARED / "anki_spa_eng")
def test_preprocess_benchmark_times_each_stage_and_reuses_its_cache(tmp_path) -> None:
    out = _run(
        "preprocess.py",
        *("--pairs", "12000", "--vocab", "300", "--input-sentence-size", "5000"),
        *("--procs", "1", "--workdir", str(tmp_path)),
    )
    assert "first run, 1 process(es), empty cache1" in out and "second run" in out
    again = float(out.split("second run, whole pipeline:")[1].split()[0])
    assert 0 <= again < 60 and "cache1" in out.split("disk:")[1]


@needs_shared(SHARED / "word_alignment_gold_deen_bicici")
def test_alignment_aer_reads_the_german_english_gold_in_either_direction(monkeypatch) -> None:
    from transformer_mt.align.gold import load_gold_set

    monkeypatch.syspath_prepend(str(BENCH))  # its `from machine import describe`
    spec = importlib.util.spec_from_file_location("alignment_aer", BENCH / "alignment_aer.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    de_en = load_gold_set("bicici", bench.gold_spec("bicici", SHARED, "de", "en"), "de", "en")
    en_de = load_gold_set("bicici", bench.gold_spec("bicici", SHARED, "en", "de"), "en", "de")
    assert len(de_en) == len(en_de) == 100
    assert de_en.sources[0].startswith("herr präsident , herr kommissar !")
    assert en_de.targets == de_en.sources and en_de.sources == de_en.targets
    # the same links, turned round; 1,233 sure links less sentence 63's one out of range
    assert [{(j, i) for i, j in s} for s, _ in de_en.gold] == [s for s, _ in en_de.gold]
    assert sum(len(s) for s, _ in de_en.gold) == 1232
    with pytest.raises(SystemExit, match="--gold bicici pairs de with en; the run is es->en"):
        bench.gold_spec("bicici", SHARED, "es", "en")


def test_alignment_aer_chooses_the_two_direction_combination_on_the_dev_set(monkeypatch) -> None:
    """Every reading of two directions is combined both ways and scored on the gold; the one
    reported is chosen by its dev-set AER alone, even where another wins on the gold."""
    monkeypatch.syspath_prepend(str(BENCH))  # its `from machine import describe`
    spec = importlib.util.spec_from_file_location("alignment_aer", BENCH / "alignment_aer.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    gold = [({(0, 0), (1, 1)}, {(0, 0), (1, 1)})]
    readings = [  # (label, method, forward links, backward links), one sentence each
        ("argmax", "argmax", [{(0, 0), (1, 0)}], [{(0, 0), (1, 1)}]),
        ("grow-diag 0.1", "grow-diag", [{(0, 0), (1, 1)}], [{(0, 0), (1, 1), (1, 0)}]),
    ]
    dev_gold = [({(0, 1), (1, 0)}, {(0, 1), (1, 0)})]
    dev_pairs = {
        "argmax": ([{(0, 1), (1, 0)}], [{(0, 1), (1, 0), (2, 2)}]),
        "grow-diag": ([{(0, 0)}], [{(0, 0)}]),
    }
    rows, chosen = bench.combine_directions("a+b", readings, gold, dev_pairs, dev_gold)
    aer = {label: scores[0] for label, _, scores in rows}
    assert list(aer) == [
        "a+b: argmax, intersect",
        "a+b: argmax, grow-diag-final-and",
        "a+b: grow-diag 0.1, intersect",
        "a+b: grow-diag 0.1, grow-diag-final-and",
    ]
    # by hand: argmax intersected keeps (0, 0) alone: 1 - (1 + 1) / (1 + 2)
    assert aer["a+b: argmax, intersect"] == pytest.approx(1 / 3)
    assert aer["a+b: grow-diag 0.1, intersect"] == 0.0  # the best on the gold...
    # ...but on dev argmax intersected is exact, and grow-diag-final-and adds the stray (2, 2)
    assert chosen == ("a+b: argmax, intersect", 0.0)
    assert bench.combine_directions("a+b", readings, gold, None, None)[1] is None
    # Merged matrices, one sentence of 2 x 2 words: the forward head puts both target words on
    # source word 0, the reverse head (turned round: columns are source words) gets them right.
    # Every pair of hard readings misses on this dev set; the merged matrix read by argmax does not.
    forward = torch.tensor([[0.6, 0.4], [0.6, 0.4]])
    backward = torch.tensor([[0.9, 0.2], [0.1, 0.8]])
    right = [({(0, 0), (1, 1)}, {(0, 0), (1, 1)})]
    dev_pairs = {
        "argmax": ([{(0, 0), (0, 1)}], [{(0, 0), (1, 1)}]),
        "grow-diag": ([{(0, 0), (0, 1)}], [{(0, 0), (0, 1)}]),
    }
    rows, chosen = bench.combine_directions(
        "a+b", readings, gold, dev_pairs, right, ([forward], [backward]), ([forward], [backward])
    )
    merged = {label: (links, scores[0]) for label, links, scores in rows[4:]}
    assert list(merged) == [
        f"a+b: {how}, {method}"
        for how, tau in (("average", 0.4), ("product", 0.3))  # taus tuned on this dev set
        for method in ("argmax", "intersect", f"threshold {tau:g}", "grow-diag 0")
    ]
    assert merged["a+b: average, argmax"] == ([{(0, 0), (1, 1)}], 0.0)
    assert merged["a+b: product, argmax"] == ([{(0, 0), (1, 1)}], 0.0)
    assert chosen == ("a+b: average, argmax", 0.0)  # the hard pairs' best on dev: 0.2
