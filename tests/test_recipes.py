"""Every recipe in conf/experiment/ trains, validates, tests and reports, not only composes; and
the paper's base recipe on two processes scores its checkpoint exactly as one process does.

The recipes run as written, with the changes a CPU test needs: every width and the tokens per
step divided by 16 (the depth, heads, dropout, smoothing and positions as the recipe says),
batches of 1,024 tokens, the CPU trainer, two steps, and small local data shaped as the hub
gives it (or, for the local-file recipes, a sample of their files).
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from .conftest import (
    CONF,
    DDP_SIZES,
    ROOT,
    SHARED,
    _lines,
    ddp_recipe,
    write_hub_wmt14,
)
from .scripts import run_script

pytestmark = pytest.mark.slow  # training runs and subprocesses

RECIPES = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
SIZES = {"train": 160, "validation": 8, "test": 8}  # rows of the small copies
SHRINK = 16  # every width of the recipe's model, divided by this


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> dict[str, list[str]]:
    """Per data preset, the overrides that point it at a small local copy."""
    tmp = tmp_path_factory.mktemp("recipe_data")
    wmt14 = write_hub_wmt14(tmp / "wmt14", SIZES, max_words=15)  # an untrained model's
    # output runs to the length limit, |x| + 50: short sources keep decoding short
    multi30k = tmp / "multi30k"  # the first rows of each release file, test2017 and COCO too
    multi30k.mkdir()
    for name in ("train", "val", "test_2016_flickr", "test_2017_flickr", "test_2017_mscoco"):
        rows = SIZES["train"] if name == "train" else SIZES["test"]
        for lang in ("en", "de"):
            lines = _lines(SHARED / "multi30k_task1" / f"{name}.{lang}.gz")[:rows]
            with gzip.open(multi30k / f"{name}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.write("".join(line + "\n" for line in lines))
    anki = tmp / "anki"  # every 200th pair of the Anki files: short and long sentences
    anki.mkdir()
    for lang in ("es", "en"):
        lines = _lines(SHARED / "anki_spa_eng" / f"spa-eng.{lang}.gz")[::200]
        with gzip.open(anki / f"spa-eng.{lang}.gz", "wt", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))
    return {
        "wmt14_en_de": [f"data.hf_path={wmt14}"],
        "wmt14_en_fr": [f"data.hf_path={wmt14}"],
        "multi30k_en_de": [f"data.local_dir={multi30k}"],
        "anki_es_en": [f"data.local_dir={anki}", "data.holdout={valid:8,test:8}"],
    }


@functools.cache
def as_written(name: str) -> DictConfig:
    """``experiment=name`` composed with nothing changed (composed once: Hydra takes a
    quarter of a second a composition here)."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("train", overrides=[f"experiment={name}", "data.cache_dir=unused"])


def recipe(name: str, out: Path, cache: Path, corpora: dict, *overrides: str) -> DictConfig:
    """``experiment=name`` composed as ``scripts/train.py`` would, made small for the CPU."""
    common = [
        f"experiment={name}",
        "trainer=cpu",
        f"output_dir={out}",
        f"data.cache_dir={cache}",
        "data.vocab_size=300",
        "data.max_tokens=1024",
        "trainer.max_steps=2",
        "trainer.max_time=null",
        "trainer.enable_progress_bar=false",
        "trainer.loggers=[]",  # the curves are drawn and tested elsewhere
        "heatmaps.valid_sentences=0",  # the recipe's example sentence is still drawn
        # an untrained model's searches run to the length limit: 8 pieces, not |x| + 50
        # (validation, test and the final evaluation all read decode's limit)
        "decode.max_len_a=0",
        "decode.max_len_b=8",
        # a GPU recipe's compiled step takes minutes to build on 2 cores, and is tested in
        # test_compile_training.py
        "trainer.compile=false",
        *overrides,
    ]
    data = as_written(name).data.name
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=common + corpora[data])
    model = cfg.model
    model.d_model //= SHRINK
    model.d_ff //= SHRINK
    if model.d_k is not None:
        model.d_k = max(1, model.d_k // SHRINK)
    if cfg.optim.tokens_per_step is not None:  # the paper's 25k: one micro-batch a step here
        cfg.optim.tokens_per_step //= SHRINK
    return cfg


# the keys recipe() changes
CHANGED = (
    "trainer.max_steps",
    "trainer.max_time",
    "trainer.enable_progress_bar",
    "trainer.loggers",
    "trainer.compile",
    "decode.max_len_a",
    "decode.max_len_b",
    "output_dir",
    "data.cache_dir",
    "data.vocab_size",
    "data.max_tokens",
    "heatmaps.valid_sentences",
    "checkpoint.every_steps",
    "final.length_penalties",
    "final.splits",
    "model.d_model",
    "model.d_ff",
    "model.d_k",
    "optim.tokens_per_step",
)


def recipe_keys(name: str) -> dict:
    """The leaf keys a recipe file sets, after those of the recipes it builds on, with their
    written values (interpolations left out: they resolve per machine)."""
    written = OmegaConf.load(CONF / "experiment" / f"{name}.yaml")
    keys: dict = {}
    for entry in written.get("defaults", []):
        if isinstance(entry, str) and entry != "_self_":  # another recipe
            keys.update(recipe_keys(entry))

    def leaves(node, prefix: str) -> None:
        for key, value in node.items():
            path = f"{prefix}{key}"
            if isinstance(value, dict):
                leaves(value, path + ".")
            elif not (isinstance(value, str) and "${" in value):
                keys[path] = value

    body = OmegaConf.to_container(written, resolve=False)
    body.pop("defaults", None)
    leaves(body, "")
    return keys


def check_own_settings(name: str, model: dict, config: DictConfig, corpora: dict) -> None:
    """The recipe's own model, smaller (what makes a Table 3 row that row), and every key the
    recipe file sets (and the recipes it builds on) in ``config``, but for those this test
    changes: a key shadowed by the defaults order fails here."""
    written = as_written(name).model
    for key in ("name", "n_layers", "n_heads", "dropout", "label_smoothing", "positional"):
        assert model[key] == written[key], key
    assert (model["d_model"], model["d_ff"]) == (
        written.d_model // SHRINK,
        written.d_ff // SHRINK,
    )
    changed = set(CHANGED) | {o.split("=")[0] for o in corpora[config.data.name]}
    own = recipe_keys(name)
    assert own, name
    for key, value in own.items():
        if key not in changed:
            assert OmegaConf.select(config, key) == value, (name, key)


# Table 3's rows each change one setting of its base. All are composed and checked; those
# trained are base, big and one row per kind of setting (heads, d_k, depth, width, dropout,
# label smoothing, positions): the others train through the same code at other sizes
# (tests/test_configs.py builds each row's model at the paper's size).
TABLE3_TRAINED = {
    "table3_base",
    "table3_big",
    "table3_A_h32",
    "table3_B_dk16",
    "table3_C_N2",
    "table3_C_d1024",
    "table3_D_drop0",
    "table3_D_ls0",
    "table3_E_learned",
}
TRAINED = [r for r in RECIPES if not r.startswith("table3_") or r in TABLE3_TRAINED]


@pytest.mark.parametrize("name", sorted(set(RECIPES) - set(TRAINED)))
def test_every_table3_row_not_trained_here_composes_to_its_own_settings(
    name: str, corpora, tmp_path
) -> None:
    cfg = recipe(name, tmp_path / "run", tmp_path / "cache", corpora)
    check_own_settings(name, OmegaConf.to_container(cfg.model), cfg, corpora)


@pytest.mark.parametrize("name", TRAINED)
def test_every_recipe_trains_tests_and_reports(
    name: str, corpora, tmp_path_factory, tmp_path
) -> None:
    from transformer_mt.train import run

    cache = tmp_path_factory.getbasetemp() / "recipe_cache"  # one tokenized corpus per data set
    cfg = recipe(name, tmp_path / "run", cache, corpora)
    if cfg.final.splits:  # a step checkpoint each step: the final evaluation has two to average
        cfg.checkpoint.every_steps = 1
        # two α values are a search as well as seven, and an untrained model's beams run to the
        # length limit
        cfg.final.length_penalties = cfg.final.length_penalties[:2]
        if name != "multi30k_cpu":  # every split is decoded the same way: all of them once
            cfg.final.splits = cfg.final.splits[:1]
    metrics = run(cfg)

    assert metrics["steps"] == 2 and metrics["test_sentences"] == SIZES["test"]
    assert metrics["val_ppl"] > 1 and 0 <= metrics["test_bleu"] <= 100
    # what was trained and saved: the checkpoint's model, the run's config.yaml
    trained = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=False)
    saved = OmegaConf.load(tmp_path / "run" / "config.yaml")
    check_own_settings(name, trained["hyper_parameters"]["model"], saved, corpora)
    if cfg.final.splits:  # the recipe's own final evaluation, written into metrics.json
        check_final_evaluation(metrics, cfg, tmp_path / "run")
    if name == "multi30k_base_gpu":  # evaluate.py scores a further test set the same way
        scored = run_script(
            "evaluate.py", f"run_dir={tmp_path / 'run'}", "ckpt.average_last=1", "split=test2017"
        )
        assert scored.returncode == 0, scored.stderr[-3000:]
        assert "Multi30k-comparable (Moses-tokenized, lowercased) BLEU: " in scored.stdout
        found = json.loads(next((tmp_path / "run" / "eval").glob("*/scores.json")).read_text())
        assert found["sentences"] == SIZES["test"] and 0 <= found["bleu_tokenized_lowercase"] <= 100
    if cfg.align.gold:  # the alignment recipes score their heads on their gold sets
        assert set(metrics["aer"]) == set(cfg.align.gold)
        assert all(0 <= s["guided_head"] <= 1 for s in metrics["aer"].values())


def check_final_evaluation(metrics: dict, cfg: DictConfig, run_dir: Path) -> None:
    """What ``final:`` promises: choices on valid, each test split decoded once and scored both
    ways, its hypotheses on disk and its figures those of that file."""
    from transformer_mt.data.sources import load_corpus
    from transformer_mt.scoring import score_translations

    final = metrics["final"]
    assert list(final["splits"]) == list(cfg.final.splits)
    # two steps, a checkpoint each: the counts up to 2 are tried, the larger ones found missing
    tried = [r["average_last"] for r in final["valid"]["average_last"]]
    assert tried == [c for c in sorted(cfg.final.average_last) if c <= 2]
    assert len(final["checkpoints"]) in tried
    assert [r["length_penalty"] for r in final["valid"]["length_penalty"]] == list(
        cfg.final.length_penalties
    )
    assert final["length_penalty"] in cfg.final.length_penalties
    assert final["beam_size"] == cfg.final.beam_size
    data = OmegaConf.to_object(cfg.data)
    corpus = load_corpus(data)
    for split, scores in final["splits"].items():
        hyps = (run_dir / "final" / f"{split}.hyp.txt").read_text(encoding="utf-8").splitlines()
        assert len(hyps) == scores["sentences"] == len(corpus[split])
        # the run's search settings held: no hypothesis past decode's limit (pieces >= words)
        assert cfg.decode.max_len_a == 0 and all(
            len(h.split()) <= cfg.decode.max_len_b for h in hyps
        )
        again, _ = score_translations(hyps, corpus[split]["tgt"], data)
        assert {k: scores[k] for k in again} == again
        assert 0 <= scores["bleu_tokenized_lowercase"] <= 100


DDP_LAUNCH_SECONDS = 300  # one of the test's launches takes 15-40 s on 2 cores


def _ddp_script(
    name: str, *args: str, env: dict, torchrun: bool = False
) -> subprocess.CompletedProcess:
    """A fresh interpreter: Lightning's DDP launcher starts the other rank from its argv; or,
    with ``torchrun``, both ranks started at once by torchrun, as on a cluster (Lightning then
    starts none).

    Both ranks run in a session of their own, so that a launch that hangs is killed whole (the
    test's timeout would kill rank 0 alone and leave rank 1 waiting). A launch still alive
    after ``DDP_LAUNCH_SECONDS`` fails the test, with its output and each rank's Python stacks
    at the moment it was killed. It is never run again: a hang here is one a user meets
    (``benchmarks/ddp_stress.py`` launches this recipe and its resume many times over).
    """
    command = [sys.executable, str(ROOT / "scripts" / name), *args]
    if torchrun:
        launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
        command[1:1] = launcher
    env = {**env, "PYTHONFAULTHANDLER": "1"}  # SIGABRT prints every thread's Python stack
    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=DDP_LAUNCH_SECONDS)
    except subprocess.TimeoutExpired:
        out, err = _stacks_then_kill(proc)
        pytest.fail(
            f"{name} {' '.join(args[-2:])} hung for {DDP_LAUNCH_SECONDS} s; stdout ended:\n"
            f"{out[-2000:]}\nstderr ended (each rank's stacks):\n{err[-8000:]}"
        )
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


def _stacks_then_kill(proc: subprocess.Popen) -> tuple[str, str]:
    """A hung launch's output, with each rank's Python stacks at the end of stderr: SIGABRT to
    the whole session (faulthandler, enabled by ``PYTHONFAULTHANDLER``, prints them; the
    launcher's rank shares rank 0's pipes), then SIGKILL to whatever is left."""
    os.killpg(proc.pid, signal.SIGABRT)
    try:
        return proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        pass
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # rank 0 and the rank it started
    return proc.communicate()


def _losses(run_dir: Path) -> dict[int, float]:
    """train/loss by optimizer step (1-based) from the run's CSV logs (all sessions)."""
    from transformer_mt.viz.curves import read_metrics

    return {step + 1: loss for step, loss in read_metrics(run_dir)["train/loss"]}


def test_paper_base_on_two_processes_trains_resumes_and_evaluates(
    tmp_path,
) -> None:
    """experiment=paper_base_en_de on trainer=ddp_cpu, as a user types it, end to end:
    checkpoints every 2 steps; the test split and the validation sample scored over both
    ranks' rows; evaluate.py averages the last 2 checkpoints with beam 4, α 0.6 and the paper's
    compound-split BLEU; and the run resumed on two processes from its step-4 checkpoint goes
    on with the losses the run itself had there, its RNG states gathered from both ranks."""
    from transformer_mt.config import checkpoint_step
    from transformer_mt.data.batching import TokenBatchSampler, TokenRows
    from transformer_mt.datamodule import TranslationDataModule
    from transformer_mt.viz.curves import read_metrics

    wmt14 = write_hub_wmt14(tmp_path / "wmt14", DDP_SIZES)
    cache, ddp = tmp_path / "cache", tmp_path / "ddp"
    small = ddp_recipe(wmt14, cache)
    # One thread per process on both sides (Lightning gives each DDP process cpu_count / 2):
    # then only the sharding differs, not the float rounding of a multi-threaded matmul.
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    recipe_args = ["experiment=paper_base_en_de", "trainer=ddp_cpu", *small]
    trained = _ddp_script(
        "train.py",
        *recipe_args,
        "trainer.max_steps=6",
        f"hydra.run.dir={ddp}",
        env=env,
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert "2 device(s) x 600 tokens x 1 accumulated" in trained.stderr + trained.stdout
    two = json.loads((ddp / "metrics.json").read_text())
    assert two["world_size"] == 2 and two["steps"] == 6
    assert two["test_sentences"] == DDP_SIZES["test"]  # the whole split, not rank 0's shard
    steps = sorted(checkpoint_step(p) for p in (ddp / "checkpoints").glob("*step=*.ckpt"))
    assert steps == [2, 4, 6]
    last = torch.load(ddp / "checkpoints" / "last.ckpt", weights_only=True)
    assert set(last["rng_states"]) == {0, 1}  # each rank's dropout generator, gathered
    assert not torch.equal(last["rng_states"][0]["torch"], last["rng_states"][1]["torch"])

    # both splits really were sharded: an odd number of batches, so that one rank also held a
    # padded repeat of another's batch, which must count once
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=["experiment=paper_base_en_de", *small])
    data = TranslationDataModule(OmegaConf.to_object(cfg.data))
    data.setup()
    for split in ("valid", "test"):
        batches = len(TokenBatchSampler(*TokenRows(data.splits[split]).lengths(), 600, False))
        assert batches >= 3 and batches % 2 == 1, (split, batches)

    # (one process against two on the same checkpoint: on a model that translates, in
    # test_a_model_that_translates_scores_the_same_on_two_processes_as_on_one)
    # the curves carry the whole split's figure too: the DDP run's last validation BLEU
    assert read_metrics(ddp)["val/bleu"][-1][1] == pytest.approx(two["val_bleu"], abs=0.01)

    # evaluate.py, as the recipe's comment says: the last 2 averaged, beam 4, α 0.6
    # one process: no DDP; as short as training's searches (the recipe's beam 4 and α kept)
    scored = run_script(
        "evaluate.py", f"run_dir={ddp}", "decode.max_len_a=0", "decode.max_len_b=16", env=env
    )
    assert scored.returncode == 0, scored.stderr[-3000:]
    assert (
        f"test of wmt14_en_de (en->de), {DDP_SIZES['test']} sentences, beam 4, α 0.6, "
        "2 checkpoint(s)" in scored.stdout
    )
    assert "paper-comparable (Moses-tokenized, compound-split) BLEU" in scored.stdout
    scores = json.loads((ddp / "eval" / "test_beam4_avg2" / "scores.json").read_text())
    assert [checkpoint_step(p) for p in scores["checkpoints"]] == [4, 6]
    assert "bleu_tokenized_compound_split" in scores

    # resumed on two processes from step 4 (a copy of the run as it stood then: its step-4
    # checkpoint as last.ckpt, its logs cut after step 4) to step 6: the losses the run had.
    # Launched by torchrun, as on a cluster: both ranks start at once (Lightning's launcher
    # starts rank 1 once rank 0 has got as far as fitting: its start is the launch above's).
    resumed = tmp_path / "resumed"
    shutil.copytree(ddp, resumed, ignore=shutil.ignore_patterns("*step=6.ckpt", "eval"))
    shutil.copy(
        next((resumed / "checkpoints").glob("*step=4.ckpt")), resumed / "checkpoints" / "last.ckpt"
    )
    log = resumed / "logs" / "metrics.csv"
    lines = log.read_text().splitlines(keepends=True)
    column = lines[0].rstrip("\n").split(",").index("step")
    log.write_text("".join([lines[0]] + [r for r in lines[1:] if int(r.split(",")[column]) < 4]))
    assert sorted(_losses(resumed)) == [1, 2, 3, 4]
    again = _ddp_script(
        "train.py", f"resume={resumed}", "trainer.max_steps=6", env=env, torchrun=True
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert "2 device(s) x 600 tokens x 1 accumulated" in again.stderr + again.stdout
    assert torch.load(resumed / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 6
    expected, got = _losses(ddp), _losses(resumed)
    assert sorted(expected) == list(range(1, 7)) and got == expected


def test_a_model_that_translates_scores_the_same_on_two_processes_as_on_one(
    demo_run, tmp_path
) -> None:
    """The suite's demo model (test BLEU 52-63), its last checkpoint validated and tested
    again on one process and on two (``trainer=ddp_cpu``'s keys on the resumed run, nothing left
    to train): the same hypotheses line for line and the same BLEU, chrF and perplexity, where
    a wrong gather (a row dropped, counted twice or out of order) would show."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from train import resumed_config
    finally:
        sys.path.pop(0)
    from transformer_mt.train import run

    skip = shutil.ignore_patterns("metrics.json", "test.hyp.txt", "eval", "align", "logs*")
    one, two = tmp_path / "one", tmp_path / "two"
    for copy in (one, two):
        shutil.copytree(demo_run, copy, ignore=skip)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each DDP process: only the sharding differs, not the rounding
    # the two-process launch (by torchrun: both ranks start at once) and the one-process run
    # side by side: neither reads the other's copy
    with ThreadPoolExecutor(max_workers=1) as pool:
        launched = pool.submit(
            _ddp_script,
            *("train.py", f"resume={two}", "trainer.devices=2", "trainer.strategy=ddp"),
            env=env,
            torchrun=True,
        )
        try:
            single = run(resumed_config(str(one), ["trainer.devices=1", "trainer.strategy=auto"]))
        finally:
            torch.set_num_threads(threads)
        pair = launched.result()
    assert pair.returncode == 0, pair.stderr[-3000:]
    double = json.loads((two / "metrics.json").read_text())
    assert (single["world_size"], double["world_size"]) == (1, 2)
    assert single["test_bleu"] > 30, single["test_bleu"]  # a model that translates
    assert (one / "test.hyp.txt").read_text() == (two / "test.hyp.txt").read_text()
    for key in ("test_bleu", "test_chrf", "test_ppl", "test_sentences", "val_bleu", "val_ppl"):
        assert single[key] == double[key], key
