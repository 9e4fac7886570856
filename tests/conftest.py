"""Shared fixtures: a tiny seeded model config, and Hydra composition of the real conf/."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from transformer_mt.config import TransformerConfig, register_configs

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
SHARED = ROOT.parent / "shared" / "data"  # real corpora beside the checkout, never copied into it
# where recipes on real corpora look for them (conf/data/anki_es_en.yaml, experiment=anki_es_en_cpu)
os.environ.setdefault("TRANSFORMER_MT_DATA", str(SHARED))


IN_CI = os.environ.get("CI") == "true"  # .ci/run exports it


def needs_shared(folder: Path = SHARED) -> pytest.MarkDecorator:
    """Skip where ``folder`` (under ../shared/data) is absent; under CI=true the skip fails."""
    return pytest.mark.skipif(
        not folder.is_dir(), reason=f"{folder} is absent (the shared corpora)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without a CUDA device the gpu tests are deselected (benchmarks/gpu_check.sh runs them),
    so that a skip in the summary always means something is missing."""
    if torch.cuda.is_available():
        return
    gpu = [item for item in items if item.get_closest_marker("gpu") is not None]
    if gpu:
        config.hook.pytest_deselected(items=gpu)
        items[:] = [item for item in items if item.get_closest_marker("gpu") is None]


def _skip_as_failure(report, what: str) -> None:
    """Under CI=true a skip is a failure, with its reason: CI must run everything but gpu tests."""
    if not IN_CI or not report.skipped or hasattr(report, "wasxfail"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = f"{what} skipped under CI=true, where nothing may be: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    outcome = yield
    if item.get_closest_marker("gpu") is None:
        _skip_as_failure(outcome.get_result(), item.nodeid)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    outcome = yield  # a module-level importorskip (a missing extra) skips at collection
    _skip_as_failure(outcome.get_result(), collector.nodeid)


register_configs()


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture
def tiny_cfg() -> TransformerConfig:
    return TransformerConfig(
        name="test",
        n_layers=2,
        d_model=16,
        d_ff=32,
        n_heads=2,
        dropout=0.0,
        vocab_size=24,
        max_positions=64,
    )


@pytest.fixture
def compose_cfg(tmp_path: Path) -> Callable[..., DictConfig]:
    """Compose conf/train.yaml with overrides, writing into tmp_path and caching under it."""

    def _compose(*overrides: str) -> DictConfig:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return compose(
                "train",
                overrides=[
                    f"output_dir={tmp_path / 'run'}",
                    f"data.cache_dir={tmp_path / 'cache'}",
                    *overrides,
                ],
            )

    return _compose


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory) -> Path:
    """A small demo model trained for about half a minute on an idle 2-core machine (2 layers,
    d_model 64, 4 heads, 360 steps; test BLEU 52-63): a model that translates, so that comparisons
    of its outputs (CTranslate2, bf16, the explorer) mean something. Shared by those tests;
    TRANSFORMER_MT_DEMO_RUN=<run> uses a run of your own."""
    from transformer_mt.train import run

    given = os.environ.get("TRANSFORMER_MT_DEMO_RUN")
    if given:
        return Path(given)
    tmp = tmp_path_factory.mktemp("demo_run")
    overrides = [
        f"output_dir={tmp / 'out'}",
        f"data.cache_dir={tmp / 'cache'}",
        "data.train_size=8000",
        "data.valid_size=100",
        "data.test_size=100",
        "data.vocab_size=300",
        "model.n_layers=2",
        "model.d_model=64",
        "model.d_ff=128",
        "model.n_heads=4",
        "optim.warmup=100",
        "optim.lr_factor=1.0",
        "trainer.max_epochs=4",
        "trainer.enable_progress_bar=false",
    ]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        run(compose("train", overrides=overrides))
    return tmp / "out"


def _lines(path: Path) -> list[str]:
    import gzip

    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def _short_pairs(src: Path, tgt: Path, max_words: int = 30) -> list[tuple[str, str]]:
    """The line pairs of two aligned files whose sides have at most ``max_words`` words."""
    pairs = zip(_lines(src), _lines(tgt))
    return [(s, t) for s, t in pairs if max(len(s.split()), len(t.split())) <= max_words]


def write_hub_wmt14(folder: Path, sizes: dict[str, int], max_words: int = 30) -> Path:
    """A small copy of the hub's ``wmt/wmt14`` as ``load_dataset`` reads it: configs ``de-en``
    and ``fr-en`` of parquet shards whose rows are ``{"translation": {lang: text}}``, declared in
    the README, from real newstest lines (../shared/data) of at most ``max_words`` words.
    ``sizes``: rows per split (train, validation, test)."""
    sources = {
        "de-en": (SHARED / "wmt13_newstest2013_deen", "newstest2013", ("de", "en")),
        "fr-en": (SHARED / "wmt14_newstest2014_fren", "newstest2014-full", ("fr", "en")),
    }
    from datasets import Dataset

    for config, (where, stem, langs) in sources.items():
        pairs = _short_pairs(*(where / f"{stem}.{lang}" for lang in langs), max_words)
        start = 0
        for split, n in sizes.items():
            rows = [dict(zip(langs, pair)) for pair in pairs[start : start + n]]
            start += n
            (folder / config).mkdir(parents=True, exist_ok=True)
            Dataset.from_dict({"translation": rows}).to_parquet(
                folder / config / f"{split}-00000-of-00001.parquet"
            )
    declared = "".join(
        f"- config_name: {config}\n  data_files:\n"
        + "".join(f"  - split: {s}\n    path: {config}/{s}-*\n" for s in sizes)
        for config in sources
    )
    (folder / "README.md").write_text(f"---\nconfigs:\n{declared}---\n")
    return folder


# the two-process recipe's copy: 5 test and 3 validation batches at data.max_tokens=600
DDP_SIZES = {"train": 160, "validation": 20, "test": 30}


def ddp_recipe(wmt14: Path, cache: Path) -> list[str]:
    """The overrides that make ``experiment=paper_base_en_de`` small for two CPU processes, on
    a ``write_hub_wmt14`` copy of ``DDP_SIZES`` (tests/test_recipes.py, benchmarks/ddp_stress.py)."""
    return [
        f"data.hf_path={wmt14}",
        f"data.cache_dir={cache}",
        "data.vocab_size=300",
        "data.max_tokens=600",  # 5 test and 3 validation batches: shards, and a padded repeat
        "data.valid_max_sentences=12",  # validation BLEU on the first 12 of 20 rows
        "model.d_model=32",
        "model.d_ff=128",
        # an untrained model decodes to the length limit: 16 pieces, not |x| + 50 (the sharding
        # and gathering are what is tested, not the search)
        "decode.max_len_a=0",
        "decode.max_len_b=16",
        "optim.tokens_per_step=1200",
        "trainer.log_every_n_steps=1",
        "trainer.enable_progress_bar=false",
        "trainer.deterministic=true",
        "trainer.loggers=[csv]",
        "checkpoint.every_minutes=null",
        "checkpoint.every_steps=2",
        "checkpoint.average_last=2",
        "heatmaps.valid_sentences=0",
    ]
