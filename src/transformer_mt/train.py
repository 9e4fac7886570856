"""``run(cfg)``: build data, model and trainer from a composed config, train, test, report.

What a run prints and writes at its end (test BLEU, AER, heatmaps, curves) is ``reporting``'s.

``scripts/train.py`` is a thin Hydra entry point around this function, which tests call directly.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import logging
import os
import shutil
import time
from dataclasses import asdict, replace
from datetime import timedelta
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from omegaconf import DictConfig, OmegaConf

from transformer_mt.align.gold import GoldSet, load_gold_set
from transformer_mt.align.reading import CONFIG_KEYS
from transformer_mt.callbacks import (
    AtomicCheckpointIO,
    ExactResume,
    FinalCheckpoint,
    StepProgressBar,
)
from transformer_mt.config import (
    AlignConfig,
    DataConfig,
    FinalEvalConfig,
    TrainCheckpointsConfig,
    TrainerConfig,
    check_keys,
)
from transformer_mt.data.batching import Batch
from transformer_mt.datamodule import TranslationDataModule
from transformer_mt.distributed import check_devices
from transformer_mt.errors import UserError
from transformer_mt.lit_module import TranslationModule
from transformer_mt.metrics import literature_bleus
from transformer_mt.reporting import (
    aer_report,
    draw_curves,
    draw_heatmaps,
    draw_source_lengths,
    final_validation,
    test_report,
)
from transformer_mt.scoring import final_evaluation
from transformer_mt.viz.curves import set_aside_metrics

log = logging.getLogger(__name__)


def run(cfg: DictConfig) -> dict:
    """Train and test one configuration; everything is written to ``cfg.output_dir``.

    Returns:
        The metrics also saved as ``metrics.json``.
    """
    started = time.perf_counter()
    check_keys(cfg)
    check_positions(cfg.model, OmegaConf.to_object(cfg.data))
    final = check_final(OmegaConf.to_object(cfg.final), OmegaConf.to_object(cfg.data))
    check_devices(cfg.trainer.accelerator, cfg.trainer.devices, cfg.trainer.num_nodes)
    out, resume_from = prepare_run_dir(cfg)
    # workers=False: loader workers only read and pad the rows the sampler chose, and draw no
    # random number; Lightning's worker seeding would make each of them import Lightning.
    L.seed_everything(cfg.seed, workers=False)
    datamodule = build_data(cfg, out)
    module = build_module(cfg, datamodule, out)
    trainer = build_trainer(cfg, out)
    if trainer.is_global_zero:
        draw_source_lengths(datamodule, module.gold_sets, out)
    step = tokens_per_step(trainer, cfg.optim, cfg.data)
    fit(trainer, module, datamodule, resume_from)
    val = final_validation(trainer, module, datamodule)
    trainer.test(module, datamodule=datamodule, verbose=False)
    metrics = {
        **test_report(module, datamodule, out),
        **val,
        "parameters": sum(p.numel() for p in module.model.parameters()),
        "wall_seconds": round(time.perf_counter() - started, 1),
        **step,
    }
    if trainer.is_global_zero:
        if "aer" in val:  # once, not per DDP rank
            print(aer_report(val["aer"], module.reading))
        metrics["alignment"] = draw_heatmaps(
            module.model, datamodule, OmegaConf.to_object(cfg.heatmaps), out, module.reading
        )
        draw_curves(out)
        if final.splits:
            metrics["final"] = final_evaluation(out, final, datamodule.cfg, module.decode_cfg)
        (out / "metrics.json").write_text(json.dumps(metrics, indent=2, ensure_ascii=False) + "\n")
    return metrics


def check_final(final: FinalEvalConfig, data: DataConfig) -> FinalEvalConfig:
    """The splits ``final.splits`` names exist, checked before training rather than after it."""
    named = {"test"}
    if data.source == "local" or data.local_dir is not None:
        named |= set(data.split_files())
    missing = [name for name in final.splits if name not in named]
    if missing:
        raise UserError(
            f"final.splits names {', '.join(missing)}, which data={data.name} does not hold "
            f"(it has {', '.join(sorted(named - {'train', 'valid'}))}); further test sets come "
            "from the files that data.local_files (with data.local_dir) or data.files names"
        )
    return final


def check_positions(model: DictConfig, data: DataConfig) -> None:
    """Every training pair fits the model's positions: a side of ``n`` pieces takes n + 1
    (EOS, or BOS in front of the decoder's input)."""
    if data.max_len + 1 > model.max_positions:
        raise UserError(
            f"data.max_len={data.max_len} pieces need {data.max_len + 1} positions, but "
            f"model.max_positions={model.max_positions}; lower data.max_len or raise "
            f"model.max_positions"
        )


def prepare_run_dir(cfg: DictConfig) -> tuple[Path, Path | None]:
    """The run directory (a new one, or the one resumed) with its config.yaml; the checkpoint to resume."""
    out = Path(cfg.resume or cfg.output_dir)
    resume_from = _resume_checkpoint(cfg.resume) if cfg.resume else None
    out.mkdir(parents=True, exist_ok=True)
    if resume_from is not None:
        rank_zero_only(set_aside_metrics)(out)  # once, before any rank's logger starts
    (out / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    return out, resume_from


COMPILE_PAD_MULTIPLE = 16


def build_data(cfg: DictConfig, out: Path) -> TranslationDataModule:
    """The corpus, tokenizer and splits (built once, or loaded from the cache); the tokenizer is
    copied into the run directory so that it is self-contained."""
    data_cfg: DataConfig = OmegaConf.to_object(cfg.data)
    if cfg.trainer.compile and data_cfg.pad_multiple == 1:
        # one compiled graph per padded shape: widths in steps of 16, not one per length
        data_cfg.pad_multiple = COMPILE_PAD_MULTIPLE
        log.info(
            "trainer.compile=true: batch widths padded to multiples of %d", COMPILE_PAD_MULTIPLE
        )
    datamodule = TranslationDataModule(
        data_cfg, seed=cfg.seed, max_positions=cfg.model.max_positions
    )
    datamodule.setup("fit")  # Lightning's own calls then return at once
    shutil.copyfile(datamodule.tokenizer.path, out / "tokenizer.model")
    return datamodule


def build_module(
    cfg: DictConfig, datamodule: TranslationDataModule, out: Path
) -> TranslationModule:
    """The LightningModule, with the vocabulary size, tokenizer and BLEU references of the data."""
    trainer_cfg: TrainerConfig = OmegaConf.to_object(cfg.trainer)
    model_cfg = replace(OmegaConf.to_object(cfg.model), vocab_size=datamodule.tokenizer.vocab_size)
    module = TranslationModule.from_configs(
        model_cfg,
        OmegaConf.to_object(cfg.optim),
        OmegaConf.to_object(cfg.decode),
        str(out / "tokenizer.model"),
        on_nonfinite_loss=trainer_cfg.on_nonfinite_loss,
        compile=trainer_cfg.compile,
        valid_max_sentences=cfg.data.valid_max_sentences,
        references={split: list(datamodule.text[split]["tgt"]) for split in ("valid", "test")},
        guided=guided_settings(cfg),
        gold_sets=gold_sets(cfg, datamodule.tokenizer),
        literature_bleus={
            key: functools.partial(bleu, lang=cfg.data.tgt_lang)
            for key, bleu in literature_bleus(cfg.data.name, cfg.data.tgt_lang).items()
        },
    )
    n_params = sum(p.numel() for p in module.model.parameters())
    log.info(
        "model=%s: %s parameters, vocabulary %d",
        model_cfg.name,
        f"{n_params:,}",
        model_cfg.vocab_size,
    )
    return module


def guided_settings(cfg: DictConfig) -> dict | None:
    """``align.guided``'s head and weight for the module; it needs the data's word links."""
    align = cfg.align
    if not align.guided:
        return None
    if cfg.data.alignments is None:
        raise UserError(
            "align.guided=true needs word alignments of the training pairs: set data.alignments "
            "to a Pharaoh file, to eflomal, or (demo corpus) to builtin"
        )
    # every key a reading is read from (HeadReading.from_config), so validation AER reads the
    # head as every command does
    keys = ("weight", "layer", "head", "mode", *CONFIG_KEYS)
    return {key: align[key] for key in keys}


def gold_sets(cfg: DictConfig, tokenizer) -> list[GoldSet]:
    """``align.gold``'s sets in the run's direction, minus pairs the tokenizer cannot fold into words."""
    sets = []
    align: AlignConfig = OmegaConf.to_object(cfg.align)  # typed and checked (GoldSetConfig)
    for name, spec in align.gold.items():
        gold = load_gold_set(name, spec, cfg.data.src_lang, cfg.data.tgt_lang)
        gold, dropped = gold.foldable(tokenizer)
        log.info(
            "align.gold.%s: %d pairs scored at every validation%s",
            name,
            len(gold),
            f" ({dropped} left out: their pieces do not fold into their words)" if dropped else "",
        )
        sets.append(gold)
    return sets


def build_trainer(cfg: DictConfig, out: Path) -> L.Trainer:
    """``lightning.Trainer`` with our loggers, exact-resume and checkpoint callbacks."""
    trainer_cfg: TrainerConfig = OmegaConf.to_object(cfg.trainer)
    arguments = dict(
        **lightning_arguments(trainer_cfg),
        default_root_dir=out,
        logger=build_loggers(trainer_cfg.loggers, out),
        callbacks=[
            *([StepProgressBar()] if trainer_cfg.enable_progress_bar else []),
            ExactResume(),
            FinalCheckpoint(out / "checkpoints" / "last.ckpt"),
            *checkpoint_callbacks(OmegaConf.to_object(cfg.checkpoint), out),
        ],
        plugins=[AtomicCheckpointIO()],
        use_distributed_sampler=False,  # TokenBatchSampler shards by rank itself
    )
    try:
        return L.Trainer(**arguments)
    except MisconfigurationException as err:  # what check_devices does not foresee: one line too
        raise UserError(f"trainer: {err}") from err


def fit(
    trainer: L.Trainer,
    module: TranslationModule,
    datamodule: TranslationDataModule,
    resume_from: Path | None,
) -> None:
    """``trainer.fit``; running out of GPU memory names the batch and what to lower."""
    try:
        trainer.fit(module, datamodule=datamodule, ckpt_path=resume_from)
    except torch.OutOfMemoryError as err:
        raise RuntimeError(
            out_of_memory_message(module.batch_in_flight, datamodule.cfg, trainer)
        ) from err


def lightning_arguments(cfg: TrainerConfig) -> dict:
    """The ``lightning.Trainer`` arguments of ``cfg``: our own keys out, ``auto-mixed`` resolved."""
    args = {k: v for k, v in asdict(cfg).items() if k not in NOT_TRAINER_ARGUMENTS}
    if args["precision"] == "auto-mixed":
        args["precision"] = (
            "bf16-mixed"
            if torch.cuda.is_available() and torch.cuda.is_bf16_supported()
            else "16-mixed"  # fp16 with dynamic loss scaling (Lightning's GradScaler)
        )
        log.info("precision: %s", args["precision"])
    return args


NOT_TRAINER_ARGUMENTS = {"compile", "on_nonfinite_loss", "loggers"}


def build_loggers(names: list[str], out: Path) -> list:
    """Lightning's loggers, all writing under ``out``.

    W&B and MLflow need their packages (``pip install -e ".[loggers]"``). W&B runs online once
    ``wandb login`` has been done; ``WANDB_MODE=offline`` keeps the run under ``out/wandb`` for a
    later ``wandb sync``. MLflow logs to ``$MLFLOW_TRACKING_URI`` when set (a team's server),
    else to a SQLite store in the run directory (``mlflow ui --backend-store-uri
    sqlite:///<run>/mlflow.db``), its artifacts beside it: MLflow 3 no longer takes new runs in
    its old ``mlruns`` file store.
    """
    loggers = []
    for name in names:
        if name == "csv":
            loggers.append(CSVLogger(out, name="logs", version=""))
        elif name == "tensorboard":
            loggers.append(TensorBoardLogger(out, name="logs", version="", default_hp_metric=False))
        elif name == "wandb":
            _needs(name, "wandb")
            from lightning.pytorch.loggers import WandbLogger

            loggers.append(WandbLogger(save_dir=str(out), name=out.name, project="transformer-mt"))
        elif name == "mlflow":
            _needs(name, "mlflow")
            from lightning.pytorch.loggers import MLFlowLogger

            uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{out.resolve()}/mlflow.db"
            loggers.append(
                MLFlowLogger(
                    experiment_name="transformer-mt",
                    run_name=out.name,
                    tracking_uri=uri,
                    artifact_location=(out.resolve() / "mlartifacts").as_uri(),
                )
            )
    return loggers


def _needs(logger: str, package: str) -> None:
    """A logger's package is installed, or one line says how to install it."""
    if importlib.util.find_spec(package) is None:
        raise UserError(
            f"trainer.loggers has {logger}, but the {package} package is not installed: "
            f'pip install -e ".[loggers]" (or drop {logger} from trainer.loggers)'
        )


def checkpoint_callbacks(cfg: TrainCheckpointsConfig, out: Path) -> list[ModelCheckpoint]:
    """Keep the last ``keep_last`` checkpoints written every N minutes and/or N steps (else per epoch)."""
    common = dict(
        dirpath=out / "checkpoints",
        filename="{epoch}-{step}",
        monitor="step",
        mode="max",  # "best" = newest, so top-k = the last k
        save_top_k=cfg.keep_last,
        save_last=True,
    )
    callbacks = []
    if cfg.every_minutes is not None:
        callbacks.append(
            ModelCheckpoint(**common, train_time_interval=timedelta(minutes=cfg.every_minutes))
        )
    if cfg.every_steps is not None:
        callbacks.append(ModelCheckpoint(**common, every_n_train_steps=cfg.every_steps))
    return callbacks or [ModelCheckpoint(**common)]


def tokens_per_step(trainer: L.Trainer, optim: DictConfig, data: DictConfig) -> dict:
    """Derive gradient accumulation from ``optim.tokens_per_step`` for the devices present (§5.1).

    Each device's micro-batch holds at most ``data.max_tokens`` padded tokens per side, so a
    step holds about world_size · accumulation · max_tokens; the accumulation is the nearest
    integer that brings this to the requested number.
    """
    per_micro_step = data.max_tokens * trainer.world_size
    if optim.tokens_per_step is not None:
        trainer.accumulate_grad_batches = max(1, round(optim.tokens_per_step / per_micro_step))
    accumulate = trainer.accumulate_grad_batches
    log.info(
        "step size: %d device(s) x %d tokens x %d accumulated = %d padded target tokens per step%s",
        trainer.world_size,
        data.max_tokens,
        accumulate,
        per_micro_step * accumulate,
        f" (optim.tokens_per_step={optim.tokens_per_step})" if optim.tokens_per_step else "",
    )
    step = {
        "world_size": trainer.world_size,
        "accumulate_grad_batches": accumulate,
        "max_tokens_per_step": per_micro_step * accumulate,
    }
    for logger in trainer.loggers:  # beside the curves (hparams.yaml, TensorBoard's hparams)
        logger.log_hyperparams(step)
    return step


def out_of_memory_message(batch: Batch | None, data: DataConfig, trainer: L.Trainer) -> str:
    shape = f"a batch of {batch.describe()}" if batch is not None else "the first batch"
    return (
        f"out of GPU memory on {shape} with data.max_tokens={data.max_tokens} and "
        f"precision={trainer.precision}. Lower data.max_tokens (optim.tokens_per_step keeps the step "
        f"size by accumulating more micro-batches), lower data.max_len, or use precision=bf16-mixed"
    )


def _resume_checkpoint(run_dir: str) -> Path:
    ckpt = Path(run_dir) / "checkpoints" / "last.ckpt"
    if not ckpt.is_file():
        raise FileNotFoundError(
            f"resume={run_dir}: no checkpoints/last.ckpt there; pass a run directory written by "
            f"scripts/train.py that has saved a checkpoint (see checkpoint.every_steps)"
        )
    return ckpt
