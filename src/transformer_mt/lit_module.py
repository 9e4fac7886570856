"""The ``LightningModule``: the training logic around a plain ``Transformer``.

It owns the loss (label-smoothed cross-entropy, §5.4), the optimizer and schedule (§5.3),
logging, and validation/test decoding for SacreBLEU. The model knows none of these.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict

import lightning as L
import torch
from torch import Tensor

from transformer_mt.align.gold import GoldSet
from transformer_mt.align.reading import HeadReading
from transformer_mt.analysis.alignment import gold_aer
from transformer_mt.config import DecodeConfig, OptimConfig, TransformerConfig
from transformer_mt.data.batching import Batch
from transformer_mt.data.tokenizer import Tokenizer
from transformer_mt.decoding import decode_batch
from transformer_mt.decoding.compiled import CountingInductor
from transformer_mt.distributed import gather_rows
from transformer_mt.loss import alignment_loss, guided_translation_loss, translation_loss
from transformer_mt.metrics import corpus_bleu
from transformer_mt.model import Transformer
from transformer_mt.model.vocab import PAD_ID
from transformer_mt.optim import build_optimizer
from transformer_mt.step_monitor import StepReporter


class TranslationModule(L.LightningModule):
    """Trains a ``Transformer``; validation and test decode with ``decode`` settings and score with SacreBLEU."""

    def __init__(
        self,
        model: dict,
        optim: dict,
        decode: dict,
        tokenizer_path: str = "",
        on_nonfinite_loss: str = "stop",
        compile: bool = False,
        valid_max_sentences: int = 1_000,
        references: dict[str, Sequence[str]] | None = None,
        guided: dict | None = None,
        gold_sets: Sequence[GoldSet] = (),
        literature_bleus: dict[str, Callable] | None = None,
    ) -> None:
        """
        Args:
            model, optim, decode: the dataclass configs as plain dicts (a checkpoint's
                hyperparameters rebuild the model alone from them).
            tokenizer_path: the SentencePiece model that detokenizes hypotheses for BLEU.
            compile: True compiles the training step with one graph per batch width (the
                batch size symbolic).
            valid_max_sentences: validation BLEU decodes the first N validation rows.
            references: {"valid": [...], "test": [...]} target sentences by row, for BLEU;
                none: BLEU is not computed (the loss and perplexity still are).
            guided: guided alignment, {"weight": λ, "layer": L, "head": H, "mode": M, and
                the reading's ``CONFIG_KEYS``} (an ``AlignConfig``'s values): the loss gains λ x
                the KL divergence between that cross-attention head, read as its
                ``HeadReading`` says, and the batch's word links
                (``transformer_mt.loss.alignment_loss``); validation AER reads its links as
                every command reads that reading.
            gold_sets: gold alignments scored at every validation (``val/aer_<name>``: the
                guided head's AER; ``val/aer_<name>_layer<k>``: each layer's, heads averaged).
            literature_bleus: tokenized BLEUs logged beside SacreBLEU as ``<split>/<key>``
                (``metrics.literature_bleus`` for the data, the target language bound):
                ``{key: bleu(hypotheses, references) -> Score}``.
        """
        super().__init__()
        # Plain dicts, so a checkpoint rebuilds the model alone; references and gold are data.
        self.save_hyperparameters(ignore=["references", "gold_sets", "literature_bleus"])
        self.model_cfg = TransformerConfig.from_saved(model)
        self.optim_cfg = OptimConfig(**optim)
        self.decode_cfg = DecodeConfig(**decode)
        self.model = Transformer(self.model_cfg)
        self.compile_model = compile
        self.steps = StepReporter(on_nonfinite_loss)  # logs and guards the training steps
        self.tokenizer = Tokenizer(tokenizer_path) if tokenizer_path else None
        self.valid_max_sentences = valid_max_sentences
        self.references = dict(references or {})
        # the guided head, resolved once; None: no guided alignment
        self.reading: HeadReading | None = None
        self.align_weight = 0.0
        if guided:
            self.reading = HeadReading.from_config(
                guided, self.model_cfg.n_layers, self.model_cfg.n_heads
            )
            self.align_weight = guided["weight"]
        self.gold_sets = list(gold_sets)
        self.literature_bleus = dict(literature_bleus or {})
        self.batch_in_flight: Batch | None = None  # for error messages (out of memory)
        self.validated_at_step: int | None = None  # the step of the last validation
        # trainer.compile: translation_loss and guided_translation_loss compiled (configure_model)
        self.compiled_loss = self.compiled_guided_loss = None
        self.compile_counter: CountingInductor | None = None
        self._outputs: dict[str, dict[int, list[int]]] = {}  # split -> row -> hypothesis ids
        # split -> row -> (label-smoothed loss, NLL, target tokens), each summed over the row
        self._sums: dict[str, dict[int, tuple[float, float, int]]] = {}

    @classmethod
    def from_configs(
        cls,
        model: TransformerConfig,
        optim: OptimConfig,
        decode: DecodeConfig,
        tokenizer_path: str = "",
        **kwargs,
    ) -> TranslationModule:
        return cls(asdict(model), asdict(optim), asdict(decode), tokenizer_path, **kwargs)

    def configure_model(self) -> None:
        if self.compile_model and self.compile_counter is None:
            # The functions are compiled, not the model: parameter names (and checkpoints) stay.
            self.compile_counter = CountingInductor()
            self.compiled_loss = torch.compile(translation_loss, backend=self.compile_counter)
            self.compiled_guided_loss = torch.compile(
                guided_translation_loss, backend=self.compile_counter
            )

    def _run_compiled(self, fn, batch: Batch, *args):
        """``fn(src, tgt_in, tgt_out, *args)`` compiled: one graph per padded (source, target)
        width (``data.pad_multiple``). The batch size varies with token batching and is left
        symbolic; no width turns symbolic behind our back (automatic dynamic shapes would trade
        the buckets for slower code)."""
        for t in (batch.src, batch.tgt_in, batch.tgt_out):
            torch._dynamo.maybe_mark_dynamic(t, 0)
        with torch._dynamo.config.patch(automatic_dynamic_shapes=False):
            return fn(batch.src, batch.tgt_in, batch.tgt_out, *args)

    def _step(self, batch: Batch) -> tuple[Tensor, Tensor, int]:
        """The training step's summed loss and NLL, and its real target tokens."""
        eps = self.model_cfg.label_smoothing
        if self.compiled_loss is not None:
            loss, nll = self._run_compiled(
                functools.partial(self.compiled_loss, self.model), batch, eps
            )
        else:
            loss, nll = translation_loss(self.model, batch.src, batch.tgt_in, batch.tgt_out, eps)
        return loss, nll, batch.n_tgt_tokens

    def on_train_epoch_end(self) -> None:
        if self.compile_counter is not None:  # recompiles are what trainer.compile must bound
            self.log("train/compiled_graphs", float(self.compile_counter.graphs))

    def _guided_step(self, batch: Batch) -> tuple[Tensor, Tensor, int, Tensor]:
        """``_step`` plus the alignment loss of the guided head (Garg et al. 2019)."""
        reading = self.reading
        args = (
            self.model_cfg.label_smoothing,
            reading.layer - 1,
            reading.head - 1,
            reading.full_context,
        )
        if self.compiled_guided_loss is not None:
            fn = functools.partial(self.compiled_guided_loss, self.model)
            loss, nll, weights = self._run_compiled(fn, batch, *args)
        else:
            loss, nll, weights = guided_translation_loss(
                self.model, batch.src, batch.tgt_in, batch.tgt_out, *args
            )
        # Lightning moved the batch, these tensors included, to the device
        align = alignment_loss(
            weights, batch.align_index, batch.align_weight, batch.align_rows, reading.shift
        )
        return loss, nll, batch.n_tgt_tokens, align

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor | None:
        self.batch_in_flight = batch
        if self.reading is not None and batch.align_index is not None:
            loss, nll, n_tokens, align = self._guided_step(batch)
            # Per-token mean, so the gradient scale does not depend on how full the batch is;
            # the alignment term is already a mean over the batch's supervised target pieces.
            mean = loss / n_tokens + self.align_weight * align
            # accumulated on the device, read once at the epoch's end (no host read per step)
            self.log("train/align_kl", align.detach(), on_step=False, on_epoch=True, batch_size=1)
        else:
            loss, nll, n_tokens = self._step(batch)
            mean = loss / n_tokens  # per-token mean, as above
        return self.steps.record(self, mean, nll, n_tokens, batch, batch_idx)

    def configure_callbacks(self) -> list[L.Callback]:
        # the step's logging and non-finite guard, added once (validate/test ask again)
        attached = self._trainer is not None and self.steps in self._trainer.callbacks
        return [] if attached else [self.steps]

    def _eval_step(self, batch: Batch, split: str) -> None:
        loss, nll = translation_loss(
            self.model,
            batch.src,
            batch.tgt_in,
            batch.tgt_out,
            self.model_cfg.label_smoothing,
            per_sentence=True,
        )
        tokens = (batch.tgt_out != PAD_ID).sum(dim=1)
        # per row, so that a row that two ranks hold (a padded repeat) is counted once
        self._sums[split].update(
            zip(batch.index.tolist(), zip(loss.tolist(), nll.tolist(), tokens.tolist()))
        )
        rows = torch.arange(batch.index.numel(), device=batch.index.device)
        if split == "val":  # validation BLEU on a fixed sample: the first valid_max_sentences rows
            rows = (batch.index < self.valid_max_sentences).nonzero().squeeze(1)
        if rows.numel():
            hyps = decode_batch(self.model, batch.src[rows], self.decode_cfg)
            self._outputs[split].update(zip(batch.index[rows].tolist(), hyps))

    def _start_eval(self, split: str) -> None:
        self._outputs[split], self._sums[split] = {}, {}

    def on_validation_epoch_start(self) -> None:
        self._start_eval("val")

    def on_test_epoch_start(self) -> None:
        self._start_eval("test")

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self._eval_step(batch, "val")

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self._eval_step(batch, "test")

    def detokenized(self, split: str) -> tuple[list[int], list[str]]:
        """Row numbers and detokenized hypotheses of the last validation/test pass, in row
        order: every rank's rows (``_end_eval`` gathers them)."""
        outputs = self._outputs.get(split, {})
        rows = sorted(outputs)
        if self.tokenizer is None:
            raise RuntimeError("detokenizing needs the module's tokenizer_path")
        return rows, self.tokenizer.decode([outputs[r] for r in rows])

    def _log_everywhere(self, name: str, value: float, prog_bar: bool = False) -> None:
        """Log a figure of the whole split, which every rank computed alike from the gathered
        rows: synced with max, which keeps it as it is (a mean of N equal floats may not)."""
        self.log(name, value, prog_bar=prog_bar, sync_dist=True, reduce_fx="max")

    def _end_eval(self, split: str, data_split: str) -> None:
        """Gather every rank's rows, then log the split's loss, perplexity and BLEU.

        The loss and perplexity are sums over the split's target tokens (not means of
        per-batch or per-rank means); BLEU is SacreBLEU's corpus score of all the hypotheses.
        """
        sums = gather_rows(self._sums[split])
        self._outputs[split] = gather_rows(self._outputs[split])
        if not sums:
            return
        loss, nll, tokens = (sum(column) for column in zip(*sums.values()))
        tokens = max(tokens, 1)
        self._log_everywhere(f"{split}/loss", loss / tokens, prog_bar=split == "val")
        self._log_everywhere(f"{split}/ppl", math.exp(min(nll / tokens, 50.0)), prog_bar=True)
        references = self.references.get(data_split)
        if references is not None and self._outputs[split]:
            rows, hyps = self.detokenized(split)
            refs = [references[r] for r in rows]
            self._log_everywhere(f"{split}/bleu", corpus_bleu(hyps, refs).score, prog_bar=True)
            for key, bleu in self.literature_bleus.items():
                self._log_everywhere(f"{split}/{key}", bleu(hyps, refs).score)

    def on_validation_epoch_end(self) -> None:
        self._end_eval("val", "valid")
        self._log_aer()
        self.validated_at_step = self.global_step

    def _log_aer(self) -> None:
        """AER on each gold set: the guided head's, and each layer's (heads averaged).

        Computed once, on rank 0 (every rank holds the same weights), and sent to the others,
        which log the same figures."""
        if not self.gold_sets or self.tokenizer is None or self.trainer.sanity_checking:
            return
        scores = None
        if self.trainer.is_global_zero:
            scores = [
                gold_aer(self.model, self.tokenizer, gold, self.reading) for gold in self.gold_sets
            ]
        scores = self.trainer.strategy.broadcast(scores, src=0)
        for gold, found in zip(self.gold_sets, scores):
            if "head" in found:
                self._log_everywhere(f"val/aer_{gold.name}", found["head"], prog_bar=True)
            for layer, aer in enumerate(found["layers"], 1):
                self._log_everywhere(f"val/aer_{gold.name}_layer{layer}", aer)
            for bucket, aer in found["by_length"].items():  # 1-10 -> len1_10, >50 -> lenover50
                key = bucket.replace(">", "over").replace("-", "_")
                self._log_everywhere(f"val/aer_{gold.name}_len{key}", aer)

    def on_test_epoch_end(self) -> None:
        self._end_eval("test", "test")

    def configure_optimizers(self) -> dict:
        fused = self.optim_cfg.fused
        if fused == "auto":  # PyTorch has a fused Adam kernel for CPUs and CUDA GPUs
            fused = self.device.type in ("cpu", "cuda")
        optimizer, schedule = build_optimizer(
            self.parameters(), self.optim_cfg, self.model_cfg.d_model, fused=fused
        )
        # Fused Adam skips a step on the device when told (``found_inf``, as GradScaler does):
        # then the non-finite guard needs no host read; decided once, here, not every step.
        self.steps.on_device = bool(fused)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}
