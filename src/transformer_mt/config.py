"""Typed configuration of training and evaluation, registered with Hydra as schemas.

The model's and the search's dataclasses live with them (``model/config.py``,
``decoding/config.py``) and are re-exported here.

Hydra composes the YAML files in ``conf/`` on top of ``TrainConfig``; because the schema
is a structured config, a key that does not exist (``model.dmodel=256``) is an error, not
a silently ignored setting. Model code receives a ``TransformerConfig``, never a DictConfig.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

from omegaconf import MISSING, DictConfig, OmegaConf

from transformer_mt.align.extract import Extraction
from transformer_mt.align.gold import GoldSetConfig
from transformer_mt.align.reading import MODES
from transformer_mt.decoding.config import DecodeConfig
from transformer_mt.errors import UserError
from transformer_mt.model.config import TransformerConfig

__all__ = [
    "AlignConfig",
    "ConcatConfig",
    "TrainCheckpointsConfig",
    "DataConfig",
    "DecodeConfig",
    "EvaluateConfig",
    "GoldSetConfig",
    "OptimConfig",
    "TrainConfig",
    "TrainerConfig",
    "TransformerConfig",
    "check_keys",
    "register_configs",
]


@dataclass
class ConcatConfig:
    """Training examples made by joining training pairs (``data.concat``; data/concat.py)."""

    share: float = 0.0  # joined examples added per training pair: 0 none, 0.1 one per ten pairs
    max_parts: int = 5  # each joins 2..max_parts random training pairs (fewer if over max_len)

    def __post_init__(self) -> None:
        if self.share < 0:
            raise UserError(f"data.concat.share must be 0 or more, got {self.share}")
        if self.max_parts < 2:
            raise UserError(f"data.concat.max_parts must be 2 or more, got {self.max_parts}")


@dataclass
class DataConfig:
    """A parallel corpus, its tokenizer and its batching; presets in ``conf/data``."""

    name: str = MISSING
    source: str = (
        "demo"  # where pairs come from: "demo" (built in), "hub" (datasets), "local" (files)
    )
    src_lang: str = "es"
    tgt_lang: str = "en"
    seed: int = (
        1234  # the demo corpus, random subsets and the SentencePiece sample are drawn from it
    )
    # source=demo: sizes of the generated splits
    train_size: int = 40_000
    valid_size: int = 1_000
    test_size: int = 1_000
    # source=hub: datasets.load_dataset(hf_path, hf_config); rows {"translation": {lang: text}}
    hf_path: str | None = None
    hf_config: str | None = None
    hf_splits: dict[str, str] = field(
        default_factory=lambda: {"train": "train", "valid": "validation", "test": "test"}
    )
    # source=local: per split, [source file, target file] (line-aligned, optionally .gz) or [one .tsv]
    files: dict[str, list[str]] = field(default_factory=dict)
    # Any data set, from a copy on disk instead (a machine without the hub): local_dir names the
    # folder, local_files the preset's file names in it per split, as for ``files``.
    local_dir: str | None = None
    local_files: dict[str, list[str]] = field(default_factory=dict)
    # source=local without valid/test files: per split, N pairs drawn (seeded) from the training
    # files, e.g. {valid: 1000, test: 1000}; training then loses every pair that shares its
    # source or target sentence with a held-out one
    holdout: dict[str, int] = field(default_factory=dict)
    # Word alignments of the training pairs, for guided alignment (align.guided): a Pharaoh file
    # (source-target, 0-indexed, one line per training pair), "eflomal" (computed on the training
    # split and cached; pip install -e ".[align]"), or "builtin" (the demo corpus's own)
    alignments: str | None = None
    # Sentence pairs added to training after the holdout and the subset, never held out: the
    # text (not the links) of word-alignment gold sets, which an unsupervised aligner such as
    # eflomal is given too. Per name, a gold set as in align.gold (recipes: ${align.gold}).
    extra_train: dict[str, Any] = field(default_factory=dict)  # name -> GoldSetConfig
    # Long training examples joined from 2..N training pairs (long-sentence alignment, data/concat.py)
    concat: ConcatConfig = field(default_factory=ConcatConfig)
    train_subset: int | None = None  # keep N training pairs
    subset_strategy: str = "first"  # "first" N, or a seeded "random" N
    vocab_size: int = 1_000  # joint SentencePiece BPE vocabulary
    input_sentence_size: int = 2_000_000  # sentences sampled (seeded) to train SentencePiece
    max_len: int = 128  # training pairs longer than this (in pieces) are dropped and counted
    max_tokens: int = 4_096  # padded tokens per batch, per side, per device
    # Batch widths rounded up to a multiple of this (1: the longest sentence). A compiled
    # training step (trainer.compile=true, which sets 16 when this is left at 1) then meets a
    # few shapes instead of one per length; benchmarks/padding.py prints what it costs.
    pad_multiple: int = 1
    valid_max_sentences: int = 1_000  # sentences decoded for validation BLEU each epoch
    num_proc: int = 1  # processes for tokenization (Dataset.map)
    num_workers: int = 0  # DataLoader workers
    cache_dir: str = MISSING
    example: str | None = None  # a source sentence whose attention is drawn after training
    # the corpus's licence or terms, named in an exported model card (scripts/export_hf.py)
    license: str | None = None

    def split_files(self) -> dict[str, list[str]]:
        """Per split, the files to read: ``files``, or ``local_files`` inside ``local_dir``."""
        if self.local_dir is None:
            return self.files
        if not self.local_files:
            hub = (
                f"; for a copy of the hub's {self.hf_path}, download it where the hub can be "
                f"reached (hf download {self.hf_path} --repo-type dataset "
                + (f"--include '{self.hf_config}/*' --include '*.md' " if self.hf_config else "")
                + "--local-dir DIR), then data.hf_path=DIR"
                if self.source == "hub" and self.hf_path
                else ""
            )
            raise UserError(
                f"data.local_dir={self.local_dir} is set, but data={self.name} names no "
                f"data.local_files (per split, the file names inside it); use data=local with "
                f"data.files instead{hub}"
            )
        folder = Path(self.local_dir).expanduser()
        return {
            split: [str(folder / name) for name in names]
            for split, names in self.local_files.items()
        }

    def __post_init__(self) -> None:
        # plain dicts from the config (and a run's config.yaml read back): typed here
        self.extra_train = GoldSetConfig.typed("data.extra_train", self.extra_train)
        if isinstance(self.concat, Mapping):
            self.concat = ConcatConfig(**self.concat)
        if self.source not in ("demo", "hub", "local"):
            raise UserError(f"data.source must be 'demo', 'hub' or 'local', got {self.source!r}")
        if self.subset_strategy not in ("first", "random"):
            raise UserError(
                f"data.subset_strategy must be 'first' or 'random', got {self.subset_strategy!r}"
            )
        unknown = set(self.holdout) - {"valid", "test"}
        if unknown:
            raise UserError(f"data.holdout takes valid and test, not {sorted(unknown)}")
        if self.alignments == "builtin" and self.source != "demo":
            raise UserError(
                f"data.alignments=builtin: only the demo corpus has built-in alignments; "
                f"data={self.name} needs a Pharaoh file or data.alignments=eflomal"
            )
        if self.pad_multiple < 1:
            raise UserError(
                f"data.pad_multiple={self.pad_multiple} must be 1 (no rounding) or more"
            )
        if self.max_tokens < self.max_len + 2:
            raise UserError(
                f"data.max_tokens={self.max_tokens} cannot hold one pair of data.max_len="
                f"{self.max_len} pieces plus BOS/EOS; raise max_tokens or lower max_len"
            )


@dataclass
class OptimConfig:
    """Adam with the inverse-square-root warm-up schedule (§5.3); presets in ``conf/optim``."""

    name: str = "paper"
    lr_factor: float = 1.0  # multiplies d_model^-0.5 · min(step^-0.5, step · warmup^-1.5)
    warmup: int = 4000
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-9
    weight_decay: float = 0.0
    # Target tokens per optimizer step, summed over devices and accumulated micro-batches (the
    # paper: ~25k). The accumulation factor is derived from it and data.max_tokens for the devices
    # actually present. None: one micro-batch per step (trainer.accumulate_grad_batches applies).
    tokens_per_step: int | None = None
    fused: Any = (
        "auto"  # fused Adam kernel: true, false, or "auto" (where PyTorch has one: CPU, CUDA)
    )

    def __post_init__(self) -> None:
        if self.warmup <= 0:
            raise UserError(f"optim.warmup must be positive, got {self.warmup}")
        if self.tokens_per_step is not None and self.tokens_per_step <= 0:
            raise UserError(
                f"optim.tokens_per_step must be positive or null, got {self.tokens_per_step}"
            )
        if self.fused not in (True, False, "auto"):
            raise UserError(f"optim.fused must be true, false or auto, got {self.fused!r}")


@dataclass
class TrainerConfig:
    """Arguments passed on to ``lightning.Trainer``; presets in ``conf/trainer``."""

    accelerator: str = "cpu"
    devices: Any = 1
    num_nodes: int = 1
    strategy: str = "auto"
    precision: str = "32-true"
    max_epochs: int | None = 10
    max_steps: int = -1
    max_time: str | None = None  # "DD:HH:MM:SS"
    gradient_clip_val: float | None = None
    accumulate_grad_batches: int = 1
    log_every_n_steps: int = 50
    val_check_interval: Any = None
    check_val_every_n_epoch: int | None = (
        1  # None with an integer val_check_interval: every N batches
    )
    num_sanity_val_steps: int = 0
    limit_train_batches: Any = None
    limit_val_batches: Any = None
    fast_dev_run: Any = False
    deterministic: Any = False
    enable_progress_bar: bool = True
    # Not lightning.Trainer arguments (train.py takes them out first):
    # torch.compile the training step (forward and loss; data.pad_multiple 16 unless set)
    compile: bool = False
    on_nonfinite_loss: str = "stop"  # "stop" (raise, naming the step and batch) or "skip" the step
    loggers: list[str] = field(default_factory=lambda: ["csv", "tensorboard"])  # + wandb, mlflow

    def __post_init__(self) -> None:
        if self.on_nonfinite_loss not in ("stop", "skip"):
            raise UserError(
                f"trainer.on_nonfinite_loss must be stop or skip, got {self.on_nonfinite_loss!r}"
            )
        unknown = set(self.loggers) - {"csv", "tensorboard", "wandb", "mlflow"}
        if unknown:
            raise UserError(
                f"trainer.loggers: unknown {sorted(unknown)}; choose from csv, tensorboard, wandb, mlflow"
            )


@dataclass
class HeatmapConfig:
    """The alignment heatmaps drawn at the end of training."""

    layer: int = -1  # decoder layer whose cross-attention is plotted (heads averaged)
    src: str | None = None  # an example sentence (translated by the model); conf: data.example
    tgt: str | None = None  # a target for ``src`` to teacher-force instead of translating
    valid_sentences: int = 3  # also draw the first N validation pairs of at most max_words words
    max_words: int = 30


@dataclass
class AlignConfig:
    """Guided alignment (Garg et al. 2019) and alignment scores while training."""

    guided: bool = False  # train one cross-attention head towards data.alignments' word links
    weight: float = 0.05  # λ, the alignment loss's weight next to the per-token translation loss
    layer: int = -2  # the supervised head's decoder layer: 1-based, or negative from the end
    head: int = 1  # 1-based
    # Which row of the head stands for target word j (transformer_mt.align.reading): causal,
    # the row that predicts j; shift, the next row, where j is the decoder's input (Chen et
    # al. 2020), at no extra cost; full, j's row in a second pass without the causal mask (Garg
    # et al.'s full context, fairseq's --full-context-alignment), one more pass up to align.layer.
    mode: str = "causal"
    # How the guided head's rows become links for validation AER (transformer_mt.align.extract,
    # the fields of its Extraction): argmax or grow-diag; tau: grow-diag's (null: 0); diagonal:
    # the diagonal prior's width in words (0: none), narrowing past narrows_past source words
    # and following the anchors' path past anchored_past (0: never); alike: words spelled alike
    # raised to that share of their row's best (0: not). Choose them on development data:
    # scripts/align.py RUN --tune-on xlwa_dev --tune-on epps_dev (every command then reads that).
    extract: str = "argmax"
    tau: float | None = None
    diagonal: float = 0.0
    narrows_past: int = 0
    anchored_past: int = 0
    alike: float = 0.0
    gold: dict[str, Any] = field(default_factory=dict)  # name -> GoldSetConfig: AER at validations

    def __post_init__(self) -> None:
        self.gold = GoldSetConfig.typed("align.gold", self.gold)
        if self.weight < 0:
            raise UserError(f"align.weight must be >= 0, got {self.weight}")
        if self.head < 1:
            raise UserError(f"align.head is 1-based, got {self.head}")
        if self.mode not in MODES:
            raise UserError(f"align.mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        try:
            Extraction(
                self.extract,
                self.tau,
                self.diagonal,
                self.narrows_past,
                self.anchored_past,
                self.alike,
            )
        except UserError as err:
            raise UserError(f"align.extract={self.extract} and its parameters: {err}") from None


@dataclass
class TrainCheckpointsConfig:
    """``checkpoint:`` of train.yaml, the checkpoints a run writes: every N minutes and/or N
    steps, else once per epoch (``EvalCheckpointConfig`` is what evaluation reads).

    Each is written to a temporary file and renamed into place, so a crash mid-write never
    leaves a corrupt checkpoint; ``last.ckpt`` always points at the newest.
    """

    keep_last: int = 5  # -1 keeps them all
    every_minutes: float | None = None  # the paper: 10
    every_steps: int | None = None
    average_last: int = (
        1  # what scripts/evaluate.py averages for this run by default (paper: 5, 20)
    )

    def __post_init__(self) -> None:
        for name in ("every_minutes", "every_steps"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise UserError(f"checkpoint.{name} must be positive or null, got {value}")


@dataclass
class FinalEvalConfig:
    """``final:`` of train.yaml: the evaluation a paper reports, run once after training (rank 0).

    Every choice is made on the validation split: how many of the last checkpoints to average
    (of ``average_last``, by greedy BLEU), then the length penalty α (of ``length_penalties``,
    by BLEU of beam search of ``beam_size``). Then each split of ``splits`` is decoded once with
    those settings and scored as ``scripts/evaluate.py`` scores it: test splits are scored,
    never consulted. Off (no ``splits``) by default.
    """

    splits: list[str] = field(default_factory=list)  # e.g. [test, test2017, mscoco2017]
    average_last: list[int] = field(default_factory=lambda: [1])  # e.g. [1, 5, 10]
    beam_size: int = 5
    length_penalties: list[float] = field(default_factory=lambda: [0.6, 1.0, 1.4])

    def __post_init__(self) -> None:
        if not self.splits:
            return
        if self.beam_size < 2:
            raise UserError(
                f"final.beam_size={self.beam_size}: the final evaluation chooses α among beam "
                "hypotheses; give 2 or more, or final.splits=[] for none"
            )
        if not self.length_penalties:
            raise UserError("final.length_penalties is empty: give the α values to try")
        if not self.average_last or min(self.average_last) < 1:
            raise UserError(
                f"final.average_last={list(self.average_last)}: give the checkpoint counts to "
                "try, each 1 or more (1: the last checkpoint alone)"
            )
        if "valid" in self.splits or "train" in self.splits:
            raise UserError(
                f"final.splits={list(self.splits)}: valid chooses α and train is trained on; "
                "name test splits only"
            )


@dataclass
class TrainConfig:
    """The primary config of ``scripts/train.py`` (``conf/train.yaml``)."""

    model: TransformerConfig = field(default_factory=TransformerConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    heatmaps: HeatmapConfig = field(default_factory=HeatmapConfig)
    align: AlignConfig = field(default_factory=AlignConfig)
    checkpoint: TrainCheckpointsConfig = field(default_factory=TrainCheckpointsConfig)
    final: FinalEvalConfig = field(default_factory=FinalEvalConfig)
    seed: int = 1234
    output_dir: str = MISSING  # the run directory (Hydra's)
    resume: str | None = None  # a run directory to continue (scripts/train.py resume=<run dir>)


@dataclass
class EvalCheckpointConfig:
    """``ckpt:`` of evaluate.yaml, the weights an evaluation reads from a run's checkpoints."""

    path: str | None = None  # a .ckpt file; None: the run directory's last.ckpt
    average_last: int = 1  # average the run's last N step checkpoints (5 for base, 20 for big)


@dataclass
class EvaluateConfig:
    """The primary config of ``scripts/evaluate.py`` (``conf/evaluate.yaml``)."""

    run_dir: str = MISSING  # a directory written by scripts/train.py
    ckpt: EvalCheckpointConfig = field(default_factory=EvalCheckpointConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    split: str = "test"  # train, valid or test of the run's data config
    limit: int | None = None  # the first N sentences only
    long_inputs: str = "truncate"  # or "error": sources longer than the model's positions
    # choose α instead of scoring one: decode the split with each length penalty, report BLEU per
    # α and the best (on split=valid, as the paper chose its α on the development set, §6.1)
    length_penalties: list[float] | None = None
    output_dir: str = MISSING


def check_keys(cfg: DictConfig, schema: type = None, prefix: str = "") -> None:
    """Refuse keys the schema does not have, including ones forced in with Hydra's ``+key=value``.

    Hydra already rejects ``key=value`` for an unknown key; ``+key=value`` bypasses the
    struct flag, and ``OmegaConf.to_object`` would then drop the key silently.
    """
    schema = schema or OmegaConf.get_type(cfg)
    known = {f.name: f for f in fields(schema)}
    for key in cfg.keys():
        if key not in known:
            raise UserError(
                f"unknown config key '{prefix}{key}'; {prefix.rstrip('.') or 'the top level'} accepts: "
                f"{', '.join(sorted(known))} (see transformer_mt/config.py)"
            )
        child = OmegaConf.get_type(cfg, key)
        if child is not None and is_dataclass(child) and isinstance(cfg[key], DictConfig):
            check_keys(cfg[key], child, f"{prefix}{key}.")


def run_average_last(run_dir: str) -> int:
    """``checkpoint.average_last`` of a run's saved config (1 when it has none)."""
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        return 1
    return int(OmegaConf.select(OmegaConf.load(path), "checkpoint.average_last", default=1))


def checkpoint_step(path: str | Path) -> int | None:
    """The training step in a checkpoint's file name (``epoch=2-step=800.ckpt``: 800), or None."""
    match = re.search(r"step=(\d+)", Path(path).name)
    return int(match.group(1)) if match else None


def checkpoint_tag(path: str | None) -> str:
    """What ``evaluate.py``'s output folder adds for ``ckpt.path``: ``_step800`` for a step
    checkpoint, ``_<name>`` for another file, nothing for a run directory or ``last.ckpt``
    (what the folder holds without it), so that evaluating two checkpoints keeps both outputs."""
    if path is None or Path(path).is_dir() or Path(path).name == "last.ckpt":
        return ""
    step = checkpoint_step(path)
    return f"_step{step}" if step is not None else f"_{Path(path).stem}"


def register_configs() -> None:
    """Register the schemas that ``conf/train.yaml`` and ``conf/evaluate.yaml`` are validated against.

    Called by the entry points (``scripts/*.py``, the tests' conftest) only: importing the
    package never loads Hydra.
    """
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name="train_schema", node=TrainConfig)
    ConfigStore.instance().store(name="evaluate_schema", node=EvaluateConfig)
    if not OmegaConf.has_resolver("run_average_last"):
        OmegaConf.register_new_resolver("run_average_last", run_average_last)
    if not OmegaConf.has_resolver("checkpoint_tag"):
        OmegaConf.register_new_resolver("checkpoint_tag", checkpoint_tag)
