"""Training end to end: the loss, overfitting a handful of pairs, and run(cfg) writing a full run directory."""

from __future__ import annotations

import csv
import json
import shutil

import pytest
import sacrebleu
import torch
from omegaconf import OmegaConf

from transformer_mt import Transformer, TransformerConfig
from transformer_mt.decoding import greedy_decode
from transformer_mt.loss import label_smoothed_nll
from transformer_mt.model.vocab import EOS_ID
from transformer_mt.train import run

from .batches import collate

PAIRS = [
    ("el gato negro duerme", "the black cat sleeps"),
    ("la casa blanca", "the white house"),
    ("los perros comen en casa", "the dogs eat at home"),
    ("una niña canta", "a girl sings"),
    ("el hombre va al parque", "the man goes to the park"),
    ("mis amigos leen", "my friends read"),
]


def test_label_smoothed_loss_against_hand_computation() -> None:
    logits = torch.log(
        torch.tensor([[[0.7, 0.1, 0.1, 0.1], [0.25, 0.25, 0.25, 0.25]]])
    )  # (1, 2, V=4)
    target = torch.tensor([[2, 0]])  # the second position is padding
    loss, nll = label_smoothed_nll(logits, target, epsilon=0.1)
    expected_nll = -torch.log(torch.tensor(0.1))
    expected_smooth = -torch.log(torch.tensor([0.7, 0.1, 0.1, 0.1])).mean()
    torch.testing.assert_close(nll, expected_nll)
    torch.testing.assert_close(loss, 0.9 * expected_nll + 0.1 * expected_smooth)


@pytest.mark.slow
def test_tiny_model_overfits_a_handful_of_pairs_and_translates_them_exactly() -> None:
    words = sorted({w for pair in PAIRS for side in pair for w in side.split()})
    ids = {w: i + 4 for i, w in enumerate(words)}  # 0-3 are pad/unk/bos/eos
    encode = lambda text: [ids[w] for w in text.split()] + [EOS_ID]  # noqa: E731
    batch = collate(
        [{"src_ids": encode(s), "tgt_ids": encode(t), "index": i} for i, (s, t) in enumerate(PAIRS)]
    )
    cfg = TransformerConfig(
        n_layers=2,
        d_model=32,
        d_ff=64,
        n_heads=4,
        dropout=0.0,
        vocab_size=len(ids) + 4,
        max_positions=64,
    )
    model = Transformer(cfg)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(300):
        loss, nll = label_smoothed_nll(model(batch.src, batch.tgt_in), batch.tgt_out, epsilon=0.0)
        optimizer.zero_grad()
        (loss / batch.n_tgt_tokens).backward()
        optimizer.step()
    assert nll.item() / batch.n_tgt_tokens < 0.02
    hyps = greedy_decode(model.eval(), batch.src)
    assert hyps == [encode(t)[:-1] for _, t in PAIRS]


@pytest.mark.slow  # trains
def test_run_smoke_two_steps(compose_cfg, tmp_path) -> None:
    """The whole recipe in seconds (fast lane): data, model, trainer, fit, validation, test, report."""
    cfg = compose_cfg(
        *("data.train_size=200", "data.valid_size=8", "data.test_size=8", "data.vocab_size=120"),
        *("model.n_layers=1", "model.d_model=16", "model.d_ff=32", "model.n_heads=2"),
        *("trainer.max_steps=2", "trainer.enable_progress_bar=false", "trainer.loggers=[csv]"),
        *("heatmaps.valid_sentences=1", "checkpoint.keep_last=1"),
    )
    metrics = run(cfg)
    out = tmp_path / "run"
    assert metrics["steps"] == 2 and metrics["test_sentences"] == 8
    assert json.loads((out / "metrics.json").read_text())["steps"] == 2
    assert (out / "checkpoints" / "last.ckpt").is_file() and (out / "tokenizer.model").is_file()
    assert (out / "alignment_layer1.png").is_file() and (
        out / "alignment_valid" / "1_layer1.png"
    ).is_file()


@pytest.mark.slow  # a few seconds each: AER on a gold set at validation
@pytest.mark.parametrize("reading", ["full", "shift"])
def test_guided_run_scores_its_head_on_a_gold_set_and_draws_it(
    compose_cfg, tmp_path, reading, capsys
) -> None:
    """Guided alignment end to end in seconds: the built-in links, the head trained and read
    with the full target as context or shifted, AER on a gold set at validation, the head's
    heatmap, and ``--head guided`` finding the head with its reading."""
    from transformer_mt.align.extract import Extraction
    from transformer_mt.align.links import corpus_scores
    from transformer_mt.align.reading import HeadReading, parse_head
    from transformer_mt.analysis.pipeline import Aligner, file_pairs

    (tmp_path / "g.es").write_text("el gato negro\nla casa\n")
    (tmp_path / "g.en").write_text("the black cat\nthe house\n")
    (tmp_path / "g.wa").write_text("0-0 1-2 2-1\n0-0 1-1\n")
    gold = f"{{format:pharaoh,path:{tmp_path / 'g.wa'},src:{tmp_path / 'g.es'},tgt:{tmp_path / 'g.en'}}}"
    cfg = compose_cfg(
        *("data.train_size=200", "data.valid_size=8", "data.test_size=8", "data.vocab_size=120"),
        *("model.n_layers=2", "model.d_model=16", "model.d_ff=32", "model.n_heads=2"),
        *("trainer.max_steps=2", "trainer.enable_progress_bar=false", "trainer.loggers=[csv]"),
        *("heatmaps.valid_sentences=0", "checkpoint.keep_last=1", "trainer.val_check_interval=2"),
        *("data.alignments=builtin", "align.guided=true", f"align.mode={reading}"),
        f"+align.gold.tiny={gold}",
        # shifted, the head is read with every reading parameter set, as validation must read it
        *(
            ["align.extract=grow-diag", "align.diagonal=2", "align.alike=0.5"]
            * (reading == "shift")
        ),
    )
    metrics = run(cfg)
    shift = reading == "shift"
    how = Extraction("grow-diag", 0.0, 2.0, alike=0.5) if shift else Extraction()
    out = tmp_path / "run"
    assert metrics["steps"] == 2
    logged = (next(out.rglob("metrics.csv"))).read_text()
    assert "val/aer_tiny" in logged and "train/align_kl" in logged
    # the guided head's AER by source length (both gold sentences have 2-3 words)
    assert "val/aer_tiny_len1_10" in logged and "val/aer_tiny_len11_20" not in logged
    # the run ends with the AER of its final weights, printed and in metrics.json
    rows = [r for r in csv.DictReader(logged.splitlines()) if r.get("val/aer_tiny")]
    aer = metrics["aer"]["tiny"]
    assert aer["guided_head"] == round(float(rows[-1]["val/aer_tiny"]), 4)
    # every layer scored, none picked: the gold set may be a test set
    assert aer["layers"] == [round(float(rows[-1][f"val/aer_tiny_layer{k}"]), 4) for k in (1, 2)]
    assert "val/aer_tiny_layer3" not in logged and "best" not in logged
    assert json.loads((out / "metrics.json").read_text())["aer"] == metrics["aer"]
    printed = capsys.readouterr().out
    named = f"1:1 ({reading})" + f", {how.name}" * shift
    layers = f"{aer['layers'][0]:.3f} / {aer['layers'][1]:.3f}"
    assert (
        f"AER tiny: guided head {named} {aer['guided_head']:.3f}, layers 1-2, heads averaged "
        f"{layers}" in printed
    )
    drawn = metrics["alignment"]["guided_head"]
    assert drawn["png"] == "alignment_layer1_head1.png" and (out / drawn["png"]).is_file()
    # shifted, a word's row is the one where it is the input: no EOS row in the picture
    n_words = len(metrics["alignment"]["example"]["target"].split())
    assert len(drawn["strongest"]) == n_words + (reading == "full")
    guided = HeadReading(1, 1, reading, how)
    assert parse_head("guided", 2, 2, run_dir=out) == guided
    ckpt = out / "checkpoints" / "last.ckpt"
    assert parse_head("guided", 2, 2, run_dir=ckpt) == guided
    # validation read the head as every command does: the module's reading, and the AER that
    # align.py's pipeline gives for the same reading on the same gold
    hparams = torch.load(ckpt, weights_only=False)["hyper_parameters"]
    assert HeadReading.from_config(hparams["guided"], 2, 2) == guided
    aligner = Aligner(out)
    pairs = file_pairs(
        *(tmp_path / f for f in ("g.es", "g.en", "g.wa")), False, False, ("es", "en")
    )
    links = aligner.capture(pairs, progress=False).links(aligner.reading())
    assert round(corpus_scores(links, pairs.gold)[0], 4) == aer["guided_head"]
    # the benchmark reads the guided head as trained, beside eflomal on the same text
    pytest.importorskip("eflomal")  # installed in CI (.ci/run: the [align] extra)
    from .conftest import ROOT
    from .scripts import run_script

    files = [str(tmp_path / name) for name in ("g.es", "g.en", "g.wa")]
    script = ROOT / "benchmarks" / "alignment_aer.py"
    command = ["--run", f"tiny={out}", "--gold-files", *files]
    how = f"({reading})"
    if not shift:  # the two directions, below, once: the reading does not change them
        # long text without gold: each head against eflomal's links, by source length
        text = tmp_path / "data" / "wmt13_newstest2013_esen"
        text.mkdir(parents=True)
        long_es = " ".join(["el gato negro duerme en casa"] * 10)  # 60 words
        (text / "newstest2013.es").write_text(f"el gato negro\nla casa\n{long_es}\n")
        (text / "newstest2013.en").write_text(
            "the black cat\nthe house\n" + " ".join(["the black cat sleeps at home"] * 10) + "\n"
        )
        agree = ("--agreement-on", "newstest2013", "--data-dir", tmp_path / "data")
        result = run_script(script, *command, "--teacher-pairs", "0", *agree)
        assert result.returncode == 0, result.stderr
        assert f"tiny: guided head 1:1 {how}" in result.stdout
        assert "eflomal grow-diag-final-and" in result.stdout
        after = result.stdout.split("against eflomal grow-diag-final-and on ")[-1]
        assert after.startswith("3 pairs of newstest2013, by source length:")
        assert f"tiny: guided head 1:1 {how}: " in after and ">50: " in after
        assert "tiny: layer 1, mean: " in after and "tiny: layer 2, mean: " in after
        # the demo's training sources hold every word of the three: length, not vocabulary
        assert f"tiny: guided head 1:1 {how}, no word unseen (3): " in after
        assert f"tiny: guided head 1:1 {how}, over 10% (0): " in after
        return
    # a run that translates the other way (here: the same weights, told they read English) is
    # scored on the gold turned round, and its head's matrices merged with the first run's
    reverse = tmp_path / "reverse"
    shutil.copytree(out, reverse)
    saved = OmegaConf.load(reverse / "config.yaml")
    saved.data.src_lang, saved.data.tgt_lang = "en", "es"
    OmegaConf.save(saved, reverse / "config.yaml")
    result = run_script(script, *command, "--run", f"rev={reverse}", "--teacher-pairs", "50")
    assert result.returncode == 0, result.stderr
    assert f"tiny: guided head 1:1 {how}" in result.stdout
    assert f"rev: guided head 1:1 {how}" in result.stdout
    assert "eflomal grow-diag-final-and" in result.stdout
    table = {line[:56].strip(): line[56:].split() for line in result.stdout.splitlines()}
    assert len(table["tiny+rev: merged, grow-diag 0 (no dev set)"]) == 3  # AER, P, R
    assert "against eflomal grow-diag-final-and as if it were the gold" in result.stdout
    taught = table["tiny: 50 pairs"]  # the guided head against its own training links
    aer, precision, recall = map(float, taught)
    # every teacher link is sure, so AER is 1 - F1 of precision and recall (to the rounding)
    assert aer == pytest.approx(1 - 2 * precision * recall / (precision + recall), abs=2e-3)
    # a run in neither direction is refused with both directions named
    saved.data.src_lang, saved.data.tgt_lang = "de", "en"
    OmegaConf.save(saved, reverse / "config.yaml")
    result = run_script(script, *command, "--run", f"rev={reverse}")
    assert (
        result.returncode != 0
        and "translates de->en;" in result.stderr
        and "translates es->en: it must translate the same way or en->es" in result.stderr
    )


@pytest.fixture(scope="module")
def small_run(tmp_path_factory) -> tuple:
    from hydra import compose, initialize_config_dir

    from .conftest import CONF

    tmp = tmp_path_factory.mktemp("run")
    overrides = [
        f"output_dir={tmp / 'out'}",
        f"data.cache_dir={tmp / 'cache'}",
        "data.train_size=600",
        "data.valid_size=40",
        "data.test_size=30",
        "data.vocab_size=300",
        "model.n_layers=1",
        "model.d_model=32",
        "model.d_ff=64",
        "model.n_heads=2",
        "trainer.max_epochs=2",
        "trainer.enable_progress_bar=false",
    ]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    return run(cfg), tmp / "out"


def out_valid_rows(out, n: int) -> list[dict]:
    from transformer_mt.checkpoint import run_data_config
    from transformer_mt.data.sources import demo_files

    with open(demo_files(run_data_config(out))["valid"], encoding="utf-8") as f:
        return [json.loads(line) for _, line in zip(range(n), f)]


@pytest.mark.slow
def test_run_writes_a_complete_run_directory(small_run) -> None:
    metrics, out = small_run
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["test_bleu"] == metrics["test_bleu"]
    # the figure is SacreBLEU of the written hypotheses against the test split's references
    from transformer_mt.checkpoint import run_data_config
    from transformer_mt.data.sources import demo_files
    from transformer_mt.metrics import corpus_bleu

    with open(demo_files(run_data_config(out))["test"], encoding="utf-8") as f:
        refs = [json.loads(line)["tgt"] for line in f]
    hyps = (out / "test.hyp.txt").read_text(encoding="utf-8").splitlines()
    assert round(corpus_bleu(hyps, refs[: len(hyps)]).score, 2) == saved["test_bleu"]
    assert saved["test_bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert saved["test_sentences"] == 30 and saved["steps"] > 0
    assert (
        len((out / "test.hyp.txt").read_text(encoding="utf-8").splitlines()) == 30
    )  # every test line
    assert (out / "checkpoints" / "last.ckpt").exists()
    assert (out / "tokenizer.model").exists()
    assert (
        "d_model: 32" in (out / "config.yaml").read_text()
    )  # the resolved config beside the outputs
    example = saved["alignment"]["example"]
    assert (out / example["png"]).stat().st_size > 10_000
    assert (out / "training_curves.png").exists() and (out / "alignment_heads.png").exists()
    assert example["source"] == "el gato negro duerme en casa" and example["translated"]
    valid = saved["alignment"]["valid"]  # the first validation pairs, on their references
    assert [v["target"] for v in valid] == [
        r["tgt"] for r in out_valid_rows(out, len(valid))
    ] and len(valid) == 3
    for k, v in enumerate(valid, 1):
        assert (
            v["files"] == [f"{k}_layer1.png"] and (out / "alignment_valid" / v["files"][0]).exists()
        )


@pytest.mark.slow
def test_checkpoint_rebuilds_the_model_alone(small_run) -> None:
    _, out = small_run
    from transformer_mt.lit_module import TranslationModule

    module = TranslationModule.load_from_checkpoint(
        out / "checkpoints" / "last.ckpt", map_location="cpu"
    )
    assert module.model_cfg.d_model == 32 and module.model_cfg.vocab_size > 0
    assert module.hparams.tokenizer_path.endswith("tokenizer.model")


@pytest.mark.slow
def test_evaluate_decodes_with_beam_and_averaging(small_run, tmp_path, capsys) -> None:
    from hydra import compose, initialize_config_dir

    from transformer_mt.evaluate import evaluate

    from .conftest import CONF

    _, out = small_run
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            "evaluate",
            overrides=[f"run_dir={out}", "ckpt.average_last=2", f"output_dir={tmp_path}"],
        )
    scores = evaluate(cfg)
    header = capsys.readouterr().out.splitlines()[0]
    assert header.startswith("test of demo_es_en (es->en), 30 sentences, beam 4"), header
    assert scores["direction"] == "es-en"
    assert scores["decode"]["beam_size"] == 4 and scores["decode"]["length_penalty"] == 0.6
    assert len(scores["checkpoints"]) == 2 and scores["sentences"] == 30
    assert scores["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert len((tmp_path / "hyp.txt").read_text(encoding="utf-8").splitlines()) == 30
    refs = (tmp_path / "ref.txt").read_text(encoding="utf-8").splitlines()
    # the file's references score the hypotheses exactly as evaluate did
    hyps = (tmp_path / "hyp.txt").read_text(encoding="utf-8").splitlines()
    assert len(refs) == 30 and round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2) == scores["bleu"]
    assert json.loads((tmp_path / "scores.json").read_text())["bleu"] == scores["bleu"]


@pytest.mark.slow
def test_evaluate_chooses_the_length_penalty_of_highest_bleu(demo_run, tmp_path) -> None:
    from hydra import compose, initialize_config_dir

    from transformer_mt.evaluate import evaluate

    from .conftest import CONF

    out = demo_run  # a model that translates: α changes which hypothesis wins

    def run(*overrides: str) -> dict:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = compose("evaluate", overrides=[f"run_dir={out}", "split=valid", *overrides])
        return evaluate(cfg)

    sweep = run("length_penalties=[0.0,0.6,3.0]", f"output_dir={tmp_path / 'sweep'}")
    assert json.loads((tmp_path / "sweep" / "length_penalty.json").read_text()) == sweep
    assert not (tmp_path / "sweep" / "hyp.txt").exists()
    rows = {r["length_penalty"]: r for r in sweep["scores"]}
    assert list(rows) == [0.0, 0.6, 3.0] and sweep["split"] == "valid"
    best = max(r["bleu"] for r in rows.values())
    assert rows[sweep["best_length_penalty"]]["bleu"] == best
    # each row is what evaluate scores at that α alone, its length ratio sacrebleu's
    alone = run("decode.length_penalty=3.0", f"output_dir={tmp_path / 'alone'}")
    assert rows[3.0]["bleu"] == alone["bleu"]
    hyps = (tmp_path / "alone" / "hyp.txt").read_text(encoding="utf-8").splitlines()
    refs = (tmp_path / "alone" / "ref.txt").read_text(encoding="utf-8").splitlines()
    stats = sacrebleu.corpus_bleu(hyps, [refs])
    assert rows[3.0]["length_ratio"] == round(stats.sys_len / stats.ref_len, 3)
    # α ranks the same finished hypotheses: a larger one picks longer outputs
    assert rows[3.0]["length_ratio"] > rows[0.0]["length_ratio"]


def test_evaluate_refuses_a_directory_that_is_not_a_run(tmp_path) -> None:
    from hydra import compose, initialize_config_dir

    from transformer_mt.evaluate import evaluate

    from .conftest import CONF

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("evaluate", overrides=[f"run_dir={tmp_path}"])
    with pytest.raises(
        FileNotFoundError, match="has no config.yaml; pass run_dir= a directory written by"
    ):
        evaluate(cfg)


def test_evaluate_writes_each_checkpoint_to_its_own_folder(tmp_path) -> None:
    from hydra import compose, initialize_config_dir

    from .conftest import CONF

    def output_dir(*overrides: str) -> str:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = compose("evaluate", overrides=[f"run_dir={tmp_path}", *overrides])
        return cfg.output_dir

    step = f"ckpt.path='{tmp_path}/checkpoints/epoch=0-step=800.ckpt'"
    assert output_dir() == f"{tmp_path}/eval/test_beam4_avg1"
    assert output_dir(step) == f"{tmp_path}/eval/test_beam4_avg1_step800"
    assert output_dir(step, "ckpt.average_last=5", "decode=greedy", "split=valid") == (
        f"{tmp_path}/eval/valid_beam1_avg5_step800"
    )
    assert output_dir(f"ckpt.path={tmp_path}/checkpoints/last.ckpt") == output_dir()


def _translate_cli(out, stdin: bytes, *args: str):
    from .scripts import run_script

    return run_script("translate.py", out, *args, input=stdin, timeout=120, text=False)


@pytest.mark.slow
def test_translate_cli_keeps_lines_and_prints_alignments(small_run) -> None:
    _, out = small_run
    result = _translate_cli(
        out, b"el gato negro duerme en casa\n\nla casa\n", "--alignments", "--beam", "2"
    )
    assert result.returncode == 0, result.stderr.decode()
    lines = result.stdout.decode().split("\n")[:-1]
    assert len(lines) == 3 and lines[1] == ""
    from transformer_mt.checkpoint import load_model
    from transformer_mt.decoding import DecodeConfig, translate

    model, tokenizer, _ = load_model(out)
    sources = ["el gato negro duerme en casa", "la casa"]
    expected = translate(model, tokenizer, sources, DecodeConfig(beam_size=2))
    for line, source, (best,) in zip((lines[0], lines[2]), sources, expected):
        if not best.tokens:  # an empty translation has no alignment to print
            assert line == ""
            continue
        text, links = line.split(" ||| ")
        assert text == best.text
        pairs = [tuple(int(x) for x in link.split("-")) for link in links.split()]
        # argmax reading: exactly one source word per target word, all inside the sentence
        assert sorted(j for _, j in pairs) == list(range(len(text.split())))
        assert all(0 <= i < len(source.split()) for i, _ in pairs)


@pytest.mark.slow
def test_translate_cli_refuses_head_guided_for_a_run_without_guidance(small_run) -> None:
    _, out = small_run
    result = _translate_cli(out, b"la casa\n", "--alignments", "--head", "guided")
    assert result.returncode != 0
    assert "was not trained with align.guided=true" in result.stderr.decode()


@pytest.mark.slow
def test_translate_cli_rejects_bad_utf8_naming_the_line(small_run) -> None:
    _, out = small_run
    result = _translate_cli(out, b"la casa\nel gato \xff negro\n")
    assert result.returncode != 0
    assert "stdin, line 2: not valid UTF-8" in result.stderr.decode()


@pytest.mark.slow
def test_model_and_tokenizer_of_different_runs_are_refused(small_run, tmp_path) -> None:
    import shutil

    from transformer_mt.checkpoint import load_model
    from transformer_mt.data import demo_corpus
    from transformer_mt.data.tokenizer import Tokenizer

    _, out = small_run
    run = tmp_path / "run"
    shutil.copytree(out / "checkpoints", run / "checkpoints")
    pairs = demo_corpus.generate(5, {"train": 800})["train"]
    other = Tokenizer.train([s for p in pairs for s in (p.src, p.tgt)], 250, tmp_path / "spm")
    shutil.copyfile(other.path, run / "tokenizer.model")
    with pytest.raises(
        ValueError, match="has 250 pieces but the checkpoint's model has vocab_size=300"
    ):
        load_model(run)


def _script(name: str, *args: str, input: str | None = None):
    from .scripts import run_script

    return run_script(name, *args, input=input, timeout=120)


@pytest.mark.slow
def test_plot_alignment_cli_writes_png_and_svg(small_run, tmp_path) -> None:
    _, out = small_run
    result = _script(
        "plot_alignment.py",
        out,
        "--src",
        "el gato negro",
        "--format",
        "png",
        "svg",
        "--out",
        tmp_path / "cat",
    )
    assert result.returncode == 0, result.stderr
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["cat_heads.png", "cat_heads.svg", "cat_layer1.png", "cat_layer1.svg"]
    assert "translation:" in result.stdout and "<- " in result.stdout
    bad = _script("plot_alignment.py", out, "--src", "el gato", "--head", "4")
    assert bad.returncode == 2 and "layer 4: the model has layers 1..1" in bad.stderr


@pytest.mark.slow
def test_align_cli_scores_files_and_writes_pharaoh(small_run, tmp_path) -> None:
    _, out = small_run
    (tmp_path / "src").write_text("el gato negro\nla casa\n")
    (tmp_path / "tgt").write_text("the black cat\nthe house\n")
    (tmp_path / "gold").write_text("1-2 2-3 3-1\n1-1 2-2\n")  # 1-indexed, target-source
    files = ("--src", tmp_path / "src", "--tgt", tmp_path / "tgt", "--gold", tmp_path / "gold")
    result = _script(
        "align.py", out, *files, "--one-indexed", "--reverse-gold", "--output", tmp_path / "links"
    )
    assert result.returncode == 0, result.stderr
    assert "causal AER/P/R" in result.stdout and "full AER/P/R" in result.stdout
    assert "(2)" in result.stdout  # two sentences of 1-10 words
    # every head scored: a table and a picture; nothing is chosen on the gold it scores
    assert "AER per head" in result.stdout and "lowest on this gold: 1" in result.stdout
    assert "(scored only; --tune-on chooses a head on development data)" in result.stdout
    assert (out / "align" / "aer_heads.png").stat().st_size > 0
    assert not (out / "align" / "reading.json").exists()
    # no --head and nothing tuned, no guided head: the last layer's heads averaged, by argmax
    assert "links of 1 by argmax" in result.stdout
    lines = (tmp_path / "links").read_text().splitlines()
    assert [len(line.split()) for line in lines] == [3, 2]  # one link per target word
    one = _script(
        "align.py",
        out,
        *files,
        "--one-indexed",
        "--reverse-gold",
        "--head",
        "1:2",
        "--output",
        tmp_path / "head",
    )
    assert one.returncode == 0 and "links of 1:2 by argmax" in one.stdout, one.stderr
    assert [len(line.split()) for line in (tmp_path / "head").read_text().splitlines()] == [3, 2]
    full = _script(
        "align.py",
        out,
        *files,
        "--one-indexed",
        "--reverse-gold",
        "--head",
        "1:2",
        "--mode",
        "full",
        "--output",
        tmp_path / "full",
    )
    assert full.returncode == 0 and "links of 1:2 (full) by argmax" in full.stdout, full.stderr
    assert [len(line.split()) for line in (tmp_path / "full").read_text().splitlines()] == [3, 2]
    bad = _script("align.py", out, *files, "--head", "1:9", "--output", tmp_path / "x")
    assert bad.returncode == 2 and "heads 1..2" in bad.stderr
    best = _script("translate.py", out, "--alignments", "--head", "best", input="el gato\n")
    assert best.returncode == 2 and "--head best: " in best.stderr and "--tune-on" in best.stderr
    # A gold file with a link outside the sentence is reported, not silently used.
    (tmp_path / "gold").write_text("1-2 2-3 3-9\n1-1 2-2\n")
    result = _script("align.py", out, *files, "--one-indexed")
    assert result.returncode == 0 and "sentence 1: links 2-8 fall outside" in result.stderr
    (tmp_path / "tgt").write_text("the black cat\n")
    result = _script("align.py", out, "--src", tmp_path / "src", "--tgt", tmp_path / "tgt")
    assert result.returncode != 0 and "has 2 lines but" in result.stderr


@pytest.mark.slow
def test_align_cli_on_the_demo_gold(small_run) -> None:
    _, out = small_run
    result = _script("align.py", out, "--limit", "20")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("20 test pairs of the demo corpus")
    assert "uncovered" in result.stdout


def _by_hand(run, reading, sources: list[str], targets: list[str]) -> list:
    """``reading``'s links of the pairs, captured and read here, not by a script."""
    from transformer_mt.analysis import corpus_attention
    from transformer_mt.checkpoint import load_model

    model, tokenizer, _ = load_model(run)
    captured = corpus_attention(
        model, tokenizer, sources, targets, full_context=reading.full_context
    )
    pairs = [(s.split(), t.split()) for s, t in zip(sources, targets)]
    return [reading.links(w, p) for w, p in zip(captured, pairs)]


def _copied_run_and_files(out, tmp_path) -> tuple:
    """A copy of the small run (nothing recorded in its align/) and two ES->EN pairs with gold:
    the run and align.py's --src/--tgt/--gold."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(out, run, ignore=shutil.ignore_patterns("align"))
    (tmp_path / "src").write_text("el gato negro\nla casa\n")
    (tmp_path / "tgt").write_text("the black cat\nthe house\n")
    (tmp_path / "gold").write_text("0-1 1-2 2-0\n0-0 1-1\n")
    return run, ("--src", tmp_path / "src", "--tgt", tmp_path / "tgt", "--gold", tmp_path / "gold")


@pytest.mark.slow
def test_align_cli_methods_tuning_and_a_reverse_run(small_run, tmp_path) -> None:
    """--tune-on a dev set (recorded, then the default with no flag), --method, --reverse-run:
    the written links are the two heads' merged matrices read at the pair's tuned tau."""
    import shutil

    from omegaconf import OmegaConf

    from transformer_mt.align.extract import TUNING_GRIDS, Extraction
    from transformer_mt.align.links import read_pharaoh
    from transformer_mt.align.reading import MERGED_RECORD, HeadReading, ReadingRecord

    _, out = small_run
    run, files = _copied_run_and_files(out, tmp_path)
    (tmp_path / "dev.tsv").write_text("the black cat\tel gato negro\t0-0 1-2 2-1\n")
    links = lambda path: [read_pharaoh(line)[0] for line in path.read_text().splitlines()]  # noqa: E731

    dev = f"xlwa:{tmp_path / 'dev.tsv'}"
    # no head named and none guided: the best head on the dev set, tuned there, recorded whole;
    # --output then writes its links by the tuned reading (not by argmax)
    tuned = _script("align.py", run, "--tune-on", dev, *files, "--output", tmp_path / "t0")
    assert tuned.returncode == 0, tuned.stderr
    record = ReadingRecord.load(run)
    assert record.reading.extraction.method == "grow-diag" and "dev.tsv" in record.tuned_on
    assert f"links of {record.reading.label} (tuned on xlwa:" in tuned.stdout
    assert "development AER of each value tried" in tuned.stdout and "pass 1, tau:" in tuned.stdout
    es, en = ["el gato negro", "la casa"], ["the black cat", "the house"]
    assert links(tmp_path / "t0") == _by_hand(run, record.reading, es, en)
    # a named head is tuned; every parameter reports each value tried, the dev's best kept
    tuned = _script("align.py", run, "--head", "1:1", "--tune-on", dev)
    assert tuned.returncode == 0, tuned.stderr
    record = ReadingRecord.load(run)
    chosen = record.reading.extraction
    assert record.reading.where == (1, 1, "causal")
    assert {t.parameter for t in record.trials} == set(TUNING_GRIDS)
    last = {t.parameter: t for t in record.trials}  # each parameter's last pass
    for name, trial in last.items():
        scores = {
            t.value: t.aer for t in record.trials if (t.parameter, t.round) == (name, trial.round)
        }
        assert scores[getattr(chosen, name)] == min(scores.values()), name
    name = chosen.name
    # with a reading recorded, the head is read by it, no flag to remember
    used = _script("align.py", run, *files, "--head", "1:1", "--output", tmp_path / "t")
    assert used.returncode == 0, used.stderr
    assert f"links of 1:1 by {name} (tuned on xlwa:" in used.stdout
    assert f"1:1 by {chosen.overridden('argmax').name}" in used.stdout
    # another head is not read by this head's tuned parameters
    other = _script("align.py", run, *files, "--head", "1:2")
    assert "links of 1:2 by argmax\n" in other.stdout, other.stderr
    plain = _script("align.py", run, *files, "--head", "1:1", "--method", "argmax")
    assert f"links of 1:1 by {chosen.overridden('argmax').name}" in plain.stdout
    unweighed = _script("align.py", run, *files, "--head", "1:1", "--diagonal", "0", "--no-alike")
    assert f"links of 1:1 by {chosen.overridden(diagonal=0, alike=0).name} (given)" in (
        unweighed.stdout
    ), unweighed.stderr
    # --tune-on keeps what the command line gives: the prior off, words alike not raised
    fixed = _script(
        "align.py", run, "--head", "1:1", "--tune-on", dev, "--diagonal", "0", "--no-alike"
    )
    assert fixed.returncode == 0, fixed.stderr
    record = ReadingRecord.load(run)
    assert (record.reading.extraction.diagonal, record.reading.extraction.alike) == (0.0, 0.0)
    assert {t.parameter for t in record.trials} == {"tau", "narrows_past", "anchored_past"}
    # a copy of the run that claims to translate the other way stands in for an EN->ES run
    reverse = tmp_path / "reverse"
    shutil.copytree(out, reverse, ignore=shutil.ignore_patterns("align"))
    cfg = OmegaConf.load(reverse / "config.yaml")
    cfg.data.src_lang, cfg.data.tgt_lang = cfg.data.tgt_lang, cfg.data.src_lang
    (reverse / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    # merged matrices: tau tuned for the pair on the dev set (its own record), then used with
    # no flag to remember: geometric mean, grow-diag at the pair's tau
    merge = ("--head", "1:1", "--reverse-run", reverse)
    tuned = _script("align.py", run, *merge, "--tune-on", dev)
    assert tuned.returncode == 0, tuned.stderr
    record = ReadingRecord.load(run, MERGED_RECORD)
    assert "dev.tsv" in record.tuned_on and record.reverse.where == (1, 1, "causal")
    pair = record.reading.extraction
    # the reverse run's own links are read by its own tuned reading, not this run's
    mine = HeadReading(1, 1, "causal", Extraction("grow-diag", 0.3))
    ReadingRecord(mine, "a dev set").save(reverse / "align")
    both = _script("align.py", run, *files, *merge, "--output", tmp_path / "mboth")
    assert both.returncode == 0, both.stderr
    assert "reverse: 1:1 by grow-diag 0.3" in both.stdout
    assert f"by {pair.name} tuned on xlwa:" in both.stdout
    assert f"merged, {pair.name}" in both.stdout  # scored beside each direction
    # by hand: both heads' word matrices (the reverse run reads the pairs turned round),
    # geometric mean, read by the pair's tuned reading
    from transformer_mt.align.extract import merge_directions
    from transformer_mt.analysis import corpus_attention
    from transformer_mt.checkpoint import load_model

    model, tokenizer, _ = load_model(run)
    reading = HeadReading(1, 1, "causal")
    ours = [reading.matrix(w) for w in corpus_attention(model, tokenizer, es, en)]
    theirs = [reading.matrix(w) for w in corpus_attention(model, tokenizer, en, es)]
    words = [(s.split(), t.split()) for s, t in zip(es, en)]
    expected = [pair.links(merge_directions(f, b.T), w) for f, b, w in zip(ours, theirs, words)]
    assert links(tmp_path / "mboth") == expected
    # the hard-link combinations and the threshold reading that lost are refused by name
    refused = _script("align.py", run, *files, *merge, "--symmetrize", "intersect")
    assert refused.returncode == 2 and "--symmetrize was removed" in refused.stderr
    refused = _script("align.py", run, *files, "--method", "threshold")
    assert refused.returncode == 2 and "invalid choice: 'threshold'" in refused.stderr
    # a reverse run that translates the same way is named
    same = _script("align.py", run, *files, "--reverse-run", out)
    assert same.returncode == 2 and "translates as" in same.stderr


@pytest.mark.slow
def test_align_cli_on_a_checkpoint_records_where_the_run_looks(small_run, tmp_path) -> None:
    """align.py RUN/checkpoints/last.ckpt keeps its records in RUN/align, where --head best
    and the tuned reading are looked up (record_folder), not in RUN/checkpoints/align."""
    _, out = small_run
    run, files = _copied_run_and_files(out, tmp_path)
    (tmp_path / "dev.tsv").write_text("the black cat\tel gato negro\t0-0 1-2 2-1\n")
    tuned = _script(
        "align.py", run / "checkpoints" / "last.ckpt", "--tune-on", f"xlwa:{tmp_path / 'dev.tsv'}"
    )
    assert tuned.returncode == 0, tuned.stderr
    assert (run / "align" / "reading.json").is_file()
    assert not (run / "checkpoints" / "align").exists()
    drawn = _script("translate.py", run, "--alignments", "--head", "best", input="el gato\n")
    assert drawn.returncode == 0, drawn.stderr


@pytest.mark.slow
def test_head_best_is_read_by_the_method_it_was_recorded_with(demo_run, tmp_path) -> None:
    """A head recorded as tuned with grow-diag is read by grow-diag again by translate.py
    --head best and by default (an explicit --method still wins)."""
    import shutil

    from transformer_mt.align.extract import Extraction
    from transformer_mt.align.reading import HeadReading, ReadingRecord

    run = tmp_path / "run"
    shutil.copytree(demo_run, run, ignore=shutil.ignore_patterns("align", "ct2", "*.png"))
    source = "el gato negro duerme en casa\nmi hermano no quiere comer pescado\n"

    def links(*args: str) -> list[str]:
        done = _script("translate.py", run, "--alignments", "--beam", "1", *args, input=source)
        assert done.returncode == 0, done.stderr
        return [line.split(" ||| ")[1] for line in done.stdout.splitlines()]

    # a head whose grow-diag links differ from its argmax links
    for head in ("1:1", "1:2", "1:3", "1:4", "2:1", "2:2", "2:3", "2:4"):
        by_grow, by_argmax = (links("--head", head, "--method", m) for m in ("grow-diag", "argmax"))
        if by_grow != by_argmax:
            break
    assert by_grow != by_argmax, "no head of the demo model tells the readings apart"
    layer, number = map(int, head.split(":"))
    best = HeadReading(layer, number, extraction=Extraction("grow-diag", 0.0))
    ReadingRecord(best, "a test").save(run / "align")
    assert links("--head", "best") == by_grow
    assert links() == by_grow  # the recorded best is also the default head
    assert links("--head", "best", "--method", "argmax") == by_argmax


@pytest.mark.slow  # trains
def test_wandb_offline_and_mlflow_log_the_run_where_their_users_look(
    compose_cfg, tmp_path, monkeypatch
) -> None:
    """W&B in offline mode (a run to ``wandb sync`` under the run directory) and MLflow in a
    SQLite store there (MLflow 3 refuses new runs in its old file store): both hold the curves."""
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = compose_cfg(
        *("data.train_size=200", "data.valid_size=8", "data.test_size=8", "data.vocab_size=120"),
        *("model.n_layers=1", "model.d_model=16", "model.d_ff=32", "model.n_heads=2"),
        *("trainer.max_steps=2", "trainer.enable_progress_bar=false"),
        *("trainer.log_every_n_steps=1", "trainer.loggers=[csv,wandb,mlflow]"),
        *("heatmaps.valid_sentences=0", "heatmaps.src=null"),
    )
    run(cfg)
    out = tmp_path / "run"
    (offline,) = (out / "wandb").glob("offline-run-*")
    assert next(offline.glob("run-*.wandb")).stat().st_size > 0
    client = MlflowClient(tracking_uri=f"sqlite:///{out.resolve()}/mlflow.db")
    experiment = client.get_experiment_by_name("transformer-mt")
    (logged,) = client.search_runs([experiment.experiment_id])
    assert logged.info.run_name == "run" and logged.info.status == "FINISHED"
    losses = client.get_metric_history(logged.info.run_id, "train/loss")
    assert [m.step for m in losses] == [0, 1]
    assert "val/bleu" in logged.data.metrics and "test/bleu" in logged.data.metrics


def test_a_logger_without_its_package_is_one_line_saying_how_to_install_it(
    tmp_path, monkeypatch
) -> None:
    import importlib.util

    from transformer_mt.errors import UserError
    from transformer_mt.train import build_loggers

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(
        UserError, match=r'the mlflow package is not installed: pip install -e "\.\[loggers\]"'
    ):
        build_loggers(["csv", "mlflow"], tmp_path)


@pytest.mark.slow
def test_tuning_reads_the_development_sets_and_never_a_test_set(small_run, tmp_path) -> None:
    """--tune-on xlwa_dev --tune-on epps_dev on a data folder where the test sets (Graça,
    XL-WA test) do not exist, for a run whose config scores on them: tuning never needs them.
    Each dev set is cut to its first pairs, to keep the test short; their links are summed."""
    from omegaconf import OmegaConf

    from transformer_mt.align.reading import ReadingRecord
    from transformer_mt.analysis.pipeline import Aligner, dev_sets, tune_run

    from .conftest import SHARED

    _, out = small_run
    run, _ = _copied_run_and_files(out, tmp_path)
    data = tmp_path / "data"
    cut = {
        "word_alignment_gold_esen_xlwa/orig/dev.tsv": 6,
        "word_alignment_gold_esen_epps_dev/en.txt": 4,
        "word_alignment_gold_esen_epps_dev/es.txt": 4,
        "word_alignment_gold_esen_epps_dev/gold.pharaoh": 4,
    }
    for name, lines in cut.items():
        (data / name).parent.mkdir(parents=True, exist_ok=True)
        kept = (SHARED / name).read_text(encoding="utf-8").splitlines(keepends=True)[:lines]
        (data / name).write_text("".join(kept), encoding="utf-8")
    cfg = OmegaConf.load(run / "config.yaml")  # the run scores on the test sets, which are gone
    test_sets = {
        "graca": "word_alignment_gold_esen_graca/orig",
        "xlwa": "word_alignment_gold_esen_xlwa/orig/test.tsv",
    }
    cfg.align.gold = {
        name: {"format": name, "path": str(data / rel)} for name, rel in test_sets.items()
    }
    OmegaConf.save(cfg, run / "config.yaml")
    assert not any((data / rel).exists() for rel in test_sets.values())
    aligner = Aligner(run)
    dev, _ = dev_sets(["xlwa_dev", "epps_dev"], aligner.direction, data).foldable(aligner.tokenizer)
    assert dev.name == "xlwa_dev+epps_dev" and len(dev) == 10
    record, _ = tune_run(aligner, dev, None)
    assert ReadingRecord.load(run) == record and record.tuned_on == "xlwa_dev+epps_dev"
    assert record.reading.extraction.source == "tuned on xlwa_dev+epps_dev"
