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
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from omegaconf import DictConfig, OmegaConf

from transformer_mt.config import (
    AlignConfig,
    DataConfig,
    check_keys,
)
from transformer_mt.data.tokenizer import EOS_ID, Tokenizer
from transformer_mt.datamodule import TranslationDataModule
from transformer_mt.decoding import greedy_decode
from transformer_mt.lit_module import TranslationModule
from transformer_mt.metrics import corpus_bleu, corpus_chrf
from transformer_mt.model import Transformer
from transformer_mt.viz.alignment import plot_alignment, plot_heads, word_attention
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
        metrics["alignment"] = _draw_alignment(
            module.model, tokenizer, OmegaConf.to_object(cfg.align), out
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


def _draw_alignment(model: Transformer, tokenizer: Tokenizer, cfg: AlignConfig, out: Path) -> dict:
    """Heatmap of one decoder layer's cross-attention (heads averaged) for ``cfg.src``.

    Returns:
        The translation and, per target word, the source word it attends to most.
    """
    model.eval()
    src_ids = tokenizer.encode([cfg.src])[0]
    if cfg.tgt is None:
        tgt_ids = greedy_decode(model, torch.tensor([src_ids + [EOS_ID]]))[0]
    else:
        tgt_ids = tokenizer.encode([cfg.tgt])[0]
    weights, src_words, tgt_words = word_attention(
        model, tokenizer, src_ids, tgt_ids
    )  # (L, H, W_tgt, W_src)
    layer = cfg.layer % weights.size(0)
    words = weights[layer].mean(dim=0)  # heads averaged: (W_tgt, W_src)
    fig = plot_alignment(
        words, src_words, tgt_words, f"decoder layer {layer + 1} cross-attention, heads averaged"
    )
    path = out / f"alignment_layer{layer + 1}.png"
    fig.savefig(path, dpi=150)
    plot_heads(weights, src_words, tgt_words).savefig(out / "alignment_heads.png", dpi=110)
    log.info("alignment heatmap: %s", path)
    best = words.argmax(dim=-1).tolist()
    return {
        "source": cfg.src,
        "translation": tokenizer.decode([tgt_ids])[0],
        "layer": layer + 1,
        "strongest": {t: src_words[j] for t, j in zip(tgt_words, best)},
        "png": path.name,
    }


def _draw_curves(out: Path) -> None:
    csv_path = out / "logs" / "metrics.csv"
    if csv_path.exists():
        plot_curves(read_metrics(csv_path)).savefig(out / "training_curves.png", dpi=120)
