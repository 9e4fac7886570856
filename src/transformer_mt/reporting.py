"""What a run reports at its end: the final validation figures, test BLEU, AER, and pictures.

``train.run`` calls these after fitting, on every rank: the figures are the whole split's (the
module gathers the ranks' rows), and only rank 0 prints and writes files.
"""

from __future__ import annotations

import logging
from pathlib import Path

import lightning as L
import numpy as np

from transformer_mt.align.extract import ARGMAX
from transformer_mt.align.reading import HeadReading
from transformer_mt.config import HeatmapConfig
from transformer_mt.datamodule import TranslationDataModule
from transformer_mt.lit_module import TranslationModule
from transformer_mt.metrics import corpus_bleu, corpus_chrf
from transformer_mt.model import Transformer
from transformer_mt.viz.curves import metric_files, plot_curves, read_metrics
from transformer_mt.viz.heatmaps import save_pair_heatmaps
from transformer_mt.viz.lengths import plot_length_histograms

log = logging.getLogger(__name__)


def final_validation(
    trainer: L.Trainer, module: TranslationModule, datamodule: TranslationDataModule
) -> dict:
    """Validation figures of the final weights (validating again when the last one is stale)."""
    if module.validated_at_step != trainer.global_step:
        trainer.validate(module, datamodule=datamodule, verbose=False)
    metrics = trainer.callback_metrics  # test() replaces them: read them now
    out = {
        "val_bleu": round(float(metrics.get("val/bleu", float("nan"))), 2),
        "val_ppl": round(float(metrics.get("val/ppl", float("nan"))), 3),
    }
    aer = {}
    for gold in module.gold_sets:  # AER of the final weights on each align.gold set
        layers = []
        while (score := metrics.get(f"val/aer_{gold.name}_layer{len(layers) + 1}")) is not None:
            layers.append(round(float(score), 4))
        if not layers:  # logged at every validation after the sanity check
            continue
        head = metrics.get(f"val/aer_{gold.name}")  # absent without align.guided
        aer[gold.name] = {"guided_head": round(float(head), 4)} if head is not None else {}
        aer[gold.name]["layers"] = layers
    if aer:
        out["aer"] = aer
    return out


def aer_report(aer: dict[str, dict], reading: HeadReading | None) -> str:
    """The lines that end a run with gold sets: each set's AER, the guided head's and every
    layer's (heads averaged; none is picked, as a gold set here may be a test set)."""
    lines = []
    for name, scores in aer.items():
        parts = []
        if "guided_head" in scores and reading is not None:
            how = "" if reading.extraction == ARGMAX else f", {reading.extraction.name}"
            parts.append(f"guided head {reading.name}{how} {scores['guided_head']:.3f}")
        layers = " / ".join(f"{aer:.3f}" for aer in scores["layers"])
        parts.append(f"layers 1-{len(scores['layers'])}, heads averaged {layers}")
        lines.append(f"      AER {name}: " + ", ".join(parts))
    return "alignment (gold sets, final weights):\n" + "\n".join(lines)


def test_report(module: TranslationModule, datamodule: TranslationDataModule, out: Path) -> dict:
    """Score the test hypotheses of every rank, write them, and print SacreBLEU with its
    signature (rank 0 writes and prints)."""
    rows, hyps = module.detokenized("test")
    size = len(datamodule.text["test"])
    if len(rows) != size:  # trainer.fast_dev_run stops the pass early
        log.warning("test: %d of the split's %d sentences were decoded and scored", len(rows), size)
    refs = list(datamodule.text["test"].select(rows)["tgt"])
    bleu, chrf = corpus_bleu(hyps, refs), corpus_chrf(hyps, refs)
    if module.trainer.is_global_zero:
        (out / "test.hyp.txt").write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
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


def draw_heatmaps(
    model: Transformer,
    datamodule: TranslationDataModule,
    cfg: HeatmapConfig,
    out: Path,
    guided: HeadReading | None = None,
) -> dict:
    """Heatmaps of one decoder layer's cross-attention (heads averaged) after training.

    The example sentence ``cfg.src`` (translated by the model, or teacher-forced on
    ``cfg.tgt``) goes to ``alignment_layer<N>.png`` and ``alignment_heads.png``, and with
    ``guided`` (the module's guided head) the guided head alone, read as it was
    trained, to ``alignment_layer<L>_head<H>.png``; the first
    ``cfg.valid_sentences`` validation pairs of at most ``cfg.max_words`` words, teacher-forced
    on their references, to ``alignment_valid/<k>_layer<N>.png``: the same sentences every run.

    Returns:
        what was drawn, per target word the source word it attends to most.
    """
    tokenizer, valid = datamodule.tokenizer, datamodule.text["valid"]
    valid = list(valid.select(range(min(len(valid), 200))))  # the first rows: the same every run
    drawn: dict = {}
    layer = HeadReading.of(cfg.layer, None, "causal", model.cfg.n_layers, model.cfg.n_heads)
    if cfg.src:
        example = save_pair_heatmaps(model, tokenizer, cfg.src, cfg.tgt, out / "alignment", layer)
        example["png"] = example["files"][0]
        drawn["example"] = example
        log.info("alignment heatmap: %s", out / example["png"])
        if guided is not None:
            head = save_pair_heatmaps(
                model, tokenizer, cfg.src, cfg.tgt, out / "alignment", guided, heads=False
            )
            drawn["guided_head"] = {"png": head["files"][0], "strongest": head["strongest"]}
            log.info("guided head's heatmap: %s", out / head["files"][0])
    fitting = [
        row
        for row in valid
        if max(len(row["src"].split()), len(row["tgt"].split())) <= cfg.max_words
    ]
    drawn["valid"] = [
        save_pair_heatmaps(
            model,
            tokenizer,
            row["src"],
            row["tgt"],
            out / "alignment_valid" / str(k),
            layer,
            heads=False,
        )
        for k, row in enumerate(fitting[: cfg.valid_sentences], 1)
    ]
    return drawn


def draw_curves(out: Path) -> None:
    if metric_files(out):
        plot_curves(read_metrics(out)).savefig(out / "training_curves.png", dpi=120)


def draw_source_lengths(datamodule: TranslationDataModule, gold_sets, out: Path) -> None:
    """``data.concat``'s training source lengths before and after joining, beside the gold
    sets' lengths, as ``source_lengths.png``."""
    if not datamodule.source_lengths:
        return
    gold = {g.name: np.array([len(s.split()) for s in g.sources]) for g in gold_sets}
    fig = plot_length_histograms(datamodule.source_lengths, gold)
    fig.savefig(out / "source_lengths.png", dpi=120)
    log.info("source lengths of training and gold sets: %s", out / "source_lengths.png")
