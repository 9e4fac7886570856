"""The ``LightningModule``: the training logic around a plain ``Transformer``.

It owns the loss (label-smoothed cross-entropy, §5.4), the optimizer and schedule (§5.3),
logging, and validation/test decoding for SacreBLEU. The model knows none of these.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import asdict

import lightning as L
import torch
from torch import Tensor

from transformer_mt.config import DecodeConfig, OptimConfig, TransformerConfig
from transformer_mt.data.batching import Batch
from transformer_mt.data.tokenizer import Tokenizer
from transformer_mt.decoding import decode_batch
from transformer_mt.loss import label_smoothed_nll
from transformer_mt.metrics import corpus_bleu
from transformer_mt.model import Transformer
from transformer_mt.optim import build_optimizer

log = logging.getLogger(__name__)


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
    ) -> None:
        """
        Args:
            model, optim, decode: the dataclass configs as plain dicts (a checkpoint's
                hyperparameters rebuild the model alone from them).
            tokenizer_path: the SentencePiece model that detokenizes hypotheses for BLEU.
            valid_max_sentences: validation BLEU decodes the first N validation rows.
            references: {"valid": [...], "test": [...]} target sentences by row, for BLEU;
                none: BLEU is not computed (the loss and perplexity still are).
        """
        super().__init__()
        # Plain dicts, so a checkpoint rebuilds the model alone; the references are data.
        self.save_hyperparameters(ignore=["references"])
        self.model_cfg = TransformerConfig(**model)
        self.optim_cfg = OptimConfig(**optim)
        self.decode_cfg = DecodeConfig(**decode)
        self.model = Transformer(self.model_cfg)
        self.on_nonfinite_loss, self.compile_model = on_nonfinite_loss, compile
        self.tokenizer = Tokenizer(tokenizer_path) if tokenizer_path else None
        self.valid_max_sentences = valid_max_sentences
        self.references = dict(references or {})
        self.batch_in_flight: Batch | None = None  # for error messages (out of memory)
        self.skipped_steps = 0  # non-finite steps skipped (trainer.on_nonfinite_loss=skip)
        self.validated_at_step: int | None = None  # the step of the last validation
        self._compiled = False
        self._fit_start = time.perf_counter()
        self._outputs: dict[str, dict[int, list[int]]] = {}  # split -> row -> hypothesis ids
        self._nll: dict[str, list] = {}  # split -> [summed NLL, target tokens]
        self._tick: float | None = None

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
        if self.compile_model and not self._compiled:
            self.model.compile()  # in place: parameter names (and checkpoints) stay the same
            self._compiled = True

    def _step(self, batch: Batch) -> tuple[Tensor, Tensor, int]:
        logits = self.model(batch.src, batch.tgt_in)  # (B, T, V)
        loss, nll = label_smoothed_nll(logits, batch.tgt_out, self.model_cfg.label_smoothing)
        return loss, nll, batch.n_tgt_tokens

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor | None:
        self.batch_in_flight = batch
        loss, nll, n_tokens = self._step(batch)
        # Per-token mean, so the gradient scale does not depend on how full the batch is.
        mean = loss / n_tokens
        finite = bool(torch.isfinite(mean))
        finite = self.trainer.strategy.reduce_boolean_decision(
            finite, all=True
        )  # every rank agrees
        if not finite:
            return self._nonfinite(mean, batch, batch_idx)
        now = time.perf_counter()
        if self._tick is not None:  # throughput over the whole step, data loading included
            self.log("train/tok_s", n_tokens / (now - self._tick), prog_bar=True, on_step=True)
        self._tick = now
        self.log("train/loss", mean, prog_bar=True, on_step=True)
        self.log("train/ppl", (nll.detach() / n_tokens).clamp(max=50.0).exp(), on_step=True)
        self.log("train/lr", self.lr_schedulers().get_last_lr()[0], on_step=True)
        self.log("train/padding", batch.padding, on_step=True)
        return mean

    def _nonfinite(self, mean: Tensor, batch: Batch, batch_idx: int) -> None:
        rows = batch.index[:5].tolist()
        what = (
            f"non-finite training loss ({float(mean)}) at step {self.global_step} "
            f"(epoch {self.current_epoch}, batch {batch_idx} of the epoch): {batch.describe()}, "
            f"training rows {rows}{'...' if batch.index.numel() > 5 else ''}"
        )
        if self.on_nonfinite_loss == "stop":
            raise FloatingPointError(
                f"{what}. Lower optim.lr_factor, raise optim.warmup, set trainer.gradient_clip_val, "
                f"or use precision=bf16-mixed instead of 16-mixed; trainer.on_nonfinite_loss=skip "
                f"skips such steps instead of stopping"
            )
        self.skipped_steps += 1
        log.warning("%s: step skipped (%d so far)", what, self.skipped_steps)
        self.log("train/skipped", float(self.skipped_steps), on_step=True)
        return None  # Lightning runs no backward and no optimizer step for this batch

    def on_before_optimizer_step(self, optimizer) -> None:
        every = self.trainer.log_every_n_steps
        if (self.global_step + 1) % every == 0 or every == 1:
            grads = [p.grad.detach().norm() for p in self.parameters() if p.grad is not None]
            if grads:
                self.log("train/grad_norm", torch.stack(grads).norm(), on_step=True)

    def on_train_epoch_start(self) -> None:
        self._tick = None

    def on_fit_start(self) -> None:
        self._fit_start = time.perf_counter()

    def on_train_epoch_end(self) -> None:
        # Wall-clock minutes since fit started, so curves can be read against time.
        self.log("time/minutes", (time.perf_counter() - self._fit_start) / 60.0)

    def _eval_step(self, batch: Batch, split: str) -> None:
        loss, nll, n_tokens = self._step(batch)
        self.log(
            f"{split}/loss",
            loss / n_tokens,
            batch_size=n_tokens,
            on_epoch=True,
            prog_bar=split == "val",
        )
        self._nll[split][0] += float(nll)
        self._nll[split][1] += n_tokens
        rows = torch.arange(batch.index.numel(), device=batch.index.device)
        if split == "val":  # validation BLEU on a fixed sample: the first valid_max_sentences rows
            rows = (batch.index < self.valid_max_sentences).nonzero().squeeze(1)
        if rows.numel():
            hyps = decode_batch(self.model, batch.src[rows], self.decode_cfg)
            self._outputs[split].update(zip(batch.index[rows].tolist(), hyps))

    def _start_eval(self, split: str) -> None:
        self._outputs[split], self._nll[split] = {}, [0.0, 0]

    def on_validation_epoch_start(self) -> None:
        self._start_eval("val")

    def on_test_epoch_start(self) -> None:
        self._start_eval("test")

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self._eval_step(batch, "val")

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self._eval_step(batch, "test")

    def detokenized(self, split: str) -> tuple[list[int], list[str]]:
        """Row numbers and detokenized hypotheses of the last validation/test pass, in row order."""
        outputs = self._outputs.get(split, {})
        rows = sorted(outputs)
        if self.tokenizer is None:
            raise RuntimeError("detokenizing needs the module's tokenizer_path")
        return rows, self.tokenizer.decode([outputs[r] for r in rows])

    def _log_bleu(self, split: str, data_split: str) -> None:
        references = self.references.get(data_split)
        rows, hyps = self.detokenized(split) if references is not None else ([], [])
        if not rows:
            return
        bleu = corpus_bleu(hyps, [references[r] for r in rows])
        nll, n_tokens = self._nll[split]
        self.log(f"{split}/bleu", bleu.score, prog_bar=True, sync_dist=True)
        self.log(
            f"{split}/ppl",
            math.exp(min(nll / max(n_tokens, 1), 50.0)),
            prog_bar=True,
            sync_dist=True,
        )

    def on_validation_epoch_end(self) -> None:
        self._log_bleu("val", "valid")
        self.validated_at_step = self.global_step

    def on_test_epoch_end(self) -> None:
        self._log_bleu("test", "test")

    def configure_optimizers(self) -> dict:
        fused = self.optim_cfg.fused
        if fused == "auto":  # PyTorch has a fused Adam kernel for CPUs and CUDA GPUs
            fused = self.device.type in ("cpu", "cuda")
        optimizer, schedule = build_optimizer(
            self.parameters(), self.optim_cfg, self.model_cfg.d_model, fused=fused
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}
