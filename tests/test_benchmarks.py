"""The benchmark scripts still run (at toy sizes) and print their figures: they must not rot.

The figures themselves are measured by running the scripts with their defaults (see README).
"""

from __future__ import annotations

import importlib.util
import sys

import pytest
import torch

from transformer_mt.errors import UserError

from .conftest import ROOT, SHARED, needs_shared
from .scripts import run_script

pytestmark = pytest.mark.slow  # training runs and subprocesses: not in the fast lane

BENCH = ROOT / "benchmarks"


def _run(script: str, *args: str) -> str:
    result = run_script(BENCH / script, *args)
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
def test_the_german_english_shared_gold_reads_in_either_direction() -> None:
    from transformer_mt.align.gold import shared_gold_set

    de_en = shared_gold_set("bicici", SHARED, "de", "en")
    en_de = shared_gold_set("bicici", SHARED, "en", "de")
    assert len(de_en) == len(en_de) == 100
    assert de_en.sources[0].startswith("herr präsident , herr kommissar !")
    assert en_de.targets == de_en.sources and en_de.sources == de_en.targets
    # the same links, turned round; 1,233 sure links less sentence 63's one out of range
    assert [{(j, i) for i, j in s} for s, _ in de_en.gold] == [s for s, _ in en_de.gold]
    assert sum(len(s) for s, _ in de_en.gold) == 1232
    with pytest.raises(UserError, match="gold set bicici pairs de with en; the run is es->en"):
        shared_gold_set("bicici", SHARED, "es", "en")


def test_alignment_aer_reads_the_merged_pair_at_the_dev_sets_tau_alone(monkeypatch) -> None:
    """The recipe's row: two directions' matrices merged by their geometric mean and read by
    grow-diag at the tau the dev set's merged matrices choose, even where another tau would
    score better on the reported set."""
    from transformer_mt.align.gold import GoldSet
    from transformer_mt.align.reading import HeadReading

    monkeypatch.syspath_prepend(str(BENCH))  # its `from machine import describe`
    spec = importlib.util.spec_from_file_location("alignment_aer", BENCH / "alignment_aer.py")
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "alignment_aer", bench)  # for its dataclass
    spec.loader.exec_module(bench)
    # one sentence of 2 x 2 words: the forward head puts both target words on source word 0,
    # the reverse head (turned round: columns are source words) gets them right
    forward = torch.tensor([[0.6, 0.4], [0.6, 0.4]])
    backward = torch.tensor([[0.9, 0.2], [0.1, 0.8]])
    head = HeadReading(1, 1)
    runs = [
        bench.Run("a", None, False, {head: [forward]}),
        bench.Run("b", None, True, {head: [backward.T]}),  # its own direction on the dev set
    ]
    heads = {"a": ([forward], head), "b": ([backward], head)}  # in the first run's direction
    both = {(0, 0), (1, 1)}
    dev = GoldSet("dev", ["x y"], ["u v"], [(both, both)])  # merged argmaxes: exact up to 0.566
    test = GoldSet("test", ["x y"], ["u v"], [({(0, 0)}, {(0, 0)})])  # tau 0.6 would win here
    # the dev set's choice: the smallest best tau, for the attention alone and as every command
    # reads it (the prior, words spelled alike: none here), the same links
    plain, row = bench.merged_rows(runs, heads, test, dev)
    assert plain.label == "a+b: merged, grow-diag 0 (dev, attention alone)"
    assert row.label == "a+b: merged, grow-diag 0 (dev)"  # every parameter ties: all off
    assert plain.links == row.links == [both] and row.aer == pytest.approx(1 - 2 / 3)
    without = bench.merged_rows(runs, heads, test, None)  # without a dev set: tau 0
    assert [r.label for r in without] == ["a+b: merged, grow-diag 0 (no dev set)"]
    # a head torn between two copies of each word (a joined pair): the prior's row joins
    torn = torch.zeros(4, 4)
    torn[:2, 2:], torn[2:, :2] = 0.55 * torch.eye(2), 0.55 * torch.eye(2)
    torn[:2, :2], torn[2:, 2:] = 0.45 * torch.eye(2), 0.45 * torch.eye(2)
    right = {(i, i) for i in range(4)}
    torn_dev = GoldSet("dev", ["a b a b"], ["c d c d"], [(right, right)])
    chosen = bench.tuned([torn], torn_dev)
    labels = [f"{e.name} ({how})" for e, how, _ in chosen]
    # the narrowest width that reads it right (2, 4 and 8 all do): the first of the grid
    assert labels == ["grow-diag 0 (dev, attention alone)", "grow-diag 0, diagonal 2 (dev)"]
    assert [e.links(torn, ("a b a b".split(), "c d c d".split())) for e, _, _ in chosen][1] == right
    trials = chosen[1][2]
    assert [(t.value, t.aer) for t in trials if t.parameter == "diagonal"][:5] == [
        (0.0, 1.0),
        (2.0, 0.0),
        (4.0, 0.0),
        (8.0, 0.0),
        (16.0, 1.0),
    ]


def _fake_run(root, name: str, seed: int, refs: list[str], greedy: list[str], beam: list[str]):
    run = root / name
    (run / "eval" / "test_beam4_avg1").mkdir(parents=True)
    (run / "config.yaml").write_text(f"seed: {seed}\n")
    (run / "test.hyp.txt").write_text("".join(line + "\n" for line in greedy))
    (run / "eval" / "test_beam4_avg1" / "hyp.txt").write_text("".join(x + "\n" for x in beam))
    (run / "eval" / "test_beam4_avg1" / "ref.txt").write_text("".join(x + "\n" for x in refs))
    return str(run)


def test_paired_bleu_reads_pairs_by_seed_pooled_and_by_length(tmp_path) -> None:
    from sacrebleu.metrics import BLEU

    refs = [
        "the cat sat on the mat .",
        "i see a dog .",
        "we will go to the big market in the town tomorrow morning .",
        "she reads a long book about old ships every night before bed .",
    ]
    worse = [
        "the cat sat on a mat .",
        "i see the dog .",
        "we go to a market in town tomorrow .",
        "she reads books about ships at night .",
    ]
    base = [_fake_run(tmp_path, f"base{s}", s, refs, refs, refs) for s in (1, 2)]
    new = [
        _fake_run(tmp_path, "new1", 1, refs, worse, refs),
        _fake_run(tmp_path, "new2", 2, refs, refs, worse),
    ]
    out = _run("paired_bleu.py", "--base", *base, "--new", *new, "--length-edges", "5", "8")
    greedy, beam = out.split("== greedy\n")[1].split("== beam\n")
    low = BLEU().corpus_score(worse, [refs]).score
    assert f"seed 1: base 100.00  new {low:.2f}  new-base {low - 100:+.2f}" in greedy
    assert (
        "seed 2: base 100.00  new 100.00  new-base +0.00  (output/reference length 1.000, 1.000)"
        in greedy
    )
    ratio = sum(len(x.split()) for x in worse) / sum(len(x.split()) for x in refs)  # 13a: as split
    assert f"new-base {low - 100:+.2f}  (output/reference length 1.000, {ratio:.3f})" in greedy
    assert (
        "seed 1: base 100.00  new 100.00" in beam and f"seed 2: base 100.00  new {low:.2f}" in beam
    )
    assert (
        f"mean new-base over 2 seeds: {(low - 100) / 2:+.2f}, sd {(100 - low) / 2**0.5:.2f}"
        in greedy
    )
    pooled = BLEU().corpus_score(worse + refs, [refs + refs]).score
    assert (
        f"pooled (8 lines), paired bootstrap x1000: base 100.00  new {pooled:.2f}  p = " in greedy
    )
    # by reference length in words: 1-5 holds sentence 2 alone (5 words), >=9 sentences 3 and 4
    short = BLEU().corpus_score(["i see the dog .", "i see a dog ."], [["i see a dog ."] * 2]).score
    assert f"reference 1-5 words (1 sentence): base 100.00  new {short:.2f}" in greedy
    assert (
        "reference 6-8 words (1 sentence)" in greedy
        and "reference >=9 words (2 sentences)" in greedy
    )


def test_paired_bleu_refuses_runs_that_do_not_pair(tmp_path) -> None:
    refs = ["a b c .", "d e f ."]
    a = _fake_run(tmp_path, "a", 1, refs, refs, refs)
    b = _fake_run(tmp_path, "b", 2, refs, refs, refs)
    c = _fake_run(tmp_path, "c", 1, ["a b c .", "x y z ."], refs, refs)
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "test.hyp.txt").write_text("a b c .\nd e f .\n")
    for new, message in (
        (b, f"pair 1: {a} has seed 1, {b} seed 2: list the --new runs in the order"),
        (c, f"error: {c} was tested on other references than {a}"),
        (str(bare), f"run `python scripts/evaluate.py run_dir={bare} ckpt.average_last=1` first"),
    ):
        result = run_script(BENCH / "paired_bleu.py", "--base", a, "--new", new)
        assert result.returncode == 1 and message in result.stderr, result.stderr
    short = _fake_run(tmp_path, "short", 1, refs, refs[:1], refs)
    result = run_script(BENCH / "paired_bleu.py", "--base", a, "--new", short)
    assert "1 greedy outputs for 2 references" in result.stderr


@needs_shared(SHARED / "multi30k_task1")
def test_gpu_carry_copies_the_checks_data_within_the_device_runs_limit(tmp_path) -> None:
    out = tmp_path / "carry" / "data"
    listed = _run("gpu_carry.py", "--data", str(SHARED), "--out", str(out))
    for name in ("train.de.gz", "test_2016_flickr.en.gz", "src-train.txt.gz"):
        assert name in listed
    copied = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    shared = sorted(
        p.relative_to(SHARED)
        for name in ("multi30k_task1", "wmt_ende_toy10k_opennmt")
        for p in (SHARED / name).rglob("*")
        if p.is_file()
    )
    assert (
        copied == shared
        and f"{len(shared)} files" in listed
        and "of the device run's 64 MiB" in listed
    )
    assert (out / "multi30k_task1" / "train.en.gz").read_bytes() == (
        SHARED / "multi30k_task1" / "train.en.gz"
    ).read_bytes()
    _run(
        "gpu_carry.py", "--data", str(SHARED), "--out", str(out)
    )  # a second copy replaces the first
    # a data folder without the check's corpora: one error line, nothing copied
    result = run_script(
        BENCH / "gpu_carry.py", "--data", str(tmp_path), "--out", str(tmp_path / "x")
    )
    assert result.returncode != 0 and not (tmp_path / "x").exists()
    assert f"error: {tmp_path} has no multi30k_task1, wmt_ende_toy10k_opennmt" in result.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU-side path of the GPU check")
def test_gpu_check_without_cuda_says_what_it_skipped_and_exits_0(tmp_path) -> None:
    import subprocess

    report = tmp_path / "report.md"
    # the suite's interpreter, not PATH's python3 (a venv need not be activated)
    env = {
        **__import__("os").environ,
        "GPU_CHECK_DIR": str(tmp_path / "work"),
        "PYTHON": sys.executable,
    }
    result = subprocess.run(
        ["bash", str(BENCH / "gpu_check.sh"), str(report)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    text = report.read_text()
    assert "**no CUDA device here**: the GPU sections were skipped" in text
    assert "\n- torch " in text and ", lightning " in text  # the versions, from the one start
    assert "## gpu-marked tests\n\nnot run: they need CUDA" in text
    assert "## training step, toy size, CPU" in text and "0 section(s) failed" in text


def _multi30k_run(tmp_path, name: str, bleus: dict[str, tuple[float, float]], minutes: float):
    """A run directory as experiment=multi30k_cpu leaves it: metrics.json with its final
    evaluation, and the validation rows of logs/metrics.csv (no checkpoints)."""
    import json

    run = tmp_path / name
    (run / "logs").mkdir(parents=True)
    (run / "checkpoints").mkdir()
    final = {
        "checkpoints": ["epoch=1-step=100.ckpt", "epoch=1-step=200.ckpt"],
        "beam_size": 5,
        "length_penalty": 1.4,
        "valid": {},
        "splits": {
            split: {"bleu": sacre, "bleu_tokenized_lowercase": tok, "sentences": 10}
            for split, (sacre, tok) in bleus.items()
        },
    }
    metrics = {"final": final, "wall_seconds": minutes * 60, "steps": 269}
    (run / "metrics.json").write_text(json.dumps(metrics))
    rows = ["step,val/bleu,val/bleu_tokenized_lowercase,val/minutes"]
    rows += [f"{99 + 100 * k},{10.0 * k},{10.5 * k},{3.5 * k}" for k in (1, 2, 3)]
    (run / "logs" / "metrics.csv").write_text("\n".join(rows) + "\n")
    return run


def test_multi30k_seeds_reports_each_test_sets_mean_and_spread_both_ways(tmp_path) -> None:
    one = _multi30k_run(tmp_path, "seed1", {"test": (37.5, 38.0), "mscoco2017": (23.0, 23.5)}, 35)
    two = _multi30k_run(tmp_path, "seed2", {"test": (36.5, 37.2), "mscoco2017": (24.0, 24.1)}, 36)
    out = _run("multi30k_seeds.py", "--runs", one, two)
    assert "| seed1 | 269 | 35.0 | 2 | 1.4 |" in out  # steps: where training stopped
    assert "| test | SacreBLEU | 37.50 | 36.50 | 37.00 | 1.00 |" in out
    assert "| test | tok. lc BLEU | 38.00 | 37.20 | 37.60 | 0.80 |" in out
    assert "| mscoco2017 | tok. lc BLEU | 23.50 | 24.10 | 23.80 | 0.60 |" in out
    assert "At step" not in out  # no step checkpoint that both hold
    assert (tmp_path / "seeds.json").is_file()


def test_bleu_vs_minutes_draws_both_bleus_from_the_runs_logs(tmp_path) -> None:
    one = _multi30k_run(tmp_path, "seed1", {"test": (1.0, 1.0)}, 35)
    out = _run("bleu_vs_minutes.py", one, "--out", tmp_path / "curve.png")
    assert "     299     7.0  20.00  21.00" in out  # step, minutes, SacreBLEU, tokenized lc
    assert (tmp_path / "curve.png").stat().st_size > 10_000
