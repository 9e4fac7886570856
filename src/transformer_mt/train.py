"""``run(cfg)``: build data, model and trainer from a composed config, train, test, report.

``scripts/train.py`` is a thin Hydra entry point around this function, which tests call directly.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from dataclasses import replace
from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from omegaconf import DictConfig, OmegaConf

from transformer_mt.config import (
    AlignConfig,
    DataConfig,
    check_keys,
)
from transformer_mt.data.tokenizer import Tokenizer
from transformer_mt.datamodule import TranslationDataModule
from transformer_mt.lit_module import TranslationModule
from transformer_mt.metrics import corpus_bleu, corpus_chrf
from transformer_mt.model import Transformer
from transformer_mt.viz.alignment import draw_pair
from transformer_mt.viz.curves import plot_curves, read_metrics

log = logging.getLogger(__name__)


def run(cfg: DictConfig) -> dict:
    """Train and test one configuration; everything is written to ``cfg.output_dir``.

    Returns:
        The metrics also saved as ``metrics.json``.
    """
    started = time.perf_counter()
    check_keys(cfg)
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    L.seed_everything(cfg.seed, workers=True)

    data_cfg: DataConfig = OmegaConf.to_object(cfg.data)
    datamodule = TranslationDataModule(data_cfg, seed=cfg.seed)
    datamodule.setup(
        "fit"
    )  # builds (or loads from cache) everything; Lightning's own calls then return
    tokenizer = datamodule.tokenizer
    shutil.copyfile(tokenizer.path, out / "tokenizer.model")  # the run directory is self-contained

    model_cfg = replace(OmegaConf.to_object(cfg.model), vocab_size=tokenizer.vocab_size)
    module = TranslationModule.from_configs(
        model_cfg,
        OmegaConf.to_object(cfg.optim),
        OmegaConf.to_object(cfg.decode),
        str(out / "tokenizer.model"),
    )
    n_params = sum(p.numel() for p in module.model.parameters())
    log.info(
        "model=%s: %s parameters, vocabulary %d",
        model_cfg.name,
        f"{n_params:,}",
        tokenizer.vocab_size,
    )

    trainer = L.Trainer(
        **OmegaConf.to_container(cfg.trainer),
        default_root_dir=out,
        logger=CSVLogger(out, name="logs", version=""),
        callbacks=[
            ModelCheckpoint(
                dirpath=out / "checkpoints",
                filename="{epoch}-{step}",
                monitor="step",
                mode="max",
                save_top_k=cfg.checkpoint.keep_last,
                save_last=True,
            )
        ],
        use_distributed_sampler=False,  # TokenBatchSampler shards by rank itself
    )
    trainer.fit(module, datamodule=datamodule)
    val_bleu = float(trainer.callback_metrics.get("val/bleu", float("nan")))  # test() replaces them
    trainer.test(module, datamodule=datamodule, verbose=False)
    metrics = _report(module, datamodule, out)
    metrics["val_bleu"] = round(val_bleu, 2)
    metrics.update(parameters=n_params, wall_seconds=round(time.perf_counter() - started, 1))
    if trainer.is_global_zero:
        valid = datamodule.text["valid"]
        metrics["alignment"] = _draw_alignment(
            module.model,
            tokenizer,
            OmegaConf.to_object(cfg.align),
            list(valid.select(range(min(len(valid), 200)))),
            out,
        )
        _draw_curves(out)
        (out / "metrics.json").write_text(json.dumps(metrics, indent=2, ensure_ascii=False) + "\n")
    return metrics


def _report(module: TranslationModule, datamodule: TranslationDataModule, out: Path) -> dict:
    """Score the test hypotheses, write them, and print SacreBLEU with its signature."""
    rows, hyps = module.detokenized("test")
    refs = list(datamodule.text["test"].select(rows)["tgt"])
    (out / "test.hyp.txt").write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    bleu, chrf = corpus_bleu(hyps, refs), corpus_chrf(hyps, refs)
    print(f"\ntest: {bleu.text}\n      signature: {bleu.signature}\n      {chrf.text}")
    return {
        "test_bleu": round(bleu.score, 2),
        "test_bleu_signature": bleu.signature,
        "test_chrf": round(chrf.score, 2),
        "test_ppl": round(float(module.trainer.callback_metrics.get("test/ppl", float("nan"))), 3),
        "test_sentences": len(hyps),
        "steps": module.trainer.global_step,
        "epochs": module.trainer.current_epoch,
    }


def _draw_alignment(
    model: Transformer, tokenizer: Tokenizer, cfg: AlignConfig, valid: list[dict], out: Path
) -> dict:
    """Heatmaps of one decoder layer's cross-attention (heads averaged) after training.

    The example sentence ``cfg.src`` (translated by the model, or teacher-forced on
    ``cfg.tgt``) goes to ``alignment_layer<N>.png`` and ``alignment_heads.png``; the first
    ``cfg.valid_sentences`` validation pairs of at most ``cfg.max_words`` words, teacher-forced
    on their references, to ``alignment_valid/<k>_layer<N>.png``: the same sentences every run.

    Returns:
        what was drawn, per target word the source word it attends to most.
    """
    drawn: dict = {}
    if cfg.src:
        example = draw_pair(model, tokenizer, cfg.src, cfg.tgt, out / "alignment", cfg.layer)
        example["png"] = example["files"][0]
        drawn["example"] = example
        log.info("alignment heatmap: %s", out / example["png"])
    fitting = [
        row
        for row in valid
        if max(len(row["src"].split()), len(row["tgt"].split())) <= cfg.max_words
    ]
    drawn["valid"] = [
        draw_pair(
            model,
            tokenizer,
            row["src"],
            row["tgt"],
            out / "alignment_valid" / str(k),
            cfg.layer,
            heads=False,
        )
        for k, row in enumerate(fitting[: cfg.valid_sentences], 1)
    ]
    return drawn


def _draw_curves(out: Path) -> None:
    csv_path = out / "logs" / "metrics.csv"
    if csv_path.exists():
        plot_curves(read_metrics(csv_path)).savefig(out / "training_curves.png", dpi=120)
